// Package isolationbench measures how well a target keeps one host's plain
// I/O flowing while another host keeps its CPU busy with functions (issue
// 18, item 5): a target runs as its own process on a memory volume; host B
// reads random 4 KiB blocks one at a time (QD1), first alone (idle), then
// while host A keeps Looping λ reads of a function that never returns in
// flight (loaded). Each such λ read runs until the target's function time
// limit ends it; A sends the next at once.
//
// Phases alternate across repetitions (idle, loaded; loaded, idle; …) so
// that whatever else the machine does falls on both alike, and the report
// gives the medians.
package isolationbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// The bars of issue 18: under load, B keeps at least half its idle IOPS
// and a p99 under 2 ms.
const (
	IOPSRatioBar = 0.5
	P99Bar       = 2 * time.Millisecond
)

// subNQN is the benchmark target's subsystem.
const subNQN = "nqn.2026-11.io.nearstore:isolation"

// Host NQNs of the two sides.
const (
	hostA = "nqn.2014-08.org.nvmexpress:uuid:isolation-a-looping"
	hostB = "nqn.2014-08.org.nvmexpress:uuid:isolation-b-reader"
)

// blockSize is B's read size.
const blockSize = 4096

// loopWasm is a function whose compute and pushdown entries spin forever
// (sandbox/wasm/testdata/loop.wat):
//
//	(module
//	  (memory (export "memory") 2)
//	  (global (export "__heap_base") i32 (i32.const 1024))
//	  (func (export "pushdown") (param i32) (result i32) (loop $l (br $l)) (i32.const 0))
//	  (func (export "compute") (param i32 i32 i32 i32) (result i32) (loop $l (br $l)) (i32.const 0)))
var loopWasm = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x0e, 0x02, 0x60,
	0x01, 0x7f, 0x01, 0x7f, 0x60, 0x04, 0x7f, 0x7f, 0x7f, 0x7f, 0x01, 0x7f,
	0x03, 0x03, 0x02, 0x00, 0x01, 0x05, 0x03, 0x01, 0x00, 0x02, 0x06, 0x07,
	0x01, 0x7f, 0x00, 0x41, 0x80, 0x08, 0x0b, 0x07, 0x2d, 0x04, 0x06, 0x6d,
	0x65, 0x6d, 0x6f, 0x72, 0x79, 0x02, 0x00, 0x0b, 0x5f, 0x5f, 0x68, 0x65,
	0x61, 0x70, 0x5f, 0x62, 0x61, 0x73, 0x65, 0x03, 0x00, 0x08, 0x70, 0x75,
	0x73, 0x68, 0x64, 0x6f, 0x77, 0x6e, 0x00, 0x00, 0x07, 0x63, 0x6f, 0x6d,
	0x70, 0x75, 0x74, 0x65, 0x00, 0x01, 0x0a, 0x15, 0x02, 0x09, 0x00, 0x03,
	0x40, 0x0c, 0x00, 0x0b, 0x41, 0x00, 0x0b, 0x09, 0x00, 0x03, 0x40, 0x0c,
	0x00, 0x0b, 0x41, 0x00, 0x0b,
}

// Config describes a run.
type Config struct {
	// TargetExe is the nearstore binary to run `target serve` from.
	TargetExe string
	// TargetArgs are added to the target's command line (its function
	// flags, say).
	TargetArgs []string
	// ServerCPUs pins the target process (taskset list); empty: not
	// pinned. Pinning describes all pinning for the report.
	ServerCPUs, Pinning string
	// Duration is the length of each phase's measurement (default 3s).
	Duration time.Duration
	// Repeat is how many idle and loaded phases each (default 3).
	Repeat int
	// Looping is how many looping λ reads host A keeps in flight
	// (default 64).
	Looping int
	// VolumeSize is the memory volume's size in bytes (default 256 MiB);
	// B reads all of it at random.
	VolumeSize int64
	// Logger receives the hosts' warnings (default: discarded).
	Logger *slog.Logger
	// Progress, if set, is told each phase as it starts.
	Progress func(string)
}

