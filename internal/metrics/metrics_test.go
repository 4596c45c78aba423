package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestNamesAndTypes builds one collector of each kind and reads back the
// exported name, help and type, so a wrong prefix or a kind built as
// another fails here rather than on a dashboard.
func TestNamesAndTypes(t *testing.T) {
	reg := prometheus.NewRegistry()
	set := New(reg, "unit")
	set.Counter("c_total", "a counter").Add(2)
	set.CounterVec("cv_total", "a counter vec", "a", "b").WithLabelValues("x", "y").Inc()
	set.Gauge("g", "a gauge").Set(3)
	set.GaugeVec("gv", "a gauge vec", "a").WithLabelValues("x").Set(4)
	set.GaugeFunc("gf", "a gauge func", func() float64 { return 5 })
	set.Histogram("h_seconds", "a histogram", []float64{1, 2}).Observe(1.5)
	set.HistogramVec("hv_seconds", "a histogram vec", []float64{1}, "a").WithLabelValues("x").Observe(0.5)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for i, mf := range mfs {
		got[mf.GetName()] = i
	}
	for _, c := range []struct {
		name, help string
		typ        string
		labels     int
	}{
		{"nearstore_unit_c_total", "a counter", "COUNTER", 0},
		{"nearstore_unit_cv_total", "a counter vec", "COUNTER", 2},
		{"nearstore_unit_g", "a gauge", "GAUGE", 0},
		{"nearstore_unit_gv", "a gauge vec", "GAUGE", 1},
		{"nearstore_unit_gf", "a gauge func", "GAUGE", 0},
		{"nearstore_unit_h_seconds", "a histogram", "HISTOGRAM", 0},
		{"nearstore_unit_hv_seconds", "a histogram vec", "HISTOGRAM", 1},
	} {
		i, ok := got[c.name]
		if !ok {
			t.Errorf("%s: not registered", c.name)
			continue
		}
		mf := mfs[i]
		if mf.GetHelp() != c.help || mf.GetType().String() != c.typ {
			t.Errorf("%s: help %q type %v, want %q %s", c.name, mf.GetHelp(), mf.GetType(), c.help, c.typ)
		}
		if n := len(mf.GetMetric()[0].GetLabel()); n != c.labels {
			t.Errorf("%s: %d labels, want %d", c.name, n, c.labels)
		}
	}
	if len(got) != 7 {
		t.Errorf("%d families registered, want 7", len(got))
	}
}

// TestConflictPanics checks that a name registered twice with one
// registry panics, as prometheus.MustRegister does.
func TestConflictPanics(t *testing.T) {
	set := New(prometheus.NewRegistry(), "unit")
	set.Counter("twice_total", "first")
	defer func() {
		if recover() == nil {
			t.Fatal("registering a name twice did not panic")
		}
	}()
	set.Counter("twice_total", "second")
}
