package target

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/internal/metrics"
	"github.com/nearstore/nearstore/nvme"
)

// Metrics exports the target's counters to Prometheus. A nil *Metrics
// records nothing.
type Metrics struct {
	commands    *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	connections prometheus.Gauge
	accepted    prometheus.Counter
	errors      *prometheus.CounterVec

	stale      *prometheus.CounterVec
	denied     *prometheus.CounterVec
	maps       *prometheus.GaugeVec
	mapExtents *prometheus.GaugeVec
	mapUpdates *prometheus.CounterVec
	grants     *prometheus.GaugeVec

	bufBytes, bufPeak prometheus.Gauge

	kvDeviceIOs *prometheus.CounterVec
	funcCPU     *prometheus.CounterVec

	// cmds caches observe's series by cmdKey: a vector's WithLabelValues
	// hashes and validates every label value under a lock, three times a
	// command. No series of those vectors is ever deleted.
	cmds sync.Map // cmdKey → *cmdSeries
}

// cmdKey is one kind of completed command: observe's labels.
type cmdKey struct {
	ss, op string
	nsid   uint32
	hasNS  bool
	ok     bool
}

// cmdSeries are the series observe updates for one cmdKey; bytes is nil
// for a command whose data is not counted, and write says whether it
// counts the command's data (a write) or its completion's (a read).
type cmdSeries struct {
	key      cmdKey
	commands prometheus.Counter
	latency  prometheus.Observer
	bytes    prometheus.Counter
	write    bool
}

// NewMetrics creates the target's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	set := metrics.New(reg, "target")
	return &Metrics{
		commands: set.CounterVec("commands_total",
			"Commands completed, by subsystem, namespace, operation and result.",
			"subsystem", "nsid", "op", "result"),
		bytes: set.CounterVec("bytes_total",
			"Data bytes moved for hosts, by subsystem, namespace and direction.",
			"subsystem", "nsid", "direction"),
		latency: set.HistogramVec("command_duration_seconds",
			"Time from a command's capsule arriving to its completion being sent.",
			prometheus.ExponentialBuckets(5e-6, 2, 20), "subsystem", "nsid", "op"),
		connections: set.Gauge("connections", "Open NVMe/TCP connections (one per queue)."),
		accepted:    set.Counter("connections_accepted_total", "NVMe/TCP connections accepted."),
		errors: set.CounterVec("errors_total",
			"Errors by kind: transport (fatal PDU errors), keep_alive_timeout, command (non-success completions).",
			"kind"),
		stale: set.CounterVec("stale_requests_total",
			"Function requests refused because they named an extent-map version the target does not hold, by subsystem and namespace.",
			"subsystem", "nsid"),
		denied: set.CounterVec("access_denied_total",
			"Commands refused with Access Denied: task hosts outside their grants, and grants refused to task hosts.",
			"subsystem", "nsid"),
		maps: set.GaugeVec("extent_maps",
			"Extent maps held, of all hosts, by subsystem and namespace (removals not counted).",
			"subsystem", "nsid"),
		mapExtents: set.GaugeVec("extent_map_extents",
			"Extents of the extent maps held, by subsystem and namespace.",
			"subsystem", "nsid"),
		mapUpdates: set.CounterVec("extent_map_updates_total",
			"Extent map updates received, by result: applied, or ignored as not newer than the version held.",
			"subsystem", "nsid", "result"),
		grants: set.GaugeVec("grants",
			"Grants held, expired ones not yet released included, by subsystem and namespace.",
			"subsystem", "nsid"),
		bufBytes: set.Gauge("command_buffer_bytes",
			"Bytes of command buffers (in-capsule data, H2C data, results) hosts' commands hold now."),
		bufPeak: set.Gauge("command_buffer_bytes_peak",
			"The most bytes of command buffers hosts' commands have held at once."),
		kvDeviceIOs: set.CounterVec("kv_device_ios_total",
			"Device I/Os KV commands took, by subsystem, namespace, operation and kind (read or write).",
			"subsystem", "nsid", "op", "kind"),
		funcCPU: set.CounterVec("function_cpu_seconds_total",
			"Time function code ran on the target's function CPU slots, by host NQN (the series of a host goes when its state is dropped after its lease).",
			"host"),
	}
}

func (m *Metrics) staleRequest(ss string, nsid uint32) {
	if m != nil {
		m.stale.WithLabelValues(ss, nsLabel(nsid)).Inc()
	}
}

