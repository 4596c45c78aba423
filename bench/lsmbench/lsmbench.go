// Package lsmbench is the LSM experiment (bench lsm): kv/lsm against
// Pebble v2 on the same local file system, with the same memtable size,
// block cache and client threads, loading YCSB records and running YCSB
// workloads, each engine in its own directory and the engines taking
// turns going first over repeated runs.
package lsmbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/bench/ycsb"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/vfs"
)

// Defaults of a Config.
const (
	DefaultRecords   = 200000
	DefaultOps       = 200000
	DefaultThreads   = 4
	DefaultValueSize = 1024
	DefaultMemTable  = 64 << 20
	DefaultCache     = 64 << 20
	DefaultRepeat    = 3
)

// Config configures Run. Zero fields take the defaults above.
type Config struct {
	// Dir holds both engines' stores, one directory per run (default: a
	// temporary directory). Unless Keep, each run's stores are removed
	// after it, and a temporary Dir at the end.
	Dir  string
	Keep bool
	// Records are loaded; Ops operations are run per workload.
	Records, Ops uint64
	// Threads is the client goroutines; ValueSize the value bytes.
	Threads, ValueSize int
	// MemTable and Cache are both engines' memtable size and block cache
	// bytes.
	MemTable, Cache int64
	// Distribution is the key choice of the workloads: "zipfian"
	// (default, θ 0.99, scrambled) or "uniform".
	Distribution string
	// PebbleCompression is Pebble's block compression: "none" (default,
	// as kv/lsm's tables) or "snappy" (Pebble's own default).
	PebbleCompression string
	// Repeat is the number of runs, medians reported.
	Repeat int
	// Workloads are run after the load, in order, on the loaded store
	// (default A and C): YCSB's A–F and db_bench's FillRandom,
	// ReadRandom and SeekScan. D and E insert records (Ops × 5% each),
	// FillRandom Records of them; the ones after see them.
	Workloads []ycsb.Workload
	// Logger receives the engines' logs (default: discarded).
	Logger *slog.Logger
	// Progress, if set, receives a line every 2 s of a load and one per
	// finished load.
	Progress io.Writer
}

