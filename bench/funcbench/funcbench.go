// Package funcbench is the function experiment (bench func): the compute
// throughput of a function in each runtime (native, eBPF, Wasm), and a
// chain of dependent lookups pushed down to the target against the host
// reading each step itself.
package funcbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image/color"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/prometheus/client_golang/prometheus"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/tpch"
	"github.com/nearstore/nearstore/volume"
)

// Runtime names a Config and a Report use. Native is the function's
// Go implementation (functions.Native), the reference every runtime's
// output is checked against.
const (
	RuntimeNative = "native"
	RuntimeWasm   = "wasm"
	RuntimeEBPF   = "ebpf"
)

// FuncRuntimes are the runtimes `bench func` measures, in report order.
var FuncRuntimes = []string{RuntimeNative, RuntimeWasm, RuntimeEBPF}

// Defaults and bounds of a Config.
const (
	DefaultFuncSize   = 1 << 20
	MaxFuncSize       = 256 << 20
	DefaultChainReads = 7
	// MinChainReads and MaxChainReads bound Config.ChainReads: a
	// lookup reads at least one index node and the value, and the
	// executor's default step cap (64) is far above the top.
	MinChainReads = 2
	MaxChainReads = 16
)

// Config configures Run.
type Config struct {
	// Function is a standard compute function (functions.Names; default
	// "stats64").
	Function string
	// Size is the input's length in bytes (default 1 MiB), rounded down
	// to what the function's input format allows.
	Size int
	// Runtimes to measure, of RuntimeNative, RuntimeWasm and RuntimeEBPF
	// (default all three). The compute part checks every runtime against
	// native Go whether or not native is listed, but times it only if it
	// is. The chain part pushes down through each listed sandbox runtime.
	Runtimes []string
	// Duration is the length of each timed run (default 1s), unless
	// Iterations is set: then every run makes exactly that many calls.
	Duration   time.Duration
	Iterations int
	// Repeat is the number of runs per runtime (default 3); reports give
	// the medians.
	Repeat int
	// Seed makes the random inputs (0: a fixed default).
	Seed uint64
	// SkipChain leaves out the pushdown chain part.
	SkipChain bool
	// ChainReads is the number of dependent reads one lookup of the chain
	// part makes: a B+-tree of ChainReads-1 levels, then the value
	// (default DefaultChainReads).
	ChainReads int
	// Progress, when set, is told what is about to run.
	Progress func(stage string)
}

func (c *Config) setDefaults() error {
	if c.Function == "" {
		c.Function = "stats64"
	}
	if c.Size == 0 {
		c.Size = DefaultFuncSize
	}
	if c.Size < 0 || c.Size > MaxFuncSize {
		return fmt.Errorf("bench: input size %d: want 1 byte to %s", c.Size, volume.FormatSize(MaxFuncSize))
	}
	if len(c.Runtimes) == 0 {
		c.Runtimes = FuncRuntimes
	}
	var rts []string
	for _, r := range c.Runtimes {
		if !slices.Contains(FuncRuntimes, r) {
			return fmt.Errorf("bench: runtime %q: want %s", r, strings.Join(FuncRuntimes, ", "))
		}
		if !slices.Contains(rts, r) {
			rts = append(rts, r)
		}
	}
	// Report order, whatever the order asked.
	slices.SortFunc(rts, func(a, b string) int { return slices.Index(FuncRuntimes, a) - slices.Index(FuncRuntimes, b) })
	c.Runtimes = rts
	if c.Iterations < 0 {
		return fmt.Errorf("bench: %d iterations", c.Iterations)
	}
	if err := harness.RunLength(&c.Duration, time.Second, &c.Repeat); err != nil {
		return err
	}
	if c.Seed == 0 {
		c.Seed = 0x6e656172 // "near"
	}
	if c.ChainReads == 0 {
		c.ChainReads = DefaultChainReads
	}
	if c.ChainReads < MinChainReads || c.ChainReads > MaxChainReads {
		return fmt.Errorf("bench: %d chain reads: want %d to %d", c.ChainReads, MinChainReads, MaxChainReads)
	}
	return nil
}

// Report is what Run measured.
type Report struct {
	Machine  report.Machine `json:"machine"`
	Function string         `json:"function"`
	// InputBytes is the input's length; OutputBytes the (checked) output's.
	InputBytes  int     `json:"input_bytes"`
	OutputBytes int     `json:"output_bytes"`
	Repeat      int     `json:"repeat"`
	Duration    float64 `json:"duration_s,omitempty"`
	Iterations  int     `json:"iterations,omitempty"`
	// Compute has one row per runtime, in FuncRuntimes order.
	Compute []FuncRow `json:"compute"`
	// Chain is the pushdown chain part (nil if skipped).
	Chain *ChainReport `json:"chain,omitempty"`
}

// FuncRun is one timed run of a compute function.
type FuncRun struct {
	Calls     int64   `json:"calls"`
	Seconds   float64 `json:"seconds"`
	MBps      float64 `json:"mb_per_s"` // input bytes (10^6) per second
	NsPerCall float64 `json:"ns_per_call"`
	// CPUSeconds is the CPU time of the thread that made the calls, and
	// MBpsCPU the input bytes per CPU second (0 where threads' CPU time
	// cannot be read).
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	MBpsCPU    float64 `json:"mb_per_cpu_s,omitempty"`
}

// FuncRow is one runtime's runs and their medians.
type FuncRow struct {
	Runtime   string    `json:"runtime"`
	Runs      []FuncRun `json:"runs"`
	MBps      float64   `json:"mb_per_s"`
	NsPerCall float64   `json:"ns_per_call"`
	MBpsCPU   float64   `json:"mb_per_cpu_s,omitempty"`
	// Ratio is throughput over native's (0 when native was not timed):
	// per CPU second where that was measured, else per wall second.
	// Every call runs on one thread, so CPU time is what it costs; wall
	// time also counts the time the thread waited for a CPU, which on a
	// shared machine says more about the neighbours than the runtime.
	Ratio float64 `json:"ratio_to_native,omitempty"`
	// WallRatio is MBps over native's MBps.
	WallRatio float64 `json:"wall_ratio_to_native,omitempty"`
}

