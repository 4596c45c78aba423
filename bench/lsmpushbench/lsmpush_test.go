package lsmpushbench

import (
	"bytes"
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
	rep := &Report{Points: []Point{
		{Workload: "C", Mode: ModePlain, OpsPerSec: 100, RoundTrips: 2, HostCPU: 10, TargetCPU: 10,
			Runs: []Trial{{CheckedReads: 5}}},
		{Workload: "C", Mode: ModePushdown, SampleRate: 0.01, OpsPerSec: 250, RoundTrips: 1, HostCPU: 5, TargetCPU: 10,
			Runs: []Trial{{CheckedReads: 5}}},
	}}
	bs := bars(rep)
	if len(bs) != 4 {
		t.Fatalf("%d bars", len(bs))
	}
	for _, b := range bs {
		if !b.Met {
			t.Errorf("bar %q not met: %v", b.What, b.Got)
		}
	}
	rep.Points[1].OpsPerSec = 150
	if bars(rep)[0].Met {
		t.Error("1.5x met the 2x bar")
	}
}
