package lambdabench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/internal/plottest"
	"github.com/nearstore/nearstore/lambda"
	"github.com/nearstore/nearstore/sandbox"
)

// TestRunLambda runs every application end to end, in-process, over
// real TCP loopback and a real offloadfs, in all four modes: each run
// checks its combined answer against the native reference itself, so a
// nil error means every mode was right. It also checks where the calls
// ran: T's at the target, B's and K's on the host.
func TestRunLambda(t *testing.T) {
	const size, req = 2 << 20, 256 << 10
	for _, tc := range []struct {
		app     string
		warm    float64
		random  bool
		depth   int
		runtime sandbox.Kind
		// interleave: the modes run together, each over its own file
		interleave int
	}{
		{app: "stats64"},
		{app: "stats32", warm: 0.5, random: true},
		{app: "knn", warm: 1},
		{app: "grep", depth: 3},
		{app: "bitmap", warm: 0.5},
		{app: "stats64", runtime: sandbox.KindEBPF, warm: 0.25, random: true},
		{app: "grep", warm: 0.5, random: true, interleave: 3},
		{app: "bitmap", warm: 0.5, depth: 2, interleave: 2},
	} {
		name := tc.app
		if tc.runtime == sandbox.KindEBPF {
			name += "-ebpf"
		}
		if tc.interleave > 0 {
			name += "-interleaved"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, Config{
				App: tc.app, Size: size, RequestSize: req, Repeat: 1, Depth: tc.depth,
				Warm: tc.warm, WarmRandom: tc.random, Runtime: tc.runtime, Interleave: tc.interleave,
			})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Requests != size/req || rep.Answer == "" || rep.Target != "this process" {
				t.Errorf("report: %d requests, answer %q, target %q", rep.Requests, rep.Answer, rep.Target)
			}
			if len(rep.Modes) != 4 {
				t.Fatalf("%d modes reported, want 4", len(rep.Modes))
			}
			for _, m := range rep.Modes {
				if len(m.Runs) != 1 || m.Seconds <= 0 || m.MBps <= 0 {
					t.Errorf("mode %s: runs %v", m.Mode, m.Runs)
				}
				var total uint64
				for _, n := range m.Ran {
					total += n
				}
				if total != uint64(rep.Requests) {
					t.Errorf("mode %s: %d calls ran (%v), want %d", m.Mode, total, m.Ran, rep.Requests)
				}
				switch m.Mode {
				case lambda.Target.String():
					if m.Ran[lambda.Target.String()] == 0 {
						t.Errorf("mode T: no call ran at the target: %v", m.Ran)
					}
				case lambda.Host.String(), lambda.Buffered.String():
					if m.Ran[m.Mode] != uint64(rep.Requests) {
						t.Errorf("mode %s: calls ran %v, want all %d in mode %s", m.Mode, m.Ran, rep.Requests, m.Mode)
					}
				}
			}
			if len(rep.Bars) != 2 {
				t.Errorf("bars: %v", rep.Bars)
			}
			if rep.Interleave != tc.interleave || len(rep.Models) != 1 {
				t.Errorf("report: interleave %d, want %d; models %q, want λ's file's one", rep.Interleave, tc.interleave, rep.Models)
			}
			plottest.Table(t, WriteTable, rep, "λ time ÷ min(K, T) time", "λ speedup over B", rep.Answer)
			if tc.app == "stats64" && tc.runtime == 0 {
				plottest.SavePNG(t, SavePlot, rep)
			}
		})
	}
}

