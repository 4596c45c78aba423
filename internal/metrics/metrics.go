// Package metrics creates a package's Prometheus collectors and registers
// them in the same call, so that a package's metrics read as a list of
// names, help texts and labels.
//
// Every name is prefixed "nearstore_<subsystem>_". Registration panics on
// a conflict (a name registered twice with one registry), as
// prometheus.MustRegister does: two metrics of one name are a programming
// error, found by the first test that builds them.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// namespace prefixes every metric nearstore exports.
const namespace = "nearstore"

// Set creates collectors named nearstore_<subsystem>_<name> and
// registers each with its registry as it is created.
type Set struct {
	f         promauto.Factory
	subsystem string
}

// New returns a Set registering with reg under subsystem.
func New(reg prometheus.Registerer, subsystem string) Set {
	return Set{f: promauto.With(reg), subsystem: subsystem}
}

func (s Set) opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: namespace, Subsystem: s.subsystem, Name: name, Help: help}
}

// Counter creates and registers a counter.
func (s Set) Counter(name, help string) prometheus.Counter {
	return s.f.NewCounter(prometheus.CounterOpts(s.opts(name, help)))
}

// CounterVec creates and registers a counter with labels.
func (s Set) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return s.f.NewCounterVec(prometheus.CounterOpts(s.opts(name, help)), labels)
}

// Gauge creates and registers a gauge.
func (s Set) Gauge(name, help string) prometheus.Gauge {
	return s.f.NewGauge(prometheus.GaugeOpts(s.opts(name, help)))
}

// GaugeVec creates and registers a gauge with labels.
func (s Set) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return s.f.NewGaugeVec(prometheus.GaugeOpts(s.opts(name, help)), labels)
}

// GaugeFunc creates and registers a gauge whose value is read from f at
// each scrape; f must be safe to call from any goroutine.
func (s Set) GaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return s.f.NewGaugeFunc(prometheus.GaugeOpts(s.opts(name, help)), f)
}

// Histogram creates and registers a histogram with the given buckets.
func (s Set) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return s.f.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: s.subsystem, Name: name, Help: help, Buckets: buckets})
}

// HistogramVec creates and registers a histogram with labels and the
// given buckets.
func (s Set) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return s.f.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: s.subsystem, Name: name, Help: help, Buckets: buckets}, labels)
}
