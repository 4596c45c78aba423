package lsmbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/lsmpushbench"
	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/bench/ycsb"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
)

// The OffloadDB experiment (bench lsm --offload): kv/lsm on an offloadfs
// that a target process serves from simulated NAND over NVMe/TCP, with
// the target's in-process offload engine, under each offload mode, and
// Pebble on the same kind of file system; each store in a fresh target,
// the modes taking turns going first run by run.
const (
	// OffloadNone: flushes and compactions on the host.
	OffloadNone = "none"
	// OffloadCompaction: compactions at the engine
	// (lsm.OffloadOptions.Compaction).
	OffloadCompaction = "compaction"
	// OffloadRecycle: compactions, and flushes from the WAL (log
	// recycling, lsm.OffloadOptions.Recycle), at the engine.
	OffloadRecycle = "compaction+recycle"
	// OffloadAll: compactions and flushes at the engine, and the L0
	// cache (lsm.OffloadOptions.L0CacheBytes: a memtable per L0 table
	// L0's compaction trigger allows).
	OffloadAll = "all"
	// OffloadPebble: Pebble v2 on offloadfs, everything on the host.
	OffloadPebble = "pebble"
)

// OffloadModes are the modes --offload knows, in report order.
var OffloadModes = []string{OffloadNone, OffloadCompaction, OffloadRecycle, OffloadAll, OffloadPebble}

// Bars of issue 22, for the fullest offload mode measured against none
// on Load: throughput at least MinOffloadSpeedup times, host CPU per
// write lower, and network bytes per byte written at most
// MaxOffloadNetRatio times.
const (
	MinOffloadSpeedup  = 1.4
	MaxOffloadNetRatio = 0.6
)

// OffloadConfig configures RunOffload. Config's fields mean what they do
// for Run (Dir and Keep aside: the stores live on the targets' volumes);
// zero fields take the defaults below rather than Run's.
type OffloadConfig struct {
	Config
	// Modes are the modes measured, side by side (default none and
	// compaction).
	Modes []string
	// TargetExe runs each target as `TargetExe target serve --offload`
	// in its own process (required), pinned to ServerCPUs if set.
	TargetExe  string
	ServerCPUs string
	// TargetFileSize and LBaseMaxBytes shape kv/lsm's tree (defaults
	// 2 MiB and 16 MiB), so a benchmark-sized load compacts through
	// several levels.
	TargetFileSize, LBaseMaxBytes int64
}

// Defaults of an OffloadConfig.
const (
	DefaultOffloadRecords  = 100000
	DefaultOffloadOps      = 50000
	DefaultOffloadMemTable = 4 << 20
)

func (c *OffloadConfig) setDefaults() error {
	setDefault(&c.Records, DefaultOffloadRecords)
	setDefault(&c.Ops, DefaultOffloadOps)
	setDefault(&c.MemTable, DefaultOffloadMemTable)
	setDefault(&c.Cache, 8<<20)
	if len(c.Workloads) == 0 {
		c.Workloads = []ycsb.Workload{ycsb.A, FillRandom}
	}
	setDefault(&c.TargetFileSize, 2<<20)
	setDefault(&c.LBaseMaxBytes, 16<<20)
	if len(c.Modes) == 0 {
		c.Modes = []string{OffloadNone, OffloadCompaction}
	}
	for i, m := range c.Modes {
		if !slices.Contains(OffloadModes, m) {
			return fmt.Errorf("offload mode %q: want one of %v", m, OffloadModes)
		}
		if slices.Contains(c.Modes[:i], m) {
			return fmt.Errorf("offload mode %q given twice", m)
		}
	}
	if c.TargetExe == "" {
		return errors.New("bench: no target executable")
	}
	return c.Config.setDefaults()
}

// RunOffload runs the experiment: Repeat runs, each loading a fresh store
// per mode (each in its own target process) and running the workloads on
// it, and reports the medians and the bars. A phase's engine is
// "kv/lsm:MODE" or "pebble".
func RunOffload(ctx context.Context, cfg OffloadConfig) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	zipf := ycsb.NewZipfian(cfg.Records, ycsb.Theta)
	rep := &Report{Records: cfg.Records, Ops: cfg.Ops, Threads: cfg.Threads, ValueSize: cfg.ValueSize,
		Dist: cfg.Distribution, Machine: report.DescribeMachine()}
	for run := range cfg.Repeat {
		order := slices.Clone(cfg.Modes)
		// Rotate which mode goes first.
		for range run % len(order) {
			order = append(order[1:], order[0])
		}
		var phases []Phase
		for _, mode := range order {
			e, err := openOffloadEngine(ctx, &cfg, mode)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mode, err)
			}
			ps, err := runAndClose(ctx, &cfg.Config, e, zipf)
			if err != nil {
				return nil, err
			}
			phases = append(phases, ps...)
		}
		rep.Runs = append(rep.Runs, phases)
	}
	rep.Phases = medianPhases(rep.Runs)
	// Report in mode order, whichever went first in the first run.
	slices.SortStableFunc(rep.Phases, func(a, b Phase) int {
		return slices.Index(cfg.Modes, modeOf(a.Engine)) - slices.Index(cfg.Modes, modeOf(b.Engine))
	})
	rep.Bars = offloadBars(rep.Phases, cfg.Modes)
	return rep, nil
}

