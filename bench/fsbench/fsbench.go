// Package fsbench is the file system experiment (bench fs): file I/O
// through offloadfs against raw namespace I/O of the same volume, case by
// case, and its metadata operations, as a table or a chart.
package fsbench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

// `bench fs`: file I/O through offloadfs against raw namespace I/O of the
// same sizes, on the same target, over the same connections. The target
// serves two memory namespaces of the same size; the file system lives on
// the first, with one file of FileSize bytes written in full; the raw
// side uses the first FileSize bytes of the second, also written in full.
// Each case runs Threads goroutines of synchronous I/O (ReadAt/WriteAt,
// the way applications use files) on each side in turn, in short slices
// that alternate between the sides (so a busy neighbour slows both
// alike); writes through the file overwrite it, so they measure the data
// path, not allocation. Metadata operations are measured separately.

// Defaults of an Config.
const (
	DefaultFSFileSize = 256 << 20
	// FSBar is the bar: file data I/O at least this fraction of
	// raw namespace throughput.
	FSBar = 0.9
)

// FSCase is one data workload.
type FSCase struct {
	// Pattern is read, write, randread or randwrite.
	Pattern string `json:"rw"`
	// BlockSize is each I/O's size in bytes.
	BlockSize int `json:"bs"`
	// Threads is the goroutines doing synchronous I/O: the queue depth.
	Threads int `json:"threads"`
}

// Label names the case: "randread 4k QD32".
func (c FSCase) Label() string {
	return fmt.Sprintf("%s %s QD%d", c.Pattern, fsSizeLabel(c.BlockSize), c.Threads)
}

func fsSizeLabel(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dm", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dk", n>>10)
	}
	return strconv.Itoa(n)
}

// ParseCase reads RW:BS:THREADS ("randread:4k:32", "read:1m:1").
func ParseCase(s string) (FSCase, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != 3 {
		return FSCase{}, fmt.Errorf("bench: case %q: want RW:BS:THREADS", s)
	}
	c := FSCase{Pattern: parts[0]}
	bs, err := volume.ParseSize(parts[1])
	if err != nil || bs <= 0 || bs > 64<<20 {
		return FSCase{}, fmt.Errorf("bench: case %q: block size %q", s, parts[1])
	}
	c.BlockSize = int(bs)
	if c.Threads, err = strconv.Atoi(parts[2]); err != nil || c.Threads < 1 || c.Threads > 1024 {
		return FSCase{}, fmt.Errorf("bench: case %q: threads %q (want 1 to 1024)", s, parts[2])
	}
	switch c.Pattern {
	case "read", "write", "randread", "randwrite":
	default:
		return FSCase{}, fmt.Errorf("bench: case %q: pattern %q (want read, write, randread or randwrite)", s, c.Pattern)
	}
	return c, nil
}

// DefaultFSCases is the matrix: sequential 1 MiB and random 4 KiB
// reads and writes at QD 1 and 32.
func DefaultFSCases() []FSCase {
	var out []FSCase
	for _, p := range []struct {
		rw string
		bs int
	}{{"read", 1 << 20}, {"write", 1 << 20}, {"randread", 4 << 10}, {"randwrite", 4 << 10}} {
		for _, qd := range []int{1, 32} {
			out = append(out, FSCase{Pattern: p.rw, BlockSize: p.bs, Threads: qd})
		}
	}
	return out
}

// Config configures Run.
type Config struct {
	// TargetExe runs the target as `TargetExe target serve` in its own
	// process (the nearstore binary); empty runs it in this process.
	TargetExe  string
	ServerCPUs string
	// FileSize is the file's size and the raw region's (default 256 MiB).
	FileSize int64
	// Queues is the host's I/O queues (default 2).
	Queues int
	// Duration is each timed run's length (default 4s); Repeat the runs
	// per case and side (default 3; medians are reported). A run is
	// made of slices of Slice (default 250ms) taking turns with the
	// other side's.
	Duration time.Duration
	Repeat   int
	Slice    time.Duration
	// Cases are the data workloads (default DefaultFSCases).
	Cases []FSCase
	// MetaDuration is each metadata run's length (default 1s); SkipMeta
	// leaves metadata out.
	MetaDuration time.Duration
	SkipMeta     bool
	// Logger receives the host library's events (default: discarded).
	Logger *slog.Logger
	// Progress, when set, is told what is about to run.
	Progress func(stage string)
}

