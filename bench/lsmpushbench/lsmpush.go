// Package lsmpushbench measures kv/lsm's Gets over NVMe/TCP, plain and
// pushed down (BPF-oF's query splitting with one lsm_get request per Get),
// on an offloadfs served by a target in its own process from a simulated
// NAND SSD: YCSB C and B with uniform keys, D with the latest records, and a sweep of the cache
// sampling rate.
package lsmpushbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/bench/ycsb"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/wasm"
)

// Modes.
const (
	ModePlain    = "plain"    // kv/lsm, every block read by the host
	ModePushdown = "pushdown" // kv/lsm, query splitting and lsm_get
	ModePebble   = "pebble"   // Pebble v2 on the same offloadfs
)

// Config configures Run.
type Config struct {
	// Records is the number of keys loaded (default 200000), ValueSize
	// their values' size (default 400). Every value read is checked.
	Records   int
	ValueSize int
	// Modes to measure (default plain and pushdown).
	Modes []string
	// Workloads are YCSB workloads: "C" (100% reads, default), "B"
	// (95% reads, 5% updates), "A" (50% reads, 50% updates) and "F" (50%
	// reads, 50% read-modify-writes: a checked read, then an update),
	// uniform keys; "D" (95% reads of the latest records, zipfian in
	// their age, 5% inserts); "Load" (case-insensitive) reports the load
	// itself, measured once per store (plain, and pebble if among Modes;
	// pushdown shares plain's store), one writer: ops/s and latencies
	// of the Sets, commands, CPU and network bytes through the settling.
	Workloads []string
	// SampleRates is the cache-sampling sweep of pushdown mode on each
	// workload (default {lsm.DefaultCacheSampleRate}); a rate of 0 means
	// none.
	SampleRates []float64
	// Threads is the Gets in flight (default 32).
	Threads int
	// Duration is each timed run (default 3s), after a warm-up of a third
	// of it; Repeat the runs per mode (default 3), interleaved.
	Duration time.Duration
	Repeat   int
	// BlockCache is the host's block cache (default 4 MiB).
	BlockCache int64
	// TargetExe runs the target as `TargetExe target serve` in its own
	// process (required), pinned to ServerCPUs if set.
	TargetExe  string
	ServerCPUs string
	// Logger receives the host library's events (default: discarded).
	Logger *slog.Logger
	// Progress, when set, is told what is about to happen.
	Progress func(stage string)
}

func (c *Config) setDefaults() error {
	if c.Records == 0 {
		c.Records = 200000
	}
	if c.ValueSize == 0 {
		c.ValueSize = 400
	}
	if c.ValueSize < 16 {
		return fmt.Errorf("bench: value size %d: at least 16", c.ValueSize)
	}
	if len(c.Modes) == 0 {
		c.Modes = []string{ModePlain, ModePushdown}
	}
	for _, m := range c.Modes {
		if m != ModePlain && m != ModePushdown && m != ModePebble {
			return fmt.Errorf("bench: mode %q: want %s, %s or %s", m, ModePlain, ModePushdown, ModePebble)
		}
	}
	if len(c.Workloads) == 0 {
		c.Workloads = []string{"C"}
	}
	c.Workloads = slices.Clone(c.Workloads) // the caller's stays as given
	for i, w := range c.Workloads {
		if strings.EqualFold(w, WorkloadLoad) {
			c.Workloads[i] = WorkloadLoad
			continue
		}
		if !slices.Contains([]string{"A", "B", "C", "D", "F"}, w) {
			return fmt.Errorf("bench: workload %q: want Load, A, B, C, D or F", w)
		}
	}
	if len(c.SampleRates) == 0 {
		c.SampleRates = []float64{lsm.DefaultCacheSampleRate}
	}
	if c.Threads <= 0 {
		c.Threads = 32
	}
	if c.Duration <= 0 {
		c.Duration = 3 * time.Second
	}
	if c.Repeat <= 0 {
		c.Repeat = 3
	}
	if c.BlockCache <= 0 {
		c.BlockCache = 4 << 20
	}
	if c.TargetExe == "" {
		return errors.New("bench: no target executable")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		c.Progress(fmt.Sprintf(format, args...))
	}
}

// Key is record i's key, YCSB's (bench/ycsb): "user" and a scrambled
// number, so loading in record order writes keys in random order.
func Key(i uint64) []byte { return ycsb.Key(i) }

