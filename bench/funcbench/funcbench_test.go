package funcbench

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"math"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/bench/internal/plottest"
	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/sandbox"
)

// TestRunFunc runs the whole benchmark briefly: every runtime's answer is
// checked against native Go inside Run (an error fails the test), and
// the target's counters must show the host's walk costing one command per
// read and a pushdown exactly one command per lookup. Nothing here is
// about timing.
func TestRunFunc(t *testing.T) {
	const lookups = 5
	var stages []string
	rep, err := Run(context.Background(), Config{
		Function: "stats64", Size: 64 << 10, Iterations: lookups, Repeat: 2,
		Progress: func(s string) { stages = append(stages, s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.InputBytes != 64<<10 || rep.OutputBytes != functions.StatsSize || rep.Iterations != lookups {
		t.Errorf("report header %+v", rep)
	}
	if len(stages) == 0 {
		t.Error("no progress")
	}
	if len(rep.Compute) != len(FuncRuntimes) {
		t.Fatalf("%d compute rows, want %d", len(rep.Compute), len(FuncRuntimes))
	}
	for i, row := range rep.Compute {
		if row.Runtime != FuncRuntimes[i] || len(row.Runs) != 2 || row.MBps <= 0 || row.NsPerCall <= 0 || row.Ratio <= 0 {
			t.Errorf("compute row %d: %+v", i, row)
		}
		for _, run := range row.Runs {
			if run.Calls != lookups {
				t.Errorf("%s: %d calls per run, want %d", row.Runtime, run.Calls, lookups)
			}
		}
	}
	if rep.Compute[0].Ratio != 1 {
		t.Errorf("native's ratio to itself is %v", rep.Compute[0].Ratio)
	}

	c := rep.Chain
	if c == nil {
		t.Fatal("no chain part")
	}
	if c.Reads != DefaultChainReads || c.Levels != DefaultChainReads-1 || c.BlockSize != 512 {
		t.Errorf("chain %d reads, %d levels, %d-byte blocks", c.Reads, c.Levels, c.BlockSize)
	}
	if len(c.Rows) != 3 || c.Rows[0].Method != ChainHostReads || c.Rows[1].Runtime != RuntimeWasm || c.Rows[2].Runtime != RuntimeEBPF {
		t.Fatalf("chain rows %+v", c.Rows)
	}
	for _, row := range c.Rows {
		wantCmds, wantOp := uint64(c.Reads), "read"
		if row.Method == ChainPushdown {
			wantCmds, wantOp = 1, "pushdown"
			if row.TargetReadsPerLookup != float64(c.Reads) {
				t.Errorf("%s: the target made %v reads per lookup, want %d", row.Runtime, row.TargetReadsPerLookup, c.Reads)
			}
			if row.Speedup <= 0 {
				t.Errorf("%s: no speedup computed", row.Runtime)
			}
		}
		if row.CommandsPerLookup != float64(wantCmds) {
			t.Errorf("%s (%s): %v commands per lookup, want exactly %d", row.Method, row.Runtime, row.CommandsPerLookup, wantCmds)
		}
		for i, run := range row.Runs {
			want := map[string]uint64{wantOp: wantCmds * lookups}
			if run.Lookups != lookups || !maps.Equal(run.Commands, want) {
				t.Errorf("%s (%s) run %d: %d lookups, commands %v; want %d, %v", row.Method, row.Runtime, i, run.Lookups, run.Commands, lookups, want)
			}
			if run.P50us <= 0 || run.P99us < run.P50us {
				t.Errorf("%s (%s) run %d: p50 %v, p99 %v", row.Method, row.Runtime, i, run.P50us, run.P99us)
			}
		}
	}
	if len(c.Steps) != 3 || c.Steps[0].Runtime != RuntimeNative || c.Steps[0].OverheadNs != 0 {
		t.Errorf("step cost rows %+v", c.Steps)
	}
	for _, s := range c.Steps {
		if s.NsPerLookup <= 0 || !near(s.NsPerStep*float64(c.Reads), s.NsPerLookup) {
			t.Errorf("step cost %+v", s)
		}
	}

	// The report's three forms.
	plottest.Table(t, WriteTable, rep, "stats64 on 64 KiB", "native", "wasm", "ebpf", "host: 7 reads", "pushdown", "overhead ns/step")
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || back.Chain == nil || back.Chain.Rows[1].CommandsPerLookup != 1 {
		t.Errorf("JSON round trip: %v, %+v", err, back.Chain)
	}
	if b := plottest.SavePNG(t, SavePlot, rep).Bounds(); b.Dx() < b.Dy() {
		t.Errorf("two charts side by side in %v", b)
	}
}

// TestRunFuncEveryFunction runs each compute function in every runtime
// on a small input; Run fails if any output differs from native Go's.
func TestRunFuncEveryFunction(t *testing.T) {
	names := computeNames()
	if len(names) < 5 {
		t.Fatalf("compute functions %v", names)
	}
	for _, fn := range names {
		t.Run(fn, func(t *testing.T) {
			rep, err := Run(context.Background(), Config{Function: fn, Size: 20000, Iterations: 2, Repeat: 1, SkipChain: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Chain != nil || len(rep.Compute) != 3 || rep.OutputBytes == 0 {
				t.Fatalf("report %+v", rep)
			}
		})
	}
}

// TestRunFuncSubset: a subset of runtimes comes back in report order, and
// without native there is no ratio.
func TestRunFuncSubset(t *testing.T) {
	rep, err := Run(context.Background(), Config{
		Function: "stats32", Size: 4096, Runtimes: []string{RuntimeEBPF, RuntimeWasm, RuntimeEBPF}, Iterations: 1, Repeat: 1, ChainReads: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Compute) != 2 || rep.Compute[0].Runtime != RuntimeWasm || rep.Compute[1].Runtime != RuntimeEBPF || rep.Compute[0].Ratio != 0 {
		t.Fatalf("compute rows %+v", rep.Compute)
	}
	c := rep.Chain
	if c == nil || c.Reads != 3 || len(c.Rows) != 3 || c.Rows[0].CommandsPerLookup != 3 || c.Rows[1].CommandsPerLookup != 1 {
		t.Fatalf("chain %+v", c)
	}
}

// TestComputeSubjectWrongAnswer: an output that differs from the
// reference is an error.
func TestComputeSubjectWrongAnswer(t *testing.T) {
	ctx := context.Background()
	rts, closeRTs, err := newFuncRuntimes(ctx, FuncRuntimes)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRTs()
	in, outCap, err := FuncInput("stats64", 4096, 1)
	if err != nil {
		t.Fatal(err)
	}
	// stats32 on the same bytes: the same output length, other numbers.
	want, err := functions.Stats64(in)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes, _ := want.AppendBinary(nil)
	for _, k := range []sandbox.Kind{sandbox.KindWasm, sandbox.KindEBPF} {
		s, err := computeSubject(ctx, rts[k], "stats32", in, outCap, wantBytes)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.call(); err != nil {
			t.Fatal(err)
		}
		if err := s.check(); err == nil || !strings.Contains(err.Error(), "differs from native") {
			t.Errorf("%v: a wrong answer gave %v", k, err)
		}
		// And a wrong length fails the call itself.
		s2, err := computeSubject(ctx, rts[k], "stats64", in, outCap, wantBytes[:8])
		if err != nil {
			t.Fatal(err)
		}
		if err := s2.call(); err == nil {
			t.Errorf("%v: a wrong output length passed", k)
		}
		s.close()
		s2.close()
	}
}

func TestFuncConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"pushdown function", Config{Function: "btree_lookup"}, "not a compute function"},
		{"unknown function", Config{Function: "nope"}, "want one of the compute functions"},
		{"bad runtime", Config{Runtimes: []string{"jvm"}}, `runtime "jvm"`},
		{"too small", Config{Function: "knn", Size: 16}, "needs at least"},
		{"too big", Config{Size: MaxFuncSize + 1}, "input size"},
		{"short chain", Config{ChainReads: 1}, "chain reads"},
		{"long chain", Config{ChainReads: MaxChainReads + 1}, "chain reads"},
		{"repeat", Config{Repeat: -1}, "repeat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestFuncInput: inputs are deterministic, within the size asked, and
// valid for the native functions.
func TestFuncInput(t *testing.T) {
	for _, fn := range computeNames() {
		a, capA, err := FuncInput(fn, 10001, 9)
		if err != nil {
			t.Fatal(err)
		}
		b, capB, _ := FuncInput(fn, 10001, 9)
		if !bytes.Equal(a, b) || capA != capB || len(a) > 10001 || len(a) < 9000 {
			t.Errorf("%s: %d bytes, not deterministic or not the size asked", fn, len(a))
		}
		out := make([]byte, capA)
		if _, err := functions.Native(fn)(a, out); err != nil {
			t.Errorf("%s: native: %v", fn, err)
		}
	}
}

// TestChainTreeDepth: the chain tree has the depth asked, for every
// length the command accepts.
func TestChainTreeDepth(t *testing.T) {
	for reads := MinChainReads; reads <= MaxChainReads; reads++ {
		tr, err := buildChainTree(reads, 1, 512)
		if err != nil {
			t.Fatalf("%d reads: %v", reads, err)
		}
		if tr.levels != reads-1 || tr.valueBase%512 != 0 || tr.valueBase < int64(len(tr.index)) {
			t.Fatalf("%d reads: %d levels, value log at %d", reads, tr.levels, tr.valueBase)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(math.Abs(a), math.Abs(b), 1) }
