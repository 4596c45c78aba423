package lsmbench

import "testing"

// TestOffloadBars: the bars compare the fullest kv/lsm mode measured
// (not pebble) with none, on Load.
func TestOffloadBars(t *testing.T) {
	phases := []Phase{
		{Engine: "kv/lsm:none", Workload: "load", OpsPerSec: 100, CPUus: 50, NetPerByteWritten: 5},
		{Engine: "kv/lsm:none", Workload: "A", OpsPerSec: 1000, CPUus: 10, NetPerByteWritten: 9},
		{Engine: "kv/lsm:compaction", Workload: "load", OpsPerSec: 150, CPUus: 60, NetPerByteWritten: 2},
		{Engine: "pebble", Workload: "load", OpsPerSec: 500, CPUus: 1, NetPerByteWritten: 1},
	}
	bars := offloadBars(phases, []string{OffloadNone, OffloadCompaction, OffloadPebble})
	if len(bars) != 3 {
		t.Fatalf("%d bars: %+v", len(bars), bars)
	}
	for i, want := range []struct {
		got float64
		met bool
	}{{1.5, true}, {1.2, false}, {0.4, true}} {
		if b := bars[i]; b.Got != want.got || b.Met != want.met {
			t.Errorf("bar %q: got %v met %v, want %v %v", b.What, b.Got, b.Met, want.got, want.met)
		}
	}
	if bars := offloadBars(phases[2:], []string{OffloadCompaction}); bars != nil {
		t.Errorf("bars without none: %+v", bars)
	}
}
