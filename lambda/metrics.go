package lambda

import "github.com/prometheus/client_golang/prometheus"

// Operation label values.
const (
	opRead  = "read"
	opWrite = "write"
)

// Metrics exports the dispatcher's counters to Prometheus. One Metrics
// may be shared by several dispatchers: their counts add up.
type Metrics struct {
	requests *prometheus.CounterVec
	profiles *prometheus.CounterVec
}

// NewMetrics creates the dispatcher metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_lambda_requests_total",
			Help: "λ calls taken by the dispatcher, by operation (read, write), mode asked (lambda, K, T, B) and where the result came from (K, T, B; none when the call failed before running).",
		}, []string{"op", "mode", "ran"}),
		profiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nearstore_lambda_profiles_total",
			Help: "λ calls the dispatcher ran on both the host and the target to measure them, by operation.",
		}, []string{"op"}),
	}
	reg.MustRegister(m.requests, m.profiles)
	return m
}

// The methods below accept a nil *Metrics.

func (m *Metrics) request(op string, asked, ran Mode) {
	if m == nil {
		return
	}
	where := "none"
	if ran != Auto {
		where = ran.String()
	}
	m.requests.WithLabelValues(op, asked.String(), where).Inc()
}

func (m *Metrics) profile(op string) {
	if m != nil {
		m.profiles.WithLabelValues(op).Inc()
	}
}
