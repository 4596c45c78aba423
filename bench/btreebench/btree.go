// Package btreebench is the B-tree experiment (bench btree): lookups in a
// nearstore B-tree read by the host or pushed down to the target, swept
// over tree depths and threads, with the commands and bytes each cost.
package btreebench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/kv/btree"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

// Devices a BTree benchmark's target can serve the tree from: RAM, or an
// SSD simulated in RAM with NAND's or Optane's latency (volume.NANDParams,
// volume.OptaneParams).
const (
	DeviceMem    = "mem"
	DeviceNAND   = "nand"
	DeviceOptane = "optane"
)

// Defaults of a Config.
const (
	DefaultBTreeKeys      = 1 << 20
	DefaultBTreeMinLevels = 6
	DefaultBTreeThreads   = 64
	// MaxBTreeThreads caps an automatic sweep: a queue holds 1023
	// commands in flight.
	MaxBTreeThreads = 1024
)

// Config configures Run.
type Config struct {
	// Keys is the number of keys loaded (default 1 Mi). Key i is
	// BTreeKey(i); its value is functions.BTreeValue(key, ValueSize), so
	// every lookup's result is checked.
	Keys int64
	// Fanout is the most keys per node (2 to 31). 0 picks the largest
	// fanout that gives the tree at least MinLevels levels, so that a
	// benchmark of a million keys has the depth of a BPF-KV tree of
	// billions.
	Fanout int
	// MinLevels is the depth Fanout 0 aims for (default 6).
	MinLevels int
	// ValueSize is the value size (default 64, BPF-KV's).
	ValueSize int
	// CacheLevels is the number of top levels the host caches (0: none).
	CacheLevels int
	// Modes to measure (default both, plain first).
	Modes []btree.Mode
	// Threads lists the lookups kept in flight at each point of the
	// sweep (one goroutine each); default {64}. With AutoSweep they are
	// ignored.
	Threads []int
	// AutoSweep doubles the threads from 1 until a mode's throughput has
	// not grown by 5% over its best for autoSweepFlat points running
	// (or MaxThreads).
	AutoSweep  bool
	MaxThreads int
	// Duration is the length of each timed run (default 3s); Repeat the
	// runs per mode and point (default 3), alternating modes; reports
	// give medians.
	Duration time.Duration
	Repeat   int
	// Device is DeviceMem, DeviceNAND (default) or DeviceOptane.
	Device string
	// Runtime runs btree_lookup at the target: sandbox.KindEBPF (default,
	// as in kv/btree) or sandbox.KindWasm.
	Runtime sandbox.Kind
	// TargetExe, when set, runs the target as `TargetExe target serve`
	// in its own process (pinned to ServerCPUs, if set), so that its CPU
	// time is its own; otherwise the target runs in this process.
	TargetExe  string
	ServerCPUs string
	// Queues is the host's I/O queues (default 1).
	Queues int
	// Seed makes the lookups' keys (0: a fixed default).
	Seed uint64
	// Logger receives the host library's connection events (default:
	// discarded).
	Logger *slog.Logger
	// Prepare, when set, runs on the connected namespace before the file
	// system is made on it (the demo verifies the data plane there).
	Prepare func(ctx context.Context, ns *host.Namespace) error
	// Progress, when set, is told what is about to happen.
	Progress func(stage string)
	// LoadProgress, when set, hears the bulk load's progress.
	LoadProgress func(done, total int64)
	// RunBar, when set, is called before each timed run; the run calls
	// update about five times a second with the time elapsed and the
	// lookups completed, and end when it is over.
	RunBar func(label string, d time.Duration) (update func(time.Duration, int64), end func())
}

