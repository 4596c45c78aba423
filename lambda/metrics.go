package lambda

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/internal/metrics"
)

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
	set := metrics.New(reg, "lambda")
	return &Metrics{
		requests: set.CounterVec("requests_total",
			"λ calls taken by the dispatcher, by operation (read, write), mode asked (lambda, K, T, B) and where the result came from (K, T, B; none when the call failed before running).",
			"op", "mode", "ran"),
		profiles: set.CounterVec("profiles_total",
			"λ calls the dispatcher ran on both the host and the target to measure them, by operation.",
			"op"),
	}
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