// Value returns version ver of record i's value: the record number, the
// version, then bytes derived from both, so that a read can check it is
// some version of the right record's value, whole.
func Value(dst []byte, i uint64, ver uint32) {
	binary.LittleEndian.PutUint64(dst, i)
	binary.LittleEndian.PutUint32(dst[8:], ver)
	x := i*0x9e3779b97f4a7c15 + uint64(ver)
	for j := 12; j < len(dst); j++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		dst[j] = byte(x)
	}
}

// checkValue reports whether v is a version of record i's value.
func checkValue(v []byte, i uint64, size int) bool {
	if len(v) != size || binary.LittleEndian.Uint64(v) != i {
		return false
	}
	want := make([]byte, size)
	Value(want, i, binary.LittleEndian.Uint32(v[8:]))
	return string(v) == string(want)
}

// Report is what Run measured.
type Report struct {
	Machine report.Machine `json:"machine"`
	Volume  string         `json:"volume"`
	Threads int            `json:"threads"`
	Repeat  int            `json:"repeat"`
	RunSecs float64        `json:"run_secs"`
	Load    Load           `json:"load"`
	Points  []Point        `json:"points"`
	Bars    []report.Bar   `json:"bars"`
}

// Load describes the loaded database.
type Load struct {
	Records   int     `json:"records"`
	ValueSize int     `json:"value_size"`
	Secs      float64 `json:"secs"`
	// Levels are the tables per level (L0 first).
	Levels []int `json:"levels"`
	// TableBytes is the tables' size; IndexBytes the in-memory index and
	// filter bytes the host holds (always resident in kv/lsm);
	// BlockCache the data-block cache, and CacheRatio BlockCache over
	// TableBytes: the share of data blocks that can be cached.
	TableBytes uint64  `json:"table_bytes"`
	BlockCache int64   `json:"block_cache"`
	CacheRatio float64 `json:"cache_ratio"`
	// trials are each store's load, by mode; reported as points of
	// workload Load when asked for.
	trials map[string]Trial
}

// WorkloadLoad names the load as a workload of Config.Workloads.
const WorkloadLoad = "Load"