func modeOf(engine string) string {
	if engine == "pebble" {
		return OffloadPebble
	}
	return engine[len("kv/lsm:"):]
}

// offloadEnv is one store's target process, the host's connection to it,
// its file system and the engine's client.
type offloadEnv struct {
	pid     int // the target's
	ctrl    *host.Controller
	fsys    *offloadfs.FS
	peer    *offload.Client
	closers harness.Closers
}

func (e *offloadEnv) close() error {
	return e.closers.Close()
}

const offloadNQN = "nqn.2026-11.io.nearstore:bench-lsm-offload"

// l0CacheTables is the L0 cache's budget in memtables in mode all:
// kv/lsm's default L0 compaction trigger, so that L0 is cached whole
// between its compactions.
const l0CacheTables = 4

// startOffloadEnv starts a target with its offload engine on a fresh
// simulated NAND volume, connects, makes and mounts a file system.
func startOffloadEnv(ctx context.Context, cfg *OffloadConfig) (_ *offloadEnv, err error) {
	e := &offloadEnv{}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	// Room for the tables (several times the data while compactions
	// run and outputs are reserved), the logs and the metadata.
	data := int64(2*cfg.Records) * int64(cfg.ValueSize+ycsb.KeyLen+16)
	size := (4*data + 512<<20 + 1<<20 - 1) &^ (1<<20 - 1)
	enginePort, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	engineAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(enginePort))
	t, err := harness.StartFSTarget(ctx, harness.TargetSpec{
		Exe: cfg.TargetExe, NQN: offloadNQN, Volume: fmt.Sprintf("sim:nand:%d?bs=4096", size),
		Args: []string{"--offload", engineAddr}, CPUs: cfg.ServerCPUs, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, t.Close)
	e.pid, e.ctrl = t.Proc.Pid(), t.Ctrl
	e.fsys, err = offloadfs.Mount(ctx, t.NS, offloadfs.Options{CommitInterval: -1, Logger: cfg.Logger, Remote: t.NS})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.fsys.Close)
	if e.peer, err = offload.Dial(engineAddr, offload.ClientOptions{Name: "bench-lsm"}); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.peer.Close)
	if err := proc.WaitListening(ctx, engineAddr, t.Proc, 10*time.Second); err != nil {
		return nil, err
	}
	return e, nil
}

// openOffloadEngine opens mode's store in a fresh environment.
func openOffloadEngine(ctx context.Context, cfg *OffloadConfig, mode string) (_ *meteredEngine, err error) {
	env, err := startOffloadEnv(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			env.close()
		}
	}()
	m := &meteredEngine{env: env}
	if mode == OffloadPebble {
		pe, err := openPebble(&cfg.Config, "pebble", func(o *pebble.Options) { o.FS = lsmpushbench.PebbleFS(env.fsys) })
		if err != nil {
			return nil, err
		}
		m.engine = pe
		m.compacting = func() bool { return pe.d.Metrics().Compact.NumInProgress > 0 }
	} else {
		o := lsm.Options{
			MemTableSize: int(cfg.MemTable), BlockCacheSize: cfg.Cache, Logger: cfg.Logger,
			TargetFileSize: cfg.TargetFileSize, LBaseMaxBytes: cfg.LBaseMaxBytes,
		}
		if mode != OffloadNone {
			o.Offload = &lsm.OffloadOptions{FS: env.fsys, Peer: env.peer, Compaction: true, Recycle: mode == OffloadRecycle || mode == OffloadAll}
		}
		if mode == OffloadAll {
			o.Offload.L0CacheBytes = l0CacheTables * cfg.MemTable
		}
		d, err := lsm.Open(env.fsys.VFS(), "db", o)
		if err != nil {
			return nil, err
		}
		m.engine = ourEngine{d: d, path: "db"}
		m.label = "kv/lsm:" + mode
		m.compacting = func() bool { return d.Metrics().Compact.InProgress > 0 }
	}
	m.startWatch()
	return m, nil
}

// meteredEngine is an engine on an offloadEnv that also measures, per
// phase, the bytes over the host's NVMe/TCP connection per byte written,
// and the latency of reads made while a compaction runs.
type meteredEngine struct {
	engine
	env        *offloadEnv
	label      string
	compacting func() bool

	busy     atomic.Bool // a compaction was running at the last look
	stop     chan struct{}
	watching sync.WaitGroup

	written  atomic.Uint64 // key and value bytes set
	net0     uint64
	written0 uint64
	tcpu0    time.Duration // the target's CPU time at begin
	mu       sync.Mutex
	during   *hist.Histogram // reads while compacting, this phase
}

