// Package rubblebench is the RubbleDB experiment (bench rubble, issue
// 23): a local replicated KV cluster — an etcd ("nearstore cluster
// etcd") and R "nearstore node serve" processes, one chain per group,
// each node in every chain — under YCSB
// Load, A, B and F, run two ways in the same run, interleaved: the
// baseline, chain replication of kv/lsm in which every replica flushes
// and compacts, and RubbleDB, in which only the primary (the chain's
// head) flushes and compacts and ships its tables into the secondaries'
// slot pools. Modes is the one table mapping each way to its nodes'
// flags.
//
// Every run starts a fresh cluster (Load needs an empty store), so the
// repeats are independent; the modes take turns going first. Each phase
// runs a fixed number of operations, so the two modes do the same work,
// and reports per node, from outside the node: CPU time (/proc/PID/stat),
// TCP bytes sent and received (the kernel's per-socket counters, read by
// sock_diag, of the sockets the node process holds), and the compactions
// it ran (kv/lsm's "compacted" debug lines on the node's stderr: count,
// bytes, wall time). Roles come from the chains in etcd: the head is the
// primary, the others are secondaries.
//
// The nodes, etcd and the client share this machine's CPUs, so
// throughput follows whatever else runs; CPU time per operation is the
// figure to compare.
package rubblebench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/bench/ycsb"
	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
)

// Mode is one way of running the cluster's nodes.
type Mode struct {
	// Name is how the report calls the mode.
	Name string `json:"name"`
	// Store is the nodes' --store; Args are further "node serve" flags.
	Store string   `json:"store"`
	Args  []string `json:"args,omitempty"`
	// About says what the mode is.
	About string `json:"about"`
}

// NodeArgs are the "node serve" flags of the mode's nodes.
func (m Mode) NodeArgs() []string { return append([]string{"--store", m.Store}, m.Args...) }

// The modes' names.
const (
	Baseline = "baseline"
	Rubble   = "rubble"
)

// Modes is the table of the two modes and their nodes' flags, the
// baseline first. A mode whose flags the binary refuses (a build without
// --store rubble) is reported unavailable; the other still runs.
func Modes() []Mode {
	return []Mode{
		{Name: Baseline, Store: "lsm", About: "chain replication of kv/lsm; every replica flushes and compacts"},
		{Name: Rubble, Store: "rubble", About: "RubbleDB; only the primary flushes and compacts, shipping its tables into the secondaries' slot pools"},
	}
}

// Config is one run.
type Config struct {
	// Binary is the nearstore executable the nodes run.
	Binary string
	// Dir holds each cluster's data while it runs (a temporary directory
	// if empty); each cluster's is removed after it stops.
	Dir string
	// Replicas are the chain lengths R measured (default 2, 3, 4).
	Replicas []int
	// Groups is the number of replication groups sharing the key space
	// (default 1), each replicated on every node.
	Groups int
	// Records loaded by Load (default 50000); Ops per other workload
	// (default 50000); ValueSize bytes per value (default 1024).
	Records, Ops, ValueSize int
	// Workloads run after Load, in order (default A, B, F). Inserts and
	// scans are not supported (D and E).
	Workloads []ycsb.Workload
	// Threads issue operations, one in flight each (default 16).
	Threads int
	// Repeat is the number of runs per mode and R (default 3).
	Repeat int
	// MemTableSize is the nodes' --memtable-size (default 1 MiB, so
	// that a small run flushes and compacts).
	MemTableSize int
	// LeaseTTL is the nodes' --lease-ttl in seconds (default 10): long,
	// so that a node starved of CPU on a loaded machine keeps its place
	// in the chains. A run whose chains change anyway is run again, at
	// most Retries times (default 2; negative: never).
	LeaseTTL, Retries int
	// Modes are the modes compared (default Modes()).
	Modes []Mode
	// Progress, if set, is told each stage.
	Progress func(stage string)
	// Counter, if set, returns the function a phase reports its
	// operations done with (done of total), every 200 ms and at the end.
	Counter func(name string) func(done, total int64)
	// NodeLog, if set, receives the nodes' warnings and errors, each line
	// prefixed with the node's ID.
	NodeLog io.Writer
}

