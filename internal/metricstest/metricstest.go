// Package metricstest reads Prometheus metrics back in tests, which
// assert on the counters the target and offloadfs export.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Sum gathers g and sums the values of metric name's samples (counters or
// gauges) whose labels include every pair in want.
func Sum(t testing.TB, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	samples:
		for _, m := range mf.GetMetric() {
			have := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue samples
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