// setDefault sets *v to d when it is zero or less: a setting left out.
func setDefault[T int | int64 | uint64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

func (c *Config) setDefaults() error {
	setDefault(&c.Records, DefaultRecords)
	setDefault(&c.Ops, DefaultOps)
	setDefault(&c.Threads, DefaultThreads)
	setDefault(&c.ValueSize, DefaultValueSize)
	setDefault(&c.MemTable, DefaultMemTable)
	setDefault(&c.Cache, DefaultCache)
	setDefault(&c.Repeat, DefaultRepeat)
	if c.Distribution == "" {
		c.Distribution = string(ycsb.DistZipfian)
	}
	switch ycsb.Distribution(c.Distribution) {
	case ycsb.DistZipfian, ycsb.DistUniform:
	default:
		return fmt.Errorf("distribution %q: want zipfian or uniform", c.Distribution)
	}
	if c.PebbleCompression == "" {
		c.PebbleCompression = "none"
	}
	if c.PebbleCompression != "none" && c.PebbleCompression != "snappy" {
		return fmt.Errorf("pebble compression %q: want none or snappy", c.PebbleCompression)
	}
	if len(c.Workloads) == 0 {
		c.Workloads = []ycsb.Workload{ycsb.A, ycsb.C}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// Phase is one workload's result on one engine.
type Phase struct {
	Engine    string  `json:"engine"`
	Workload  string  `json:"workload"`
	Ops       uint64  `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	// WriteAmp (Load and FillRandom): bytes this process passed to write
	// calls while writing and settling, over the key and value bytes
	// written.
	WriteAmp float64 `json:"write_amp,omitempty"`
	// SpaceAmp: the store's bytes on disk after the phase (after
	// settling, for Load) over the live records' key and value bytes.
	SpaceAmp float64 `json:"space_amp"`
	// Load only: LevelWriteAmp is the bytes written into each level (L0
	// by flushes) over the bytes loaded, Stalls the writes stalled or
	// slowed down and StallSeconds their time, SettleSeconds the time
	// the flush and the compaction debt took after the last write.
	LevelWriteAmp []float64 `json:"level_write_amp,omitempty"`
	Stalls        uint64    `json:"stalls,omitempty"`
	StallSeconds  float64   `json:"stall_seconds,omitempty"`
	SettleSeconds float64   `json:"settle_seconds,omitempty"`
	// ScanEntries (workloads with scans): the mean records a scan read.
	ScanEntries float64 `json:"scan_entries,omitempty"`
	// CPUus is this process's CPU time (all threads: clients, flushes,
	// compactions, GC) over the phase, per operation, in µs.
	CPUus   float64 `json:"cpu_us_per_op"`
	Seconds float64 `json:"seconds"`
	// With --offload: NetPerByteWritten is the bytes over the host's
	// NVMe/TCP connection (both ways, through settling for Load and
	// fillrandom) per key and value byte written; TargetCPUus the target
	// process's CPU time (its engine's included) per operation over the
	// same span; ReadsCompacting the
	// reads made while a compaction ran and ReadP99Compacting their
	// p99; Offloaded and OffloadLocal the store's compactions and
	// flushes run at the engine and those it ran itself after the engine
	// did not (totals so far).
	NetPerByteWritten float64 `json:"net_bytes_per_byte_written,omitempty"`
	TargetCPUus       float64 `json:"target_cpu_us_per_op,omitempty"`
	ReadsCompacting   uint64  `json:"reads_compacting,omitempty"`
	ReadP99Compacting float64 `json:"read_p99_us_compacting,omitempty"`
	Offloaded         uint64  `json:"offloaded_compactions,omitempty"`
	OffloadLocal      uint64  `json:"offload_local_compactions,omitempty"`
}

// Report is a run's result: the configuration, each run's phases, their
// medians and the bars.
type Report struct {
	Records   uint64 `json:"records"`
	Ops       uint64 `json:"ops"`
	Threads   int    `json:"threads"`
	ValueSize int    `json:"value_size"`
	Dist      string `json:"distribution"`
	// Phases are the medians over Runs of each figure, taken apart.
	Phases  []Phase        `json:"phases"`
	Runs    [][]Phase      `json:"runs"`
	Bars    []report.Bar   `json:"bars"`
	Machine report.Machine `json:"machine"`
}

// Bars of issue 19: kv/lsm's throughput at least MinThroughputRatio of
// Pebble's on Load, A and C, and its write amplification on Load at most
// MaxWriteAmpRatio of Pebble's.
const (
	MinThroughputRatio = 0.7
	MaxWriteAmpRatio   = 1.2
)

// medianPhases returns, per engine and workload in first-seen order
// (engines grouped, kv/lsm's first as first seen), the median of each
// figure over the runs.
func medianPhases(runs [][]Phase) []Phase {
	var keys []string
	groups := map[string][]Phase{}
	for _, run := range runs {
		for _, p := range run {
			k := p.Engine + "/" + p.Workload
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], p)
		}
	}
	slices.SortStableFunc(keys, func(a, b string) int { return strings.Compare(strings.Split(a, "/")[0], strings.Split(b, "/")[0]) })
	var out []Phase
	for _, k := range keys {
		ps := groups[k]
		out = append(out, Phase{
			Engine: ps[0].Engine, Workload: ps[0].Workload, Ops: ps[0].Ops,
			OpsPerSec:     report.MedianOf(ps, func(p Phase) float64 { return p.OpsPerSec }),
			P50us:         report.MedianOf(ps, func(p Phase) float64 { return p.P50us }),
			P99us:         report.MedianOf(ps, func(p Phase) float64 { return p.P99us }),
			P999us:        report.MedianOf(ps, func(p Phase) float64 { return p.P999us }),
			WriteAmp:      report.MedianOf(ps, func(p Phase) float64 { return p.WriteAmp }),
			SpaceAmp:      report.MedianOf(ps, func(p Phase) float64 { return p.SpaceAmp }),
			CPUus:         report.MedianOf(ps, func(p Phase) float64 { return p.CPUus }),
			Stalls:        uint64(report.MedianOf(ps, func(p Phase) float64 { return float64(p.Stalls) })),
			StallSeconds:  report.MedianOf(ps, func(p Phase) float64 { return p.StallSeconds }),
			SettleSeconds: report.MedianOf(ps, func(p Phase) float64 { return p.SettleSeconds }),
			ScanEntries:   report.MedianOf(ps, func(p Phase) float64 { return p.ScanEntries }),
			LevelWriteAmp: medianLevels(ps),
			Seconds:       report.MedianOf(ps, func(p Phase) float64 { return p.Seconds }),

			NetPerByteWritten: report.MedianOf(ps, func(p Phase) float64 { return p.NetPerByteWritten }),
			TargetCPUus:       report.MedianOf(ps, func(p Phase) float64 { return p.TargetCPUus }),
			ReadsCompacting:   uint64(report.MedianOf(ps, func(p Phase) float64 { return float64(p.ReadsCompacting) })),
			ReadP99Compacting: report.MedianOf(ps, func(p Phase) float64 { return p.ReadP99Compacting }),
			Offloaded:         uint64(report.MedianOf(ps, func(p Phase) float64 { return float64(p.Offloaded) })),
			OffloadLocal:      uint64(report.MedianOf(ps, func(p Phase) float64 { return float64(p.OffloadLocal) })),
		})
	}
	return out
}

// medianLevels is the median of each level's write amplification.
func medianLevels(ps []Phase) []float64 {
	if len(ps[0].LevelWriteAmp) == 0 {
		return nil
	}
	out := make([]float64, len(ps[0].LevelWriteAmp))
	for l := range out {
		out[l] = report.MedianOf(ps, func(p Phase) float64 {
			if l < len(p.LevelWriteAmp) {
				return p.LevelWriteAmp[l]
			}
			return 0
		})
	}
	return out
}

// procWchar is the bytes this process has passed to write system calls.
func procWchar() (uint64, error) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no wchar in /proc/self/io")
}

// runPhase runs ops operations over threads goroutines; op(i, rng) does
// operation i. If progress is set it is called with the operations
// started every 2 seconds.
func runPhase(ctx context.Context, threads int, ops uint64, op func(i uint64, r *rand.Rand) error, progress func(done uint64)) (*hist.Histogram, time.Duration, error) {
	return harness.RunOps(ctx, harness.Ops{Threads: threads, N: ops, Op: op, Seed: 42, Progress: progress})
}

func phaseOf(engine, wl string, ops uint64, h *hist.Histogram, el, cpu time.Duration) Phase {
	return Phase{
		Engine: engine, Workload: wl, Ops: ops, Seconds: el.Seconds(),
		OpsPerSec: float64(ops) / el.Seconds(),
		P50us:     report.Micros(h.Quantile(0.5)),
		P99us:     report.Micros(h.Quantile(0.99)),
		P999us:    report.Micros(h.Quantile(0.999)),
		CPUus:     report.Micros(cpu) / float64(ops),
	}
}

// processCPU is this process's CPU time so far.
func processCPU() (time.Duration, error) {
	c, ok := harness.ProcessCPU()
	if !ok {
		return 0, errors.New("no process CPU time on this system")
	}
	return c, nil
}

// usage is this process's write-call bytes (procWchar) and CPU time
// (processCPU) so far, read around each phase.
func usage() (wchar uint64, cpu time.Duration, err error) {
	if wchar, err = procWchar(); err != nil {
		return 0, 0, err
	}
	cpu, err = processCPU()
	return wchar, cpu, err
}

// dirBytes is the bytes of the files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by a compaction as we walked
			}
			return err
		}
		if e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err
}

// randomValue returns n random bytes.
func randomValue(r *rand.Rand, n int) []byte {
	v := make([]byte, n)
	for i := 0; i+8 <= len(v); i += 8 {
		binary.LittleEndian.PutUint64(v[i:], r.Uint64())
	}
	return v
}

// Run runs the benchmark: Repeat runs, each loading fresh stores of both
// engines in turn (the engines alternating which goes first) and running
// the workloads on each, and reports the medians and the bars.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	base, removeBase, err := harness.WorkDir(cfg.Dir, "nearstore-bench-lsm-")
	if err != nil {
		return nil, err
	}
	if !cfg.Keep {
		defer removeBase()
	}
	zipf := ycsb.NewZipfian(cfg.Records, ycsb.Theta)
	rep := &Report{Records: cfg.Records, Ops: cfg.Ops, Threads: cfg.Threads, ValueSize: cfg.ValueSize,
		Dist: cfg.Distribution, Machine: report.DescribeMachine()}
	var runDir string
	opens := []func() (engine, error){
		func() (engine, error) {
			p := filepath.Join(runDir, "kvlsm")
			d, err := lsm.Open(vfs.OS(""), p, lsm.Options{
				MemTableSize: int(cfg.MemTable), BlockCacheSize: cfg.Cache, Logger: cfg.Logger,
			})
			return ourEngine{d: d, path: p}, err
		},
		func() (engine, error) {
			p := filepath.Join(runDir, "pebble")
			return openPebble(&cfg, p, nil)
		},
	}
	for run := 0; run < cfg.Repeat; run++ {
		runDir = filepath.Join(base, fmt.Sprintf("run%d", run))
		order := opens
		if run%2 == 1 {
			// Alternate which engine goes first.
			order = []func() (engine, error){opens[1], opens[0]}
		}
		var phases []Phase
		for _, open := range order {
			e, err := open()
			if err != nil {
				return nil, err
			}
			ps, err := runAndClose(ctx, &cfg, e, zipf)
			if err != nil {
				return nil, err
			}
			phases = append(phases, ps...)
		}
		rep.Runs = append(rep.Runs, phases)
		if !cfg.Keep {
			os.RemoveAll(runDir)
		}
	}
	rep.Phases = medianPhases(rep.Runs)
	rep.Bars = bars(rep.Phases)
	return rep, nil
}

// runAndClose runs the load and workloads on e and closes it. A CPU
// profile's samples carry the label engine=NAME: the label follows the
// engine's goroutines (flushes and compactions start from its calls).
func runAndClose(ctx context.Context, cfg *Config, e engine, zipf *ycsb.Zipfian) (ps []Phase, err error) {
	pprof.Do(ctx, pprof.Labels("engine", e.name()), func(ctx context.Context) {
		ps, err = runEngine(ctx, cfg, e, zipf)
	})
	if cerr := e.close(); err == nil && cerr != nil {
		err = fmt.Errorf("%s close: %w", e.name(), cerr)
	}
	return ps, err
}

// openPebble opens Pebble in dir with cfg's memtable, cache and
// compression and a listener counting its write stalls; tweak, if set,
// changes the options last (its file system).
func openPebble(cfg *Config, dir string, tweak func(*pebble.Options)) (pebbleEngine, error) {
	c := pebble.NewCache(cfg.Cache)
	var stalls, stallNanos atomic.Uint64
	var stallStart atomic.Int64
	po := &pebble.Options{Cache: c, MemTableSize: uint64(cfg.MemTable), Logger: pebbleLog{cfg.Logger},
		EventListener: &pebble.EventListener{
			WriteStallBegin: func(pebble.WriteStallBeginInfo) {
				stalls.Add(1)
				stallStart.Store(time.Now().UnixNano())
			},
			WriteStallEnd: func() {
				if s := stallStart.Swap(0); s != 0 {
					stallNanos.Add(uint64(time.Now().UnixNano() - s))
				}
			},
		}}
	if cfg.PebbleCompression == "none" {
		for i := range po.Levels {
			po.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
		}
	}
	if tweak != nil {
		tweak(po)
	}
	d, err := pebble.Open(dir, po)
	if err != nil {
		c.Unref()
		return pebbleEngine{}, err
	}
	return pebbleEngine{d: d, cache: c, path: dir, stalls: &stalls, stallNanos: &stallNanos}, nil
}

// meter is an engine that measures more than runEngine does: begin is
// called as each phase starts and end as it ends, to add its figures to
// the phase; diskBytes is the store's size, for engines whose directory
// is not on the local file system.
type meter interface {
	begin()
	end(p *Phase)
	diskBytes() (int64, error)
}

// runEngine loads e and runs the workloads on it.
func runEngine(ctx context.Context, cfg *Config, e engine, zipf *ycsb.Zipfian) ([]Phase, error) {
	var phases []Phase
	recordBytes := float64(ycsb.KeyLen + cfg.ValueSize)
	ins := newInserter(cfg.Records)
	count := &ins.acked
	m, _ := e.(meter)
	spaceAmp := func() (float64, error) {
		size := func() (int64, error) { return dirBytes(e.dir()) }
		if m != nil {
			size = m.diskBytes
		}
		n, err := size()
		return float64(n) / (float64(count.Load()) * recordBytes), err
	}
	begin, end := func() {}, func(*Phase) {}
	if m != nil {
		begin, end = m.begin, m.end
	}
	w0, c0, err := usage()
	if err != nil {
		return nil, err
	}
	begin()
	h, el, err := runPhase(ctx, cfg.Threads, cfg.Records, func(i uint64, r *rand.Rand) error {
		return e.set(ycsb.Key(i), randomValue(r, cfg.ValueSize))
	}, func(done uint64) {
		cfg.progress("%s: loading, %d of %d records (%.0f%%)", e.name(), done, cfg.Records, 100*float64(done)/float64(cfg.Records))
	})
	settleStart := time.Now()
	if err == nil {
		err = e.settle(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("%s load: %w", e.name(), err)
	}
	w1, c1, err := usage()
	if err != nil {
		return nil, err
	}
	p := phaseOf(e.name(), "load", cfg.Records, h, el, c1-c0)
	loaded := float64(cfg.Records) * recordBytes
	p.WriteAmp = float64(w1-w0) / loaded
	p.SettleSeconds = time.Since(settleStart).Seconds()
	wd := e.writeDetail()
	for _, b := range wd.levelBytes {
		p.LevelWriteAmp = append(p.LevelWriteAmp, float64(b)/loaded)
	}
	p.Stalls, p.StallSeconds = wd.stalls, wd.stallTime.Seconds()
	end(&p)
	if p.SpaceAmp, err = spaceAmp(); err != nil {
		return nil, err
	}
	phases = append(phases, p)
	cfg.progress("%s: load %d records in %s, settled in %s", e.name(), cfg.Records, el.Round(time.Millisecond), time.Since(settleStart).Round(time.Millisecond))
	for _, wl := range cfg.Workloads {
		var chooser ycsb.Chooser
		switch {
		case wl.Dist == ycsb.DistLatest:
			chooser = ycsb.Latest{Z: zipf, Count: count}
		case wl.Dist == ycsb.DistUniform, ycsb.Distribution(cfg.Distribution) == ycsb.DistUniform:
			chooser = uniformOver{count}
		default:
			chooser = ycsb.Scrambled{Z: zipf}
		}
		var missing, scans, scanned atomic.Uint64
		ops := cfg.Ops
		fill := wl.Name == FillRandom.Name
		if fill {
			ops = cfg.Records
		}
		w0, c0, err := usage()
		if err != nil {
			return nil, err
		}
		begin()
		h, el, err := runPhase(ctx, cfg.Threads, ops, func(i uint64, r *rand.Rand) error {
			op := wl.Choose(r)
			if op == ycsb.Insert {
				i := ins.next.Add(1) - 1
				if err := e.set(ycsb.Key(i), randomValue(r, cfg.ValueSize)); err != nil {
					return err
				}
				ins.done(i)
				return nil
			}
			k := ycsb.Key(chooser.Next(r))
			switch op {
			case ycsb.Update:
				return e.set(k, randomValue(r, cfg.ValueSize))
			case ycsb.Scan:
				n, err := e.scan(k, wl.ScanLen(r))
				if n == 0 && err == nil {
					missing.Add(1)
				}
				scans.Add(1)
				scanned.Add(uint64(n))
				return err
			}
			ok, err := e.get(k)
			if err != nil {
				return err
			}
			if !ok {
				missing.Add(1)
				return nil
			}
			if op == ycsb.ReadModifyWrite {
				return e.set(k, randomValue(r, cfg.ValueSize))
			}
			return nil
		}, nil)
		settleStart := time.Now()
		if err == nil && fill {
			err = e.settle(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", e.name(), wl.Name, err)
		}
		w1, c1, err := usage()
		if err != nil {
			return nil, err
		}
		if missing.Load() > 0 {
			return nil, fmt.Errorf("%s %s: %d reads missed loaded keys", e.name(), wl.Name, missing.Load())
		}
		p := phaseOf(e.name(), wl.Name, ops, h, el, c1-c0)
		if fill {
			p.WriteAmp = float64(w1-w0) / (float64(ops) * recordBytes)
			p.SettleSeconds = time.Since(settleStart).Seconds()
		}
		if n := scans.Load(); n > 0 {
			p.ScanEntries = float64(scanned.Load()) / float64(n)
		}
		end(&p)
		if p.SpaceAmp, err = spaceAmp(); err != nil {
			return nil, err
		}
		phases = append(phases, p)
	}
	return phases, nil
}

// db_bench's workloads, as mixes the YCSB machinery runs: fillrandom
// inserts Records new records (their keys hashed, so in random key
// order), then settles like Load; readrandom reads existing records
// chosen uniformly, every one of which must be found; scan seeks to an
// existing record chosen uniformly and reads 100 records from it. They
// run on the loaded store like A–F, so readrandom and scan after
// fillrandom see its records too.
var (
	FillRandom = ycsb.Workload{Name: "fillrandom", Insert: 1, Dist: ycsb.DistUniform}
	ReadRandom = ycsb.Workload{Name: "readrandom", Read: 1, Dist: ycsb.DistUniform}
	SeekScan   = ycsb.Workload{Name: "scan", Scan: 1, Dist: ycsb.DistUniform, MinScanLen: 100, MaxScanLen: 100}
)

// ParseWorkloads returns the workloads of a comma-separated list of YCSB
// letters (A–F, or all for A–F) and db_bench names (fillrandom,
// readrandom, scan), case-insensitive, in the order given, each once.
func ParseWorkloads(list string) ([]ycsb.Workload, error) {
	dbBench := []ycsb.Workload{FillRandom, ReadRandom, SeekScan}
	var out []ycsb.Workload
	for _, f := range strings.Split(list, ",") {
		name := strings.ToLower(strings.TrimSpace(f))
		var add []ycsb.Workload
		if i := slices.IndexFunc(dbBench, func(w ycsb.Workload) bool { return w.Name == name }); i >= 0 {
			add = dbBench[i : i+1]
		} else {
			var err error
			if add, err = ycsb.Parse(f); err != nil {
				return nil, fmt.Errorf("%w, or fillrandom, readrandom, scan", err)
			}
		}
		for _, w := range add {
			if slices.ContainsFunc(out, func(o ycsb.Workload) bool { return o.Name == w.Name }) {
				return nil, fmt.Errorf("workload %s given twice", w.Name)
			}
			out = append(out, w)
		}
	}
	return out, nil
}

// inserter numbers inserted records and tracks which exist: YCSB's
// acknowledged counter. Records [0, acked) are all inserted, so a chooser
// bounded by acked never picks one still being written.
type inserter struct {
	next, acked atomic.Uint64
	mu          sync.Mutex
	finished    map[uint64]bool // inserted, above acked
}

func newInserter(records uint64) *inserter {
	in := &inserter{finished: map[uint64]bool{}}
	in.next.Store(records)
	in.acked.Store(records)
	return in
}

// done records that record i is inserted.
func (in *inserter) done(i uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.finished[i] = true
	a := in.acked.Load()
	for in.finished[a] {
		delete(in.finished, a)
		a++
	}
	in.acked.Store(a)
}

// uniformOver chooses evenly among the records inserted so far.
type uniformOver struct{ count *atomic.Uint64 }

func (u uniformOver) Next(r *rand.Rand) uint64 { return r.Uint64N(u.count.Load()) }

// bars states the bars from the medians.
func bars(phases []Phase) []report.Bar {
	byKey := map[string]Phase{}
	for _, p := range phases {
		byKey[p.Engine+"/"+p.Workload] = p
	}
	var out []report.Bar
	for _, wl := range []string{"load", "A", "C"} {
		ours, theirs := byKey["kv/lsm/"+wl], byKey["pebble/"+wl]
		if theirs.OpsPerSec <= 0 {
			continue
		}
		got := ours.OpsPerSec / theirs.OpsPerSec
		out = append(out, report.Bar{What: "kv/lsm throughput ÷ pebble's, " + wl, Want: fmt.Sprintf("≥ %.2f", MinThroughputRatio),
			Got: got, Met: got >= MinThroughputRatio})
	}
	if theirs := byKey["pebble/load"].WriteAmp; theirs > 0 {
		wa := byKey["kv/lsm/load"].WriteAmp / theirs
		out = append(out, report.Bar{What: "kv/lsm write amp ÷ pebble's, load", Want: fmt.Sprintf("≤ %.2f", MaxWriteAmpRatio),
			Got: wa, Met: wa <= MaxWriteAmpRatio})
	}
	return out
}