// TestLambdaRunDetectsWrongAnswers: a run whose answer is not the
// reference fails, for reads (a wrong reference) and writes (output that
// was never written).
func TestLambdaRunDetectsWrongAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const size, req = 1 << 20, 256 << 10
	e, err := startLambdaEnv(ctx, lambdaEnvConfig{volumeSize: 128 << 20, cacheSize: 64 << 20, requestSize: req, depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reqs, err := planLambdaRequests(size, req, lambdaBlock)
	if err != nil {
		t.Fatal(err)
	}
	opts := runOpts{depth: 1}
	for _, name := range []string{"stats64", "bitmap"} {
		app, err := lookupLambdaApp(name)
		if err != nil {
			t.Fatal(err)
		}
		fn, err := e.register(ctx, app.function, sandbox.KindWasm)
		if err != nil {
			t.Fatal(err)
		}
		w, err := prepareLambdaApp(ctx, e, app, fn, reqs, size, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.runOnce(ctx, w, lambda.Target, opts, 1); err != nil {
			t.Fatalf("%s: a correct run failed: %v", name, err)
		}
		if app.write {
			// Nothing written since the scrub: the file is not the bitmap.
			if err := w.scrub(ctx, w.file); err != nil {
				t.Fatal(err)
			}
			if _, err := w.verify(ctx, w.file); err == nil || !strings.Contains(err.Error(), "differs") {
				t.Errorf("%s: verifying an unwritten file: %v", name, err)
			}
		} else {
			w.reference = "count 0"
			if _, err := e.runOnce(ctx, w, lambda.Host, opts, 1); err == nil || !strings.Contains(err.Error(), "wrong answer") {
				t.Errorf("%s: a run against a wrong reference: %v", name, err)
			}
		}
		w.file.Close()
	}
}

// TestLambdaProfileSchedule: the profiling schedule given reaches λ's
// dispatcher (how many of λ's calls were profiled follows it), the
// report says which schedule ran, and a negative one is refused.
func TestLambdaProfileSchedule(t *testing.T) {
	const size, req = 2 << 20, 256 << 10 // 8 requests a run
	for _, tc := range []struct {
		every, first int
		// λ's profiled calls over both runs' 16 requests: the first
		// `first` of every `every`, and a recheck's `first` (a recheck
		// comes at most once every `every` requests).
		min, max uint64
	}{
		{every: 4, first: 2, min: 8, max: 16},
		{every: 1000, first: 1, min: 1, max: 2},
		{every: 0, first: 0, min: lambda.DefaultProfileFirst, max: 2 * lambda.DefaultProfileFirst},
	} {
		t.Run(fmt.Sprintf("%d-of-%d", tc.first, tc.every), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, Config{
				App: "stats64", Size: size, RequestSize: req, Repeat: 2,
				ProfileEvery: tc.every, ProfileFirst: tc.first,
			})
			if err != nil {
				t.Fatal(err)
			}
			every, first := cmp.Or(tc.every, lambda.DefaultProfileEvery), cmp.Or(tc.first, lambda.DefaultProfileFirst)
			if rep.ProfileEvery != every || rep.ProfileFirst != first {
				t.Errorf("report: first %d of every %d, want %d of %d", rep.ProfileFirst, rep.ProfileEvery, first, every)
			}
			var profiled uint64
			for _, m := range rep.Modes {
				for _, r := range m.Runs {
					if m.Mode != lambda.Auto.String() && r.Profiled > 0 {
						t.Errorf("mode %s profiled %d calls", m.Mode, r.Profiled)
					}
					profiled += r.Profiled
				}
			}
			if profiled < tc.min || profiled > tc.max {
				t.Errorf("λ profiled %d calls, want %d to %d", profiled, tc.min, tc.max)
			}
			var out strings.Builder
			if err := WriteTable(&out, rep); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("the first %d of every %d requests profiled", first, every); !strings.Contains(out.String(), want) {
				t.Errorf("the table has no %q:\n%s", want, out.String())
			}
		})
	}
	if _, err := Run(context.Background(), Config{App: "stats64", ProfileEvery: -1}); err == nil {
		t.Error("a negative profile schedule was taken")
	}
}

func TestLambdaBars(t *testing.T) {
	mk := func(app string, warm float64, shaped bool, rate string, secs map[string]float64) *Report {
		r := &Report{App: app, Warm: warm, LinkShaped: shaped, LinkRate: rate}
		for _, m := range []string{"B", "K", "T", "lambda"} {
			if s, ok := secs[m]; ok {
				r.Modes = append(r.Modes, ModeResult{Mode: m, Seconds: s})
			}
		}
		return r
	}
	all := map[string]float64{"B": 4, "K": 3, "T": 1, "lambda": 1.04}
	for _, tc := range []struct {
		name    string
		rep     *Report
		n       int
		best    float64
		bestMet bool
		vsB     float64
		applies bool
		vsBMet  bool
	}{
		{"10gbit cold stats64", mk("stats64", 0, true, "10gbit", all), 2, 1.04, true, 4 / 1.04, true, true},
		{"loopback", mk("grep", 0, false, "", all), 2, 1.04, true, 4 / 1.04, false, true},
		{"warm", mk("stats64", 0.5, true, "10gbit", all), 2, 1.04, true, 4 / 1.04, false, true},
		{"knn", mk("knn", 0, true, "10gbit", all), 2, 1.04, true, 4 / 1.04, false, true},
		{"λ slow", mk("stats64", 0, true, "10gbit", map[string]float64{"B": 2, "K": 3, "T": 1, "lambda": 1.2}), 2, 1.2, false, 2 / 1.2, true, false},
		{"no B", mk("stats64", 0, true, "10gbit", map[string]float64{"K": 3, "T": 1, "lambda": 1}), 1, 1, true, 0, false, false},
		{"no K", mk("stats64", 0, true, "10gbit", map[string]float64{"B": 3, "T": 1, "lambda": 1}), 1, 0, false, 3, true, true},
	} {
		bars := lambdaBars(tc.rep)
		if len(bars) != tc.n {
			t.Errorf("%s: %d bars, want %d", tc.name, len(bars), tc.n)
			continue
		}
		for _, b := range bars {
			switch {
			case b.Max:
				if math.Abs(b.Value-tc.best) > 1e-9 || b.Met != tc.bestMet || !b.Applies {
					t.Errorf("%s: %+v, want value %g met %v", tc.name, b, tc.best, tc.bestMet)
				}
			default:
				if math.Abs(b.Value-tc.vsB) > 1e-9 || b.Applies != tc.applies || b.Met != tc.vsBMet {
					t.Errorf("%s: %+v, want value %g applies %v met %v", tc.name, b, tc.vsB, tc.applies, tc.vsBMet)
				}
			}
		}
	}
}

func TestForEachRequest(t *testing.T) {
	for _, depth := range []int{1, 4} {
		seen := make([]int, 50)
		err := forEachRequest(context.Background(), len(seen), depth, func(_ context.Context, i int) error {
			seen[i]++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range seen {
			if n != 1 {
				t.Fatalf("depth %d: request %d done %d times", depth, i, n)
			}
		}
		err = forEachRequest(context.Background(), 50, depth, func(_ context.Context, i int) error {
			if i == 7 {
				return os.ErrInvalid
			}
			return nil
		})
		if err != os.ErrInvalid {
			t.Errorf("depth %d: error %v, want %v", depth, err, os.ErrInvalid)
		}
	}
}
