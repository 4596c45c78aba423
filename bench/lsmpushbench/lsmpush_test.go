package lsmpushbench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValuesCheck(t *testing.T) {
	v := make([]byte, 64)
	Value(v, 7, 3)
	if !checkValue(v, 7, 64) {
		t.Fatal("a value does not check")
	}
	for _, c := range []struct {
		name string
		v    []byte
		i    uint64
		size int
	}{
		{"other record", v, 8, 64},
		{"short", v[:63], 7, 64},
		{"flipped byte", append(bytes.Clone(v[:40]), append([]byte{v[40] ^ 1}, v[41:]...)...), 7, 64},
	} {
		if checkValue(c.v, c.i, c.size) {
			t.Errorf("%s: checks", c.name)
		}
	}
	if bytes.Equal(Key(1), Key(2)) || !strings.HasPrefix(string(Key(1)), "user") {
		t.Fatalf("keys %q %q", Key(1), Key(2))
	}
}

func TestBars(t *testing.T) {
	pt := func(mode, rt string, threads int, ops float64) Point {
		return Point{Workload: "C", variant: variant{Dist: DistUniform, Mode: mode, Runtime: rt, SampleRate: 0.01, Threads: threads},
			OpsPerSec: ops, RoundTrips: 2, HostCPU: 10, TargetCPU: 10, Runs: []Trial{{CheckedReads: 5}}}
	}
	pd := pt(ModePushdown, "ebpf", 64, 250)
	pd.RoundTrips, pd.HostCPU = 1, 5
	rep := &Report{Points: []Point{
		pt(ModePlain, "", 8, 80), pt(ModePlain, "", 64, 100), // saturated at 64
		pt(ModePushdown, "ebpf", 8, 90), pd,
		pt(ModePushdown, "wasm", 64, 150),
		{Workload: "C", variant: variant{Dist: DistZipfian, Mode: ModePlain, Threads: 64}, OpsPerSec: 1000}, // not uniform
	}}
	bs := bars(rep)
	if len(bs) != 7 {
		t.Fatalf("%d bars: %+v", len(bs), bs)
	}
	for i, b := range bs[:3] {
		if !b.Met || !strings.Contains(b.What, "(ebpf)") {
			t.Errorf("bar %d %q: met %v, got %v", i, b.What, b.Met, b.Got)
		}
	}
	if bs[0].Got != 2.5 {
		t.Errorf("ebpf / plain at saturation = %v, want 2.5", bs[0].Got)
	}
	if w := bs[3]; w.Met || w.Got != 1.5 || !strings.Contains(w.What, "(wasm)") {
		t.Errorf("wasm's 1.5x: %+v", w)
	}
	if last := bs[len(bs)-1]; !last.Met || last.Got != 25 {
		t.Errorf("checked reads bar: %+v", last)
	}
}

// TestSavePlot draws a report with a sampling sweep: a panel per workload
// and distribution, and the sweep's panel only when two or more rates were
// measured.
func TestSavePlot(t *testing.T) {
	var pts []Point
	for _, wl := range []string{"C", "D"} {
		dist := DistUniform
		if wl == "D" {
			dist = DistLatest
		}
		pts = append(pts, Point{Workload: wl, variant: variant{Dist: dist, Mode: ModePlain, Threads: 8}, OpsPerSec: 100})
		for _, r := range []float64{0, 0.001, 0.01, 0.1} {
			pts = append(pts, Point{Workload: wl, variant: variant{Dist: dist, Mode: ModePushdown, Runtime: "wasm", SampleRate: r, Threads: 8},
				OpsPerSec: 100 + 1000*r})
		}
	}
	rep := &Report{Volume: "sim:nand", Points: pts}
	p, err := samplingPlot(rep)
	if err != nil || p == nil {
		t.Fatalf("sweep: %v, %v", p, err)
	}
	file := filepath.Join(t.TempDir(), "lsm.png")
	if err := SavePlot(file, rep); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(file); err != nil || st.Size() < 1000 {
		t.Fatalf("plot file: %v, %v", st, err)
	}
	one := &Report{Points: pts[:2]}
	if p, err := samplingPlot(one); p != nil || err != nil {
		t.Fatalf("one rate: %v, %v", p, err)
	}
}