func (c *Config) setDefaults() error {
	if c.FileSize == 0 {
		c.FileSize = DefaultFSFileSize
	}
	if c.FileSize < 1<<20 || c.FileSize%(1<<20) != 0 {
		return fmt.Errorf("bench: file size %d: want a positive multiple of 1 MiB", c.FileSize)
	}
	if c.Queues == 0 {
		c.Queues = 2
	}
	if c.Duration == 0 {
		c.Duration = 4 * time.Second
	}
	if c.Repeat == 0 {
		c.Repeat = 3
	}
	if c.Slice == 0 {
		c.Slice = 250 * time.Millisecond
	}
	if c.MetaDuration == 0 {
		c.MetaDuration = time.Second
	}
	if c.Queues < 0 || c.Duration < 0 || c.Repeat < 0 || c.MetaDuration < 0 || c.Slice < 0 {
		return errors.New("bench: negative queues, duration or repeat")
	}
	if len(c.Cases) == 0 {
		c.Cases = DefaultFSCases()
	}
	for _, k := range c.Cases {
		if int64(k.BlockSize) > c.FileSize {
			return fmt.Errorf("bench: case %s: block size larger than the %d-byte file", k.Label(), c.FileSize)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Report is what Run measured.
type Report struct {
	Machine  report.Machine `json:"machine"`
	Target   string         `json:"target"` // "own process" or "this process"
	FileSize int64          `json:"file_size"`
	Extents  int            `json:"file_extents"`
	Queues   int            `json:"queues"`
	Repeat   int            `json:"repeat"`
	RunSecs  float64        `json:"run_seconds"`
	// Data has one point per case, in order.
	Data []FSPoint `json:"data"`
	// Meta has the metadata operations' rates.
	Meta []FSMeta `json:"meta,omitempty"`
	// Bar is the issue's: the worst data ratio against FSBar.
	Bar FSBarResult `json:"bar"`
}

// FSPoint is one case on both sides.
type FSPoint struct {
	Case FSCase `json:"case"`
	File FSSide `json:"offloadfs"`
	Raw  FSSide `json:"raw"`
	// Ratio is the median over runs of the file's throughput over the
	// raw side's in the same run.
	Ratio float64 `json:"ratio"`
}

// FSSide is one side's runs and their medians.
type FSSide struct {
	Runs  []FSRun `json:"runs"`
	MBps  float64 `json:"mb_per_s"`
	IOPS  float64 `json:"iops"`
	P50us float64 `json:"p50_us"`
	P99us float64 `json:"p99_us"`
}

// FSRun is one timed run.
type FSRun struct {
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"`
	IOPS    float64 `json:"iops"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
}

// FSMeta is one metadata operation's rate.
type FSMeta struct {
	Op        string    `json:"op"`
	Runs      []float64 `json:"runs"`
	OpsPerSec float64   `json:"ops_per_s"`
}

// FSBarResult says whether the bar was met.
type FSBarResult struct {
	Want  float64 `json:"want"`
	Worst float64 `json:"worst"`
	Case  string  `json:"worst_case"`
	Met   bool    `json:"met"`
}

// fsNQN is the subsystem the benchmark's target serves.
const fsNQN = "nqn.2026-11.io.nearstore:bench-fs"

// fsEnv is the target, the connection and both sides.
type fsEnv struct {
	ctrl    *host.Controller
	fsns    *host.Namespace // the file system's
	raw     *host.Namespace
	fsys    *offloadfs.FS
	file    *offloadfs.File
	extents int
	closers harness.Closers
}

func (e *fsEnv) Close() error {
	return e.closers.Close()
}

// Run runs the benchmark.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	e, err := startFSEnv(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	rep := &Report{
		Machine: report.DescribeMachine(), Target: "this process", FileSize: cfg.FileSize, Extents: e.extents,
		Queues: cfg.Queues, Repeat: cfg.Repeat, RunSecs: cfg.Duration.Seconds(),
		Bar: FSBarResult{Want: FSBar, Worst: -1},
	}
	if cfg.TargetExe != "" {
		rep.Target = "own process"
	}
	for _, c := range cfg.Cases {
		pt := FSPoint{Case: c}
		for r := range cfg.Repeat {
			harness.Stage(cfg.Progress, "%s: run %d of %d", c.Label(), r+1, cfg.Repeat)
			fr, rr, err := runFSPair(ctx, e.file, e.raw, c, &cfg, r%2 == 1)
			if err != nil {
				return rep, fmt.Errorf("bench: %s: %w", c.Label(), err)
			}
			pt.File.Runs = append(pt.File.Runs, fr)
			pt.Raw.Runs = append(pt.Raw.Runs, rr)
		}
		pt.File.summarize()
		pt.Raw.summarize()
		// The ratio of each run's pair, whose slices took turns under the
		// same conditions, then their median: steadier than the ratio of
		// the two medians when the machine is busy.
		ratios := make([]float64, len(pt.File.Runs))
		for i := range ratios {
			if raw := pt.Raw.Runs[i].MBps; raw > 0 {
				ratios[i] = pt.File.Runs[i].MBps / raw
			}
		}
		pt.Ratio = report.Median(ratios)
		if rep.Bar.Worst < 0 || pt.Ratio < rep.Bar.Worst {
			rep.Bar.Worst, rep.Bar.Case = pt.Ratio, c.Label()
		}
		rep.Data = append(rep.Data, pt)
	}
	rep.Bar.Met = rep.Bar.Worst >= FSBar
	if !cfg.SkipMeta {
		if rep.Meta, err = runFSMeta(ctx, e.fsys, &cfg); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func (s *FSSide) summarize() {
	med := func(f func(FSRun) float64) float64 {
		vs := make([]float64, len(s.Runs))
		for i, r := range s.Runs {
			vs[i] = f(r)
		}
		return report.Median(vs)
	}
	s.MBps = med(func(r FSRun) float64 { return r.MBps })
	s.IOPS = med(func(r FSRun) float64 { return r.IOPS })
	s.P50us = med(func(r FSRun) float64 { return r.P50us })
	s.P99us = med(func(r FSRun) float64 { return r.P99us })
}

// startFSEnv starts the target, connects, makes the file system and
// writes the file and the raw region in full.
func startFSEnv(ctx context.Context, cfg *Config) (_ *fsEnv, err error) {
	e := &fsEnv{}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	// The file system's namespace holds the file, its metadata (with an
	// inode table of 16 MiB) and slack.
	size := cfg.FileSize + cfg.FileSize/8 + 96<<20
	var addr string
	if cfg.TargetExe != "" {
		addr, err = e.startTargetProcess(ctx, cfg, size)
	} else {
		addr, err = e.startTargetHere(cfg, size)
	}
	if err != nil {
		return nil, err
	}
	harness.Stage(cfg.Progress, "connecting with %d queues", cfg.Queues)
	e.ctrl, err = host.Connect(ctx, addr, fsNQN, harness.HostOptions(host.Options{IOQueues: cfg.Queues, QueueDepth: 64, Logger: cfg.Logger}))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.ctrl.Close)
	if e.fsns, err = e.ctrl.Namespace(1); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if e.raw, err = e.ctrl.Namespace(2); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := offloadfs.Mkfs(ctx, e.fsns, offloadfs.MkfsOptions{Inodes: fsMetaInodes}); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	// The mount keeps the target's extent maps in step, as a real owner's
	// does; with no file changing during the runs, it is idle.
	e.fsys, err = offloadfs.Mount(ctx, e.fsns, offloadfs.Options{Logger: cfg.Logger, Remote: e.fsns, Loader: e.ctrl})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.fsys.Close)
	if e.file, err = e.fsys.Create("bench"); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.file.Close)
	harness.Stage(cfg.Progress, "writing the %s file and the raw region", volume.FormatSize(cfg.FileSize))
	buf := make([]byte, 8<<20)
	_, _ = rand.Read(buf)
	for off := int64(0); off < cfg.FileSize; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), cfg.FileSize-off)]
		if _, err := e.file.WriteAt(b, off); err != nil {
			return nil, fmt.Errorf("bench: writing the file: %w", err)
		}
		if _, err := e.raw.WriteAtContext(ctx, b, off); err != nil {
			return nil, fmt.Errorf("bench: writing the raw region: %w", err)
		}
	}
	if err := e.fsys.SyncRemote(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	m, err := e.file.Extents()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.extents = len(m.Extents)
	return e, nil
}

// startTargetHere serves two memory namespaces from this process.
func (e *fsEnv) startTargetHere(cfg *Config, size int64) (string, error) {
	var nss []target.NamespaceConfig
	for i := range 2 {
		v, err := volume.Open("mem:" + strconv.FormatInt(size, 10))
		if err != nil {
			return "", err
		}
		e.closers = append(e.closers, v.Close)
		nss = append(nss, target.NamespaceConfig{Backend: v, Name: fmt.Sprintf("mem-%d", i)})
	}
	srv, err := target.New(target.Config{Subsystems: []target.SubsystemConfig{{NQN: fsNQN, Namespaces: nss}}, Logger: cfg.Logger})
	if err != nil {
		return "", err
	}
	addr, stop, err := harness.ServeLoopback(srv)
	if err != nil {
		return "", err
	}
	e.closers = append(e.closers, stop)
	return addr, nil
}

// startTargetProcess runs `nearstore target serve` with two memory
// volumes.
func (e *fsEnv) startTargetProcess(ctx context.Context, cfg *Config, size int64) (string, error) {
	vol := "mem:" + strconv.FormatInt(size, 10)
	p, addr, err := harness.StartTarget(ctx, harness.TargetSpec{Exe: cfg.TargetExe, NQN: fsNQN, Volume: vol, Args: []string{"--volume", vol}, CPUs: cfg.ServerCPUs})
	if err != nil {
		return "", err
	}
	e.closers = append(e.closers, p.Stop)
	return addr, nil
}

// ioTarget is what a side does I/O on: the file, or the raw namespace.
type ioTarget interface {
	io.ReaderAt
	io.WriterAt
}

// runFSPair makes one run of a case on each side. The sides take turns
// in slices of cfg.Slice, in the order ABBA ABBA... (BAAB... with
// rawFirst), so that whatever else the machine is doing falls on both
// alike; each side's run adds up its slices.
func runFSPair(ctx context.Context, file, raw ioTarget, c FSCase, cfg *Config, rawFirst bool) (FSRun, FSRun, error) {
	n := max(1, int(cfg.Duration/cfg.Slice))
	slice := cfg.Duration / time.Duration(n)
	// One buffer per thread for the whole run, random for writes: made
	// once, outside the timed slices.
	bufs := make([][]byte, c.Threads)
	for i := range bufs {
		bufs[i] = make([]byte, c.BlockSize)
		if strings.HasSuffix(c.Pattern, "write") {
			_, _ = rand.Read(bufs[i])
		}
	}
	var acc [2]sliceAcc // file, raw
	for k := range 2 * n {
		// ABBA: the first of each pair of slices alternates.
		side := (k/2 + k%2) % 2 // 0 1 1 0 0 1 1 0 ...
		if rawFirst {
			side = 1 - side
		}
		t := ioTarget(file)
		if side == 1 {
			t = raw
		}
		s, err := runFSSlice(ctx, t, c, cfg.FileSize, slice, bufs)
		if err != nil {
			return FSRun{}, FSRun{}, fmt.Errorf("on %s: %w", [2]string{"offloadfs", "raw"}[side], err)
		}
		acc[side].add(s)
	}
	return acc[0].run(c), acc[1].run(c), nil
}

// sliceAcc adds up slices of one side.
type sliceAcc struct {
	ops  int64
	secs float64
	hist *hist.Histogram
}

func (a *sliceAcc) add(s sliceAcc) {
	a.ops += s.ops
	a.secs += s.secs
	if a.hist == nil {
		a.hist = hist.New()
	}
	a.hist.Merge(s.hist)
}

func (a *sliceAcc) run(c FSCase) FSRun {
	return FSRun{
		Ops: a.ops, Seconds: a.secs,
		IOPS:  float64(a.ops) / a.secs,
		MBps:  float64(a.ops) * float64(c.BlockSize) / a.secs / 1e6,
		P50us: report.Micros(a.hist.Quantile(0.50)),
		P99us: report.Micros(a.hist.Quantile(0.99)),
	}
}

// runFSSlice runs one case on one side: c.Threads goroutines of
// synchronous I/O over [0, region), issuing until d has passed. Every
// operation counts, and the slice lasts until the last one is done, so a
// slice loses nothing at its edges: its ramp-up and drain count on both
// sides alike. Sequential patterns give each goroutine its
// own stripe; random ones draw aligned offsets uniformly, with
// replacement. bufs has each goroutine's buffer.
func runFSSlice(ctx context.Context, t ioTarget, c FSCase, region int64, d time.Duration, bufs [][]byte) (sliceAcc, error) {
	slots := region / int64(c.BlockSize)
	write := strings.HasSuffix(c.Pattern, "write")
	random := strings.HasPrefix(c.Pattern, "rand")
	var ops atomic.Int64
	var firstErr error
	var errOnce sync.Once
	hists := hist.NewSet(c.Threads)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range c.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pick := harness.NewSlots(slots, i, c.Threads, random, uint64(start.UnixNano()))
			buf := bufs[i]
			for ctx.Err() == nil {
				off := pick.Next() * int64(c.BlockSize)
				t0 := time.Now()
				var err error
				if write {
					_, err = t.WriteAt(buf, off)
				} else {
					_, err = t.ReadAt(buf, off)
				}
				now := time.Now()
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				ops.Add(1)
				hists[i].Record(now.Sub(t0))
				if now.After(deadline) {
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		return sliceAcc{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return sliceAcc{}, err
	}
	return sliceAcc{ops: ops.Load(), secs: el.Seconds(), hist: hist.Merged(hists)}, nil
}

// Metadata operations measured, in report order.
var fsMetaOps = []string{"create+sync", "create", "stat", "rename", "remove"}

// fsMetaInodes is the file system's inode count (16 MiB of inode table),
// and fsMetaMaxFiles the most files one metadata run creates, well inside
// it: a fast create run stops there rather than at the time limit.
const (
	fsMetaInodes   = 1 << 16
	fsMetaMaxFiles = 40000
)

// runFSMeta measures metadata operations on fsys, one goroutine (the
// file system serializes metadata changes anyway), cfg.Repeat times:
//
//   - create+sync: create and close an empty file, then Sync (a durable
//     create: one journal commit, two flushes, each time);
//   - create: the same without Sync (commits group many);
//   - stat: Stat of the files created, in turn;
//   - rename: rename each file and back, in turn;
//   - remove: remove the files, then Sync (so the rate includes the
//     commit).
func runFSMeta(ctx context.Context, fsys *offloadfs.FS, cfg *Config) ([]FSMeta, error) {
	rates := map[string][]float64{}
	d := cfg.MetaDuration
	for r := range cfg.Repeat {
		dir := fmt.Sprintf("meta%d", r)
		if err := fsys.Mkdir(dir); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		var names []string
		create := func(sync bool) (float64, error) {
			start := time.Now()
			n := 0
			for time.Since(start) < d && len(names) < fsMetaMaxFiles {
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				name := fmt.Sprintf("%s/f%07d", dir, len(names))
				f, err := fsys.Create(name)
				if err != nil {
					return 0, err
				}
				if err := f.Close(); err != nil {
					return 0, err
				}
				if sync {
					if err := fsys.Sync(ctx); err != nil {
						return 0, err
					}
				}
				names = append(names, name)
				n++
			}
			return float64(n) / time.Since(start).Seconds(), nil
		}
		harness.Stage(cfg.Progress, "metadata: create+sync, run %d of %d", r+1, cfg.Repeat)
		v, err := create(true)
		if err != nil {
			return nil, fmt.Errorf("bench: create+sync: %w", err)
		}
		rates["create+sync"] = append(rates["create+sync"], v)
		harness.Stage(cfg.Progress, "metadata: create, run %d of %d", r+1, cfg.Repeat)
		if v, err = create(false); err != nil {
			return nil, fmt.Errorf("bench: create: %w", err)
		}
		rates["create"] = append(rates["create"], v)
		if err := fsys.Sync(ctx); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		// stat and rename cycle through the files for d.
		cycle := func(op func(i int, name string) error) (float64, error) {
			start := time.Now()
			n := 0
			for time.Since(start) < d {
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				if err := op(n, names[n%len(names)]); err != nil {
					return 0, err
				}
				n++
			}
			return float64(n) / time.Since(start).Seconds(), nil
		}
		harness.Stage(cfg.Progress, "metadata: stat, run %d of %d", r+1, cfg.Repeat)
		if v, err = cycle(func(_ int, name string) error { _, err := fsys.Stat(name); return err }); err != nil {
			return nil, fmt.Errorf("bench: stat: %w", err)
		}
		rates["stat"] = append(rates["stat"], v)
		harness.Stage(cfg.Progress, "metadata: rename, run %d of %d", r+1, cfg.Repeat)
		renamed := make([]bool, len(names))
		if v, err = cycle(func(i int, name string) error {
			k := i % len(names)
			from, to := name, name+".r"
			if renamed[k] {
				from, to = to, from
			}
			renamed[k] = !renamed[k]
			return fsys.Rename(from, to)
		}); err != nil {
			return nil, fmt.Errorf("bench: rename: %w", err)
		}
		rates["rename"] = append(rates["rename"], v)
		harness.Stage(cfg.Progress, "metadata: remove, run %d of %d", r+1, cfg.Repeat)
		start := time.Now()
		for k, name := range names {
			if renamed[k] {
				name += ".r"
			}
			if err := fsys.Remove(name); err != nil {
				return nil, fmt.Errorf("bench: remove: %w", err)
			}
		}
		if err := fsys.Sync(ctx); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		rates["remove"] = append(rates["remove"], float64(len(names))/time.Since(start).Seconds())
		if err := fsys.Remove(dir); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	out := make([]FSMeta, 0, len(fsMetaOps))
	for _, op := range fsMetaOps {
		out = append(out, FSMeta{Op: op, Runs: rates[op], OpsPerSec: report.Median(rates[op])})
	}
	return out, nil
}

// WriteTable prints the report as tables.
func WriteTable(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "offloadfs file I/O vs raw namespace I/O over NVMe/TCP (target: %s; %s file in %d extents; %d queues; medians of %d runs of %gs)\n\n",
		r.Target, volume.FormatSize(r.FileSize), r.Extents, r.Queues, r.Repeat, r.RunSecs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\toffloadfs MB/s\traw MB/s\tratio\toffloadfs IOPS\traw IOPS\tp50 µs (fs/raw)\tp99 µs (fs/raw)\t")
	for _, p := range r.Data {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.3f\t%.0f\t%.0f\t%.0f / %.0f\t%.0f / %.0f\t\n",
			p.Case.Label(), p.File.MBps, p.Raw.MBps, p.Ratio, p.File.IOPS, p.Raw.IOPS, p.File.P50us, p.Raw.P50us, p.File.P99us, p.Raw.P99us)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "met"
	if !r.Bar.Met {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, "\ngoal: file data I/O at least %.0f%% of raw throughput: %s (worst: %s at %.3f)\n", 100*r.Bar.Want, verdict, r.Bar.Case, r.Bar.Worst)
	if len(r.Meta) > 0 {
		fmt.Fprintf(w, "\nmetadata operations (one goroutine)\n\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "op\tops/s (median)\truns\t")
		for _, m := range r.Meta {
			runs := make([]string, len(m.Runs))
			for i, v := range m.Runs {
				runs[i] = fmt.Sprintf("%.0f", v)
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t\n", m.Op, m.OpsPerSec, strings.Join(runs, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// plotFS draws each case's ratio of file to raw throughput as a bar,
// with the bar's 0.9 and parity marked and both sides' MB/s above.
func plotFS(r *Report) (*plot.Plot, error) {
	if r == nil || len(r.Data) == 0 {
		return nil, errors.New("bench: nothing to plot")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("offloadfs file I/O ÷ raw namespace I/O over NVMe/TCP (medians of %d runs of %gs)\nlabels: ratio, then MB/s offloadfs / raw", r.Repeat, r.RunSecs)
	if r.Machine.Pinning != "" {
		p.Title.Text += "\n" + r.Machine.Pinning
	}
	p.Y.Label.Text = "throughput ratio (offloadfs ÷ raw)"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.X.Tick.Label.Font.Size = vg.Points(8)
	vs := make(plotter.Values, len(r.Data))
	labels := make([]string, len(r.Data))
	var top float64
	xy := plotter.XYLabels{}
	for _, d := range r.Data {
		top = max(top, d.Ratio)
	}
	top = max(top, 1)
	for i, d := range r.Data {
		vs[i] = d.Ratio
		labels[i] = strings.Replace(d.Case.Label(), " QD", "\nQD", 1)
		// All labels on one line above the tallest bar and parity.
		xy.XYs = append(xy.XYs, plotter.XY{X: float64(i), Y: top * 1.04})
		xy.Labels = append(xy.Labels, fmt.Sprintf("%.2f\n%.0f / %.0f", d.Ratio, d.File.MBps, d.Raw.MBps))
	}
	bars, err := report.Bars(vs, vg.Points(28), report.Blue)
	if err != nil {
		return nil, err
	}
	p.Add(bars)
	for _, ref := range []struct {
		y     float64
		name  string
		color report.RGB
	}{{FSBar, "goal (0.9)", report.Red}, {1, "parity", 0x555555}} {
		line, err := report.GoalLine(ref.y, len(r.Data), ref.color)
		if err != nil {
			return nil, err
		}
		p.Add(line)
		p.Legend.Add(ref.name, line)
	}
	l, err := report.CenteredLabels(xy, vg.Points(7))
	if err != nil {
		return nil, err
	}
	l.Offset = vg.Point{Y: vg.Points(4)}
	p.Add(l)
	report.NominalBars(p, labels...)
	p.Y.Max = top * 1.3
	p.Legend.Top = true
	p.Legend.Left = true
	return p, nil
}

// SavePlot renders plotFS to path, in the format its extension names,
// 9 by 5 inches.
func SavePlot(path string, r *Report) error {
	return report.SavePlot(path, 9*vg.Inch, 5*vg.Inch, func() (*plot.Plot, error) { return plotFS(r) })
}