func (c *Config) setDefaults() error {
	if c.Keys == 0 {
		c.Keys = DefaultBTreeKeys
	}
	if c.Keys < 1 {
		return fmt.Errorf("bench: %d keys", c.Keys)
	}
	if c.MinLevels == 0 {
		c.MinLevels = DefaultBTreeMinLevels
	}
	if c.ValueSize == 0 {
		c.ValueSize = btree.DefaultValueSize
	}
	if c.Fanout == 0 {
		c.Fanout = fanoutForLevels(c.Keys, c.MinLevels)
	}
	if c.CacheLevels < 0 {
		return fmt.Errorf("bench: %d cache levels", c.CacheLevels)
	}
	if len(c.Modes) == 0 {
		c.Modes = []btree.Mode{btree.Plain, btree.Pushdown}
	}
	harness.Default(&c.MaxThreads, MaxBTreeThreads)
	c.MaxThreads = min(c.MaxThreads, MaxBTreeThreads)
	if len(c.Threads) == 0 {
		c.Threads = []int{DefaultBTreeThreads}
	}
	for _, t := range c.Threads {
		if t < 1 || t > MaxBTreeThreads {
			return fmt.Errorf("bench: %d threads: want 1 to %d", t, MaxBTreeThreads)
		}
	}
	if err := harness.RunLength(&c.Duration, 3*time.Second, &c.Repeat); err != nil {
		return err
	}
	if c.Device == "" {
		c.Device = DeviceNAND
	}
	if _, err := deviceSpec(c.Device, 1<<20); err != nil {
		return err
	}
	if c.Runtime == 0 {
		c.Runtime = sandbox.KindEBPF
	}
	harness.Default(&c.Queues, 1)
	if c.Seed == 0 {
		c.Seed = 0x6e656172 // "near"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// BTreeKey is the benchmark's i-th key: even numbers from 2, so the odd
// ones between are missing.
func BTreeKey(i int64) uint64 { return uint64(i+1) * 2 }

// fanoutForLevels returns the largest fanout (at most 31) whose tree of
// keys has at least levels levels, or 2 if none has.
func fanoutForLevels(keys int64, levels int) int {
	for f := btree.MaxFanout; f > btree.MinFanout; f-- {
		if treeDepth(keys, f) >= levels {
			return f
		}
	}
	return btree.MinFanout
}

// treeDepth is the number of levels of a bulk-loaded tree of keys.
func treeDepth(keys int64, fanout int) int {
	n, d := max((keys+int64(fanout)-1)/int64(fanout), 1), 1
	for n > 1 {
		n = (n + int64(fanout) - 1) / int64(fanout)
		d++
	}
	return d
}

// deviceSpec returns the volume spec of a device of size bytes, in
// 512-byte blocks: BPF-KV's nodes are sectors, so a node read is one
// block on either path.
func deviceSpec(device string, size int64) (string, error) {
	switch device {
	case DeviceMem:
		return fmt.Sprintf("mem:%d?bs=512", size), nil
	case DeviceNAND, DeviceOptane:
		return fmt.Sprintf("sim:%s:%d?bs=512", device, size), nil
	}
	return "", fmt.Errorf("bench: device %q: want %s, %s or %s", device, DeviceMem, DeviceNAND, DeviceOptane)
}

// Report is what Run measured.
type Report struct {
	Machine report.Machine `json:"machine"`
	Tree    btree.Info     `json:"tree"`
	Device  string         `json:"device"`
	Volume  string         `json:"volume"`
	Runtime string         `json:"runtime"`
	Queues  int            `json:"queues"`
	Repeat  int            `json:"repeat"`
	RunSecs float64        `json:"run_seconds"`
	Load    BTreeLoad      `json:"load"`
	Target  BTreeTarget    `json:"target"`
	// Points has every (mode, threads) measured, in sweep order.
	Points []BTreePoint `json:"points"`
	// Saturated has, per mode, the point of highest median throughput.
	Saturated []BTreePoint `json:"saturated"`
	// Ratios compares pushdown's saturated point with plain's (nil
	// unless both were measured).
	Ratios *BTreeRatios `json:"ratios,omitempty"`
	// Bars are the targets that apply to this configuration.
	Bars []BTreeBar `json:"bars,omitempty"`
}

// BTreeLoad describes the bulk load.
type BTreeLoad struct {
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"` // index and values, 10^6 bytes per second
}

// BTreeTarget says where the target ran, which decides what the CPU
// columns mean.
type BTreeTarget struct {
	// Process is true when the target ran in its own process: host CPU
	// is then this process's, target CPU the target's. Otherwise both ran
	// here, and host CPU is the whole process's (target CPU 0).
	Process bool   `json:"own_process"`
	CPUs    string `json:"cpus,omitempty"`
}

// BTreeRun is one timed run.
type BTreeRun struct {
	Lookups   int64   `json:"lookups"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_s"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	// Commands are the I/O commands the target completed on the
	// namespace, by operation (its command counters): the network round
	// trips.
	Commands map[string]uint64 `json:"commands"`
	// HostCPU and TargetCPU are CPU time (user + system) during the run.
	HostCPU   float64 `json:"host_cpu_s"`
	TargetCPU float64 `json:"target_cpu_s"`
	// NetBytes are the bytes that crossed the host–target connections,
	// both ways (TCP payload: PDUs and data).
	NetBytes uint64 `json:"net_bytes"`
	// Gets are the lookups the counters cover: those counted, and those
	// in flight at the end, which finish after it.
	Gets uint64 `json:"gets"`
	// Store is the store's own count of reads, pushdowns and fallbacks.
	Reads     uint64 `json:"store_reads"`
	Pushdowns uint64 `json:"store_pushdowns"`
	Fallbacks uint64 `json:"fallbacks"`
}

// BTreePoint is one mode at one thread count: its runs and their medians.
type BTreePoint struct {
	Mode      string     `json:"mode"`
	Threads   int        `json:"threads"`
	Runs      []BTreeRun `json:"runs"`
	OpsPerSec float64    `json:"ops_per_s"`
	P50us     float64    `json:"p50_us"`
	P99us     float64    `json:"p99_us"`
	// Per lookup, over all runs: round trips (target commands), CPU in
	// µs, network bytes.
	RoundTrips  float64 `json:"round_trips_per_op"`
	HostCPUus   float64 `json:"host_cpu_us_per_op"`
	TargetCPUus float64 `json:"target_cpu_us_per_op"`
	TotalCPUus  float64 `json:"total_cpu_us_per_op"`
	NetBytes    float64 `json:"net_bytes_per_op"`
	Fallbacks   uint64  `json:"fallbacks"`
}

// BTreeRatios compares pushdown with plain at their saturated points:
// each is "how many times better pushdown is".
type BTreeRatios struct {
	Throughput float64 `json:"throughput"`  // pushdown ÷ plain ops/s
	RoundTrips float64 `json:"round_trips"` // plain ÷ pushdown per op
	TotalCPU   float64 `json:"total_cpu"`   // plain ÷ pushdown per op
	HostCPU    float64 `json:"host_cpu"`    // plain ÷ pushdown per op
	TargetCPU  float64 `json:"target_cpu"`  // plain ÷ pushdown per op (0: not measured)
	NetBytes   float64 `json:"net_bytes"`   // plain ÷ pushdown per op
	// P50 and P99 compare latency at LatencyThreads, the fewest threads
	// both modes ran with (saturated points differ in threads, and so in
	// queueing): plain ÷ pushdown.
	P50            float64 `json:"p50_latency"`
	P99            float64 `json:"p99_latency"`
	LatencyThreads int     `json:"latency_threads"`
}

// BTreeBar is one of the targets: Got must be at least Want.
type BTreeBar struct {
	What string  `json:"what"`
	Want float64 `json:"want"`
	Got  float64 `json:"got"`
	Met  bool    `json:"met"`
}

// autoSweepFlat is how many doublings without 5% more throughput end an
// automatic sweep: three, because one run in a noisy neighbourhood can
// dip by more than the growth left.
const autoSweepFlat = 3

// btreeNQN is the subsystem the benchmark's target serves.
const btreeNQN = "nqn.2026-11.io.nearstore:bench-btree"

// btreeEnv is a target serving a device, the host connected to it, an
// offloadfs on the namespace and the loaded store.
type btreeEnv struct {
	probe   targetProbe
	ctrl    *host.Controller
	ns      *host.Namespace
	fsys    *offloadfs.FS
	store   *btree.Store
	spec    string
	closers harness.Closers
}

func (e *btreeEnv) Close() error {
	return e.closers.Close()
}

// targetProbe reads a target's counters: its I/O commands on the
// namespace by operation, its CPU time, and the bytes it moved over
// its connections.
type targetProbe interface {
	commands(ctx context.Context) (map[string]uint64, error)
	// cpu and netBytes return ok false when they cannot be told apart
	// from this process's.
	cpu() (d time.Duration, ok bool, err error)
	netBytes() (uint64, error)
}

// startBTreeEnv starts the target (in this process, or as its own
// process), connects, makes the file system and loads the tree.
func startBTreeEnv(ctx context.Context, cfg *Config, threads int) (_ *btreeEnv, err error) {
	e := &btreeEnv{}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	index, values := btreeSizes(cfg.Keys, cfg.Fanout, cfg.ValueSize)
	// Room for the tree, the file system's metadata and slack.
	size := (index + values + (index+values)/8 + 32<<20 + 1<<20 - 1) &^ (1<<20 - 1)
	if e.spec, err = deviceSpec(cfg.Device, size); err != nil {
		return nil, err
	}
	var addr string
	if cfg.TargetExe != "" {
		addr, err = e.startTargetProcess(ctx, cfg)
	} else {
		addr, err = e.startTargetHere(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	depth := min(MaxBTreeThreads-1, max(threads, 32))
	e.ctrl, err = host.Connect(ctx, addr, btreeNQN, harness.HostOptions(host.Options{IOQueues: cfg.Queues, QueueDepth: depth, Logger: cfg.Logger}))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.ctrl.Close)
	if e.ns, err = e.ctrl.Namespace(1); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if cfg.Prepare != nil {
		if err := cfg.Prepare(ctx, e.ns); err != nil {
			return nil, err
		}
	}
	if err := offloadfs.Mkfs(ctx, e.ns, offloadfs.MkfsOptions{}); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.fsys, err = offloadfs.Mount(ctx, e.ns, offloadfs.Options{CommitInterval: -1, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.fsys.Close)
	return e, nil
}

// btreeSizes returns the sizes of a tree's index file and value log.
func btreeSizes(keys int64, fanout, valueSize int) (index, values int64) {
	n := max((keys+int64(fanout)-1)/int64(fanout), 1)
	index = n
	for n > 1 {
		n = (n + int64(fanout) - 1) / int64(fanout)
		index += n
	}
	return index * btree.NodeSize, keys * int64(valueSize)
}

// load bulk-loads the tree and opens it with the configured cache.
func (e *btreeEnv) load(ctx context.Context, cfg *Config) (BTreeLoad, error) {
	src := func(i int64, v []byte) (uint64, error) {
		k := BTreeKey(i)
		PutBTreeValue(v, k)
		return k, nil
	}
	opts := btree.Options{
		Fanout: cfg.Fanout, ValueSize: cfg.ValueSize, CacheLevels: cfg.CacheLevels,
		Pusher: btree.RawPusher{NS: e.ns}, Loader: e.ctrl, Runtime: cfg.Runtime,
		Progress: cfg.LoadProgress, Logger: cfg.Logger,
	}
	start := time.Now()
	s, err := btree.Create(ctx, e.fsys, "bpfkv", cfg.Keys, src, opts)
	if err != nil {
		return BTreeLoad{}, err
	}
	el := time.Since(start)
	e.store = s
	e.closers = append(e.closers, s.Close)
	info := s.Info()
	return BTreeLoad{Seconds: el.Seconds(), MBps: float64(info.IndexBytes+info.ValueBytes) / el.Seconds() / 1e6}, nil
}

// PutBTreeValue writes functions.BTreeValue(key, len(v)) into v without
// allocating.
func PutBTreeValue(v []byte, key uint64) {
	var kb [8]byte
	binary.LittleEndian.PutUint64(kb[:], key)
	for i := range v {
		if i < 8 {
			v[i] = kb[i]
		} else {
			v[i] = byte(i) ^ byte(key)
		}
	}
}

// checkBTreeValue reports whether v is key's value.
func checkBTreeValue(v []byte, key uint64, size int) bool {
	if len(v) != size {
		return false
	}
	var kb [8]byte
	binary.LittleEndian.PutUint64(kb[:], key)
	for i, b := range v {
		want := byte(i) ^ byte(key)
		if i < 8 {
			want = kb[i]
		}
		if b != want {
			return false
		}
	}
	return true
}

// startTargetHere runs the target in this process with both runtimes.
func (e *btreeEnv) startTargetHere(ctx context.Context, cfg *Config) (string, error) {
	vol, err := volume.Open(e.spec)
	if err != nil {
		return "", err
	}
	e.closers = append(e.closers, vol.Close)
	// Keep an idle wasm instance for every lookup that can be in flight:
	// on a slow device each pushdown holds its instance for the whole
	// walk, and past the pool every request instantiates a new one.
	wrt, err := wasm.NewRuntime(ctx, wasm.Options{PoolSize: MaxBTreeThreads})
	if err != nil {
		return "", err
	}
	e.closers = append(e.closers, func() error { return wrt.Close(context.Background()) })
	reg := prometheus.NewRegistry()
	srv, err := target.New(target.Config{
		Subsystems: []target.SubsystemConfig{{NQN: btreeNQN, Namespaces: []target.NamespaceConfig{{Backend: vol, Name: e.spec}}}},
		Logger:     cfg.Logger,
		Metrics:    target.NewMetrics(reg),
		Runtimes:   []sandbox.Runtime{wrt, ebpf.NewRuntime(ebpf.Options{Logger: cfg.Logger})},
	})
	if err != nil {
		return "", err
	}
	addr, stop, err := harness.ServeLoopback(srv)
	if err != nil {
		return "", err
	}
	e.closers = append(e.closers, stop)
	e.probe = &inProcessProbe{counter: harness.CommandCounter{Reg: reg, NSID: "1"}}
	return addr, nil
}

// startTargetProcess runs `nearstore target serve` with metrics on a
// second port.
func (e *btreeEnv) startTargetProcess(ctx context.Context, cfg *Config) (string, error) {
	mport, err := proc.FreePort()
	if err != nil {
		return "", err
	}
	maddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(mport))
	p, addr, err := harness.StartTarget(ctx, harness.TargetSpec{Exe: cfg.TargetExe, NQN: btreeNQN, Volume: e.spec,
		Args: []string{"--metrics", maddr}, CPUs: cfg.ServerCPUs})
	if err != nil {
		return "", err
	}
	e.closers = append(e.closers, p.Stop)
	if err := proc.WaitListening(ctx, maddr, p, 10*time.Second); err != nil {
		return "", err
	}
	e.probe = &processProbe{pid: p.Pid(), url: "http://" + maddr + "/metrics", nsid: "1"}
	return addr, nil
}

// inProcessProbe reads a target in this process: its metrics registry;
// network bytes are half of what this process read and wrote (each byte
// is written by one side and read by the other, both here).
type inProcessProbe struct{ counter harness.CommandCounter }

func (p *inProcessProbe) commands(context.Context) (map[string]uint64, error) {
	return p.counter.Read()
}
func (p *inProcessProbe) cpu() (time.Duration, bool, error) { return 0, false, nil }
func (p *inProcessProbe) netBytes() (uint64, error) {
	r, w, err := procIO("self")
	return (r + w) / 2, err
}

// processProbe reads a target process: /metrics over HTTP, its CPU time
// and I/O bytes from /proc (its only reads and writes are its
// connections').
type processProbe struct {
	pid  int
	url  string
	nsid string
}

func (p *processProbe) commands(ctx context.Context) (map[string]uint64, error) {
	return scrapeCommands(ctx, p.url, p.nsid)
}

func (p *processProbe) cpu() (time.Duration, bool, error) {
	d, err := harness.ProcCPU(strconv.Itoa(p.pid))
	return d, true, err
}

func (p *processProbe) netBytes() (uint64, error) {
	r, w, err := procIO(strconv.Itoa(p.pid))
	return r + w, err
}

// scrapeCommands reads nearstore_target_commands_total for namespace nsid
// from a Prometheus text endpoint, summed by op.
func scrapeCommands(ctx context.Context, url, nsid string) (map[string]uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: target metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: target metrics: %s", resp.Status)
	}
	return parseCommandCounts(resp.Body, nsid)
}

// parseCommandCounts reads the text exposition format's
// nearstore_target_commands_total samples of namespace nsid, by op.
func parseCommandCounts(r io.Reader, nsid string) (map[string]uint64, error) {
	const name = "nearstore_target_commands_total{"
	out := map[string]uint64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), name)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(line, "} ")
		if !ok {
			return nil, fmt.Errorf("bench: metrics line %q", sc.Text())
		}
		ls := parseLabels(labels)
		if ls["nsid"] != nsid {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("bench: metrics line %q: %w", sc.Text(), err)
		}
		out[ls["op"]] += uint64(v)
	}
	return out, sc.Err()
}

// parseLabels reads `a="x",b="y"` (values without escaped quotes, as the
// target's are).
func parseLabels(s string) map[string]string {
	m := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		v, rest, _ := strings.Cut(rest, `"`)
		m[strings.TrimSpace(k)] = v
		s = strings.TrimPrefix(rest, ",")
	}
	return m
}

// procIO returns the bytes a process has passed to read and write system
// calls (rchar, wchar), sockets included.
func procIO(pid string) (r, w uint64, err error) {
	b, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return 0, 0, fmt.Errorf("bench: I/O counters: %w", err)
	}
	return parseProcIO(b)
}