func (c *Config) defaults() {
	harness.Default(&c.Duration, 3*time.Second)
	harness.Default(&c.Repeat, 3)
	harness.Default(&c.Looping, 64)
	harness.Default(&c.VolumeSize, 256<<20)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Phase names.
const (
	PhaseIdle   = "idle"
	PhaseLoaded = "loaded"
)

// PhaseRun is one phase's measurement of B's reads.
type PhaseRun struct {
	Rep   int     `json:"rep"`
	Phase string  `json:"phase"`
	Reads int64   `json:"reads"`
	Secs  float64 `json:"secs"`
	IOPS  float64 `json:"iops"`
	P50us float64 `json:"p50_us"`
	P99us float64 `json:"p99_us"`
	MaxUs float64 `json:"max_us"`
	// LambdaEnded counts A's λ reads that ended during the phase (by the
	// function time limit, as the function never returns), and
	// LambdaOther those that ended otherwise (any other status).
	LambdaEnded int64 `json:"lambda_ended"`
	LambdaOther int64 `json:"lambda_other"`
	// TargetCPUSecs is the target process's CPU time in the phase.
	TargetCPUSecs float64 `json:"target_cpu_secs"`
}

// Summary is the medians of one phase over the repetitions.
type Summary struct {
	IOPS  float64 `json:"iops"`
	P50us float64 `json:"p50_us"`
	P99us float64 `json:"p99_us"`
	// TargetCPU is the target's CPU use in CPUs (CPU seconds per second).
	TargetCPU float64 `json:"target_cpu"`
}

// Report is a run's result.
type Report struct {
	Machine    report.Machine `json:"machine"`
	TargetArgs []string       `json:"target_args"`
	Looping    int            `json:"looping"`
	Repeat     int            `json:"repeat"`
	PhaseSecs  float64        `json:"phase_secs"`
	Runs       []PhaseRun     `json:"runs"`
	Idle       Summary        `json:"idle"`
	Loaded     Summary        `json:"loaded"`
	// Ratio is Loaded.IOPS / Idle.IOPS.
	Ratio float64      `json:"ratio"`
	Bars  []report.Bar `json:"bars"`
}

// env is the target process and the two hosts.
type env struct {
	target *proc.Process
	a, b   *host.Controller
	nsA    *host.Namespace
	nsB    *host.Namespace
	fn     sandbox.ID
}

func (e *env) close() error {
	var errs []error
	if e.a != nil {
		errs = append(errs, e.a.Close())
	}
	if e.b != nil {
		errs = append(errs, e.b.Close())
	}
	if e.target != nil {
		errs = append(errs, e.target.Stop())
	}
	return errors.Join(errs...)
}

func start(ctx context.Context, cfg *Config) (*env, error) {
	if cfg.TargetExe == "" {
		return nil, errors.New("bench isolation: no target binary")
	}
	e := &env{}
	var addr string
	var err error
	if e.target, addr, err = harness.StartTarget(ctx, harness.TargetSpec{Exe: cfg.TargetExe, NQN: subNQN,
		Volume: "mem:" + strconv.FormatInt(cfg.VolumeSize, 10), Args: cfg.TargetArgs, CPUs: cfg.ServerCPUs}); err != nil {
		return nil, err
	}
	connect := func(nqn string, queues, depth int) (*host.Controller, *host.Namespace, error) {
		c, err := host.Connect(ctx, addr, subNQN, harness.HostOptions(host.Options{
			HostNQN: nqn, IOQueues: queues, QueueDepth: depth, Logger: cfg.Logger}))
		if err != nil {
			return nil, nil, fmt.Errorf("bench isolation: connecting %s: %w", nqn, err)
		}
		ns, err := c.Namespace(1)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, ns, nil
	}
	if e.b, e.nsB, err = connect(hostB, 1, 4); err != nil {
		_ = e.close()
		return nil, err
	}
	queues := max(1, (cfg.Looping+31)/32)
	if e.a, e.nsA, err = connect(hostA, queues, 32); err != nil {
		_ = e.close()
		return nil, err
	}
	if e.fn, err = e.a.LoadFunction(ctx, loopWasm); err != nil {
		_ = e.close()
		return nil, fmt.Errorf("bench isolation: loading the looping function: %w", err)
	}
	return e, nil
}

// Run runs the benchmark.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	e, err := start(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	rep := &Report{Machine: report.DescribeMachine(), TargetArgs: cfg.TargetArgs, Looping: cfg.Looping,
		Repeat: cfg.Repeat, PhaseSecs: cfg.Duration.Seconds()}
	rep.Machine.Pinning = cfg.Pinning
	// A short unmeasured warm-up of B's path.
	if _, err := e.readPhase(ctx, 300*time.Millisecond); err != nil {
		return nil, err
	}
	for i := range cfg.Repeat {
		order := []string{PhaseIdle, PhaseLoaded}
		if i%2 == 1 {
			order = []string{PhaseLoaded, PhaseIdle}
		}
		for _, ph := range order {
			if cfg.Progress != nil {
				cfg.Progress(fmt.Sprintf("repetition %d/%d: %s", i+1, cfg.Repeat, ph))
			}
			r, err := e.phase(ctx, &cfg, ph)
			if err != nil {
				return nil, fmt.Errorf("bench isolation: repetition %d, %s: %w", i+1, ph, err)
			}
			r.Rep = i
			rep.Runs = append(rep.Runs, r)
		}
	}
	rep.summarize()
	return rep, nil
}