// Point is one mode on one workload at one sampling rate: its runs and
// their medians.
type Point struct {
	Workload   string  `json:"workload"`
	Mode       string  `json:"mode"`
	SampleRate float64 `json:"sample_rate"`
	Runs       []Trial `json:"runs"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50Micros  float64 `json:"p50_us"`
	P99Micros  float64 `json:"p99_us"`
	P999Micros float64 `json:"p999_us"`
	// RoundTrips are NVMe commands per operation; CPU in µs per
	// operation, host (this process) and target; NetBytes data bytes
	// over the connection per operation.
	RoundTrips   float64 `json:"round_trips_per_op"`
	HostCPU      float64 `json:"host_cpu_us_per_op"`
	TargetCPU    float64 `json:"target_cpu_us_per_op"`
	NetBytes     float64 `json:"net_bytes_per_op"`
	CacheHitRate float64 `json:"cache_hit_rate"`
}

// Trial is one timed run.
type Trial struct {
	Ops          uint64            `json:"ops"`
	Secs         float64           `json:"secs"`
	OpsPerSec    float64           `json:"ops_per_sec"`
	P50Micros    float64           `json:"p50_us"`
	P99Micros    float64           `json:"p99_us"`
	P999Micros   float64           `json:"p999_us"`
	Commands     uint64            `json:"commands"`
	HostCPU      float64           `json:"host_cpu_secs"`
	TargetCPU    float64           `json:"target_cpu_secs"`
	NetBytes     uint64            `json:"net_bytes"`
	CacheHits    int64             `json:"cache_hits"`
	CacheMisses  int64             `json:"cache_misses"`
	Pushdown     lsm.PushdownStats `json:"pushdown"`
	CheckedReads uint64            `json:"checked_reads"`
}

// env is the target process, the host connected to it and the file system.
type env struct {
	cfg     *Config
	spec    string
	ctrl    *host.Controller
	fsys    *offloadfs.FS
	hrt     sandbox.Runtime
	pid     int
	closers []func() error
	// versions are the loaded records' current value versions (workload
	// B); inserted are the records workload D inserted, per store
	// directory.
	versions []atomic.Uint32
	inserted map[string]*inserts
	latest   *ycsb.Zipfian
}

// inserts tracks a store's records inserted after the load: next is the
// next record number to insert; count the records [0, count) that all
// exist (inserts finish out of order, so done holds those above it).
type inserts struct {
	next  atomic.Uint64
	count atomic.Uint64
	mu    sync.Mutex
	done  map[uint64]bool
}

// insert allocates a record number; finish marks it written.
func (in *inserts) insert() uint64 { return in.next.Add(1) - 1 }

func (in *inserts) finish(i uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.done[i] = true
	for c := in.count.Load(); in.done[c]; c++ {
		delete(in.done, c)
		in.count.Store(c + 1)
	}
}

func (e *env) Close() error {
	var errs []error
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i]())
	}
	return errors.Join(errs...)
}

const nqn = "nqn.2026-11.io.nearstore:bench-lsm-pushdown"

func startEnv(ctx context.Context, cfg *Config) (_ *env, err error) {
	e := &env{cfg: cfg}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	// Room for the tables (several times the data while compactions
	// run), the logs and the file system's metadata.
	data := int64(cfg.Records) * int64(cfg.ValueSize+40)
	size := (4*data + 256<<20 + 1<<20 - 1) &^ (1<<20 - 1)
	e.spec = fmt.Sprintf("sim:nand:%d?bs=4096", size)
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"target", "serve", "--log-level", "warn", "--allow-any-host", "--listen", addr, "--nqn", nqn, "--volume", e.spec}
	p, err := proc.Start(ctx, proc.Spec{Name: "nearstore target", Path: cfg.TargetExe, Args: args, CPUs: cfg.ServerCPUs})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, p.Stop)
	e.pid = p.Pid()
	if err := proc.WaitListening(ctx, addr, p, 10*time.Second); err != nil {
		return nil, err
	}
	e.ctrl, err = host.Connect(ctx, addr, nqn, harness.HostOptions(host.Options{IOQueues: 2, QueueDepth: 256, Logger: cfg.Logger}))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.ctrl.Close)
	ns, err := e.ctrl.Namespace(1)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := offloadfs.Mkfs(ctx, ns, offloadfs.MkfsOptions{}); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	wrt, err := wasm.NewRuntime(ctx, wasm.Options{})
	if err != nil {
		return nil, err
	}
	e.hrt = wrt
	e.closers = append(e.closers, func() error { return wrt.Close(context.Background()) })
	e.fsys, err = offloadfs.Mount(ctx, ns, offloadfs.Options{
		CommitInterval: -1, Logger: cfg.Logger, Remote: ns, Loader: e.ctrl, Runtimes: []sandbox.Runtime{wrt},
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.fsys.Close)
	e.versions = make([]atomic.Uint32, cfg.Records)
	e.inserted = map[string]*inserts{}
	for _, dir := range []string{dbDir, pebbleDir} {
		in := &inserts{done: map[uint64]bool{}}
		in.next.Store(uint64(cfg.Records))
		in.count.Store(uint64(cfg.Records))
		e.inserted[dir] = in
	}
	if slices.Contains(cfg.Workloads, "D") {
		e.latest = ycsb.NewZipfian(uint64(cfg.Records), ycsb.Theta)
	}
	return e, nil
}

// options are the store's: small levels, so that a benchmark-sized
// database has several.
func (e *env) options(mode string, rate float64) lsm.Options {
	o := lsm.Options{
		MemTableSize:    2 << 20,
		LBaseMaxBytes:   1 << 20,
		LevelMultiplier: 4,
		TargetFileSize:  1 << 20,
		BlockCacheSize:  e.cfg.BlockCache,
		Logger:          slog.New(slog.DiscardHandler),
	}
	if mode == ModePushdown {
		o.Pusher = e.fsys
		o.CacheSampleRate = rate
		if rate == 0 {
			o.CacheSampleRate = -1
		}
	}
	return o
}

// The stores' directories.
const (
	dbDir     = "db"
	pebbleDir = "pebble"
)

// load writes the records into kv/lsm (and Pebble, if measured) and waits
// for compactions to settle.
func (e *env) load(ctx context.Context) (Load, error) {
	cfg := e.cfg
	start := time.Now()
	ld := Load{Records: cfg.Records, ValueSize: cfg.ValueSize, BlockCache: cfg.BlockCache}
	modes := []string{ModePlain}
	if slices.Contains(cfg.Modes, ModePebble) {
		modes = append(modes, ModePebble)
	}
	v := make([]byte, cfg.ValueSize)
	ld.trials = map[string]Trial{}
	for _, mode := range modes {
		cfg.progress("loading %d records of %d bytes into %s", cfg.Records, cfg.ValueSize, mode)
		eng, err := e.openEngine(mode, 0)
		if err != nil {
			return ld, err
		}
		before, err := e.sample(eng)
		if err != nil {
			eng.Close()
			return ld, err
		}
		h := hist.New()
		t0 := time.Now()
		for i := range uint64(cfg.Records) {
			Value(v, i, 0)
			s := time.Now()
			if err := eng.Set(Key(i), v); err != nil {
				eng.Close()
				return ld, err
			}
			h.Record(time.Since(s))
		}
		secs := time.Since(t0).Seconds()
		if err := eng.settle(ctx); err != nil {
			eng.Close()
			return ld, err
		}
		after, err := e.sample(eng)
		if err != nil {
			eng.Close()
			return ld, err
		}
		ld.trials[mode] = trialOf(uint64(cfg.Records), secs, h, before, after)
		if l, ok := eng.(lsmEngine); ok {
			for _, lm := range l.Metrics().Levels {
				ld.Levels = append(ld.Levels, lm.Tables)
				ld.TableBytes += lm.Size
			}
		}
		if err := eng.Close(); err != nil {
			return ld, err
		}
	}
	ld.CacheRatio = float64(cfg.BlockCache) / float64(max(ld.TableBytes, 1))
	if err := e.fsys.SyncRemote(ctx); err != nil {
		return ld, err
	}
	ld.Secs = time.Since(start).Seconds()
	return ld, nil
}

// sample is the counters at one instant.
type sample struct {
	host       host.Stats
	hostCPU    time.Duration
	targetCPU  time.Duration
	hits, miss int64
	pd         lsm.PushdownStats
}

func (e *env) sample(d engine) (sample, error) {
	var s sample
	var err error
	if s.targetCPU, err = harness.ProcCPU(strconv.Itoa(e.pid)); err != nil {
		return s, err
	}
	if s.hostCPU, err = harness.ProcCPU("self"); err != nil {
		return s, err
	}
	s.host = e.ctrl.Stats()
	s.hits, s.miss = d.cache()
	s.pd = d.pushdown()
	return s, nil
}

// run opens the store in mode, warms it up, and measures workload wl with
// cfg.Threads goroutines for cfg.Duration.
func (e *env) run(ctx context.Context, wl, mode string, rate float64, seed uint64) (Trial, error) {
	cfg := e.cfg
	d, err := e.openEngine(mode, rate)
	if err != nil {
		return Trial{}, err
	}
	defer d.Close()
	ins := e.inserted[dbDir]
	if mode == ModePebble {
		ins = e.inserted[pebbleDir]
	}
	if _, err := e.ops(ctx, d, ins, wl, cfg.Duration/3, seed, nil); err != nil {
		return Trial{}, err
	}
	if err := d.settle(ctx); err != nil { // updates of the warm-up
		return Trial{}, err
	}
	if err := e.fsys.SyncRemote(ctx); err != nil {
		return Trial{}, err
	}
	before, err := e.sample(d)
	if err != nil {
		return Trial{}, err
	}
	h := hist.New()
	r, err := e.ops(ctx, d, ins, wl, cfg.Duration, seed+1<<32, h)
	if err != nil {
		return r, err
	}
	after, err := e.sample(d)
	if err != nil {
		return r, err
	}
	t := trialOf(r.Ops, r.Secs, h, before, after)
	t.CheckedReads = r.CheckedReads
	return t, nil
}

// trialOf is ops operations over secs, their latencies in h, and the
// counters' changes from before to after.
func trialOf(ops uint64, secs float64, h *hist.Histogram, before, after sample) Trial {
	r := Trial{Ops: ops, Secs: secs}
	r.P50Micros = report.Micros(h.Quantile(0.5))
	r.P99Micros = report.Micros(h.Quantile(0.99))
	r.P999Micros = report.Micros(h.Quantile(0.999))
	r.OpsPerSec = float64(r.Ops) / r.Secs
	r.Commands = after.host.Commands - before.host.Commands
	r.NetBytes = after.host.BytesRead + after.host.BytesWritten - before.host.BytesRead - before.host.BytesWritten
	r.HostCPU = (after.hostCPU - before.hostCPU).Seconds()
	r.TargetCPU = (after.targetCPU - before.targetCPU).Seconds()
	r.CacheHits = after.hits - before.hits
	r.CacheMisses = after.miss - before.miss
	r.Pushdown = diffPushdown(after.pd, before.pd)
	return r
}

func diffPushdown(a, b lsm.PushdownStats) lsm.PushdownStats {
	return lsm.PushdownStats{
		InMemory: a.InMemory - b.InMemory, Pushed: a.Pushed - b.Pushed, HostRuns: a.HostRuns - b.HostRuns,
		Sampled: a.Sampled - b.Sampled, Plain: a.Plain - b.Plain, BlockReads: a.BlockReads - b.BlockReads,
		TablesSearched: a.TablesSearched - b.TablesSearched, BlocksSearched: a.BlocksSearched - b.BlocksSearched,
	}
}

// ops runs workload wl on d with cfg.Threads goroutines for dur,
// recording latencies into h if set. Every value read is checked; a wrong
// one ends the run with an error.
func (e *env) ops(ctx context.Context, d engine, ins *inserts, wl string, dur time.Duration, seed uint64, h *hist.Histogram) (Trial, error) {
	cfg := e.cfg
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ops, checked atomic.Uint64
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		cancel()
	}
	hists := make([]*hist.Histogram, cfg.Threads)
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for t := range cfg.Threads {
		hists[t] = hist.New()
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(t)))
			v := make([]byte, cfg.ValueSize)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				i := rng.Uint64N(uint64(cfg.Records))
				if wl == "D" {
					i = ycsb.Latest{Z: e.latest, Count: &ins.count}.Next(rng)
				}
				var write bool
				switch wl {
				case "A":
					write = rng.IntN(2) == 0
				case "B", "D":
					write = rng.IntN(20) == 0
				case "F":
					if rng.IntN(2) == 0 { // read-modify-write: the read
						got, err := d.Get(Key(i))
						if err != nil {
							fail(fmt.Errorf("bench: get record %d: %w", i, err))
							return
						}
						if !checkValue(got, i, cfg.ValueSize) {
							fail(fmt.Errorf("bench: record %d: wrong value %x", i, got[:min(len(got), 16)]))
							return
						}
						checked.Add(1)
						write = true
					}
				}
				if write && wl == "D" {
					i = ins.insert()
					Value(v, i, 0)
					if err := d.Set(Key(i), v); err != nil {
						fail(err)
						return
					}
					ins.finish(i)
				} else if write {
					ver := e.versions[i].Add(1)
					Value(v, i, ver)
					if err := d.Set(Key(i), v); err != nil {
						fail(err)
						return
					}
				} else {
					got, err := d.Get(Key(i))
					if err != nil {
						fail(fmt.Errorf("bench: get record %d: %w", i, err))
						return
					}
					if !checkValue(got, i, cfg.ValueSize) {
						fail(fmt.Errorf("bench: record %d: wrong value %x", i, got[:min(len(got), 16)]))
						return
					}
					checked.Add(1)
				}
				t1 := time.Now()
				if t1.Before(deadline) {
					hists[t].Record(t1.Sub(t0))
					ops.Add(1)
				}
			}
		})
	}
	wg.Wait()
	r := Trial{Ops: ops.Load(), Secs: dur.Seconds(), CheckedReads: checked.Load()}
	if h != nil {
		for _, x := range hists {
			h.Merge(x)
		}
	}
	return r, firstErr
}

// Run loads the database and measures every workload, mode and sampling
// rate, interleaving modes run by run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cfg.progress("starting the target (simulated NAND) and making the file system")
	e, err := startEnv(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	ld, err := e.load(ctx)
	if err != nil {
		return nil, err
	}
	rep := &Report{Machine: report.DescribeMachine(), Volume: e.spec, Threads: cfg.Threads, Repeat: cfg.Repeat,
		RunSecs: cfg.Duration.Seconds(), Load: ld}
	type variant struct {
		mode string
		rate float64
	}
	seed := uint64(1)
	for _, wl := range cfg.Workloads {
		if wl == WorkloadLoad {
			for _, m := range cfg.Modes {
				if t, ok := ld.trials[m]; ok {
					p := Point{Workload: wl, Mode: m, Runs: []Trial{t}}
					summarize(&p)
					rep.Points = append(rep.Points, p)
				}
			}
			continue
		}
		var vs []variant
		for _, m := range cfg.Modes {
			if m == ModePushdown {
				for _, r := range cfg.SampleRates {
					vs = append(vs, variant{m, r})
				}
			} else {
				vs = append(vs, variant{m, 0})
			}
		}
		pts := make([]Point, len(vs))
		for i, v := range vs {
			pts[i] = Point{Workload: wl, Mode: v.mode, SampleRate: v.rate}
		}
		for r := range cfg.Repeat {
			for j := range vs {
				i := (j + r) % len(vs) // rotate which goes first
				v := vs[i]
				cfg.progress("YCSB %s, %s (sampling %g), run %d/%d", wl, v.mode, v.rate, r+1, cfg.Repeat)
				seed++
				run, err := e.run(ctx, wl, v.mode, v.rate, seed)
				if err != nil {
					return rep, err
				}
				pts[i].Runs = append(pts[i].Runs, run)
			}
		}
		for i := range pts {
			summarize(&pts[i])
		}
		rep.Points = append(rep.Points, pts...)
	}
	rep.Bars = bars(rep)
	return rep, nil
}

func summarize(p *Point) {
	med := func(f func(Trial) float64) float64 { return report.MedianOf(p.Runs, f) }
	p.OpsPerSec = med(func(r Trial) float64 { return r.OpsPerSec })
	p.P50Micros = med(func(r Trial) float64 { return r.P50Micros })
	p.P99Micros = med(func(r Trial) float64 { return r.P99Micros })
	p.P999Micros = med(func(r Trial) float64 { return r.P999Micros })
	per := func(x float64, r Trial) float64 { return x / float64(max(r.Ops, 1)) }
	p.RoundTrips = med(func(r Trial) float64 { return per(float64(r.Commands), r) })
	p.HostCPU = med(func(r Trial) float64 { return per(r.HostCPU*1e6, r) })
	p.TargetCPU = med(func(r Trial) float64 { return per(r.TargetCPU*1e6, r) })
	p.NetBytes = med(func(r Trial) float64 { return per(float64(r.NetBytes), r) })
	p.CacheHitRate = med(func(r Trial) float64 {
		return float64(r.CacheHits) / float64(max(r.CacheHits+r.CacheMisses, 1))
	})
}

// find returns the point of workload wl in mode (pushdown: at rate), or
// nil.
func (rep *Report) find(wl, mode string, rate float64) *Point {
	for i := range rep.Points {
		p := &rep.Points[i]
		if p.Workload == wl && p.Mode == mode && (mode != ModePushdown || p.SampleRate == rate) {
			return p
		}
	}
	return nil
}

// bars are the issue's: on YCSB C, pushdown (default sampling) at least
// 2× plain's throughput, with fewer round trips and less CPU per Get, and
// at least 1.5× Pebble's; every value read checked, none wrong.
func bars(rep *Report) []report.Bar {
	var out []report.Bar
	if pl, pd := rep.find("C", ModePlain, 0), rep.find("C", ModePushdown, lsm.DefaultCacheSampleRate); pl != nil && pd != nil {
		x := pd.OpsPerSec / pl.OpsPerSec
		out = append(out,
			report.Bar{What: "YCSB C uniform: pushdown / plain throughput", Want: ">= 2", Got: x, Met: x >= 2},
			report.Bar{What: "YCSB C: round trips per Get, pushdown / plain", Want: "< 1", Got: pd.RoundTrips / pl.RoundTrips, Met: pd.RoundTrips < pl.RoundTrips},
			report.Bar{What: "YCSB C: host+target CPU per Get, pushdown / plain", Want: "< 1",
				Got: (pd.HostCPU + pd.TargetCPU) / (pl.HostCPU + pl.TargetCPU), Met: pd.HostCPU+pd.TargetCPU < pl.HostCPU+pl.TargetCPU})
	}
	if pb, pd := rep.find("C", ModePebble, 0), rep.find("C", ModePushdown, lsm.DefaultCacheSampleRate); pb != nil && pd != nil {
		x := pd.OpsPerSec / pb.OpsPerSec
		out = append(out, report.Bar{What: "YCSB C uniform: pushdown / Pebble on the same offloadfs, throughput", Want: ">= 1.5", Got: x, Met: x >= 1.5})
	}
	var checked uint64
	for _, p := range rep.Points {
		for _, r := range p.Runs {
			checked += r.CheckedReads
		}
	}
	// A wrong value ends a run with an error, so a report exists only if
	// none was wrong.
	out = append(out, report.Bar{What: "values read and checked, none wrong", Want: "> 0", Got: float64(checked), Met: checked > 0})
	return out
}