func parseProcIO(b []byte) (r, w uint64, err error) {
	var seen int
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, perr := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		switch k {
		case "rchar":
			r, err, seen = n, perr, seen+1
		case "wchar":
			w, err, seen = n, perr, seen+1
		}
		if err != nil {
			return 0, 0, fmt.Errorf("bench: /proc io: %w", err)
		}
	}
	if seen != 2 {
		return 0, 0, errors.New("bench: /proc io has no rchar and wchar")
	}
	return r, w, nil
}

// btreeSample is the counters at one instant.
type btreeSample struct {
	cmds      map[string]uint64
	hostCPU   time.Duration
	targetCPU time.Duration
	net       uint64
	store     btree.Stats
}

// sample reads every counter. The target's metrics are scraped first and
// its CPU and bytes read after when start (and the reverse at the end), so
// the scrape itself falls outside the window measured.
func (e *btreeEnv) sample(ctx context.Context, start bool) (btreeSample, error) {
	var s btreeSample
	var err error
	scrape := func() error {
		s.cmds, err = e.probe.commands(ctx)
		return err
	}
	if start {
		if err := scrape(); err != nil {
			return s, err
		}
	}
	if s.net, err = e.probe.netBytes(); err != nil {
		return s, err
	}
	if s.targetCPU, _, err = e.probe.cpu(); err != nil {
		return s, err
	}
	if s.hostCPU, err = harness.ProcCPU("self"); err != nil {
		return s, err
	}
	s.store = e.store.Stats()
	if !start {
		if err := scrape(); err != nil {
			return s, err
		}
	}
	return s, nil
}