func (c *Config) defaults() error {
	if c.Binary == "" {
		return errors.New("rubblebench: no nearstore binary")
	}
	if len(c.Replicas) == 0 {
		c.Replicas = []int{2, 3, 4}
	}
	for _, r := range c.Replicas {
		if r < 2 || r > 16 {
			return fmt.Errorf("rubblebench: %d replicas: want 2 to 16 (a primary and secondaries)", r)
		}
	}
	if c.Groups == 0 {
		c.Groups = 1
	}
	if c.Groups < 0 || c.Groups > 64 {
		return fmt.Errorf("rubblebench: %d groups: want 1 to 64", c.Groups)
	}
	def := func(v *int, d int, what string) error {
		if *v == 0 {
			*v = d
		}
		if *v < 0 {
			return fmt.Errorf("rubblebench: %s %d", what, *v)
		}
		return nil
	}
	if err := errors.Join(def(&c.Records, 50000, "records"), def(&c.Ops, 50000, "ops"), def(&c.ValueSize, 1024, "value size"),
		def(&c.Threads, 16, "threads"), def(&c.Repeat, 3, "repeat"), def(&c.MemTableSize, 1<<20, "memtable size"),
		def(&c.LeaseTTL, 10, "lease TTL")); err != nil {
		return err
	}
	switch {
	case c.Retries == 0:
		c.Retries = 2
	case c.Retries < 0:
		c.Retries = 0
	}
	if c.ValueSize < valueHeader {
		return fmt.Errorf("rubblebench: value size %d: want at least %d", c.ValueSize, valueHeader)
	}
	if c.Records < 2 {
		return fmt.Errorf("rubblebench: %d records: want at least 2", c.Records)
	}
	if len(c.Workloads) == 0 {
		c.Workloads = []ycsb.Workload{ycsb.A, ycsb.B, ycsb.F}
	}
	for _, w := range c.Workloads {
		if w.Insert > 0 || w.Scan > 0 {
			return fmt.Errorf("rubblebench: workload %s inserts or scans: want reads, updates and read-modify-writes (A, B, C, F)", w.Name)
		}
	}
	if len(c.Modes) == 0 {
		c.Modes = Modes()
	}
	return nil
}

func (c *Config) stage(format string, args ...any) { harness.Stage(c.Progress, format, args...) }

// valueHeader is the record number and version at the head of every
// value (8 bytes each, little-endian); random bytes fill the rest.
const valueHeader = 16

func fillValue(v []byte, rec, ver uint64, r *rand.Rand) {
	binary.LittleEndian.PutUint64(v, rec)
	binary.LittleEndian.PutUint64(v[8:], ver)
	for i := valueHeader; i < len(v); i += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], r.Uint64())
		copy(v[i:], b[:])
	}
}

// checkValue checks that v is a value written for record rec.
func checkValue(v []byte, rec uint64, size int) error {
	if len(v) != size || binary.LittleEndian.Uint64(v) != rec {
		return fmt.Errorf("record %d: read a value of %d bytes for record %d", rec, len(v), binary.LittleEndian.Uint64(append(v, make([]byte, 8)...)))
	}
	return nil
}

// YCSBShards is the shard map that gives n groups g0…g(n-1) equal shares
// of YCSB's keys (ycsb.Split).
func YCSBShards(n int) (cluster.ShardMap, error) {
	m := cluster.ShardMap{Version: 1}
	var start []byte
	split := ycsb.Split(n)
	for i := range n {
		s := cluster.Shard{Start: start, Group: "g" + strconv.Itoa(i)}
		if i < len(split) {
			s.End = split[i]
			start = s.End
		}
		m.Shards = append(m.Shards, s)
	}
	return m, m.Validate()
}