// phase measures B for cfg.Duration, with A's looping λ reads in flight
// if ph is loaded.
func (e *env) phase(ctx context.Context, cfg *Config, ph string) (PhaseRun, error) {
	var stopA func() (ended, other int64)
	if ph == PhaseLoaded {
		stopA = e.loadA(ctx, cfg.Looping)
		// Let A's requests fill the target before measuring.
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			stopA()
			return PhaseRun{}, ctx.Err()
		}
	}
	cpu0, cpuErr := harness.ProcCPU(strconv.Itoa(e.target.Pid()))
	r, err := e.readPhase(ctx, cfg.Duration)
	cpu1, cpuErr1 := harness.ProcCPU(strconv.Itoa(e.target.Pid()))
	if cpuErr == nil && cpuErr1 == nil {
		r.TargetCPUSecs = (cpu1 - cpu0).Seconds()
	}
	if stopA != nil {
		r.LambdaEnded, r.LambdaOther = stopA()
	}
	r.Phase = ph
	return r, err
}

// loadA starts n goroutines, each sending looping λ reads one after
// another. The returned func counts the λ reads that ended so far by the
// time limit and those that ended otherwise, then stops the goroutines
// and waits for the λ reads in flight to end: cancelling them on the host
// would leave them queued at the target, and the next phase would not be
// idle there.
func (e *env) loadA(ctx context.Context, n int) (stop func() (ended, other int64)) {
	var stopping atomic.Bool
	var wg sync.WaitGroup
	var ended, other atomic.Int64
	files := []pushdown.File{e.nsA.RawFile()}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := host.Start{Offset: uint64(i) * blockSize, Length: blockSize}
			for !stopping.Load() && ctx.Err() == nil {
				_, err := e.nsA.LambdaRead(ctx, e.fn, files, start, nil, 64)
				var st *nvme.StatusError
				switch {
				case ctx.Err() != nil:
				case errors.As(err, &st) && st.Status.Code() == nvme.StatusFunctionTimeout:
					ended.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	return func() (int64, int64) {
		e, o := ended.Load(), other.Load()
		stopping.Store(true)
		wg.Wait()
		return e, o
	}
}

// readPhase reads random blocks from B, one at a time, for d.
func (e *env) readPhase(ctx context.Context, d time.Duration) (PhaseRun, error) {
	blocks := e.nsB.Size() / blockSize
	buf := make([]byte, blockSize)
	h := hist.New()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 18))
	var reads int64
	begin := time.Now()
	end := begin.Add(d)
	var maxLat time.Duration
	for {
		t0 := time.Now()
		if !t0.Before(end) {
			break
		}
		off := rng.Int64N(blocks) * blockSize
		if _, err := e.nsB.ReadAtContext(ctx, buf, off); err != nil {
			return PhaseRun{}, fmt.Errorf("host B read at %d: %w", off, err)
		}
		lat := time.Since(t0)
		h.Record(lat)
		maxLat = max(maxLat, lat)
		reads++
	}
	secs := time.Since(begin).Seconds()
	return PhaseRun{Reads: reads, Secs: secs, IOPS: float64(reads) / secs,
		P50us: report.Micros(h.Quantile(0.50)), P99us: report.Micros(h.Quantile(0.99)), MaxUs: report.Micros(maxLat)}, nil
}