// Run measures BPF-KV point lookups of random keys on a store loaded
// into an offloadfs on a target, in each mode: one goroutine per thread,
// each looking up one key at a time and checking every value, for each
// point of the thread sweep. See Report for what it records.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	maxThreads := slices.Max(cfg.Threads)
	if cfg.AutoSweep {
		maxThreads = cfg.MaxThreads
	}
	harness.Stage(cfg.Progress, "starting the target (%s device) and making the file system", cfg.Device)
	e, err := startBTreeEnv(ctx, &cfg, maxThreads)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	harness.Stage(cfg.Progress, "loading %d keys (fanout %d, %d-byte values)", cfg.Keys, cfg.Fanout, cfg.ValueSize)
	ld, err := e.load(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	rep := &Report{
		Machine: report.DescribeMachine(), Tree: e.store.Info(), Device: cfg.Device, Volume: e.spec,
		Runtime: cfg.Runtime.String(), Queues: cfg.Queues, Repeat: cfg.Repeat, RunSecs: cfg.Duration.Seconds(),
		Load: ld, Target: BTreeTarget{Process: cfg.TargetExe != "", CPUs: cfg.ServerCPUs},
	}
	b := &btreeBench{cfg: &cfg, env: e}
	// Warm up each mode: connections, the target's instances, caches.
	for _, m := range cfg.Modes {
		if _, err := b.run(ctx, m, min(16, maxThreads), min(cfg.Duration/4, 500*time.Millisecond), ""); err != nil {
			return rep, err
		}
	}
	active := slices.Clone(cfg.Modes)
	best := map[btree.Mode]float64{}
	flat := map[btree.Mode]int{} // points running without 5% growth
	threads := cfg.Threads
	if cfg.AutoSweep {
		threads = nil
		for t := 1; t <= cfg.MaxThreads; t *= 2 {
			threads = append(threads, t)
		}
	}
	for _, t := range threads {
		if len(active) == 0 {
			break
		}
		pts := make([]BTreePoint, len(active))
		for i, m := range active {
			pts[i] = BTreePoint{Mode: m.String(), Threads: t}
		}
		for r := 1; r <= cfg.Repeat; r++ {
			for i, m := range active {
				label := fmt.Sprintf("%-8s %4d threads, run %d/%d", m, t, r, cfg.Repeat)
				run, err := b.run(ctx, m, t, cfg.Duration, label)
				if err != nil {
					// What was measured so far stands: a long sweep that
					// fails late keeps its completed points.
					rep.finish(cfg.Modes)
					return rep, err
				}
				pts[i].Runs = append(pts[i].Runs, run)
			}
		}
		var still []btree.Mode
		for i, m := range active {
			p := summarize(pts[i], rep.Target.Process)
			rep.Points = append(rep.Points, p)
			if p.OpsPerSec >= best[m]*1.05 {
				flat[m] = 0
			} else {
				flat[m]++
			}
			best[m] = max(best[m], p.OpsPerSec)
			if !cfg.AutoSweep || flat[m] < autoSweepFlat {
				still = append(still, m)
			}
		}
		active = still
	}
	rep.finish(cfg.Modes)
	return rep, nil
}