func (m *Metrics) accessDenied(ss string, nsid uint32) {
	if m != nil {
		m.denied.WithLabelValues(ss, nsLabel(nsid)).Inc()
	}
}

func (m *Metrics) mapsChanged(ss string, nsid uint32, d mapDelta) {
	if m == nil {
		return
	}
	ns := nsLabel(nsid)
	m.maps.WithLabelValues(ss, ns).Add(float64(d.live))
	m.mapExtents.WithLabelValues(ss, ns).Add(float64(d.extents))
	m.mapUpdates.WithLabelValues(ss, ns, "applied").Add(float64(d.applied))
	m.mapUpdates.WithLabelValues(ss, ns, "ignored").Add(float64(d.ignored))
}

func (m *Metrics) grantsHeld(ss string, nsid uint32, n int) {
	if m != nil {
		m.grants.WithLabelValues(ss, nsLabel(nsid)).Set(float64(n))
	}
}

// buffers reports the command buffers held now and at most.
func (m *Metrics) buffers(now, peak int64) {
	if m != nil {
		m.bufBytes.Set(float64(now))
		m.bufPeak.Set(float64(peak))
	}
}

func (m *Metrics) connOpened() {
	if m != nil {
		m.connections.Inc()
		m.accepted.Inc()
	}
}

func (m *Metrics) connClosed() {
	if m != nil {
		m.connections.Dec()
	}
}

func (m *Metrics) error(kind string) {
	if m != nil {
		m.errors.WithLabelValues(kind).Inc()
	}
}

// observe records one completed command of subsystem ss, on an admin
// queue or an I/O queue. last is the caller's (a queue's) cache of the
// series it updated last, tried before the shared map.
func (m *Metrics) observe(last *atomic.Pointer[cmdSeries], ss string, admin bool, r *request, st nvme.Status, inBytes int) {
	if m == nil {
		return
	}
	op := r.op
	if op == "" {
		switch {
		case r.sqe.Opcode == nvme.AdminFabrics:
			op = "fabrics"
		case admin:
			op = "admin"
		default:
			op = "other"
		}
	}
	k := cmdKey{ss: ss, op: op, ok: st.OK()}
	if r.ns != nil {
		k.nsid, k.hasNS = r.ns.id, true
	}
	if !k.ok {
		m.errors.WithLabelValues("command").Inc()
	}
	c := last.Load()
	if c == nil || c.key != k {
		c = m.cmdSeriesOf(k)
		last.Store(c)
	}
	c.commands.Inc()
	c.latency.Observe(time.Since(r.start).Seconds())
	if c.bytes != nil {
		if c.write {
			c.bytes.Add(float64(len(r.data)))
		} else {
			c.bytes.Add(float64(inBytes))
		}
	}
}

// cmdSeriesOf returns k's series, from the cache once made.
func (m *Metrics) cmdSeriesOf(k cmdKey) *cmdSeries {
	if v, ok := m.cmds.Load(k); ok {
		return v.(*cmdSeries)
	}
	nsid := "0"
	if k.hasNS {
		nsid = nsLabel(k.nsid)
	}
	result := "ok"
	if !k.ok {
		result = "error"
	}
	c := &cmdSeries{
		key:      k,
		commands: m.commands.WithLabelValues(k.ss, nsid, k.op, result),
		latency:  m.latency.WithLabelValues(k.ss, nsid, k.op),
	}
	if k.ok && k.hasNS {
		switch k.op {
		case "read":
			c.bytes = m.bytes.WithLabelValues(k.ss, nsid, "read")
		case "write":
			c.bytes, c.write = m.bytes.WithLabelValues(k.ss, nsid, "write"), true
		}
	}
	v, _ := m.cmds.LoadOrStore(k, c)
	return v.(*cmdSeries)
}

func (m *Metrics) kvIOs(ss string, nsid uint32, op string, reads, writes int) {
	if m == nil {
		return
	}
	ns := nsLabel(nsid)
	m.kvDeviceIOs.WithLabelValues(ss, ns, op, "read").Add(float64(reads))
	m.kvDeviceIOs.WithLabelValues(ss, ns, op, "write").Add(float64(writes))
}

// functionCPUOf returns the counter of host's function CPU seconds, nil
// without metrics.
func (m *Metrics) functionCPUOf(host string) prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.funcCPU.WithLabelValues(host)
}

// forgetFunctionCPU drops host's series: it is gone.
func (m *Metrics) forgetFunctionCPU(host string) {
	if m != nil {
		m.funcCPU.DeleteLabelValues(host)
	}
}