func (m *meteredEngine) name() string {
	if m.label != "" {
		return m.label
	}
	return m.engine.name()
}

// startWatch polls whether a compaction runs, every few milliseconds.
func (m *meteredEngine) startWatch() {
	m.stop = make(chan struct{})
	m.watching.Add(1)
	go func() {
		defer m.watching.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.busy.Store(m.compacting())
			}
		}
	}()
}

func (m *meteredEngine) set(k, v []byte) error {
	m.written.Add(uint64(len(k) + len(v)))
	return m.engine.set(k, v)
}

func (m *meteredEngine) get(k []byte) (bool, error) {
	if !m.busy.Load() {
		return m.engine.get(k)
	}
	t := time.Now()
	ok, err := m.engine.get(k)
	d := time.Since(t)
	m.mu.Lock()
	m.during.Record(d)
	m.mu.Unlock()
	return ok, err
}

func (m *meteredEngine) netBytes() uint64 {
	s := m.env.ctrl.Stats()
	return s.BytesRead + s.BytesWritten
}

// begin implements meter.
func (m *meteredEngine) begin() {
	m.net0, m.written0 = m.netBytes(), m.written.Load()
	m.tcpu0, _ = harness.ProcCPU(strconv.Itoa(m.env.pid))
	m.mu.Lock()
	m.during = hist.New()
	m.mu.Unlock()
}

// end implements meter.
func (m *meteredEngine) end(p *Phase) {
	if w := m.written.Load() - m.written0; w > 0 {
		p.NetPerByteWritten = float64(m.netBytes()-m.net0) / float64(w)
	}
	if t, err := harness.ProcCPU(strconv.Itoa(m.env.pid)); err == nil && p.Ops > 0 {
		p.TargetCPUus = float64((t - m.tcpu0).Microseconds()) / float64(p.Ops)
	}
	m.mu.Lock()
	if m.during.Count() > 0 {
		p.ReadsCompacting = m.during.Count()
		p.ReadP99Compacting = report.Micros(m.during.Quantile(0.99))
	}
	m.mu.Unlock()
	if d, ok := m.engine.(ourEngine); ok {
		om := d.d.OffloadMetrics()
		p.Offloaded, p.OffloadLocal = om.Compactions+om.Flushes, om.LocalCompactions+om.LocalFlushes
	}
}

// diskBytes implements meter: the store's files' bytes.
func (m *meteredEngine) diskBytes() (int64, error) {
	des, err := m.env.fsys.ReadDir(m.dir())
	if err != nil {
		return 0, err
	}
	var n int64
	for _, de := range des {
		fi, err := m.env.fsys.Stat(path.Join(m.dir(), de.Name()))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
		if err == nil {
			n += fi.Size()
		}
	}
	return n, nil
}

func (m *meteredEngine) close() error {
	close(m.stop)
	m.watching.Wait()
	return errors.Join(m.engine.close(), m.env.close())
}

// offloadBars states issue 22's bars for the fullest kv/lsm offload mode
// measured against none, on Load.
func offloadBars(phases []Phase, modes []string) []report.Bar {
	byKey := map[string]Phase{}
	for _, p := range phases {
		byKey[p.Engine+"/"+p.Workload] = p
	}
	base, ok := byKey["kv/lsm:"+OffloadNone+"/load"]
	if !ok {
		return nil
	}
	var best string
	for _, m := range modes {
		if m != OffloadNone && m != OffloadPebble {
			best = m
		}
	}
	ours, ok := byKey["kv/lsm:"+best+"/load"]
	if !ok || base.OpsPerSec <= 0 || base.CPUus <= 0 || base.NetPerByteWritten <= 0 {
		return nil
	}
	speed := ours.OpsPerSec / base.OpsPerSec
	cpu := ours.CPUus / base.CPUus
	netr := ours.NetPerByteWritten / base.NetPerByteWritten
	return []report.Bar{
		{What: fmt.Sprintf("Load throughput, offload %s ÷ none", best), Want: fmt.Sprintf("≥ %.2f", MinOffloadSpeedup), Got: speed, Met: speed >= MinOffloadSpeedup},
		{What: fmt.Sprintf("Load host CPU per write, offload %s ÷ none", best), Want: "< 1", Got: cpu, Met: cpu < 1},
		{What: fmt.Sprintf("Load network bytes per byte written, offload %s ÷ none", best), Want: fmt.Sprintf("≤ %.2f", MaxOffloadNetRatio), Got: netr, Met: netr <= MaxOffloadNetRatio},
	}
}
