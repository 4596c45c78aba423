// Package leedbench is the LEED experiment: LEED's store behind the NVMe
// KV command set in a target, on a simulated NAND SSD, driven over
// NVMe/TCP by the host library, against what a user would run today for
// the same objects: kv/lsm on offloadfs over NVMe/TCP, on an NVM
// namespace of the same simulated SSD in the same target.
//
// Keys are 16 bytes, the KV command set's maximum. YCSB's keys
// ("user" and a number) are mapped into them as the 8-byte FNV-1a 64 of
// the YCSB key string followed by the 8-byte big-endian record number:
// unique, fixed-size, and spread over the hash space as YCSB's are.
package leedbench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/kv/leed"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

// Config is one run.
type Config struct {
	// Objects loaded into each store before the timed phases.
	Objects int
	// ValueSizes are the object sizes measured (default 256 and 1024).
	ValueSizes []int
	// Threads issue operations, one in flight each.
	Threads int
	// Duration of each timed phase.
	Duration time.Duration
	// Repeat runs every phase this many times, interleaving the stores;
	// the report gives medians.
	Repeat int
	// Only, if "scale" or "capacity", measures only memory per object or
	// only usable capacity (no timed phases).
	Only string
	// ScaleObjects are the store sizes at which memory per object is
	// measured, in this process on a RAM volume.
	ScaleObjects []int
	// CapacityBytes is the raw size of the store filled to measure usable
	// capacity.
	CapacityBytes int64
	// Baseline runs kv/lsm on offloadfs too.
	Baseline bool
	// Progress, if set, receives a line per step.
	Progress io.Writer
}

func (c *Config) defaults() {
	harness.Default(&c.Objects, 50000)
	if len(c.ValueSizes) == 0 {
		c.ValueSizes = []int{256, 1024}
	}
	harness.Default(&c.Threads, 16)
	harness.Default(&c.Duration, 3*time.Second)
	harness.Default(&c.Repeat, 3)
	harness.Default(&c.CapacityBytes, 256<<20)
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// Key is the 16-byte key of YCSB record i: FNV-1a 64 of "user<i>", then i,
// both big-endian.
func Key(i uint64) []byte {
	h := fnv.New64a()
	fmt.Fprintf(h, "user%d", i)
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, h.Sum64())
	binary.BigEndian.PutUint64(k[8:], i)
	return k
}

// value fills v with record i's bytes at version ver, checkable on read.
func value(v []byte, i uint64, ver uint32) {
	for j := 0; j+12 <= len(v); j += 12 {
		binary.LittleEndian.PutUint64(v[j:], i)
		binary.LittleEndian.PutUint32(v[j+8:], ver)
	}
}

func valueOK(v []byte, i uint64, size int) bool {
	return len(v) == size && (size < 12 || binary.LittleEndian.Uint64(v) == i)
}