// Run measures every R and mode, Repeat times each, and returns the
// report. A mode the binary refuses is reported unavailable; any other
// failure ends the run with the report so far.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	root, removeRoot, err := harness.WorkDir(cfg.Dir, "nearstore-rubblebench-")
	if err != nil {
		return nil, err
	}
	defer removeRoot()
	shards, err := YCSBShards(cfg.Groups)
	if err != nil {
		return nil, err
	}
	r := newReport(&cfg)
	zipf := ycsb.NewZipfian(uint64(cfg.Records), ycsb.Theta)
	for _, reps := range cfg.Replicas {
		for run := 1; run <= cfg.Repeat; run++ {
			order := slices.Clone(cfg.Modes)
			if run%2 == 0 {
				slices.Reverse(order)
			}
			for _, m := range order {
				mr := r.mode(m.Name)
				if !mr.Available {
					continue
				}
				dir := filepath.Join(root, fmt.Sprintf("%s-r%d-run%d", m.Name, reps, run))
				cr := clusterRun{cfg: &cfg, mode: m, replicas: reps, run: run, dir: dir, shards: shards, zipf: zipf}
				var phases []Phase
				var err error
				for try := 0; ; try++ {
					phases, err = cr.measure(ctx)
					os.RemoveAll(dir)
					if !errors.Is(err, errChainsChanged) || try == cfg.Retries {
						break
					}
					r.Retried = append(r.Retried, fmt.Sprintf("%s: %v", cr.label(), err))
					cfg.stage("%s: run again: %v", cr.label(), err)
				}
				r.Runs = append(r.Runs, phases...)
				if refused := (*harness.NodeRefusedError)(nil); errors.As(err, &refused) {
					mr.Available, mr.Unavailable = false, refused.Error()
					cfg.stage("%s: unavailable: %s", m.Name, refused.Stderr)
					continue
				}
				if err != nil {
					r.finish()
					return r, fmt.Errorf("%s, R = %d, run %d: %w", m.Name, reps, run, err)
				}
			}
		}
	}
	r.finish()
	return r, nil
}

// errChainsChanged is a run during which a chain was reconfigured (a
// node lost its lease): its figures mix roles, so it is run again.
var errChainsChanged = errors.New("the chains changed during the run")

// clusterRun is one mode's run at one R: a fresh cluster, Load, then
// the workloads.
type clusterRun struct {
	cfg      *Config
	mode     Mode
	replicas int
	run      int
	dir      string
	shards   cluster.ShardMap
	zipf     *ycsb.Zipfian
}

func (c *clusterRun) label() string {
	return fmt.Sprintf("%s R=%d run %d", c.mode.Name, c.replicas, c.run)
}

func (c *clusterRun) measure(ctx context.Context) (_ []Phase, err error) {
	cfg := c.cfg
	cfg.stage("%s: starting etcd and %d nodes (%s)", c.label(), c.replicas, strings.Join(c.mode.NodeArgs(), " "))
	logs := map[string]*nodeLog{}
	for i := 1; i <= c.replicas; i++ {
		id := fmt.Sprintf("n%d", i)
		logs[id] = &nodeLog{id: id, fwd: cfg.NodeLog}
	}
	cl, err := harness.StartChainCluster(ctx, harness.ChainClusterSpec{
		Exe: cfg.Binary, Dir: c.dir, Nodes: c.replicas, Shards: c.shards, LogLevel: "debug",
		NodeArgs: append(c.mode.NodeArgs(), "--memtable-size", strconv.Itoa(cfg.MemTableSize), "--lease-ttl", strconv.Itoa(cfg.LeaseTTL)),
		Stderr:   func(id string) io.Writer { return logs[id] },
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := cl.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("stopping the cluster: %w", cerr)
		}
	}()
	chains, err := cl.Chains(ctx)
	if err != nil {
		return nil, err
	}
	roles := rolesOf(chains)
	rt, err := chain.NewRouter(ctx, chain.RouterConfig{Control: cl.Control, Reads: chain.ReadTail})
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	m := meter{cl: cl, logs: logs, roles: roles}
	var phases []Phase
	load := ycsb.Workload{Name: "load", Insert: 1}
	for _, w := range append([]ycsb.Workload{load}, cfg.Workloads...) {
		p, err := c.phase(ctx, rt, &m, w)
		if err != nil {
			return phases, fmt.Errorf("%s: %w", w.Name, err)
		}
		now, err := cl.Chains(ctx)
		if err != nil {
			return phases, err
		}
		if !sameChains(chains, now) {
			return phases, fmt.Errorf("%s: %w (%v, then %v): roles are not one node's", w.Name, errChainsChanged, chains, now)
		}
		cfg.stage("%s %-4s %8.0f ops/s  p99 %8.0f µs  CPU %6.1f µs/op (primary %.1f, secondaries %.1f)  writes/msg %.1f (secondary %.1f)", c.label(), w.Name,
			p.OpsPerSec, p.P99us, p.CPUus.Total, p.CPUus.Primary, p.CPUus.Secondaries, p.WritesPerShip.Primary, p.WritesPerShip.Secondary)
		phases = append(phases, p)
	}
	return phases, nil
}