// finish picks each mode's saturated point and compares them.
func (rep *Report) finish(modes []btree.Mode) {
	rep.Saturated = nil
	for _, m := range modes {
		var sat *BTreePoint
		for i := range rep.Points {
			p := &rep.Points[i]
			if p.Mode == m.String() && (sat == nil || p.OpsPerSec > sat.OpsPerSec) {
				sat = p
			}
		}
		if sat != nil {
			rep.Saturated = append(rep.Saturated, *sat)
		}
	}
	rep.Ratios, rep.Bars = btreeRatios(rep)
}

// btreeBench runs timed lookups.
type btreeBench struct {
	cfg  *Config
	env  *btreeEnv
	runs uint64
}

// run looks up random keys with threads goroutines for d and returns what
// it measured; label, when set, shows a progress bar.
func (b *btreeBench) run(ctx context.Context, mode btree.Mode, threads int, d time.Duration, label string) (BTreeRun, error) {
	cfg, e := b.cfg, b.env
	b.runs++
	seed := b.runs
	before, err := e.sample(ctx, true)
	if err != nil {
		return BTreeRun{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ops atomic.Int64
	// late is set when a lookup that ended after the deadline was
	// counted: only while the run had counted none, so that a short run
	// on a loaded machine measures one lookup rather than nothing; the
	// run's time then lasts until every thread is done.
	var late atomic.Bool
	var firstErr error
	var errOnce sync.Once
	hists := hist.NewSet(threads)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for t, h := range hists {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(cfg.Seed+seed, uint64(t)))
			for runCtx.Err() == nil {
				key := BTreeKey(rng.Int64N(cfg.Keys))
				t0 := time.Now()
				if !t0.Before(deadline) && ops.Load() > 0 {
					return
				}
				v, err := e.store.Get(runCtx, mode, key)
				t1 := time.Now()
				if err == nil && !checkBTreeValue(v, key, cfg.ValueSize) {
					err = fmt.Errorf("key %d: wrong value %x", key, v)
				}
				if err != nil {
					if runCtx.Err() == nil {
						errOnce.Do(func() { firstErr = fmt.Errorf("bench: %v lookup: %w", mode, err) })
					}
					cancel()
					return
				}
				if t1.Before(deadline) || ops.Load() == 0 {
					if !t1.Before(deadline) {
						late.Store(true)
					}
					h.Record(t1.Sub(t0))
					ops.Add(1)
				}
			}
		})
	}
	if label != "" && cfg.RunBar != nil {
		update, end := cfg.RunBar(label, d)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		tick := time.NewTicker(200 * time.Millisecond)
	loop:
		for {
			select {
			case <-tick.C:
				update(min(time.Since(start), d), ops.Load())
			case <-done:
				break loop
			}
		}
		tick.Stop()
		update(d, ops.Load())
		end()
	}
	wg.Wait()
	secs := d.Seconds()
	if late.Load() {
		secs = time.Since(start).Seconds()
	}
	if firstErr != nil {
		return BTreeRun{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return BTreeRun{}, err
	}
	after, err := e.sample(ctx, false)
	if err != nil {
		return BTreeRun{}, err
	}
	h := hist.Merged(hists)
	n := int64(h.Count())
	return BTreeRun{
		Lookups: n, Seconds: secs, OpsPerSec: float64(n) / secs,
		P50us: report.Micros(h.Quantile(0.5)), P99us: report.Micros(h.Quantile(0.99)),
		Commands:  harness.DiffCounts(after.cmds, before.cmds),
		HostCPU:   (after.hostCPU - before.hostCPU).Seconds(),
		TargetCPU: (after.targetCPU - before.targetCPU).Seconds(),
		NetBytes:  after.net - before.net,
		Gets:      after.store.Gets - before.store.Gets,
		Reads:     after.store.Reads - before.store.Reads,
		Pushdowns: after.store.Pushdowns - before.store.Pushdowns,
		Fallbacks: after.store.Fallbacks - before.store.Fallbacks,
	}, nil
}