// Phase is one timed phase's result.
type Phase struct {
	Store      string  `json:"store"` // leed or lsm
	ValueSize  int     `json:"value_size"`
	Workload   string  `json:"workload"` // get, put, ycsb-a … ycsb-d
	Ops        uint64  `json:"ops"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	DeviceIOs  float64 `json:"device_ios_per_op"` // from the target's counters
	Errors     uint64  `json:"errors"`
	RepeatedAt int     `json:"repeat"`
}

// Scale is memory per object at one store size.
type Scale struct {
	Objects        int     `json:"objects"`
	ValueSize      int     `json:"value_size"`
	SegTblBytes    int64   `json:"segtbl_bytes"`
	BytesPerObject float64 `json:"bytes_per_object"`
}

// Capacity is one fill of a store until full.
type Capacity struct {
	ValueSize   int     `json:"value_size"`
	RawBytes    int64   `json:"raw_bytes"`
	Objects     int64   `json:"objects"`
	ObjectBytes int64   `json:"object_bytes"` // key+value bytes stored
	Usable      float64 `json:"usable"`       // ObjectBytes / RawBytes
}

// Report is a run's measurements.
type Report struct {
	Machine  report.Machine `json:"machine"`
	Config   ConfigReport   `json:"config"`
	Phases   []Phase        `json:"phases"`
	Medians  []Phase        `json:"medians"`
	Scale    []Scale        `json:"scale"`
	Capacity []Capacity     `json:"capacity"`
	Bars     []report.Bar   `json:"bars"`
}

// ConfigReport is the run's configuration as reported.
type ConfigReport struct {
	Objects    int    `json:"objects"`
	ValueSizes []int  `json:"value_sizes"`
	Threads    int    `json:"threads"`
	Duration   string `json:"duration"`
	Repeat     int    `json:"repeat"`
	Device     string `json:"device"`
	KeyMapping string `json:"key_mapping"`
}

// env is a target in this process with an NVM namespace (1) and a KV
// namespace (2), each on its own simulated NAND SSD.
type env struct {
	nvmVol, kvVol volume.Volume
	store         *leed.Store
	reg           *prometheus.Registry
	stop          func() error
	ctrl          *host.Controller
	kv, nvm       *host.Namespace
}

const nqn = "nqn.2026-11.io.nearstore:bench-leed"

func startEnv(ctx context.Context, kvSize, nvmSize int64, avgValue int) (_ *env, err error) {
	e := &env{reg: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.kvVol, err = volume.Open(fmt.Sprintf("sim:nand:%d?bs=4096", kvSize)); err != nil {
		return nil, err
	}
	if e.nvmVol, err = volume.Open(fmt.Sprintf("sim:nand:%d?bs=4096", nvmSize)); err != nil {
		return nil, err
	}
	p := volume.NANDParams()
	curve, capacity := leed.CurveFor(leed.DeviceModel{ReadLatency: p.ReadLatency, WriteLatency: p.WriteLatency, IOPS: p.IOPS, Bandwidth: p.Bandwidth})
	eng, err := leed.NewEngine(curve, capacity)
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	if e.store, err = leed.Open(ctx, e.kvVol, leed.Options{Create: true, AvgValueSize: avgValue, MaxValueSize: 4096, Engine: eng, Logger: quiet}); err != nil {
		return nil, err
	}
	srv, err := target.New(target.Config{
		Subsystems: []target.SubsystemConfig{{NQN: nqn, Namespaces: []target.NamespaceConfig{
			{Backend: e.nvmVol, Name: "nvm"},
			{Backend: e.kvVol, Name: "kv", KV: &leed.Namespace{DB: e.store, Engine: eng}},
		}}},
		Logger:  quiet,
		Metrics: target.NewMetrics(e.reg),
	})
	if err != nil {
		return nil, err
	}
	addr, stop, err := harness.ServeLoopback(srv)
	if err != nil {
		return nil, err
	}
	e.stop = stop
	if e.ctrl, err = host.Connect(ctx, addr, nqn, harness.HostOptions(host.Options{Logger: quiet})); err != nil {
		return nil, err
	}
	if e.nvm, err = e.ctrl.Namespace(1); err != nil {
		return nil, err
	}
	if e.kv, err = e.ctrl.Namespace(2); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	if e.ctrl != nil {
		e.ctrl.Close()
	}
	if e.stop != nil {
		e.stop()
	}
	if e.store != nil {
		e.store.Close()
	}
	for _, v := range []volume.Volume{e.kvVol, e.nvmVol} {
		if v != nil {
			v.Close()
		}
	}
}

// metric sums a target metric's samples whose labels include want.
func (e *env) metric(name string, want map[string]string) float64 {
	mfs, err := e.reg.Gather()
	if err != nil {
		return math.NaN()
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// kvStore is what a phase drives: LEED through the KV command set, or the
// LSM on offloadfs.
type kvStore interface {
	get(ctx context.Context, key []byte) ([]byte, error)
	put(ctx context.Context, key, value []byte) error
}

type leedClient struct{ ns *host.Namespace }

func (c leedClient) get(ctx context.Context, key []byte) ([]byte, error) {
	v, err := c.ns.Retrieve(ctx, key)
	if errors.Is(err, &nvme.StatusError{Status: nvme.StatusKVKeyNotExist}) {
		return nil, errMissing
	}
	return v, err
}

// errMissing is a get of a key the store does not hold.
var errMissing = errors.New("key not found")

func (c leedClient) put(ctx context.Context, key, value []byte) error {
	return c.ns.Store(ctx, key, value, host.KVStoreOptions{})
}

type lsmClient struct{ db *lsm.DB }

func (c lsmClient) get(_ context.Context, key []byte) ([]byte, error) {
	v, err := c.db.Get(key)
	if errors.Is(err, lsm.ErrNotFound) {
		return nil, errMissing
	}
	return v, err
}
func (c lsmClient) put(_ context.Context, key, value []byte) error {
	return c.db.Set(key, value, nil)
}

// load stores records [0, n) from threads goroutines.
func load(ctx context.Context, s kvStore, n, size, threads int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, threads)
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]byte, size)
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				value(v, uint64(i), 0)
				if err := s.put(ctx, Key(uint64(i)), v); err != nil {
					errc <- fmt.Errorf("load record %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// workload is one mix of operations: the read share, and how records are
// chosen.
type workload struct {
	name   string
	reads  float64
	zipf   bool
	latest bool // YCSB D: reads favour recent inserts, writes insert
}

var workloads = map[string]workload{
	"get":    {name: "get", reads: 1},
	"put":    {name: "put", reads: 0},
	"ycsb-a": {name: "ycsb-a", reads: 0.5, zipf: true},
	"ycsb-b": {name: "ycsb-b", reads: 0.95, zipf: true},
	"ycsb-c": {name: "ycsb-c", reads: 1, zipf: true},
	"ycsb-d": {name: "ycsb-d", reads: 0.95, latest: true},
}

// run drives w against s for d from threads goroutines and returns the
// phase's counts and latencies. inserted is the record count, which YCSB
// D's inserts grow.
func run(ctx context.Context, s kvStore, w workload, size, threads int, d time.Duration, inserted *atomic.Int64) (Phase, error) {
	var wg sync.WaitGroup
	hs := make([]*hist.Histogram, threads)
	var ops, errs atomic.Uint64
	var firstErr atomic.Pointer[error]
	deadline := time.Now().Add(d)
	// YCSB D reads records inserted during the phase, some of which are
	// still in flight: those may be missing.
	base := uint64(inserted.Load())
	start := time.Now()
	for t := 0; t < threads; t++ {
		hs[t] = hist.New()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(t)+1, uint64(time.Now().UnixNano())))
			var z *rand.Zipf
			if w.zipf {
				z = rand.NewZipf(rng, 1.01, 1, uint64(inserted.Load()-1))
			}
			v := make([]byte, size)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				n := uint64(inserted.Load())
				var i uint64
				switch {
				case w.latest:
					// Recent records most: an exponential back from the newest.
					i = n - 1 - min(n-1, uint64(rng.ExpFloat64()*float64(n)/100))
				case z != nil:
					// Zipf over a scrambled order, so the hot records are
					// spread, as YCSB's scrambled zipfian spreads them.
					i = (z.Uint64() * 0x9E3779B97F4A7C15) % n
				default:
					i = rng.Uint64N(n)
				}
				t0 := time.Now()
				var err error
				if rng.Float64() < w.reads {
					var got []byte
					got, err = s.get(ctx, Key(i))
					if errors.Is(err, errMissing) && w.latest && i >= base {
						err = nil
						got = nil
					} else if err == nil && !valueOK(got, i, size) {
						err = fmt.Errorf("record %d: wrong value", i)
					}
				} else {
					if w.latest {
						i = uint64(inserted.Add(1) - 1)
					}
					value(v, i, 1)
					err = s.put(ctx, Key(i), v)
				}
				hs[t].Record(time.Since(t0))
				ops.Add(1)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	h := hist.New()
	for _, x := range hs {
		h.Merge(x)
	}
	p := Phase{Workload: w.name, ValueSize: size, Ops: ops.Load(), OpsPerSec: float64(ops.Load()) / el.Seconds(),
		P50us: report.Micros(h.Quantile(0.5)), P99us: report.Micros(h.Quantile(0.99)), Errors: errs.Load()}
	if e := firstErr.Load(); e != nil && errs.Load()*100 > ops.Load() {
		return p, fmt.Errorf("%s: %d of %d operations failed: %w", w.name, errs.Load(), ops.Load(), *e)
	}
	return p, nil
}

// Run runs the experiment.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	r := &Report{Machine: report.DescribeMachine(), Config: ConfigReport{
		Objects: cfg.Objects, ValueSizes: cfg.ValueSizes, Threads: cfg.Threads, Duration: cfg.Duration.String(), Repeat: cfg.Repeat,
		Device:     "sim:nand (90 µs reads, 20 µs writes, 700K IOPS, 3.2 GB/s), one per namespace, target in this process over TCP loopback",
		KeyMapping: "16 bytes: FNV-1a 64 of YCSB's \"user<n>\" key, then n, both big-endian",
	}}
	for _, size := range cfg.ValueSizes {
		if cfg.Only != "" {
			break
		}
		if err := runSize(ctx, &cfg, r, size); err != nil {
			return r, err
		}
	}
	for _, size := range cfg.ValueSizes[:1] {
		if cfg.Only == "capacity" {
			break
		}
		for _, n := range cfg.ScaleObjects {
			cfg.progress("memory per object: %d objects of %d bytes", n, size)
			s, err := measureScale(ctx, n, size)
			if err != nil {
				return r, err
			}
			r.Scale = append(r.Scale, s)
		}
	}
	for _, size := range cfg.ValueSizes {
		if cfg.Only == "scale" {
			break
		}
		cfg.progress("usable capacity: filling %d bytes with %d-byte values", cfg.CapacityBytes, size)
		c, err := measureCapacity(ctx, cfg.CapacityBytes, size)
		if err != nil {
			return r, err
		}
		r.Capacity = append(r.Capacity, c)
	}
	r.medians()
	r.bars()
	return r, nil
}

func runSize(ctx context.Context, cfg *Config, r *Report, size int) error {
	// Room for the objects, YCSB D's inserts, and the logs' slack.
	perObj := int64(size + 16 + 64)
	mib := func(n int64) int64 { return (n + 1<<20 - 1) &^ (1<<20 - 1) }
	kvSize := mib(max(64<<20, int64(cfg.Objects)*perObj*3))
	nvmSize := mib(max(256<<20, int64(cfg.Objects)*perObj*4))
	cfg.progress("value size %d: target with a %d MiB KV namespace and a %d MiB NVM namespace", size, kvSize>>20, nvmSize>>20)
	e, err := startEnv(ctx, kvSize, nvmSize, size)
	if err != nil {
		return err
	}
	defer e.close()
	stores := map[string]kvStore{"leed": leedClient{e.kv}}
	order := []string{"leed"}
	if cfg.Baseline {
		if err := offloadfs.Mkfs(ctx, e.nvm, offloadfs.MkfsOptions{}); err != nil {
			return fmt.Errorf("baseline mkfs: %w", err)
		}
		fsys, err := offloadfs.Mount(ctx, e.nvm, offloadfs.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return fmt.Errorf("baseline mount: %w", err)
		}
		defer fsys.Close()
		// Caches far smaller than the data, as on a host whose memory the
		// store does not own: reads reach the device, as LEED's do.
		db, err := lsm.Open(fsys.VFS(), "db", lsm.Options{MemTableSize: 1 << 20, BlockCacheSize: 1 << 20, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return fmt.Errorf("baseline lsm: %w", err)
		}
		defer db.Close()
		stores["lsm"] = lsmClient{db}
		order = append(order, "lsm")
	}
	inserted := map[string]*atomic.Int64{}
	for _, name := range order {
		cfg.progress("  loading %d objects into %s", cfg.Objects, name)
		if err := load(ctx, stores[name], cfg.Objects, size, cfg.Threads); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		inserted[name] = &atomic.Int64{}
		inserted[name].Store(int64(cfg.Objects))
	}
	for rep := 0; rep < cfg.Repeat; rep++ {
		for _, wl := range []string{"get", "put", "ycsb-a", "ycsb-b", "ycsb-c", "ycsb-d"} {
			for _, name := range order {
				ios := func() float64 {
					if name == "leed" {
						return e.metric("nearstore_target_kv_device_ios_total", map[string]string{"nsid": "2"})
					}
					return e.metric("nearstore_target_commands_total", map[string]string{"nsid": "1", "op": "read"}) +
						e.metric("nearstore_target_commands_total", map[string]string{"nsid": "1", "op": "write"})
				}
				before := ios()
				p, err := run(ctx, stores[name], workloads[wl], size, cfg.Threads, cfg.Duration, inserted[name])
				if err != nil {
					return fmt.Errorf("%s %s: %w", name, wl, err)
				}
				p.Store, p.RepeatedAt = name, rep
				if p.Ops > 0 {
					p.DeviceIOs = (ios() - before) / float64(p.Ops)
				}
				cfg.progress("  %s %-6s %4d B: %8.0f ops/s  p50 %7.1f µs  p99 %7.1f µs  %.2f device I/Os/op", name, wl, size, p.OpsPerSec, p.P50us, p.P99us, p.DeviceIOs)
				r.Phases = append(r.Phases, p)
			}
		}
	}
	return nil
}

// openRAMStore makes a LEED store for values of about size bytes on a
// new RAM volume of raw bytes; closeStore closes the store, then the
// volume.
func openRAMStore(ctx context.Context, raw int64, size int) (_ *leed.Store, closeStore func(), err error) {
	v, err := volume.Open(fmt.Sprintf("mem:%d", raw))
	if err != nil {
		return nil, nil, err
	}
	s, err := leed.Open(ctx, v, leed.Options{Create: true, AvgValueSize: size, MaxValueSize: 4096, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		v.Close()
		return nil, nil, err
	}
	return s, func() {
		s.Close()
		v.Close()
	}, nil
}

// measureScale loads n objects into a store on a RAM volume sized for
// them, in this process, and reports SegTbl's bytes per object.
func measureScale(ctx context.Context, n, size int) (Scale, error) {
	raw := int64(float64(n)*float64(size+12+40)*1.15) + 2<<20 // and the logs' reserves
	s, closeStore, err := openRAMStore(ctx, (raw+(1<<20))&^(1<<20-1), size)
	if err != nil {
		return Scale{}, err
	}
	defer closeStore()
	// Loaded in batches (leed.Store.ImportBatch: one chain read, value
	// write and chain write per segment per batch), so 10M objects load
	// in minutes; the index it builds is the one Puts would.
	const batchSize = 250000
	vals := make([]byte, batchSize*size)
	for first := 0; first < n; first += batchSize {
		if err := ctx.Err(); err != nil {
			return Scale{}, err
		}
		m := min(batchSize, n-first)
		batch := make([]leed.KV, m)
		for j := range m {
			i := uint64(first + j)
			v := vals[j*size : (j+1)*size]
			value(v, i, 0)
			batch[j] = leed.KV{Key: Key(i), Value: v}
		}
		if _, err := s.ImportBatch(ctx, batch); err != nil {
			return Scale{}, fmt.Errorf("scale: records %d to %d of %d: %w", first, first+m, n, err)
		}
	}
	for i := uint64(0); i < uint64(n); i += max(1, uint64(n)/1000) {
		got, _, err := s.Get(ctx, Key(i))
		if err != nil || !valueOK(got, i, size) {
			return Scale{}, fmt.Errorf("scale: record %d after loading: %v", i, err)
		}
	}
	st := s.Stats()
	return Scale{Objects: int(st.Objects), ValueSize: size, SegTblBytes: st.SegTblBytes, BytesPerObject: float64(st.SegTblBytes) / float64(st.Objects)}, nil
}

// measureCapacity fills a store on a RAM volume of raw bytes with new
// objects until it answers ErrFull, then checks a sample of them.
func measureCapacity(ctx context.Context, raw int64, size int) (Capacity, error) {
	s, closeStore, err := openRAMStore(ctx, raw, size)
	if err != nil {
		return Capacity{}, err
	}
	defer closeStore()
	val := make([]byte, size)
	var n uint64
	for ; ; n++ {
		value(val, n, 0)
		if _, err := s.Put(ctx, Key(n), val, leed.PutAny); err != nil {
			if errors.Is(err, leed.ErrFull) {
				break
			}
			return Capacity{}, err
		}
	}
	for i := uint64(0); i < n; i += max(1, n/1000) {
		got, _, err := s.Get(ctx, Key(i))
		if err != nil || !valueOK(got, i, size) || !bytes.Equal(got[:8], val[:8]) && i == n-1 {
			return Capacity{}, fmt.Errorf("capacity: record %d after the store filled: %v", i, err)
		}
	}
	obj := int64(n) * int64(size+16)
	return Capacity{ValueSize: size, RawBytes: raw, Objects: int64(n), ObjectBytes: obj, Usable: float64(obj) / float64(raw)}, nil
}

func (r *Report) medians() {
	type k struct {
		store, wl string
		size      int
	}
	groups := map[k][]Phase{}
	var keys []k
	for _, p := range r.Phases {
		kk := k{p.Store, p.Workload, p.ValueSize}
		if _, ok := groups[kk]; !ok {
			keys = append(keys, kk)
		}
		groups[kk] = append(groups[kk], p)
	}
	for _, kk := range keys {
		ps := groups[kk]
		m := Phase{Store: kk.store, Workload: kk.wl, ValueSize: kk.size, RepeatedAt: -1}
		m.OpsPerSec = report.MedianOf(ps, func(p Phase) float64 { return p.OpsPerSec })
		m.P50us = report.MedianOf(ps, func(p Phase) float64 { return p.P50us })
		m.P99us = report.MedianOf(ps, func(p Phase) float64 { return p.P99us })
		m.DeviceIOs = report.MedianOf(ps, func(p Phase) float64 { return p.DeviceIOs })
		for _, p := range ps {
			m.Ops += p.Ops
			m.Errors += p.Errors
		}
		r.Medians = append(r.Medians, m)
	}
}

func (r *Report) median(store, wl string, size int) (Phase, bool) {
	for _, p := range r.Medians {
		if p.Store == store && p.Workload == wl && p.ValueSize == size {
			return p, true
		}
	}
	return Phase{}, false
}

func (r *Report) bars() {
	if len(r.Scale) > 0 {
		worst, at := 0.0, 0
		for _, s := range r.Scale {
			if s.BytesPerObject > worst {
				worst, at = s.BytesPerObject, s.Objects
			}
		}
		last := r.Scale[len(r.Scale)-1]
		r.Bars = append(r.Bars, report.Bar{What: fmt.Sprintf("memory index bytes per object (SegTbl), largest of %d sizes up to %d objects (worst at %d)", len(r.Scale), last.Objects, at),
			Want: "≤ 0.5", Got: worst, Met: worst <= 0.5})
	}
	for _, c := range r.Capacity {
		r.Bars = append(r.Bars, report.Bar{What: fmt.Sprintf("usable capacity, %d-byte values (key+value bytes stored before full / raw bytes)", c.ValueSize),
			Want: "≥ 0.90", Got: c.Usable, Met: c.Usable >= 0.90})
	}
	for _, size := range r.Config.ValueSizes {
		if p, ok := r.median("leed", "get", size); ok {
			r.Bars = append(r.Bars, report.Bar{What: fmt.Sprintf("device I/Os per GET, %d B (target counters)", size), Want: "= 2", Got: p.DeviceIOs, Met: math.Abs(p.DeviceIOs-2) < 0.05})
		}
		if p, ok := r.median("leed", "put", size); ok {
			r.Bars = append(r.Bars, report.Bar{What: fmt.Sprintf("device I/Os per PUT, %d B (target counters)", size), Want: "= 3", Got: p.DeviceIOs, Met: math.Abs(p.DeviceIOs-3) < 0.05})
		}
	}
}

// WriteTable prints the report.
func WriteTable(w io.Writer, r *Report) error {
	t := &report.TableWriter{W: w}
	t.Printf("LEED behind the NVMe KV command set vs kv/lsm on offloadfs, both over NVMe/TCP to one target (medians of %d runs, %d threads, %s each)\n", r.Config.Repeat, r.Config.Threads, r.Config.Duration)
	t.Printf("device: %s\nkeys: %s\n\n", r.Config.Device, r.Config.KeyMapping)
	t.Printf("%-6s %-7s %6s %12s %10s %10s %14s\n", "store", "work", "value", "ops/s", "p50 µs", "p99 µs", "device I/Os/op")
	for _, p := range r.Medians {
		t.Printf("%-6s %-7s %6d %12.0f %10.1f %10.1f %14.2f\n", p.Store, p.Workload, p.ValueSize, p.OpsPerSec, p.P50us, p.P99us, p.DeviceIOs)
	}
	if len(r.Scale) > 0 {
		t.Printf("\nmemory index (SegTbl) per object:\n")
		for _, s := range r.Scale {
			t.Printf("  %10d objects of %d B: %8d bytes, %.4f bytes/object\n", s.Objects, s.ValueSize, s.SegTblBytes, s.BytesPerObject)
		}
	}
	if len(r.Capacity) > 0 {
		t.Printf("\nusable capacity (filled until Capacity Exceeded):\n")
		for _, c := range r.Capacity {
			t.Printf("  %4d B values: %d objects, %d of %d raw bytes: %.1f%%\n", c.ValueSize, c.Objects, c.ObjectBytes, c.RawBytes, 100*c.Usable)
		}
	}
	if t.Err != nil {
		return t.Err
	}
	return report.WriteBars(w, r.Bars)
}
