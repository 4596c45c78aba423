package offloadfs

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/internal/metrics"
)

// Stats counts what the file system did with the target: function
// requests and where they ran, version mismatches, and the
// synchronizer's work. The counts are since Mount.
type Stats struct {
	// Requests are the file-level function calls made (Pushdown,
	// LambdaRead, LambdaWrite).
	Requests uint64
	// Sent are the requests sent to the target.
	Sent uint64
	// Remote are the requests whose result came from the target.
	Remote uint64
	// NotSynced are the requests not sent because the target did not
	// hold (as far as the synchronizer knew) the version of a file they
	// name: changed, and not yet committed or pushed.
	NotSynced uint64
	// Stale are the requests the target refused with Stale Extent Map.
	Stale uint64
	// Discarded are the requests whose result was thrown away because a
	// file's version changed while they ran.
	Discarded uint64
	// Fallbacks are the requests run on the host, by reading the blocks
	// and running the function in a local sandbox.
	Fallbacks uint64

	// MapsPut and MapsRemoved are the extent-map updates the target
	// confirmed; SyncErrors the synchronizer's failed rounds (each
	// retried); Resyncs the times it pushed every map again because the
	// target had lost them (a restart).
	MapsPut, MapsRemoved, SyncErrors, Resyncs uint64
	// SyncPending is the inodes whose committed changes are waiting to
	// be pushed.
	SyncPending int

	// Grants is the grants live now.
	Grants int
}

// Mismatches are all the version mismatches: requests not sent, refused
// as stale, or discarded.
func (s Stats) Mismatches() uint64 { return s.NotSynced + s.Stale + s.Discarded }

// counters are the atomic counts behind Stats.
type counters struct {
	requests, sent, remote, notSynced, stale, discarded, fallbacks atomic.Uint64
	mapsPut, mapsRemoved, syncErrors, resyncs                      atomic.Uint64
}

// Metrics exports file-system counters to Prometheus. One Metrics may be
// shared by several mounts: their counts add up.
type Metrics struct {
	requests   *prometheus.CounterVec
	mismatches *prometheus.CounterVec
	maps       *prometheus.CounterVec
	syncErrors prometheus.Counter
	resyncs    prometheus.Counter
	pending    prometheus.Gauge
	grants     prometheus.Gauge
	commits    *prometheus.CounterVec
	commitDur  prometheus.Histogram
	journaled  prometheus.Counter
}

// Operation label values.
const (
	opPushdown    = "pushdown"
	opLambdaRead  = "lambda_read"
	opLambdaWrite = "lambda_write"
)

// NewMetrics creates the file-system metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	set := metrics.New(reg, "offloadfs")
	return &Metrics{
		requests: set.CounterVec("function_requests_total",
			"File-level function requests completed, by operation and where they ran (target, or host after a fallback).",
			"op", "ran"),
		mismatches: set.CounterVec("version_mismatches_total",
			"Function requests that could not use the target's extent maps, by operation and when that was found: before sending (not synchronized), refused by the target (stale), or after completion (discarded).",
			"op", "when"),
		maps: set.CounterVec("extent_map_updates_total",
			"Extent-map updates the target confirmed, by kind (put, remove).", "kind"),
		syncErrors: set.Counter("sync_errors_total", "Synchronizer rounds that failed and were retried."),
		resyncs: set.Counter("sync_resyncs_total",
			"Times every extent map was pushed again because the target had lost them."),
		pending: set.Gauge("sync_pending", "Inodes whose committed extent-map changes wait to be pushed."),
		grants:  set.Gauge("grants", "Grants of file extents to other hosts live now."),
		commits: set.CounterVec("commits_total",
			"Metadata commits, by result: ok, error (a device error failed the file system), fenced (another host took it over).",
			"result"),
		commitDur: set.Histogram("commit_duration_seconds",
			"Time to commit a metadata transaction: generation check, journal write and flushes, checkpoint.",
			prometheus.ExponentialBuckets(50e-6, 2, 16)),
		journaled: set.Counter("journal_blocks_total", "Metadata block images written to the journal by commits."),
	}
}

// The methods below accept a nil *Metrics, so the file system calls them
// whether or not metrics are configured.

func (m *Metrics) ran(op string, remote bool) {
	if m == nil {
		return
	}
	where := "host"
	if remote {
		where = "target"
	}
	m.requests.WithLabelValues(op, where).Inc()
}

// committed records a commit attempt that got as far as the generation
// check: its result, and for a commit that wrote, its time and blocks.
func (m *Metrics) committed(seconds float64, blocks int, err error) {
	if m == nil {
		return
	}
	switch {
	case errors.Is(err, ErrFenced):
		m.commits.WithLabelValues("fenced").Inc()
		return
	case err != nil:
		m.commits.WithLabelValues("error").Inc()
		return
	}
	m.commits.WithLabelValues("ok").Inc()
	m.commitDur.Observe(seconds)
	m.journaled.Add(float64(blocks))
}

func (m *Metrics) mismatch(op, when string) {
	if m != nil {
		m.mismatches.WithLabelValues(op, when).Inc()
	}
}

func (m *Metrics) mapUpdates(puts, removes int) {
	if m == nil {
		return
	}
	if puts > 0 {
		m.maps.WithLabelValues("put").Add(float64(puts))
	}
	if removes > 0 {
		m.maps.WithLabelValues("remove").Add(float64(removes))
	}
}

func (m *Metrics) syncError() {
	if m != nil {
		m.syncErrors.Inc()
	}
}

func (m *Metrics) resync() {
	if m != nil {
		m.resyncs.Inc()
	}
}

func (m *Metrics) pendingDelta(d int) {
	if m != nil && d != 0 {
		m.pending.Add(float64(d))
	}
}

func (m *Metrics) grantsDelta(d int) {
	if m != nil {
		m.grants.Add(float64(d))
	}
}

// Stats returns the file system's counts of function requests, version
// mismatches, synchronizer work and grants.
func (fsys *FS) Stats() Stats {
	c := &fsys.ctr
	s := Stats{
		Requests:    c.requests.Load(),
		Sent:        c.sent.Load(),
		Remote:      c.remote.Load(),
		NotSynced:   c.notSynced.Load(),
		Stale:       c.stale.Load(),
		Discarded:   c.discarded.Load(),
		Fallbacks:   c.fallbacks.Load(),
		MapsPut:     c.mapsPut.Load(),
		MapsRemoved: c.mapsRemoved.Load(),
		SyncErrors:  c.syncErrors.Load(),
		Resyncs:     c.resyncs.Load(),
	}
	if fsys.syncer != nil {
		s.SyncPending = fsys.syncer.pendingCount()
	}
	fsys.grantMu.Lock()
	s.Grants = len(fsys.grants)
	fsys.grantMu.Unlock()
	return s
}