// summarize fills a point's medians and per-lookup figures: counters over
// all runs divided by all the lookups they cover.
func summarize(p BTreePoint, ownProcess bool) BTreePoint {
	p.OpsPerSec = report.MedianOf(p.Runs, func(r BTreeRun) float64 { return r.OpsPerSec })
	p.P50us = report.MedianOf(p.Runs, func(r BTreeRun) float64 { return r.P50us })
	p.P99us = report.MedianOf(p.Runs, func(r BTreeRun) float64 { return r.P99us })
	var ops, cmds, net uint64
	var hcpu, tcpu float64
	for _, r := range p.Runs {
		ops += r.Gets
		cmds += harness.SumCounts(r.Commands)
		net += r.NetBytes
		hcpu += r.HostCPU
		tcpu += r.TargetCPU
		p.Fallbacks += r.Fallbacks
	}
	if ops == 0 {
		return p
	}
	n := float64(ops)
	p.RoundTrips = float64(cmds) / n
	p.HostCPUus = hcpu * 1e6 / n
	p.NetBytes = float64(net) / n
	if ownProcess {
		p.TargetCPUus = tcpu * 1e6 / n
	}
	p.TotalCPUus = p.HostCPUus + p.TargetCPUus
	return p
}

// btreeRatios compares the modes' saturated points and checks the bars
// that apply.
func btreeRatios(rep *Report) (*BTreeRatios, []BTreeBar) {
	var plain, push *BTreePoint
	for i := range rep.Saturated {
		switch rep.Saturated[i].Mode {
		case btree.Plain.String():
			plain = &rep.Saturated[i]
		case btree.Pushdown.String():
			push = &rep.Saturated[i]
		}
	}
	if plain == nil || push == nil {
		return nil, nil
	}
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	r := &BTreeRatios{
		Throughput: div(push.OpsPerSec, plain.OpsPerSec),
		RoundTrips: div(plain.RoundTrips, push.RoundTrips),
		TotalCPU:   div(plain.TotalCPUus, push.TotalCPUus),
		HostCPU:    div(plain.HostCPUus, push.HostCPUus),
		TargetCPU:  div(plain.TargetCPUus, push.TargetCPUus),
		NetBytes:   div(plain.NetBytes, push.NetBytes),
	}
	lat := map[string]map[int]BTreePoint{}
	for _, p := range rep.Points {
		if lat[p.Mode] == nil {
			lat[p.Mode] = map[int]BTreePoint{}
		}
		lat[p.Mode][p.Threads] = p
	}
	for t, pl := range lat[btree.Plain.String()] {
		pd, ok := lat[btree.Pushdown.String()][t]
		if ok && (r.LatencyThreads == 0 || t < r.LatencyThreads) {
			r.LatencyThreads, r.P50, r.P99 = t, div(pl.P50us, pd.P50us), div(pl.P99us, pd.P99us)
		}
	}
	var bars []BTreeBar
	bar := func(what string, want, got float64) {
		bars = append(bars, BTreeBar{What: what, Want: want, Got: got, Met: got >= want})
	}
	switch {
	case rep.Tree.CacheLevels == 0 && rep.Tree.Depth >= 6:
		bar("saturated throughput, pushdown ÷ plain (no cache, ≥6 levels)", 3, r.Throughput)
		bar("round trips per lookup, plain ÷ pushdown", 4, r.RoundTrips)
		// "Less total CPU": any ratio above 1.
		bar("total CPU per lookup, plain ÷ pushdown (>1)", 1.0000001, r.TotalCPU)
	case rep.Tree.CacheLevels == 3:
		bar("saturated throughput, pushdown ÷ plain (top 3 levels cached)", 1.5, r.Throughput)
	}
	return r, bars
}

