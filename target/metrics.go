package target

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
}

// NewMetrics creates the target's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_target_commands_total",
			Help: "Commands completed, by subsystem, namespace, operation and result.",
		}, []string{"subsystem", "nsid", "op", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_target_bytes_total",
			Help: "Data bytes moved for hosts, by subsystem, namespace and direction.",
		}, []string{"subsystem", "nsid", "direction"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nearstore_target_command_duration_seconds",
			Help:    "Time from a command's capsule arriving to its completion being sent.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 20),
		}, []string{"subsystem", "nsid", "op"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nearstore_target_connections",
			Help: "Open NVMe/TCP connections (one per queue).",
		}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nearstore_target_connections_accepted_total",
			Help: "NVMe/TCP connections accepted.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_target_errors_total",
			Help: "Errors by kind: transport (fatal PDU errors), keep_alive_timeout, command (non-success completions).",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.commands, m.bytes, m.latency, m.connections, m.accepted, m.errors)
	return m
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

// observe records one completed command.
func (m *Metrics) observe(q *queue, cmd *command, st nvme.Status, inBytes int) {
	if m == nil || q.ss == nil {
		return
	}
	op := cmd.op
	if op == "" {
		switch {
		case cmd.sqe.Opcode == nvme.AdminFabrics:
			op = "fabrics"
		case q.qid == 0:
			op = "admin"
		default:
			op = "other"
		}
	}
	nsid := "0"
	if cmd.ns != nil {
		nsid = nsLabel(cmd.ns.id)
	}
	result := "ok"
	if !st.OK() {
		result = "error"
		m.errors.WithLabelValues("command").Inc()
	}
	m.commands.WithLabelValues(q.ss.nqn, nsid, op, result).Inc()
	m.latency.WithLabelValues(q.ss.nqn, nsid, op).Observe(time.Since(cmd.start).Seconds())
	if st.OK() && cmd.ns != nil {
		switch op {
		case "read":
			m.bytes.WithLabelValues(q.ss.nqn, nsid, "read").Add(float64(inBytes))
		case "write":
			m.bytes.WithLabelValues(q.ss.nqn, nsid, "write").Add(float64(len(cmd.data)))
		}
	}
}
