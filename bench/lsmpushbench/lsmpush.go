// Package lsmpushbench measures kv/lsm's Gets over NVMe/TCP, plain and
// pushed down (BPF-oF's query splitting with one lsm_get request per Get),
// on an offloadfs served by a target in its own process from a simulated
// NAND SSD: YCSB A, B, C and F with uniform or zipfian keys, D with the
// latest records, lsm_get in wasm or eBPF at the target, a sweep of the
// Gets in flight and a sweep of the cache sampling rate.
package lsmpushbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/bench/ycsb"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
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
	// keys as Dists say; "D" (95% reads of the latest records, zipfian in
	// their age, 5% inserts); "Load" (case-insensitive) reports the load
	// itself, measured once per store (plain, and pebble if among Modes;
	// pushdown shares plain's store), one writer: ops/s and latencies
	// of the Sets, commands, CPU and network bytes through the settling.
	Workloads []string
	// SampleRates is the cache-sampling sweep of pushdown mode on each
	// workload (default {lsm.DefaultCacheSampleRate}); a rate of 0 means
	// none.
	SampleRates []float64
	// Dists are the key distributions of workloads A, B, C and F:
	// DistUniform (default) and DistZipfian (YCSB's scrambled zipfian,
	// theta 0.99). D always reads the latest records.
	Dists []string
	// Runtimes are the runtimes lsm_get runs in at the target for
	// pushdown mode, each measured as its own variant (default wasm).
	Runtimes []sandbox.Kind
	// Threads is the Gets in flight (default 32); Concurrency, if set,
	// measures every variant at each of these instead, to find where
	// each saturates.
	Threads     int
	Concurrency []int
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
	// TargetCPUProfile, when set, has the target write a CPU profile of
	// its whole run (load and timed runs) to this file (`target serve
	// --cpuprofile`).
	TargetCPUProfile string
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
	harness.Default(&c.Threads, 32)
	if len(c.Concurrency) == 0 {
		c.Concurrency = []int{c.Threads}
	}
	for _, n := range c.Concurrency {
		if n <= 0 {
			return fmt.Errorf("bench: concurrency %d: want at least 1", n)
		}
	}
	if len(c.Dists) == 0 {
		c.Dists = []string{DistUniform}
	}
	for _, d := range c.Dists {
		if d != DistUniform && d != DistZipfian {
			return fmt.Errorf("bench: key distribution %q: want %s or %s", d, DistUniform, DistZipfian)
		}
	}
	if len(c.Runtimes) == 0 {
		c.Runtimes = []sandbox.Kind{sandbox.KindWasm}
	}
	for _, k := range c.Runtimes {
		if k != sandbox.KindWasm && k != sandbox.KindEBPF {
			return fmt.Errorf("bench: runtime %v: want wasm or ebpf", k)
		}
	}
	harness.Default(&c.Duration, 3*time.Second)
	harness.Default(&c.Repeat, 3)
	harness.Default(&c.BlockCache, 4<<20)
	if c.TargetExe == "" {
		return errors.New("bench: no target executable")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func (c *Config) progress(format string, args ...any) {
	harness.Stage(c.Progress, format, args...)
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

// getChecked reads record i from d and checks that its value is a
// version of the record's (checkValue).
func getChecked(d engine, i uint64, size int) error {
	got, err := d.Get(Key(i))
	if err != nil {
		return fmt.Errorf("bench: get record %d: %w", i, err)
	}
	if !checkValue(got, i, size) {
		return fmt.Errorf("bench: record %d: wrong value %x", i, got[:min(len(got), 16)])
	}
	return nil
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
	// TableBytes is the tables' size; PinnedBytes the index, filter and
	// range-deletion bytes kv/lsm holds in memory for them (outside the
	// block cache, so they always fit); BlockCache the data-block cache,
	// and CacheRatio BlockCache over TableBytes less PinnedBytes: the
	// share of data blocks that can be cached.
	TableBytes  uint64  `json:"table_bytes"`
	PinnedBytes uint64  `json:"pinned_bytes"`
	BlockCache  int64   `json:"block_cache"`
	CacheRatio  float64 `json:"cache_ratio"`
	// trials are each store's load, by mode; reported as points of
	// workload Load when asked for.
	trials map[string]Trial
}

// WorkloadLoad names the load as a workload of Config.Workloads.
const WorkloadLoad = "Load"

// Key distributions (Config.Dists); D's is DistLatest.
const (
	DistUniform = "uniform"
	DistZipfian = "zipfian"
	DistLatest  = "latest"
)

// Point is one variant on one workload: its runs and their medians.
type Point struct {
	Workload string `json:"workload"`
	variant
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

// variant is what a point measures: the key distribution, the mode, for
// pushdown the runtime and sampling rate, and the Gets in flight.
type variant struct {
	Dist       string  `json:"dist"`
	Mode       string  `json:"mode"`
	Runtime    string  `json:"runtime,omitempty"`
	SampleRate float64 `json:"sample_rate"`
	Threads    int     `json:"threads"`
}

// env is the target process, the host connected to it and the file system.
type env struct {
	cfg     *Config
	spec    string
	ctrl    *host.Controller
	fsys    *offloadfs.FS
	pid     int
	closers harness.Closers
	// versions are the loaded records' current value versions (workload
	// B); inserted are the records workload D inserted, per store
	// directory.
	versions []atomic.Uint32
	inserted map[string]*inserts
	latest   *ycsb.Zipfian
	zipf     *ycsb.Zipfian
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
	return e.closers.Close()
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
	var args []string
	if cfg.TargetCPUProfile != "" {
		args = []string{"--cpuprofile", cfg.TargetCPUProfile}
	}
	t, err := harness.StartFSTarget(ctx, harness.TargetSpec{
		Exe: cfg.TargetExe, NQN: nqn, Volume: e.spec, Args: args, CPUs: cfg.ServerCPUs, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, t.Close)
	e.pid, e.ctrl = t.Proc.Pid(), t.Ctrl
	ns := t.NS
	// Host runtimes for requests the target cannot run, of both kinds.
	wrt, err := wasm.NewRuntime(ctx, wasm.Options{})
	if err != nil {
		return nil, err
	}
	brt := ebpf.NewRuntime(ebpf.Options{Logger: cfg.Logger})
	e.closers = append(e.closers, func() error {
		return errors.Join(wrt.Close(context.Background()), brt.Close(context.Background()))
	})
	e.fsys, err = offloadfs.Mount(ctx, ns, offloadfs.Options{
		CommitInterval: -1, Logger: cfg.Logger, Remote: ns, Loader: e.ctrl, Runtimes: []sandbox.Runtime{wrt, brt},
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
	if slices.Contains(cfg.Dists, DistZipfian) {
		e.zipf = ycsb.NewZipfian(uint64(cfg.Records), ycsb.Theta)
	}
	return e, nil
}

// Both engines' memtable and base level size: small, so that 200,000
// records make five levels (L2 to L6): the tree's size puts the base level
// at L2, and a flush fits in it.
const (
	memTableSize  = 512 << 10
	lbaseMaxBytes = 512 << 10
)

// options are the store's: small levels, so that a benchmark-sized
// database has at least five (200,000 records: L2 to L6).
func (e *env) options(v variant) lsm.Options {
	o := lsm.Options{
		MemTableSize:    memTableSize,
		LBaseMaxBytes:   lbaseMaxBytes,
		LevelMultiplier: 4,
		TargetFileSize:  1 << 20,
		BlockCacheSize:  e.cfg.BlockCache,
		Logger:          slog.New(slog.DiscardHandler),
	}
	if v.Mode == ModePushdown {
		o.Pusher = e.fsys
		o.PushdownRuntime = sandbox.KindWasm
		if v.Runtime == sandbox.KindEBPF.String() {
			o.PushdownRuntime = sandbox.KindEBPF
		}
		o.CacheSampleRate = v.SampleRate
		if v.SampleRate == 0 {
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
		eng, err := e.openEngine(variant{Mode: mode})
		if err != nil {
			return ld, err
		}
		if err := e.loadInto(ctx, eng, mode, &ld, v); err != nil {
			eng.Close()
			return ld, err
		}
		if err := eng.Close(); err != nil {
			return ld, err
		}
	}
	ld.CacheRatio = float64(cfg.BlockCache) / float64(max(ld.TableBytes-min(ld.PinnedBytes, ld.TableBytes), 1))
	if err := e.fsys.SyncRemote(ctx); err != nil {
		return ld, err
	}
	ld.Secs = time.Since(start).Seconds()
	return ld, nil
}

// loadInto writes the records into eng, the store of mode, with v as the
// value buffer, waits for it to settle and adds what it measured to ld.
func (e *env) loadInto(ctx context.Context, eng engine, mode string, ld *Load, v []byte) error {
	cfg := e.cfg
	before, err := e.sample(eng)
	if err != nil {
		return err
	}
	h := hist.New()
	t0 := time.Now()
	for i := range uint64(cfg.Records) {
		Value(v, i, 0)
		s := time.Now()
		if err := eng.Set(Key(i), v); err != nil {
			return err
		}
		h.Record(time.Since(s))
	}
	secs := time.Since(t0).Seconds()
	if err := eng.settle(ctx); err != nil {
		return err
	}
	after, err := e.sample(eng)
	if err != nil {
		return err
	}
	ld.trials[mode] = trialOf(uint64(cfg.Records), secs, h, before, after)
	if l, ok := eng.(lsmEngine); ok {
		for _, lm := range l.Metrics().Levels {
			ld.Levels = append(ld.Levels, lm.Tables)
			ld.TableBytes += lm.Size
		}
		if ld.PinnedBytes, err = l.PinnedBytes(); err != nil {
			return err
		}
	}
	return nil
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

// run opens the store as v says, warms it up, and measures workload wl
// with v.Threads goroutines for cfg.Duration.
func (e *env) run(ctx context.Context, wl string, v variant, seed uint64) (Trial, error) {
	cfg := e.cfg
	d, err := e.openEngine(v)
	if err != nil {
		return Trial{}, err
	}
	defer d.Close()
	ins := e.inserted[dbDir]
	if v.Mode == ModePebble {
		ins = e.inserted[pebbleDir]
	}
	if _, err := e.ops(ctx, d, ins, wl, v, cfg.Duration/3, seed, nil); err != nil {
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
	r, err := e.ops(ctx, d, ins, wl, v, cfg.Duration, seed+1<<32, h)
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

// ops runs workload wl on d with v.Threads goroutines for dur, keys
// drawn from v.Dist, recording latencies into h if set. Every value read
// is checked; a wrong one ends the run with an error.
func (e *env) ops(ctx context.Context, d engine, ins *inserts, wl string, v variant, dur time.Duration, seed uint64, h *hist.Histogram) (Trial, error) {
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
	var keys ycsb.Chooser = ycsb.Uniform{N: uint64(cfg.Records)}
	switch {
	case wl == "D":
		keys = ycsb.Latest{Z: e.latest, Count: &ins.count}
	case v.Dist == DistZipfian:
		keys = ycsb.Scrambled{Z: e.zipf}
	}
	hists := hist.NewSet(v.Threads)
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for t := range v.Threads {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(t)))
			v := make([]byte, cfg.ValueSize)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				i := keys.Next(rng)
				var write bool
				switch wl {
				case "A":
					write = rng.IntN(2) == 0
				case "B", "D":
					write = rng.IntN(20) == 0
				case "F":
					if rng.IntN(2) == 0 { // read-modify-write: the read
						if err := getChecked(d, i, cfg.ValueSize); err != nil {
							fail(err)
							return
						}
						checked.Add(1)
						write = true
					}
				}
				if write {
					// D inserts a new record; the others write a new
					// version of record i.
					var ver uint32
					if wl == "D" {
						i = ins.insert()
					} else {
						ver = e.versions[i].Add(1)
					}
					Value(v, i, ver)
					if err := d.Set(Key(i), v); err != nil {
						fail(err)
						return
					}
					if wl == "D" {
						ins.finish(i)
					}
				} else {
					if err := getChecked(d, i, cfg.ValueSize); err != nil {
						fail(err)
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
	seed := uint64(1)
	for _, wl := range cfg.Workloads {
		if wl == WorkloadLoad {
			for _, m := range cfg.Modes {
				if t, ok := ld.trials[m]; ok {
					p := Point{Workload: wl, variant: variant{Mode: m, Threads: 1}, Runs: []Trial{t}}
					summarize(&p)
					rep.Points = append(rep.Points, p)
				}
			}
			continue
		}
		dists := cfg.Dists
		if wl == "D" {
			dists = []string{DistLatest}
		}
		for _, dist := range dists {
			pts, err := e.measure(ctx, wl, cfg.variants(dist), &seed)
			rep.Points = append(rep.Points, pts...)
			if err != nil {
				return rep, err
			}
		}
	}
	rep.Bars = bars(rep)
	return rep, nil
}

// variants are the variants measured on each workload with distribution
// dist: every mode (pushdown in every runtime at every sampling rate) at
// every concurrency.
func (c *Config) variants(dist string) []variant {
	var vs []variant
	for _, n := range c.Concurrency {
		for _, m := range c.Modes {
			if m != ModePushdown {
				vs = append(vs, variant{Dist: dist, Mode: m, Threads: n})
				continue
			}
			for _, k := range c.Runtimes {
				for _, r := range c.SampleRates {
					vs = append(vs, variant{Dist: dist, Mode: m, Runtime: k.String(), SampleRate: r, Threads: n})
				}
			}
		}
	}
	return vs
}

// measure runs workload wl in every variant cfg.Repeat times, the
// variants interleaved run by run (which goes first rotates), and returns
// a point per variant.
func (e *env) measure(ctx context.Context, wl string, vs []variant, seed *uint64) ([]Point, error) {
	cfg := e.cfg
	pts := make([]Point, len(vs))
	for i, v := range vs {
		pts[i] = Point{Workload: wl, variant: v}
	}
	for r := range cfg.Repeat {
		for j := range vs {
			i := (j + r) % len(vs)
			v := vs[i]
			cfg.progress("YCSB %s %s, %s, %d threads, run %d/%d", wl, v.Dist, pts[i].label(), v.Threads, r+1, cfg.Repeat)
			*seed++
			run, err := e.run(ctx, wl, v, *seed)
			if err != nil {
				return nil, err
			}
			pts[i].Runs = append(pts[i].Runs, run)
		}
	}
	for i := range pts {
		summarize(&pts[i])
	}
	return pts, nil
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

// best returns the point of YCSB C uniform in mode (pushdown: in runtime
// rt at the default sampling rate) with the highest throughput over the
// concurrencies measured, its throughput at saturation; or nil.
func (rep *Report) best(mode, rt string) *Point {
	var b *Point
	for i := range rep.Points {
		p := &rep.Points[i]
		if p.Workload != "C" || p.Dist != DistUniform || p.Mode != mode {
			continue
		}
		if mode == ModePushdown && (p.Runtime != rt || p.SampleRate != lsm.DefaultCacheSampleRate) {
			continue
		}
		if b == nil || p.OpsPerSec > b.OpsPerSec {
			b = p
		}
	}
	return b
}

// bars are the issue's, for each runtime measured: on YCSB C uniform at
// saturation (each mode at its best concurrency), pushdown (default
// sampling) at least 2× plain's throughput, with fewer round trips and
// less CPU per Get, and at least 1.5× Pebble's; every value read checked,
// none wrong.
func bars(rep *Report) []report.Bar {
	var out []report.Bar
	var rts []string
	for _, p := range rep.Points {
		if p.Mode == ModePushdown && !slices.Contains(rts, p.Runtime) {
			rts = append(rts, p.Runtime)
		}
	}
	pl, pb := rep.best(ModePlain, ""), rep.best(ModePebble, "")
	for _, rt := range rts {
		pd := rep.best(ModePushdown, rt)
		if pd == nil {
			continue
		}
		if pl != nil {
			x := pd.OpsPerSec / pl.OpsPerSec
			out = append(out,
				report.Bar{What: "YCSB C uniform, saturated: pushdown (" + rt + ") / plain throughput", Want: ">= 2", Got: x, Met: x >= 2},
				report.Bar{What: "YCSB C: round trips per Get, pushdown (" + rt + ") / plain", Want: "< 1", Got: pd.RoundTrips / pl.RoundTrips, Met: pd.RoundTrips < pl.RoundTrips},
				report.Bar{What: "YCSB C: host+target CPU per Get, pushdown (" + rt + ") / plain", Want: "< 1",
					Got: (pd.HostCPU + pd.TargetCPU) / (pl.HostCPU + pl.TargetCPU), Met: pd.HostCPU+pd.TargetCPU < pl.HostCPU+pl.TargetCPU})
		}
		if pb != nil {
			x := pd.OpsPerSec / pb.OpsPerSec
			out = append(out, report.Bar{What: "YCSB C uniform, saturated: pushdown (" + rt + ") / Pebble on the same offloadfs, throughput", Want: ">= 1.5", Got: x, Met: x >= 1.5})
		}
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
