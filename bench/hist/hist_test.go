package hist

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	h := New()
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]time.Duration, 100000)
	for i := range vals {
		vals[i] = time.Duration(r.ExpFloat64() * 50e3) // mean 50 µs
		h.Record(vals[i])
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if diff := float64(got-exact) / float64(exact); diff > 0.01 || diff < -0.01 {
			t.Errorf("q%.3f = %v, exact %v (%.2f%% off)", q, got, exact, 100*diff)
		}
	}
	if h.Count() != uint64(len(vals)) {
		t.Fatalf("count %d", h.Count())
	}
}

func TestHistogramBuckets(t *testing.T) {
	// Every bucket's lower bound maps back to that bucket, and indices grow
	// with values, across the whole range.
	prev := -1
	for _, v := range []uint64{0, 1, 1023, 1024, 1025, 2047, 2048, 1 << 20, 1<<20 + 1, 1 << 40, 1<<63 - 1} {
		i := histIndex(v)
		if i < prev {
			t.Fatalf("index of %d (%d) below the previous value's (%d)", v, i, prev)
		}
		prev = i
		if lb := histValue(i); lb > v || histIndex(lb) != i {
			t.Fatalf("bucket %d of %d has lower bound %d", i, v, lb)
		}
	}
	a, b := New(), New()
	a.Record(time.Microsecond)
	b.Record(time.Millisecond)
	a.Merge(b)
	if a.Count() != 2 || a.Quantile(1) != time.Millisecond || a.Quantile(0.5) != time.Microsecond {
		t.Fatalf("merge: count %d max %v median %v", a.Count(), a.Quantile(1), a.Quantile(0.5))
	}
}

// TestSetMerged: a set's histograms are separate and empty, and Merged
// holds every observation of them all, leaving them as they were.
func TestSetMerged(t *testing.T) {
	hs := NewSet(3)
	if len(hs) != 3 || hs[0] == hs[1] || hs[1] == hs[2] {
		t.Fatalf("NewSet(3) = %v: want 3 distinct histograms", hs)
	}
	for i, h := range hs {
		if h.Count() != 0 {
			t.Fatalf("histogram %d starts with %d observations", i, h.Count())
		}
		for j := range i + 1 {
			h.Record(time.Duration(j+1) * time.Millisecond)
		}
	}
	m := Merged(hs)
	if m.Count() != 6 || m.Quantile(1) < 3*time.Millisecond || m.Mean() <= 0 {
		t.Errorf("merged: count %d, max %v, mean %v; want 6 observations up to 3ms", m.Count(), m.Quantile(1), m.Mean())
	}
	if hs[2].Count() != 3 {
		t.Errorf("merging changed a member: %d observations, want 3", hs[2].Count())
	}
	if Merged(nil).Count() != 0 {
		t.Error("Merged(nil) is not empty")
	}
}