// summarize fills in the medians, the ratio and the bars.
func (r *Report) summarize() {
	of := func(ph string) Summary {
		var rs []PhaseRun
		for _, x := range r.Runs {
			if x.Phase == ph {
				rs = append(rs, x)
			}
		}
		return Summary{
			IOPS:      report.MedianOf(rs, func(x PhaseRun) float64 { return x.IOPS }),
			P50us:     report.MedianOf(rs, func(x PhaseRun) float64 { return x.P50us }),
			P99us:     report.MedianOf(rs, func(x PhaseRun) float64 { return x.P99us }),
			TargetCPU: report.MedianOf(rs, func(x PhaseRun) float64 { return x.TargetCPUSecs / x.Secs }),
		}
	}
	r.Idle, r.Loaded = of(PhaseIdle), of(PhaseLoaded)
	if r.Idle.IOPS > 0 {
		r.Ratio = r.Loaded.IOPS / r.Idle.IOPS
	}
	p99ms := r.Loaded.P99us / 1e3
	r.Bars = []report.Bar{
		{What: "loaded/idle QD1 IOPS", Want: fmt.Sprintf(">= %g", IOPSRatioBar), Got: r.Ratio, Met: r.Ratio >= IOPSRatioBar},
		{What: "loaded p99 (ms)", Want: fmt.Sprintf("< %g ms", float64(P99Bar)/float64(time.Millisecond)), Got: p99ms, Met: p99ms < float64(P99Bar)/float64(time.Millisecond)},
	}
}

// WriteTable prints the medians and the bars.
func WriteTable(w io.Writer, r *Report) error {
	t := &report.TableWriter{W: w}
	t.Printf("host B: random %d B reads at QD1, alone and while host A keeps %d looping λ reads in flight\n", blockSize, r.Looping)
	t.Printf("medians of %d phases of %gs each, interleaved; target args: %v\n\n", r.Repeat, r.PhaseSecs, r.TargetArgs)
	t.Printf("%-8s %10s %10s %10s %12s\n", "phase", "IOPS", "p50 µs", "p99 µs", "target CPUs")
	for _, s := range []struct {
		name string
		s    Summary
	}{{PhaseIdle, r.Idle}, {PhaseLoaded, r.Loaded}} {
		t.Printf("%-8s %10.0f %10.1f %10.1f %12.2f\n", s.name, s.s.IOPS, s.s.P50us, s.s.P99us, s.s.TargetCPU)
	}
	t.Printf("\nloaded/idle IOPS: %.3f\n", r.Ratio)
	if t.Err != nil {
		return t.Err
	}
	return report.WriteBars(w, r.Bars)
}

// SavePlot draws the median IOPS of both phases, labelled with their p50
// and p99, into path (.png, .svg or .pdf).
func SavePlot(path string, r *Report) error {
	return report.SavePlot(path, 6*vg.Inch, 4.5*vg.Inch, func() (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("host B 4 KiB QD1 reads, alone and beside %d looping λ reads of host A\n(medians of %d × %gs; bar: loaded ≥ %g × idle, p99 < 2 ms)",
			r.Looping, r.Repeat, r.PhaseSecs, IOPSRatioBar)
		if r.Machine.Pinning != "" {
			p.Title.Text += "\n" + r.Machine.Pinning
		}
		p.Y.Label.Text = "IOPS"
		p.Y.Tick.Marker = report.KiloTicks{}
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		vs := plotter.Values{r.Idle.IOPS, r.Loaded.IOPS}
		bars, err := report.Bars(vs, vg.Points(60), report.Blue)
		if err != nil {
			return nil, err
		}
		p.Add(bars)
		goal, err := report.GoalLine(r.Idle.IOPS*IOPSRatioBar, len(vs), report.Red)
		if err != nil {
			return nil, err
		}
		p.Add(goal)
		p.Legend.Add("goal (half of idle)", goal)
		top := max(r.Idle.IOPS, r.Loaded.IOPS)
		labels, err := plotter.NewLabels(plotter.XYLabels{
			XYs: []plotter.XY{{X: 0, Y: top * 1.04}, {X: 1, Y: top * 1.04}},
			Labels: []string{
				fmt.Sprintf("%.0f IOPS\np50 %.0f µs, p99 %.0f µs", r.Idle.IOPS, r.Idle.P50us, r.Idle.P99us),
				fmt.Sprintf("%.0f IOPS (%.2f×)\np50 %.0f µs, p99 %.0f µs", r.Loaded.IOPS, r.Ratio, r.Loaded.P50us, r.Loaded.P99us),
			}})
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		p.Add(labels)
		p.Y.Max = top * 1.2
		p.NominalX(PhaseIdle, fmt.Sprintf("loaded (%d looping λ)", r.Looping))
		return p, nil
	})
}
