package leedbench

import (
	"context"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/internal/plottest"
)

func TestKeys(t *testing.T) {
	seen := map[string]bool{}
	for i := uint64(0); i < 10000; i++ {
		k := Key(i)
		if len(k) != 16 || seen[string(k)] {
			t.Fatalf("key %d: %x (len %d, seen %v)", i, k, len(k), seen[string(k)])
		}
		seen[string(k)] = true
	}
	v := make([]byte, 256)
	value(v, 77, 3)
	if !valueOK(v, 77, 256) || valueOK(v, 78, 256) || valueOK(v[:255], 77, 256) {
		t.Fatal("value check")
	}
}

// TestRunSmall runs the whole experiment small, both stores, and checks
// the report's shape and bars: the device I/O counts come from the
// target's counters and must be LEED's 2 and 3.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a target and runs every phase")
	}
	r, err := Run(context.Background(), Config{Objects: 500, ValueSizes: []int{256}, Threads: 4, Duration: 200 * time.Millisecond,
		Repeat: 1, ScaleObjects: []int{2000}, CapacityBytes: 4 << 20, Baseline: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Medians) != 12 {
		t.Fatalf("%d medians, want 6 workloads × 2 stores", len(r.Medians))
	}
	for _, p := range r.Medians {
		if p.Ops == 0 || p.Errors != 0 {
			t.Fatalf("%+v", p)
		}
	}
	get, _ := r.median("leed", "get", 256)
	put, _ := r.median("leed", "put", 256)
	if get.DeviceIOs != 2 || put.DeviceIOs < 2.9 || put.DeviceIOs > 3.2 {
		t.Fatalf("device I/Os per GET %v, per PUT %v", get.DeviceIOs, put.DeviceIOs)
	}
	if len(r.Scale) != 1 || r.Scale[0].Objects != 2000 || r.Scale[0].BytesPerObject <= 0 || len(r.Capacity) != 1 || r.Capacity[0].Usable <= 0.5 {
		t.Fatalf("scale %+v capacity %+v", r.Scale, r.Capacity)
	}
	if len(r.Bars) != 4 {
		t.Fatalf("%d bars", len(r.Bars))
	}
	plottest.Table(t, WriteTable, r, "bar: device I/Os per GET")
	plottest.SavePNG(t, SavePlot, r)
}