// WriteTable prints r: the sweep, the saturated points and the
// ratios.
func WriteTable(w io.Writer, r *Report) error {
	ew := &report.TableWriter{W: w}
	m := r.Machine
	ew.Printf("machine: %d CPUs (%s), kernel %s, %s, GOMAXPROCS %d\n", m.CPUs, m.CPUModel, m.Kernel, m.Go, m.GOMAXPROCS)
	if m.Pinning != "" {
		ew.Printf("pinning: %s\n", m.Pinning)
	}
	where := "in this process (CPU columns: the whole process under host)"
	if r.Target.Process {
		where = "in its own process"
		if r.Target.CPUs != "" {
			where += " on CPUs " + r.Target.CPUs
		}
	}
	t := r.Tree
	ew.Printf("tree: %d keys, %d levels of fanout %d, %d-byte values; %d levels cached on the host (%s)\n",
		t.Keys, t.Depth, t.Fanout, t.ValueSize, t.CacheLevels, volume.FormatSize(t.CacheBytes))
	ew.Printf("target: %s, %s; btree_lookup in %s; loaded in %.1fs (%.0f MB/s)\n", r.Volume, where, r.Runtime, r.Load.Seconds, r.Load.MBps)
	ew.Printf("medians of %d runs of %gs per point; every value checked\n\n", r.Repeat, r.RunSecs)
	header := func() {
		ew.Printf("%-9s %7s %10s %9s %9s %11s %9s %9s %9s %10s\n",
			"mode", "threads", "lookups/s", "p50 µs", "p99 µs", "round trips", "host µs", "target µs", "total µs", "net B/op")
	}
	row := func(p BTreePoint) {
		tcpu := "-"
		if r.Target.Process {
			tcpu = fmt.Sprintf("%.1f", p.TargetCPUus)
		}
		ew.Printf("%-9s %7d %10.0f %9.1f %9.1f %11.2f %9.1f %9s %9.1f %10.0f\n",
			p.Mode, p.Threads, p.OpsPerSec, p.P50us, p.P99us, p.RoundTrips, p.HostCPUus, tcpu, p.TotalCPUus, p.NetBytes)
	}
	header()
	for _, p := range r.Points {
		row(p)
	}
	ew.Printf("\nsaturated (highest throughput of the sweep):\n")
	header()
	for _, p := range r.Saturated {
		row(p)
	}
	if x := r.Ratios; x != nil {
		ew.Printf("\npushdown vs plain: %.2f× throughput, %.2f× fewer round trips, %.2f× less CPU per lookup (host %.2f×",
			x.Throughput, x.RoundTrips, x.TotalCPU, x.HostCPU)
		if r.Target.Process {
			ew.Printf(", target %.2f×", x.TargetCPU)
		}
		ew.Printf("), %.2f× fewer bytes", x.NetBytes)
		if x.LatencyThreads > 0 {
			ew.Printf("; at %d threads p50 %.2f× and p99 %.2f× lower", x.LatencyThreads, x.P50, x.P99)
		}
		ew.Printf("\n")
	}
	for _, b := range r.Bars {
		verdict := "met"
		if !b.Met {
			verdict = "MISSED"
		}
		want := fmt.Sprintf("≥ %.1f×", b.Want)
		if b.Want < 1.01 {
			want = "> 1×"
		}
		ew.Printf("goal: %s %s: %.2f× — %s\n", b.What, want, b.Got, verdict)
	}
	return ew.Err
}

// BTreeInfo returns the key count, fanout and depth Run would use for
// cfg, without running anything.
func BTreeInfo(cfg Config) (keys int64, fanout, depth int, err error) {
	if err := cfg.setDefaults(); err != nil {
		return 0, 0, 0, err
	}
	return cfg.Keys, cfg.Fanout, treeDepth(cfg.Keys, cfg.Fanout), nil
}