// ChainReport is the pushdown chain part: B+-tree point lookups of
// Reads dependent reads each (Levels index nodes, then the value) against
// a target in this process, over NVMe/TCP on loopback.
type ChainReport struct {
	Reads     int `json:"dependent_reads"`
	Levels    int `json:"tree_levels"`
	Keys      int `json:"keys"`
	BlockSize int `json:"block_size"`
	// Rows: the host walking the tree with one ordinary read per level,
	// then a pushdown per sandbox runtime.
	Rows []ChainRow `json:"rows"`
	// Steps is btree_lookup's cost per step in this process, without I/O:
	// native Go (functions.BTreeStep), then each sandbox runtime.
	Steps []StepRow `json:"step_cost"`
}

// Chain methods.
const (
	ChainHostReads = "host reads"
	ChainPushdown  = "pushdown"
)

// ChainRun is one timed run of lookups.
type ChainRun struct {
	Lookups int64   `json:"lookups"`
	Seconds float64 `json:"seconds"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	MeanUs  float64 `json:"mean_us"`
	// Commands counts the I/O commands the target completed on the
	// namespace during the run, by operation (its
	// nearstore_target_commands_total counters, after minus before).
	Commands map[string]uint64 `json:"commands"`
	// TargetReads is the reads the target made for pushdowns (their
	// results' counters).
	TargetReads uint64 `json:"target_reads,omitempty"`
}

// ChainRow is one way of doing the lookups: its runs and their medians.
type ChainRow struct {
	Method  string     `json:"method"`  // ChainHostReads or ChainPushdown
	Runtime string     `json:"runtime"` // native for the host walk
	Runs    []ChainRun `json:"runs"`
	P50us   float64    `json:"p50_us"`
	P99us   float64    `json:"p99_us"`
	MeanUs  float64    `json:"mean_us"`
	// CommandsPerLookup is all runs' commands over all their lookups:
	// ChainReport.Reads for the host walk, 1 for a pushdown.
	CommandsPerLookup float64 `json:"commands_per_lookup"`
	// TargetReadsPerLookup: reads the target made per pushdown.
	TargetReadsPerLookup float64 `json:"target_reads_per_lookup,omitempty"`
	// Speedup is the host walk's median p50 over this row's.
	Speedup float64 `json:"speedup_vs_host_reads,omitempty"`
}

// StepRow is btree_lookup's in-process cost in one runtime.
type StepRow struct {
	Runtime     string  `json:"runtime"`
	NsPerLookup float64 `json:"ns_per_lookup"` // median of the runs
	NsPerStep   float64 `json:"ns_per_step"`
	// OverheadNs is NsPerStep minus native Go's: what running a step in
	// the sandbox adds (0 for native).
	OverheadNs float64 `json:"overhead_ns_per_step"`
	// CPUNsPerStep and CPUOverheadNs are the same by the process's CPU
	// time (all threads, the Go runtime's included; nothing else runs in
	// the process meanwhile), which does not count the time spent waiting
	// for a CPU on a loaded machine. 0 where it cannot be read.
	CPUNsPerStep  float64 `json:"cpu_ns_per_step,omitempty"`
	CPUOverheadNs float64 `json:"cpu_overhead_ns_per_step,omitempty"`
}

// FuncInput returns a deterministic random input of at most size bytes for
// the named compute function, and the output capacity it needs:
//
//   - stats64, stats32: random u64s / u32s;
//   - knn: 16-dimensional vectors of small integers and a target;
//   - grep: rows of 20 to 120 lowercase letters and spaces, one in ten
//     containing the pattern "needle";
//   - bitmap: runs of 1 to 128 bits of random value;
//   - tpch_q1, tpch_q6, tpch_q12, tpch_q14: the first LINEITEM rows of the
//     SF 1 table of the seed, behind the validation query's parameters.
func FuncInput(fn string, size int, seed uint64) (in []byte, outCap int, err error) {
	r := rand.New(rand.NewPCG(seed, uint64(len(fn))))
	le := binary.LittleEndian
	tooSmall := func(need int) error {
		return fmt.Errorf("bench: %s needs at least %d input bytes, have %d", fn, need, size)
	}
	switch fn {
	case "stats64", "stats32":
		w := 8
		if fn == "stats32" {
			w = 4
		}
		if size < w {
			return nil, 0, tooSmall(w)
		}
		in = make([]byte, size/w*w)
		for i := 0; i < len(in); i += 8 {
			var b [8]byte
			le.PutUint64(b[:], r.Uint64())
			copy(in[i:], b[:])
		}
		return in, functions.StatsSize, nil
	case "knn":
		const dim = 16
		n := (size - 8 - 4*dim) / (4 * dim)
		if n < 1 {
			return nil, 0, tooSmall(8 + 8*dim)
		}
		vec := func() []int32 {
			v := make([]int32, dim)
			for i := range v {
				v[i] = int32(r.IntN(2001) - 1000)
			}
			return v
		}
		vs := make([][]int32, n)
		for i := range vs {
			vs[i] = vec()
		}
		return functions.EncodeKNN(vec(), vs...), 8 * n, nil
	case "grep":
		pat := []byte("needle")
		if size < 4+len(pat) {
			return nil, 0, tooSmall(4 + len(pat))
		}
		text := make([]byte, 0, size-4-len(pat))
		for len(text) < cap(text) {
			row := make([]byte, 20+r.IntN(101))
			for i := range row {
				if r.IntN(6) == 0 {
					row[i] = ' '
				} else {
					row[i] = byte('a' + r.IntN(26))
				}
			}
			if r.IntN(10) == 0 {
				copy(row[r.IntN(len(row)-len(pat)):], pat)
			}
			row = append(row, '\n')
			text = append(text, row[:min(len(row), cap(text)-len(text))]...)
		}
		return functions.EncodeGrep(pat, text), len(text) + 1, nil
	case "bitmap":
		if size < 4 {
			return nil, 0, tooSmall(4)
		}
		in = make([]byte, 0, size/4*4)
		total := 0
		for len(in) < cap(in) {
			n := 1 + r.IntN(128)
			total += n
			in = le.AppendUint32(in, uint32(n)|uint32(r.IntN(2))<<31)
		}
		return in, (total + 7) / 8, nil
	case "tpch_q1", "tpch_q6", "tpch_q12", "tpch_q14":
		q, err := tpch.Validation(map[string]int{"tpch_q1": 1, "tpch_q6": 6, "tpch_q12": 12, "tpch_q14": 14}[fn])
		if err != nil {
			return nil, 0, err
		}
		n := (size - tpch.ParamsSize) / tpch.RowSize
		if n < 1 {
			return nil, 0, tooSmall(tpch.ParamsSize + tpch.RowSize)
		}
		// SF 1 has about 6 M rows, more than MaxFuncSize holds.
		g, err := tpch.NewGenerator(1, seed)
		if err != nil {
			return nil, 0, err
		}
		var rows []byte
		for i := int64(0); len(rows) < n*tpch.RowSize; i += 256 {
			rows = g.AppendRows(rows, i, i+256)
		}
		in = q.Input(rows[:n*tpch.RowSize])
		return in, q.OutCap(len(in)), nil
	case "":
		return nil, 0, errors.New("bench: no function named")
	}
	if functions.Native(fn) == nil && slices.Contains(functions.Names(), fn) {
		return nil, 0, fmt.Errorf("bench: %s is not a compute function (the chain part measures btree_lookup's pushdown)", fn)
	}
	return nil, 0, fmt.Errorf("bench: %q: want one of the compute functions %s", fn, strings.Join(computeNames(), ", "))
}

// computeNames lists the standard compute functions.
func computeNames() []string {
	var ns []string
	for _, n := range functions.Names() {
		if functions.Native(n) != nil {
			ns = append(ns, n)
		}
	}
	return ns
}

// funcLimits are the limits the compute part loads modules with: room for
// the input and output, a generous clock, and no eBPF instruction or
// backward-jump budgets (they cap the work of one call, and the point here
// is to measure it; the clock still bounds every call).
func funcLimits(inLen, outCap int) sandbox.Limits {
	mem := max(16<<20, inLen+outCap+(1<<20))
	return sandbox.Limits{
		MemoryBytes:     mem,
		MaxOutput:       max(16<<20, outCap),
		Time:            time.Minute,
		MaxInstructions: 1 << 62,
		MaxBackJumps:    1 << 62,
	}
}

// newFuncRuntimes returns the sandbox runtimes named in names, by kind.
func newFuncRuntimes(ctx context.Context, names []string) (map[sandbox.Kind]sandbox.Runtime, func(), error) {
	rts := map[sandbox.Kind]sandbox.Runtime{}
	closeAll := func() {
		for _, rt := range rts {
			_ = rt.Close(context.Background())
		}
	}
	if slices.Contains(names, RuntimeWasm) {
		w, err := wasm.NewRuntime(ctx, wasm.Options{})
		if err != nil {
			return nil, nil, err
		}
		rts[sandbox.KindWasm] = w
	}
	if slices.Contains(names, RuntimeEBPF) {
		rts[sandbox.KindEBPF] = ebpf.NewRuntime(ebpf.Options{})
	}
	return rts, closeAll, nil
}

func funcKind(name string) sandbox.Kind {
	switch name {
	case RuntimeWasm:
		return sandbox.KindWasm
	case RuntimeEBPF:
		return sandbox.KindEBPF
	}
	return 0
}

// Run measures a standard compute function in native Go, wasm and
// eBPF on the same random input, checking every runtime's output against
// native Go's (a difference is an error), and then, unless
// cfg.SkipChain, the pushdown chain part (see ChainReport). On error it
// returns what it measured so far along with the error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	in, outCap, err := FuncInput(cfg.Function, cfg.Size, cfg.Seed)
	if err != nil {
		return nil, err
	}
	native := functions.Native(cfg.Function)
	want := make([]byte, outCap)
	n, err := native(in, want)
	if err != nil {
		return nil, fmt.Errorf("bench: %s in native Go on the generated input: %w", cfg.Function, err)
	}
	want = want[:n]
	rep := &Report{
		Machine: report.DescribeMachine(), Function: cfg.Function, InputBytes: len(in), OutputBytes: n,
		Repeat: cfg.Repeat, Iterations: cfg.Iterations,
	}
	if cfg.Iterations == 0 {
		rep.Duration = cfg.Duration.Seconds()
	}
	rts, closeRTs, err := newFuncRuntimes(ctx, cfg.Runtimes)
	if err != nil {
		return nil, err
	}
	defer closeRTs()

	type subject struct {
		name  string
		call  func() error // one call, checking the output's length
		check func() error // compares the last call's output with want
		done  func()
	}
	var subjects []subject
	defer func() {
		for _, s := range subjects {
			if s.done != nil {
				s.done()
			}
		}
	}()
	for _, name := range cfg.Runtimes {
		if name == RuntimeNative {
			out := make([]byte, outCap)
			subjects = append(subjects, subject{
				name: name,
				call: func() error {
					k, err := native(in, out)
					if err == nil && k != n {
						err = fmt.Errorf("returned %d bytes, then %d", n, k)
					}
					return err
				},
				check: func() error {
					if !slices.Equal(out[:n], want) {
						return errors.New("not deterministic")
					}
					return nil
				},
			})
			continue
		}
		s, err := computeSubject(ctx, rts[funcKind(name)], cfg.Function, in, outCap, want)
		if err != nil {
			return rep, err
		}
		subjects = append(subjects, subject{name: name, call: s.call, check: s.check, done: s.close})
	}
	// Every runtime is checked once before anything is timed.
	for _, s := range subjects {
		if err := s.call(); err != nil {
			return rep, fmt.Errorf("bench: %s %s: %w", s.name, cfg.Function, err)
		}
		if err := s.check(); err != nil {
			return rep, fmt.Errorf("bench: %s %s: %w", s.name, cfg.Function, err)
		}
		rep.Compute = append(rep.Compute, FuncRow{Runtime: s.name})
	}
	for r := 1; r <= cfg.Repeat; r++ {
		for i, s := range subjects {
			harness.Stage(cfg.Progress, "%s %s, %s input, run %d of %d", s.name, cfg.Function, volume.FormatSize(int64(len(in))), r, cfg.Repeat)
			calls, el, cpu, err := timeFuncCallsCPU(ctx, cfg.Duration, cfg.Iterations, s.call)
			if err == nil {
				err = s.check()
			}
			if err != nil {
				return rep, fmt.Errorf("bench: %s %s, run %d: %w", s.name, cfg.Function, r, err)
			}
			row := &rep.Compute[i]
			run := FuncRun{
				Calls: calls, Seconds: el.Seconds(),
				MBps:      float64(calls) * float64(len(in)) / el.Seconds() / 1e6,
				NsPerCall: float64(el.Nanoseconds()) / float64(calls),
			}
			if cpu > 0 {
				run.CPUSeconds = cpu.Seconds()
				run.MBpsCPU = float64(calls) * float64(len(in)) / cpu.Seconds() / 1e6
			}
			row.Runs = append(row.Runs, run)
		}
	}
	var nativeRow *FuncRow
	for i := range rep.Compute {
		row := &rep.Compute[i]
		row.MBps = report.MedianOf(row.Runs, func(r FuncRun) float64 { return r.MBps })
		row.NsPerCall = report.MedianOf(row.Runs, func(r FuncRun) float64 { return r.NsPerCall })
		row.MBpsCPU = report.MedianOf(row.Runs, func(r FuncRun) float64 { return r.MBpsCPU })
		if row.Runtime == RuntimeNative {
			nativeRow = row
		}
	}
	if nativeRow != nil && nativeRow.MBps > 0 {
		for i := range rep.Compute {
			row := &rep.Compute[i]
			row.WallRatio = row.MBps / nativeRow.MBps
			row.Ratio = row.WallRatio
			if nativeRow.MBpsCPU > 0 && row.MBpsCPU > 0 {
				row.Ratio = row.MBpsCPU / nativeRow.MBpsCPU
			}
		}
	}
	if cfg.SkipChain {
		return rep, nil
	}
	rep.Chain, err = runChain(ctx, &cfg, rts)
	return rep, err
}

type computeCaller struct {
	call, check func() error
	close       func()
}

// computeSubject loads fn into rt and returns calls on one instance whose
// input buffer holds in.
func computeSubject(ctx context.Context, rt sandbox.Runtime, fn string, in []byte, outCap int, want []byte) (*computeCaller, error) {
	b, err := functions.Module(fn, rt.Kind())
	if err != nil {
		return nil, err
	}
	m, err := rt.Load(ctx, b, funcLimits(len(in), outCap))
	if err != nil {
		return nil, fmt.Errorf("bench: loading %s (%v): %w", fn, rt.Kind(), err)
	}
	inst, err := sandbox.Prepare(ctx, m, in, outCap)
	if err != nil {
		_ = m.Close(ctx)
		return nil, fmt.Errorf("bench: %s (%v) instance: %w", fn, rt.Kind(), err)
	}
	closeAll := func() {
		inst.Release()
		_ = m.Close(context.Background())
	}
	var last int
	return &computeCaller{
		call: func() error {
			k, err := inst.Compute(ctx, len(in), outCap)
			if err != nil {
				return err
			}
			if k != len(want) {
				return fmt.Errorf("returned %d bytes, native Go %d", k, len(want))
			}
			last = k
			return nil
		},
		check: func() error {
			// The output buffer may have moved (a wasm memory grows):
			// take it afresh.
			ob, err := inst.Output(outCap)
			if err != nil {
				return err
			}
			if !slices.Equal(ob[:last], want) {
				i := 0
				for i < last && ob[i] == want[i] {
					i++
				}
				return fmt.Errorf("output differs from native Go's at byte %d of %d", i, last)
			}
			// The input must not have been changed either, or later
			// calls would measure something else.
			ib, err := inst.Input(len(in))
			if err != nil {
				return err
			}
			if !slices.Equal(ib, in) {
				return errors.New("the function changed its input")
			}
			return nil
		},
		close: closeAll,
	}, nil
}

// timeFuncCallsCPU is timeFuncCalls on one locked OS thread, returning
// also the CPU time that thread used (0 if it cannot be read).
func timeFuncCallsCPU(ctx context.Context, d time.Duration, iters int, call func() error) (int64, time.Duration, time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, ok0 := harness.ThreadCPU()
	n, el, err := timeFuncCalls(ctx, d, iters, call)
	c1, ok1 := harness.ThreadCPU()
	var cpu time.Duration
	if ok0 && ok1 && c1 > c0 {
		cpu = c1 - c0
	}
	return n, el, cpu, err
}

// timeFuncCalls calls call for d, or exactly iters times if iters > 0, and
// returns the calls made and the time they took. It reads the clock once
// per batch of about a millisecond, so that short calls are not
// dominated by it.
func timeFuncCalls(ctx context.Context, d time.Duration, iters int, call func() error) (int64, time.Duration, error) {
	start := time.Now()
	if iters > 0 {
		for i := range iters {
			if err := call(); err != nil {
				return int64(i), time.Since(start), err
			}
		}
		return int64(iters), time.Since(start), nil
	}
	var n, batch int64 = 0, 1
	for {
		for range batch {
			if err := call(); err != nil {
				return n, time.Since(start), err
			}
			n++
		}
		el := time.Since(start)
		if el >= d {
			return n, el, nil
		}
		if err := ctx.Err(); err != nil {
			return n, el, err
		}
		per := max(el/time.Duration(n), 1)
		batch = max(1, min(int64(time.Millisecond/per), int64((d-el)/per)+1, 1<<20))
	}
}

// The chain part's target.
const chainNQN = "nqn.2026-11.io.nearstore:bench-func"

// chainTree is a B+-tree laid out on a namespace: the index file from
// byte 0, the value log after it.
type chainTree struct {
	keys      []uint64
	index     []byte
	values    []byte
	valueBase int64 // byte offset of the value log on the namespace
	levels    int
	files     []pushdown.File
}

const chainValueSize = functions.DefaultValueSize

// buildChainTree builds a tree whose point lookups make reads dependent
// reads: reads-1 levels of nodes (fanout 4, or 2 past 8 levels, so that
// the tree stays small), then the value.
func buildChainTree(reads int, seed uint64, bs int) (*chainTree, error) {
	levels := reads - 1
	fanout := 4
	if levels > 8 {
		fanout = 2
	}
	nkeys := 1
	for range levels {
		nkeys *= fanout
	}
	r := rand.New(rand.NewPCG(seed, 7))
	keys := make([]uint64, 0, nkeys)
	seen := map[uint64]bool{}
	for len(keys) < nkeys {
		k := r.Uint64N(1 << 40)
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	index, values := functions.BuildBTreeFanout(keys, chainValueSize, fanout)
	t := &chainTree{keys: keys, index: index, values: values, levels: levels}
	// Check the depth the way a lookup sees it.
	scratch := make([]byte, sandbox.ScratchSize)
	functions.BTreeRequest{Mode: functions.BTreeGet, Key: keys[0], ValueSize: chainValueSize}.Encode(scratch)
	steps, err := functions.RunPushdown(functions.BTreeStep, scratch, [][]byte{index, values},
		sandbox.Next{File: functions.IndexFile, Len: functions.NodeSize}, sandbox.Limits{})
	if err != nil {
		return nil, err
	}
	if steps != reads {
		return nil, fmt.Errorf("bench: a lookup in the chain tree takes %d reads, want %d", steps, reads)
	}
	blocks := func(n int) uint32 { return uint32((n + bs - 1) / bs) }
	t.valueBase = int64(blocks(len(index))) * int64(bs)
	t.files = []pushdown.File{
		{Size: uint64(len(index)), Extents: []pushdown.Extent{{LBA: 0, Blocks: blocks(len(index))}}},
		{Size: uint64(len(values)), Extents: []pushdown.Extent{{LBA: uint64(t.valueBase) / uint64(bs), Blocks: blocks(len(values))}}},
	}
	return t, nil
}

// fileOffset maps an offset of one of the tree's files to the namespace.
func (t *chainTree) fileOffset(file uint32, off uint64) int64 {
	if file == functions.ValueFile {
		return t.valueBase + int64(off)
	}
	return int64(off)
}

// checkLookup checks a finished lookup's scratch.
func (t *chainTree) checkLookup(scratch []byte, key uint64) error {
	res, err := functions.ParseBTreeResult(scratch)
	if err != nil {
		return err
	}
	if res.Status != functions.BTreeFound || int(res.Nodes) != t.levels {
		return fmt.Errorf("lookup of key %d: status %d after %d nodes, want found after %d", key, res.Status, res.Nodes, t.levels)
	}
	if !slices.Equal(res.Value, functions.BTreeValue(key, chainValueSize)) {
		return fmt.Errorf("lookup of key %d: wrong value", key)
	}
	return nil
}

// runChain is the chain part: a target in this process serving a memory
// volume on loopback, the tree written to it through the host library,
// btree_lookup loaded over the wire into each sandbox runtime, and
// lookups timed one at a time (a dependent chain has no parallelism to
// offer), first by the host with one ordinary read per level, then as one
// pushdown each.
func runChain(ctx context.Context, cfg *Config, rts map[sandbox.Kind]sandbox.Runtime) (*ChainReport, error) {
	const bs = 512
	tree, err := buildChainTree(cfg.ChainReads, cfg.Seed, bs)
	if err != nil {
		return nil, err
	}
	rep := &ChainReport{Reads: cfg.ChainReads, Levels: tree.levels, Keys: len(tree.keys), BlockSize: bs}
	var kinds []sandbox.Kind
	for _, name := range cfg.Runtimes {
		if k := funcKind(name); k != 0 {
			kinds = append(kinds, k)
		}
	}

	// The per-step cost in this process first: it needs no target.
	if err := chainStepCost(ctx, cfg, tree, rts, kinds, rep); err != nil {
		return rep, err
	}

	size := (tree.valueBase + int64(len(tree.values)) + 1<<20) &^ (1<<20 - 1)
	vol, err := volume.Open(fmt.Sprintf("mem:%d?bs=%d", size, bs))
	if err != nil {
		return rep, err
	}
	defer vol.Close()
	reg := prometheus.NewRegistry()
	var targetRTs []sandbox.Runtime
	for _, k := range kinds {
		targetRTs = append(targetRTs, rts[k])
	}
	discard := slog.New(slog.DiscardHandler)
	srv, err := target.New(target.Config{
		Subsystems: []target.SubsystemConfig{{NQN: chainNQN, Namespaces: []target.NamespaceConfig{{Backend: vol, Name: vol.String()}}}},
		Logger:     discard,
		Metrics:    target.NewMetrics(reg),
		Runtimes:   targetRTs,
	})
	if err != nil {
		return rep, err
	}
	addr, stop, err := harness.ServeLoopback(srv)
	if err != nil {
		return rep, err
	}
	defer func() { _ = stop() }()
	ctrl, err := host.Connect(ctx, addr, chainNQN, harness.HostOptions(host.Options{IOQueues: 1, QueueDepth: 4, Logger: discard}))
	if err != nil {
		return rep, err
	}
	defer ctrl.Close()
	ns, err := ctrl.Namespace(1)
	if err != nil {
		return rep, err
	}
	if ns.BlockSize() != bs {
		return rep, fmt.Errorf("bench: namespace block size %d, want %d", ns.BlockSize(), bs)
	}
	if _, err := ns.WriteAtContext(ctx, tree.index, 0); err != nil {
		return rep, err
	}
	if _, err := ns.WriteAtContext(ctx, tree.values, tree.valueBase); err != nil {
		return rep, err
	}
	ids := map[sandbox.Kind]sandbox.ID{}
	for _, k := range kinds {
		b, err := functions.Module("btree_lookup", k)
		if err != nil {
			return rep, err
		}
		if ids[k], err = ctrl.LoadFunction(ctx, b); err != nil {
			return rep, err
		}
	}
	counter := harness.CommandCounter{Reg: reg, NSID: fmt.Sprint(ns.ID())}

	type method struct {
		row    ChainRow
		lookup func(key uint64) (targetReads uint32, err error)
	}
	scratch := make([]byte, sandbox.ScratchSize)
	block := make([]byte, functions.NodeSize)
	methods := []method{{
		row: ChainRow{Method: ChainHostReads, Runtime: RuntimeNative},
		lookup: func(key uint64) (uint32, error) {
			// The host runs the same steps natively, reading what each
			// asks for with an ordinary read.
			functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: chainValueSize}.Encode(scratch)
			next := sandbox.Next{File: functions.IndexFile, Len: functions.NodeSize}
			for range cfg.ChainReads {
				data := block[:next.Len]
				if _, err := ns.ReadAtContext(ctx, data, tree.fileOffset(next.File, next.Offset)); err != nil {
					return 0, err
				}
				done, nx, err := functions.BTreeStep(scratch, data)
				if err != nil {
					return 0, err
				}
				if done {
					return 0, tree.checkLookup(scratch, key)
				}
				if len(nx) != 1 || nx[0].Len > uint64(len(block)) {
					return 0, fmt.Errorf("lookup of key %d: step asked for %v", key, nx)
				}
				next = nx[0]
			}
			return 0, fmt.Errorf("lookup of key %d: more than %d reads", key, cfg.ChainReads)
		},
	}}
	for _, k := range kinds {
		id := ids[k]
		methods = append(methods, method{
			row: ChainRow{Method: ChainPushdown, Runtime: k.String()},
			lookup: func(key uint64) (uint32, error) {
				functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: chainValueSize}.Encode(scratch)
				res, err := ns.Pushdown(ctx, id, tree.files, host.Start{File: functions.IndexFile, Length: functions.NodeSize}, scratch)
				if err != nil {
					return res.Reads, err
				}
				if !res.Done || int(res.Steps) != cfg.ChainReads || int(res.Reads) != cfg.ChainReads {
					return res.Reads, fmt.Errorf("lookup of key %d: done %v after %d steps and %d reads, want %d", key, res.Done, res.Steps, res.Reads, cfg.ChainReads)
				}
				return res.Reads, tree.checkLookup(res.Output, key)
			},
		})
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 11))
	// One untimed lookup each: connections, instances and caches warm.
	for _, m := range methods {
		if _, err := m.lookup(tree.keys[0]); err != nil {
			return rep, fmt.Errorf("bench: %s (%s): %w", m.row.Method, m.row.Runtime, err)
		}
	}
	for r := 1; r <= cfg.Repeat; r++ {
		for i := range methods {
			m := &methods[i]
			harness.Stage(cfg.Progress, "chain of %d reads: %s (%s), run %d of %d", cfg.ChainReads, m.row.Method, m.row.Runtime, r, cfg.Repeat)
			before, err := counter.Read()
			if err != nil {
				return rep, err
			}
			h := hist.New()
			var reads uint64
			start := time.Now()
			for n := 0; ; n++ {
				if (cfg.Iterations > 0 && n == cfg.Iterations) || (cfg.Iterations == 0 && n > 0 && time.Since(start) >= cfg.Duration) {
					break
				}
				if n&63 == 0 && ctx.Err() != nil {
					return rep, ctx.Err()
				}
				key := tree.keys[rng.IntN(len(tree.keys))]
				t0 := time.Now()
				tr, err := m.lookup(key)
				h.Record(time.Since(t0))
				if err != nil {
					return rep, fmt.Errorf("bench: %s (%s), run %d: %w", m.row.Method, m.row.Runtime, r, err)
				}
				reads += uint64(tr)
			}
			el := time.Since(start)
			after, err := counter.Read()
			if err != nil {
				return rep, err
			}
			m.row.Runs = append(m.row.Runs, ChainRun{
				Lookups: int64(h.Count()), Seconds: el.Seconds(),
				P50us: report.Micros(h.Quantile(0.5)), P99us: report.Micros(h.Quantile(0.99)), MeanUs: report.Micros(h.Mean()),
				Commands: harness.DiffCounts(after, before), TargetReads: reads,
			})
		}
	}
	for _, m := range methods {
		row := m.row
		var lookups, cmds, reads uint64
		for _, r := range row.Runs {
			lookups += uint64(r.Lookups)
			cmds += harness.SumCounts(r.Commands)
			reads += r.TargetReads
		}
		row.P50us = report.MedianOf(row.Runs, func(r ChainRun) float64 { return r.P50us })
		row.P99us = report.MedianOf(row.Runs, func(r ChainRun) float64 { return r.P99us })
		row.MeanUs = report.MedianOf(row.Runs, func(r ChainRun) float64 { return r.MeanUs })
		if lookups > 0 {
			row.CommandsPerLookup = float64(cmds) / float64(lookups)
			if row.Method == ChainPushdown {
				row.TargetReadsPerLookup = float64(reads) / float64(lookups)
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	if walk := rep.Rows[0]; walk.P50us > 0 {
		for i := 1; i < len(rep.Rows); i++ {
			if rep.Rows[i].P50us > 0 {
				rep.Rows[i].Speedup = walk.P50us / rep.Rows[i].P50us
			}
		}
	}
	return rep, nil
}

// chainStepCost times whole lookups through btree_lookup in this process,
// over the tree in memory and without I/O, as the target's executor
// drives it: acquire an instance, then per step copy the block into the
// sandbox and call it (through DriveSteps where the instance has it, as
// the executor does). Native Go runs functions.BTreeStep the same way.
func chainStepCost(ctx context.Context, cfg *Config, tree *chainTree, rts map[sandbox.Kind]sandbox.Runtime, kinds []sandbox.Kind, rep *ChainReport) error {
	files := [][]byte{tree.index, tree.values}
	rng := rand.New(rand.NewPCG(cfg.Seed, 13))
	type walker struct {
		name string
		walk func(key uint64) error
	}
	read := func(nx sandbox.Next) ([]byte, error) {
		f := files[nx.File]
		if nx.Offset > uint64(len(f)) || nx.Len > uint64(len(f))-nx.Offset {
			return nil, fmt.Errorf("read [%d, +%d) past the end of file %d", nx.Offset, nx.Len, nx.File)
		}
		return f[nx.Offset : nx.Offset+nx.Len], nil
	}
	scratch := make([]byte, sandbox.ScratchSize)
	block := make([]byte, functions.NodeSize)
	walkers := []walker{{name: RuntimeNative, walk: func(key uint64) error {
		functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: chainValueSize}.Encode(scratch)
		nx := sandbox.Next{File: functions.IndexFile, Len: functions.NodeSize}
		for range cfg.ChainReads {
			src, err := read(nx)
			if err != nil {
				return err
			}
			data := block[:copy(block, src)]
			done, next, err := functions.BTreeStep(scratch, data)
			if err != nil {
				return err
			}
			if done {
				return tree.checkLookup(scratch, key)
			}
			nx = next[0]
		}
		return fmt.Errorf("lookup of key %d: more than %d steps", key, cfg.ChainReads)
	}}}
	for _, k := range kinds {
		b, err := functions.Module("btree_lookup", k)
		if err != nil {
			return err
		}
		m, err := rts[k].Load(ctx, b, sandbox.Limits{})
		if err != nil {
			return fmt.Errorf("bench: loading btree_lookup (%v): %w", k, err)
		}
		defer m.Close(context.Background())
		walkers = append(walkers, walker{name: k.String(), walk: func(key uint64) error {
			inst, err := m.Acquire(ctx)
			if err != nil {
				return err
			}
			defer inst.Release()
			functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: chainValueSize}.Encode(inst.Scratch())
			steps := 0
			stepRead := func(next []sandbox.Next) (uint32, uint64, int, error) {
				if steps++; steps > cfg.ChainReads {
					return 0, 0, 0, fmt.Errorf("lookup of key %d: more than %d steps", key, cfg.ChainReads)
				}
				if len(next) != 1 {
					return 0, 0, 0, fmt.Errorf("lookup of key %d: step asked for %v", key, next)
				}
				src, err := read(next[0])
				if err != nil {
					return 0, 0, 0, err
				}
				buf, err := inst.Data(len(src))
				if err != nil {
					return 0, 0, 0, err
				}
				copy(buf, src)
				return next[0].File, next[0].Offset, len(src), nil
			}
			first := []sandbox.Next{{File: functions.IndexFile, Len: functions.NodeSize}}
			if d, ok := inst.(sandbox.StepDriver); ok {
				// As the executor runs it: the runtime drives the steps.
				if err := d.DriveSteps(ctx, first, stepRead); err != nil {
					return err
				}
				return tree.checkLookup(inst.Scratch(), key)
			}
			nx := first
			for {
				f, off, n, err := stepRead(nx)
				if err != nil {
					return err
				}
				done, next, err := inst.Step(ctx, f, off, n)
				if err != nil {
					return err
				}
				if done {
					return tree.checkLookup(inst.Scratch(), key)
				}
				nx = next
			}
		}})
	}
	// A lookup takes microseconds: time a fixed share of the runs' length
	// (a tenth, at least 10 ms), or the iterations asked for.
	// The runs alternate between runtimes, so that a change in the
	// machine's load falls on all of them.
	d := max(cfg.Duration/10, 10*time.Millisecond)
	perLookup := make([][]float64, len(walkers))
	cpuPerLookup := make([][]float64, len(walkers))
	for r := 1; r <= cfg.Repeat; r++ {
		for i, w := range walkers {
			harness.Stage(cfg.Progress, "btree_lookup in process: %s, run %d of %d", w.name, r, cfg.Repeat)
			c0, ok0 := harness.ProcessCPU()
			calls, el, err := timeFuncCalls(ctx, d, cfg.Iterations, func() error {
				return w.walk(tree.keys[rng.IntN(len(tree.keys))])
			})
			c1, ok1 := harness.ProcessCPU()
			if err != nil {
				return fmt.Errorf("bench: btree_lookup in process (%s): %w", w.name, err)
			}
			perLookup[i] = append(perLookup[i], float64(el.Nanoseconds())/float64(calls))
			if ok0 && ok1 && c1 > c0 {
				cpuPerLookup[i] = append(cpuPerLookup[i], float64((c1-c0).Nanoseconds())/float64(calls))
			}
		}
	}
	for i, w := range walkers {
		ns := report.Median(perLookup[i])
		row := StepRow{Runtime: w.name, NsPerLookup: ns, NsPerStep: ns / float64(cfg.ChainReads)}
		if len(cpuPerLookup[i]) == cfg.Repeat {
			row.CPUNsPerStep = report.Median(cpuPerLookup[i]) / float64(cfg.ChainReads)
		}
		if len(rep.Steps) > 0 {
			row.OverheadNs = row.NsPerStep - rep.Steps[0].NsPerStep
			if row.CPUNsPerStep > 0 && rep.Steps[0].CPUNsPerStep > 0 {
				row.CPUOverheadNs = row.CPUNsPerStep - rep.Steps[0].CPUNsPerStep
			}
		}
		rep.Steps = append(rep.Steps, row)
	}
	return nil
}

// WriteTable prints r as tables: the compute throughput per runtime,
// then the chain part.
func WriteTable(w io.Writer, r *Report) error {
	ew := &report.TableWriter{W: w}
	m := r.Machine
	ew.Printf("machine: %d CPUs (%s), kernel %s, %s, GOMAXPROCS %d\n", m.CPUs, m.CPUModel, m.Kernel, m.Go, m.GOMAXPROCS)
	runs := fmt.Sprintf("%gs", r.Duration)
	if r.Iterations > 0 {
		runs = fmt.Sprintf("%d calls", r.Iterations)
	}
	if r.Repeat == 1 {
		runs = "1 run of " + runs
	} else {
		runs = fmt.Sprintf("medians of %d runs of %s", r.Repeat, runs)
	}
	ew.Printf("%s on %s of random input (%s out); %s; every output checked against native Go\n\n",
		r.Function, volume.FormatSize(int64(r.InputBytes)), volume.FormatSize(int64(r.OutputBytes)), runs)
	ew.Printf("%-8s %9s %10s %12s %10s\n", "runtime", "MB/s", "µs/call", "MB/CPU-s", "vs native")
	for _, row := range r.Compute {
		ratio, cpu := "-", "-"
		if row.Ratio > 0 {
			ratio = fmt.Sprintf("%.3f×", row.Ratio)
		}
		if row.MBpsCPU > 0 {
			cpu = fmt.Sprintf("%.0f", row.MBpsCPU)
		}
		ew.Printf("%-8s %9.0f %10.1f %12s %10s\n", row.Runtime, row.MBps, row.NsPerCall/1e3, cpu, ratio)
	}
	if len(r.Compute) > 0 && r.Compute[0].MBpsCPU > 0 {
		ew.Printf("(vs native: throughput per CPU second of the calling thread, which a busy machine does not distort)\n")
	}
	c := r.Chain
	if c == nil {
		return ew.Err
	}
	ew.Printf("\npushdown chain: B+-tree point lookups of %d dependent reads (%d levels of %d-byte nodes, then the value)\n"+
		"in %d keys, one at a time, against a target in this process over NVMe/TCP on loopback;\n"+
		"commands are the target's counters for the namespace\n\n",
		c.Reads, c.Levels, functions.NodeSize, c.Keys)
	ew.Printf("%-14s %-8s %8s %8s %8s %16s %20s %8s\n", "method", "runtime", "p50 µs", "p99 µs", "mean µs", "commands/lookup", "target reads/lookup", "speedup")
	for _, row := range c.Rows {
		speed, treads := "-", "-"
		if row.Speedup > 0 {
			speed = fmt.Sprintf("%.2f×", row.Speedup)
		}
		if row.Method == ChainPushdown {
			treads = fmt.Sprintf("%.2f", row.TargetReadsPerLookup)
		}
		name := row.Method
		if row.Method == ChainHostReads {
			name = fmt.Sprintf("host: %d reads", c.Reads)
		}
		ew.Printf("%-14s %-8s %8.1f %8.1f %8.1f %16.2f %20s %8s\n", name, row.Runtime, row.P50us, row.P99us, row.MeanUs, row.CommandsPerLookup, treads, speed)
	}
	ew.Printf("\nbtree_lookup in this process, no I/O (%d steps a lookup, as the target's executor drives them):\n\n", c.Reads)
	ew.Printf("%-8s %10s %8s %17s %12s %21s\n", "runtime", "ns/lookup", "ns/step", "overhead ns/step", "CPU ns/step", "CPU overhead ns/step")
	for _, st := range c.Steps {
		ew.Printf("%-8s %10.0f %8.0f %17s %12.0f %21s\n", st.Runtime, st.NsPerLookup, st.NsPerStep, fmt.Sprintf("%+.0f", st.OverheadNs),
			st.CPUNsPerStep, fmt.Sprintf("%+.0f", st.CPUOverheadNs))
	}
	return ew.Err
}

// funcPlots draws r: the compute throughput per runtime (median MB/s,
// labelled with the ratio to native) and, with the chain part, the median
// p50 latency of a lookup per method (labelled with the commands it cost
// and its speedup over the host's reads).
func funcPlots(r *Report) ([]*plot.Plot, error) {
	if r == nil || len(r.Compute) == 0 {
		return nil, errors.New("bench: nothing to plot")
	}
	bars := func(title, ylabel string, names []string, vs plotter.Values, labels []string, c color.Color) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		b, err := report.Bars(vs, vg.Points(40), c)
		if err != nil {
			return nil, err
		}
		p.Add(b)
		p.NominalX(names...)
		top := slices.Max(vs)
		p.Y.Max = top * 1.2
		p.X.Min, p.X.Max = -0.6, float64(len(vs))-0.4
		xy := plotter.XYLabels{XYs: make(plotter.XYs, len(vs)), Labels: labels}
		for i, v := range vs {
			xy.XYs[i] = plotter.XY{X: float64(i), Y: v + top*0.02}
		}
		l, err := report.CenteredLabels(xy, vg.Points(9))
		if err != nil {
			return nil, err
		}
		p.Add(l)
		return p, nil
	}
	var names, labels []string
	var vs plotter.Values
	for _, row := range r.Compute {
		names = append(names, row.Runtime)
		vs = append(vs, row.MBps)
		if row.Ratio > 0 {
			labels = append(labels, fmt.Sprintf("%.0f MB/s\n%.3f×", row.MBps, row.Ratio))
		} else {
			labels = append(labels, fmt.Sprintf("%.0f MB/s", row.MBps))
		}
	}
	runs := "1 run"
	if r.Repeat != 1 {
		runs = fmt.Sprintf("median of %d runs", r.Repeat)
	}
	left, err := bars(fmt.Sprintf("%s on %s: %s", r.Function, volume.FormatSize(int64(r.InputBytes)), runs),
		"MB/s of input", names, vs, labels, report.Blue)
	if err != nil {
		return nil, err
	}
	plots := []*plot.Plot{left}
	if c := r.Chain; c != nil && len(c.Rows) > 0 {
		names, labels, vs = nil, nil, nil
		for _, row := range c.Rows {
			if row.Method == ChainHostReads {
				names = append(names, fmt.Sprintf("host: %d reads", c.Reads))
			} else {
				names = append(names, row.Method+" "+row.Runtime)
			}
			vs = append(vs, row.P50us)
			l := fmt.Sprintf("%.1f µs\n%.2f cmd/lookup", row.P50us, row.CommandsPerLookup)
			if row.Speedup > 0 {
				l += fmt.Sprintf("\n%.2f×", row.Speedup)
			}
			labels = append(labels, l)
		}
		right, err := bars(fmt.Sprintf("B+-tree lookup, %d dependent reads over NVMe/TCP", c.Reads),
			"median p50 latency (µs)", names, vs, labels, report.Orange)
		if err != nil {
			return nil, err
		}
		plots = append(plots, right)
	}
	return plots, nil
}

// writePlot renders r's charts side by side (see funcPlots) to w in
// format ("png", "svg", "pdf"), 6 by 5 inches each.
func writePlot(w io.Writer, r *Report, format string) error {
	plots, err := funcPlots(r)
	if err != nil {
		return err
	}
	c, err := draw.NewFormattedCanvas(vg.Length(len(plots))*6*vg.Inch, 5*vg.Inch, format)
	if err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 8, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	cs := plot.Align([][]*plot.Plot{plots}, tiles, draw.New(c))
	for i, p := range plots {
		p.Draw(cs[0][i])
	}
	_, err = c.WriteTo(w)
	return err
}

// SavePlot renders r's charts to path, in the format its extension
// names.
func SavePlot(path string, r *Report) error {
	return report.SaveByExtension(path, func(w io.Writer, format string) error { return writePlot(w, r, format) })
}