// phase runs one workload (Load: insert every record) and measures it.
func (c *clusterRun) phase(ctx context.Context, rt *chain.Router, m *meter, w ycsb.Workload) (Phase, error) {
	cfg := c.cfg
	n := uint64(cfg.Ops)
	if w.Insert > 0 {
		n = uint64(cfg.Records)
	}
	var count func(done, total int64)
	if cfg.Counter != nil {
		count = cfg.Counter(fmt.Sprintf("%s %-4s ", c.label(), w.Name))
	}
	chooser := ycsb.Scrambled{Z: c.zipf}
	var version atomic.Uint64
	op := func(i uint64, r *rand.Rand) error {
		v := make([]byte, cfg.ValueSize)
		if w.Insert > 0 {
			fillValue(v, i, 0, r)
			return rt.Put(ctx, ycsb.Key(i), v)
		}
		rec := chooser.Next(r)
		k := ycsb.Key(rec)
		o := w.Choose(r)
		if o == ycsb.Read || o == ycsb.ReadModifyWrite {
			got, found, err := rt.Get(ctx, k)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("record %d (%s) not found", rec, k)
			}
			if err := checkValue(got, rec, cfg.ValueSize); err != nil {
				return err
			}
			if o == ycsb.Read {
				return nil
			}
		}
		fillValue(v, rec, version.Add(1), r)
		return rt.Put(ctx, k, v)
	}
	before, err := m.sample()
	if err != nil {
		return Phase{}, err
	}
	o := harness.Ops{Threads: cfg.Threads, N: n, Op: op, Seed: uint64(c.run)}
	if count != nil {
		o.Progress, o.Every = func(done uint64) { count(int64(done), int64(n)) }, 200*time.Millisecond
	}
	h, el, err := harness.RunOps(ctx, o)
	if count != nil {
		count(int64(n), int64(n))
	}
	if err != nil {
		return Phase{}, err
	}
	after, err := m.sample()
	if err != nil {
		return Phase{}, err
	}
	return m.phase(c, w.Name, n, el, h, before, after), nil
}

// nodeKinds is how the nodes' role names read in reports.
const (
	RolePrimary   = "primary"
	RoleSecondary = "secondary"
	RoleMixed     = "mixed"
)

// rolesOf names each node's role from the chains: the head of every
// group is the primary, a member that heads none a secondary; a node that
// heads some groups and not others is mixed.
func rolesOf(chains map[string][]string) map[string]string {
	roles := map[string]string{}
	for _, members := range chains {
		for i, id := range members {
			role := RoleSecondary
			if i == 0 {
				role = RolePrimary
			}
			if had, ok := roles[id]; ok && had != role {
				role = RoleMixed
			}
			roles[id] = role
		}
	}
	return roles
}

func sameChains(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for g, m := range a {
		if !slices.Equal(m, b[g]) {
			return false
		}
	}
	return true
}

// latencies are a phase's p50 and p99 in µs.
func latencies(h *hist.Histogram) (p50, p99 float64) {
	return report.Micros(h.Quantile(0.5)), report.Micros(h.Quantile(0.99))
}
