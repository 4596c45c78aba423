package offload

import "github.com/prometheus/client_golang/prometheus"

// Metrics exports an engine's and a client's counters to Prometheus. A
// nil *Metrics records nothing. One Metrics serves one engine and any
// number of clients.
type Metrics struct {
	reg      prometheus.Registerer
	tasks    *prometheus.CounterVec
	running  prometheus.Gauge
	bytes    *prometheus.CounterVec
	cache    *prometheus.CounterVec
	clientBy *prometheus.CounterVec
	rejected *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_offload_tasks_total",
			Help: "Tasks an engine was asked to run, by task and result: ok, error, rejected (turned away by admission), ended (stopped at its deadline or when its client went).",
		}, []string{"task", "result"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nearstore_offload_running",
			Help: "Tasks an engine is running.",
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_offload_bytes_total",
			Help: "Bytes engine tasks read and wrote, by direction.",
		}, []string{"direction"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_offload_cache_lookups_total",
			Help: "Offload cache page lookups, by result: hit, miss.",
		}, []string{"result"}),
		clientBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_offload_client_tasks_total",
			Help: "Tasks a client ran, by where: engine, or local (the engine turned them away).",
		}, []string{"where"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_offload_client_rejected_total",
			Help: "Tasks engines turned away from a client, by reason: cpu, token.",
		}, []string{"reason"}),
	}
	reg.MustRegister(m.tasks, m.running, m.bytes, m.cache, m.clientBy, m.rejected)
	return m
}

// engineGauges registers the gauges read from a running engine.
func (m *Metrics) engineGauges(e *Engine) {
	if m == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nearstore_offload_fairness",
			Help: "Jain's fairness index over the tasks each client had run on the engine: 1 is fair, 1/n one client has all.",
		}, e.adm.fairness),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nearstore_offload_cpu_use",
			Help: "The engine machine's CPU use, 0 to 1, as admission last saw it.",
		}, e.cpuUse),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nearstore_offload_tokens_free",
			Help: "Tokens free under the token policy.",
		}, func() float64 { return float64(e.adm.free(e.now())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nearstore_offload_cache_bytes",
			Help: "Bytes the offload cache holds.",
		}, func() float64 { return float64(e.cache.Stats().Bytes) }),
	)
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
