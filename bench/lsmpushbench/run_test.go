package lsmpushbench

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/sandbox"
)

// TestRunWriteWorkloads runs YCSB Load, A and F end to end at a tiny size:
// nearstore's target in its own process, kv/lsm (plain) and Pebble on
// offloadfs over NVMe/TCP, updates and read-modify-writes interleaved
// with reads whose every value is checked (Run fails on a wrong one).
// Every point has throughput, checked reads and ordered quantiles; the
// loads wrote their records' bytes over the connection.
func TestRunWriteWorkloads(t *testing.T) {
	bin := buildNearstore(t)
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

// TestRunPushdownVariants runs YCSB C at a tiny size in every variant the
// bench sweeps: plain and pushdown with lsm_get in wasm and in eBPF at the
// target, without and with cache sampling, uniform and zipfian keys, two
// concurrencies. Every pushdown point's Gets were pushed and ran at the
// target; without sampling, in one command each; every variant read and
// checked values, and the bars compare each runtime with plain.
func TestRunPushdownVariants(t *testing.T) {
	bin := buildNearstore(t)
	rep, err := Run(context.Background(), Config{Records: 3000, ValueSize: 100, Modes: []string{ModePlain, ModePushdown},
		Workloads: []string{"C"}, Dists: []string{DistUniform, DistZipfian}, Runtimes: []sandbox.Kind{sandbox.KindWasm, sandbox.KindEBPF},
		SampleRates: []float64{0, lsm.DefaultCacheSampleRate}, Concurrency: []int{1, 4}, BlockCache: 16 << 10,
		Duration: 300 * time.Millisecond, Repeat: 1, TargetExe: bin})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 2*2*5 {
		t.Fatalf("%d points, want 20", len(rep.Points))
	}
	seen := map[variant]bool{}
	for _, p := range rep.Points {
		seen[p.variant] = true
		r := p.Runs[0]
		if p.OpsPerSec <= 0 || r.CheckedReads == 0 || r.CheckedReads < r.Ops {
			t.Errorf("%+v: %d ops, %d checked", p.variant, r.Ops, r.CheckedReads)
		}
		if p.Mode != ModePushdown {
			continue
		}
		pd := r.Pushdown
		// Besides the Gets' commands, a keep-alive may fall in the run.
		if pd.Pushed == 0 || pd.HostRuns != 0 || pd.Plain != 0 ||
			(p.SampleRate == 0 && (pd.Sampled != 0 || r.Commands > pd.Pushed+2)) {
			t.Errorf("%+v: pushdown %+v, %d commands", p.variant, pd, r.Commands)
		}
	}
	if len(seen) != len(rep.Points) || !seen[variant{Dist: DistZipfian, Mode: ModePushdown, Runtime: "ebpf", Threads: 4}] {
		t.Fatalf("variants %v", seen)
	}
	if len(rep.Bars) != 2*3+1 {
		t.Fatalf("bars %+v", rep.Bars)
	}
}

// buildNearstore builds the nearstore binary the bench runs its target
// with (skipped in -short mode).
func buildNearstore(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds nearstore and starts a target process")
	}
	bin := filepath.Join(t.TempDir(), "nearstore")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nearstore/nearstore/cmd/nearstore").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
