package btreebench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/internal/plottest"
	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/kv/btree"
)

// The runner's round trips come from the target's command counters: a
// plain lookup costs one read per uncached level plus the value, a
// pushdown one command, whatever the timing.
func TestRunBTreeRoundTrips(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a target and loads a tree")
	}
	for _, cache := range []int{0, 3} {
		rep, err := Run(context.Background(), Config{
			Keys: 2000, Fanout: 4, CacheLevels: cache, Device: DeviceMem,
			Threads: []int{1, 4}, Duration: 150 * time.Millisecond, Repeat: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Tree.Depth != 6 || rep.Tree.CacheLevels != cache {
			t.Fatalf("tree %+v", rep.Tree)
		}
		if len(rep.Points) != 4 || len(rep.Saturated) != 2 {
			t.Fatalf("%d points, %d saturated; want 4, 2", len(rep.Points), len(rep.Saturated))
		}
		var hostCPU float64
		for _, p := range rep.Points {
			want := 1.0
			if p.Mode == btree.Plain.String() {
				want = float64(rep.Tree.Depth + 1 - cache)
			}
			if math.Abs(p.RoundTrips-want) > 1e-9 {
				t.Errorf("cache %d, %s, %d threads: %.4f round trips per lookup, want %g (commands %v)",
					cache, p.Mode, p.Threads, p.RoundTrips, want, p.Runs[0].Commands)
			}
			r := p.Runs[0]
			if r.Lookups == 0 || p.OpsPerSec <= 0 || p.P50us <= 0 || p.P99us < p.P50us {
				t.Errorf("%s, %d threads: %d lookups, %.0f/s, p50 %.1f µs, p99 %.1f µs", p.Mode, p.Threads, r.Lookups, p.OpsPerSec, p.P50us, p.P99us)
			}
			// Thread CPU time comes from scheduler ticks: one short point on
			// a loaded machine may see none, so only the sum must be positive.
			hostCPU += p.HostCPUus
			if p.Fallbacks != 0 || p.HostCPUus < 0 || p.TargetCPUus != 0 {
				t.Errorf("%s: %d fallbacks, host CPU %.1f µs, target CPU %.1f µs (in process: 0)", p.Mode, p.Fallbacks, p.HostCPUus, p.TargetCPUus)
			}
			// The store's own count agrees with the target's.
			if got := float64(r.Reads+r.Pushdowns) / float64(r.Gets); math.Abs(got-want) > 1e-9 {
				t.Errorf("%s: the store counted %.4f round trips per lookup, want %g", p.Mode, got, want)
			}
			if p.NetBytes < 500 {
				t.Errorf("%s: %.0f network bytes per lookup", p.Mode, p.NetBytes)
			}
		}
		if hostCPU <= 0 {
			t.Errorf("cache %d: no host CPU time measured in any point", cache)
		}
		if rep.Ratios == nil || math.Abs(rep.Ratios.RoundTrips-float64(rep.Tree.Depth+1-cache)) > 1e-9 {
			t.Errorf("ratios %+v", rep.Ratios)
		}
		wantBars := map[int]int{0: 3, 3: 1}[cache]
		if len(rep.Bars) != wantBars {
			t.Errorf("cache %d: bars %+v, want %d", cache, rep.Bars, wantBars)
		}
		plottest.Table(t, WriteTable, rep, "plain", "pushdown", "saturated", "round trips")
		plottest.SavePNG(t, SavePlot, rep)
		if _, err := json.Marshal(rep); err != nil {
			t.Fatal(err)
		}
	}
}

// An automatic sweep doubles the threads and stops at MaxThreads.
func TestRunBTreeAutoSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a target and loads a tree")
	}
	rep, err := Run(context.Background(), Config{
		Keys: 500, Fanout: 8, Device: DeviceMem, Modes: []btree.Mode{btree.Pushdown}, Runtime: 0,
		AutoSweep: true, MaxThreads: 4, Duration: 80 * time.Millisecond, Repeat: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, p := range rep.Points {
		got = append(got, p.Threads)
	}
	if len(got) == 0 || got[0] != 1 || got[len(got)-1] > 4 {
		t.Errorf("sweep %v, want 1, 2, 4 (or fewer if it stopped growing)", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != 2*got[i-1] {
			t.Errorf("sweep %v does not double", got)
		}
	}
	if rep.Ratios != nil || len(rep.Saturated) != 1 {
		t.Errorf("one mode: ratios %+v, saturated %+v", rep.Ratios, rep.Saturated)
	}
}

func TestBTreeConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Keys: -1}, {Device: "floppy"}, {Threads: []int{0}}, {Threads: []int{MaxBTreeThreads + 1}}, {CacheLevels: -1},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestFanoutForLevels(t *testing.T) {
	for _, tc := range []struct {
		keys           int64
		levels, fanout int
	}{
		{1_000_000, 6, 15}, {1 << 20, 6, 15}, {1 << 20, 5, 31}, {1_000_000, 5, 31}, {30_000_000, 6, 31}, {2000, 6, 4}, {10, 6, 2},
	} {
		f := fanoutForLevels(tc.keys, tc.levels)
		if f != tc.fanout {
			t.Errorf("%d keys, %d levels: fanout %d, want %d", tc.keys, tc.levels, f, tc.fanout)
		}
		if tc.fanout > 2 && treeDepth(tc.keys, f) < tc.levels {
			t.Errorf("%d keys, fanout %d: depth %d", tc.keys, f, treeDepth(tc.keys, f))
		}
	}
}

func TestBTreeValueEncoding(t *testing.T) {
	for _, size := range []int{1, 8, 9, 64, 300} {
		for _, key := range []uint64{2, 0xfffe, 1 << 40} {
			v := make([]byte, size)
			PutBTreeValue(v, key)
			if !bytes.Equal(v, functions.BTreeValue(key, size)) {
				t.Errorf("key %d size %d: %x, want %x", key, size, v, functions.BTreeValue(key, size))
			}
			if !checkBTreeValue(v, key, size) || checkBTreeValue(v, key+2, size) {
				t.Errorf("key %d size %d: check disagrees", key, size)
			}
		}
	}
}

func TestParseCommandCounts(t *testing.T) {
	text := `# HELP nearstore_target_commands_total Commands completed.
# TYPE nearstore_target_commands_total counter
nearstore_target_commands_total{nsid="0",op="admin",result="ok",subsystem="x"} 12
nearstore_target_commands_total{nsid="1",op="pushdown",result="ok",subsystem="x"} 1.234567e+06
nearstore_target_commands_total{nsid="1",op="read",result="ok",subsystem="x"} 700
nearstore_target_commands_total{nsid="1",op="read",result="error",subsystem="x"} 3
nearstore_target_bytes_total{direction="read",nsid="1",subsystem="x"} 99999
`
	got, err := parseCommandCounts(strings.NewReader(text), "1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["pushdown"] != 1234567 || got["read"] != 703 {
		t.Errorf("got %v", got)
	}
	if _, err := parseCommandCounts(strings.NewReader(`nearstore_target_commands_total{nsid="1"} x`), "1"); err == nil {
		t.Error("a bad value parsed")
	}
}

func TestParseProcIO(t *testing.T) {
	r, w, err := parseProcIO([]byte("rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 0\n"))
	if err != nil || r != 6976 || w != 12 {
		t.Errorf("io: %d, %d, %v", r, w, err)
	}
	if _, _, err := parseProcIO([]byte("syscr: 10\n")); err == nil {
		t.Error("io without rchar parsed")
	}
}
