package offload

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/internal/metrics"
)

// Metrics exports an engine's and a client's counters to Prometheus. A
// nil *Metrics records nothing. One Metrics serves one engine and any
// number of clients.
type Metrics struct {
	set      metrics.Set // registers the engine gauges later
	tasks    *prometheus.CounterVec
	running  prometheus.Gauge
	bytes    *prometheus.CounterVec
	cache    *prometheus.CounterVec
	clientBy *prometheus.CounterVec
	rejected *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	set := metrics.New(reg, "offload")
	return &Metrics{
		set: set,
		tasks: set.CounterVec("tasks_total",
			"Tasks an engine was asked to run, by task and result: ok, error, rejected (turned away by admission), ended (stopped at its deadline or when its client went).",
			"task", "result"),
		running: set.Gauge("running", "Tasks an engine is running."),
		bytes:   set.CounterVec("bytes_total", "Bytes engine tasks read and wrote, by direction.", "direction"),
		cache:   set.CounterVec("cache_lookups_total", "Offload cache page lookups, by result: hit, miss.", "result"),
		clientBy: set.CounterVec("client_tasks_total",
			"Tasks a client ran, by where: engine, or local (the engine turned them away).", "where"),
		rejected: set.CounterVec("client_rejected_total",
			"Tasks engines turned away from a client, by reason: cpu, token.", "reason"),
	}
}

// engineGauges registers the gauges read from a running engine.
func (m *Metrics) engineGauges(e *Engine) {
	if m == nil {
		return
	}
	m.set.GaugeFunc("fairness",
		"Jain's fairness index over the tasks each client had run on the engine: 1 is fair, 1/n one client has all.",
		e.adm.fairness)
	m.set.GaugeFunc("cpu_use", "The engine machine's CPU use, 0 to 1, as admission last saw it.", e.cpuUse)
	m.set.GaugeFunc("tokens_free", "Tokens free under the token policy.",
		func() float64 { return float64(e.adm.free(e.now())) })
	m.set.GaugeFunc("cache_bytes", "Bytes the offload cache holds.",
		func() float64 { return float64(e.cache.Stats().Bytes) })
}

func (m *Metrics) task(name, result string) {
	if m != nil {
		m.tasks.WithLabelValues(name, result).Inc()
	}
}

func (m *Metrics) runningDelta(d float64) {
	if m != nil {
		m.running.Add(d)
	}
}

func (m *Metrics) io(s Stats) {
	if m == nil {
		return
	}
	m.bytes.WithLabelValues("read").Add(float64(s.BytesRead))
	m.bytes.WithLabelValues("write").Add(float64(s.BytesWritten))
	m.cache.WithLabelValues("hit").Add(float64(s.CacheHits))
	m.cache.WithLabelValues("miss").Add(float64(s.CacheMisses))
}

func (m *Metrics) ranAt(where string) {
	if m != nil {
		m.clientBy.WithLabelValues(where).Inc()
	}
}

func (m *Metrics) rejectedFor(reason string) {
	if m != nil {
		m.rejected.WithLabelValues(reason).Inc()
	}
}
