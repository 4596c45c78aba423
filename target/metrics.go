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

	stale      *prometheus.CounterVec
	denied     *prometheus.CounterVec
	maps       *prometheus.GaugeVec
	mapExtents *prometheus.GaugeVec
	mapUpdates *prometheus.CounterVec
	grants     *prometheus.GaugeVec

	bufBytes, bufPeak prometheus.Gauge

	kvDeviceIOs *prometheus.CounterVec
	funcCPU     *prometheus.CounterVec
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
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_target_stale_requests_total",
			Help: "Function requests refused because they named an extent-map version the target does not hold, by subsystem and namespace.",
		}, []string{"subsystem", "nsid"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_target_access_denied_total",
			Help: "Commands refused with Access Denied: task hosts outside their grants, and grants refused to task hosts.",
		}, []string{"subsystem", "nsid"}),
		maps: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nearstore_target_extent_maps",
			Help: "Extent maps held, of all hosts, by subsystem and namespace (removals not counted).",
		}, []string{"subsystem", "nsid"}),
		mapExtents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nearstore_target_extent_map_extents",
			Help: "Extents of the extent maps held, by subsystem and namespace.",
		}, []string{"subsystem", "nsid"}),
		mapUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_target_extent_map_updates_total",
			Help: "Extent map updates received, by result: applied, or ignored as not newer than the version held.",
		}, []string{"subsystem", "nsid", "result"}),
		grants: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nearstore_target_grants",
			Help: "Grants held, expired ones not yet released included, by subsystem and namespace.",
		}, []string{"subsystem", "nsid"}),
	}
	m.bufBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nearstore_target_command_buffer_bytes",
		Help: "Bytes of command buffers (in-capsule data, H2C data, results) hosts' commands hold now.",
	})
	m.bufPeak = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nearstore_target_command_buffer_bytes_peak",
		Help: "The most bytes of command buffers hosts' commands have held at once.",
	})
	m.kvDeviceIOs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nearstore_target_kv_device_ios_total",
		Help: "Device I/Os KV commands took, by subsystem, namespace, operation and kind (read or write).",
	}, []string{"subsystem", "nsid", "op", "kind"})
	m.funcCPU = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nearstore_target_function_cpu_seconds_total",
		Help: "Time function code ran on the target's function CPU slots, by host NQN (the series of a host goes when its state is dropped after its lease).",
	}, []string{"host"})
	reg.MustRegister(m.funcCPU)
	reg.MustRegister(m.commands, m.bytes, m.latency, m.connections, m.accepted, m.errors,
		m.stale, m.denied, m.maps, m.mapExtents, m.mapUpdates, m.grants, m.bufBytes, m.bufPeak, m.kvDeviceIOs)
	return m
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
// queue or an I/O queue.
func (m *Metrics) observe(ss string, admin bool, r *request, st nvme.Status, inBytes int) {
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
	nsid := "0"
	if r.ns != nil {
		nsid = nsLabel(r.ns.id)
	}
	result := "ok"
	if !st.OK() {
		result = "error"
		m.errors.WithLabelValues("command").Inc()
	}
	m.commands.WithLabelValues(ss, nsid, op, result).Inc()
	m.latency.WithLabelValues(ss, nsid, op).Observe(time.Since(r.start).Seconds())
	if st.OK() && r.ns != nil {
		switch op {
		case "read":
			m.bytes.WithLabelValues(ss, nsid, "read").Add(float64(inBytes))
		case "write":
			m.bytes.WithLabelValues(ss, nsid, "write").Add(float64(len(r.data)))
		}
	}
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
