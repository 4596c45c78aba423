package lsmpushbench

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRunWriteWorkloads runs YCSB Load, A and F end to end at a tiny size:
// nearstore's target in its own process, kv/lsm (plain) and Pebble on
// offloadfs over NVMe/TCP, updates and read-modify-writes interleaved
// with reads whose every value is checked (Run fails on a wrong one).
// Every point has throughput, checked reads and ordered quantiles; the
// loads wrote their records' bytes over the connection.
func TestRunWriteWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nearstore and starts a target process")
	}
	bin := filepath.Join(t.TempDir(), "nearstore")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nearstore/nearstore/cmd/nearstore").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rep, err := Run(context.Background(), Config{Records: 2000, ValueSize: 100, Modes: []string{ModePlain, ModePebble},
		Workloads: []string{"load", "A", "F"}, Threads: 4, Duration: 300 * time.Millisecond, Repeat: 1, TargetExe: bin})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 6 {
		t.Fatalf("%d points, want 6: %+v", len(rep.Points), rep.Points)
	}
	for _, p := range rep.Points {
		r := p.Runs[0]
		if p.Workload == WorkloadLoad {
			// One writer, every record; the tables reach the target.
			if r.Ops != 2000 || r.CheckedReads != 0 || r.Commands == 0 || r.NetBytes < 2000*100 ||
				p.P50Micros <= 0 || p.P99Micros < p.P50Micros || p.P999Micros < p.P99Micros {
				t.Errorf("load %s: %+v", p.Mode, p)
			}
			continue
		}
		// Half of A's operations read; every one of F's does (its
		// writes read first). Reads finishing past the deadline are
		// checked but not counted as operations.
		readsOK := r.CheckedReads*4 > r.Ops && r.CheckedReads*4 < r.Ops*3
		if p.Workload == "F" {
			readsOK = r.CheckedReads >= r.Ops && r.CheckedReads <= r.Ops+4
		}
		if p.OpsPerSec <= 0 || !readsOK || p.P50Micros <= 0 || p.P99Micros < p.P50Micros || p.P999Micros < p.P99Micros {
			t.Errorf("%s %s: %+v", p.Workload, p.Mode, p)
		}
	}
	cfg := Config{Workloads: []string{"E"}}
	if err := cfg.setDefaults(); err == nil {
		t.Error("workload E accepted")
	}
}
