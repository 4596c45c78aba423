package offload_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/metricstest"
	"github.com/nearstore/nearstore/internal/testengine"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// The tests run the real pieces: package target serving a memory volume
// on loopback TCP, the owner's file system on it over NVMe/TCP, and
// engines served over gRPC on loopback — a peer reaching the volume over
// its own NVMe/TCP connection under its own host NQN, or an in-target
// engine reading the volume directly and admitting its I/O through the
// target's grants.
const (
	rigNQN    = "nqn.2026-11.io.nearstore:offload-unit"
	ownerNQN  = "nqn.2026-11.io.nearstore:owner"
	engineNQN = "nqn.2026-11.io.nearstore:engine"
	rigBS     = 512
)

// rig is a target, an owner's file system, and engines.
type rig struct {
	t      testing.TB
	vol    volume.Volume
	target *testtarget.Target
	ns     *host.Namespace // the owner's
	fsys   *offloadfs.FS
	reg    *prometheus.Registry // the last engine's and its client's metrics
}

func newRig(t testing.TB) *rig {
	t.Helper()
	r := &rig{t: t}
	var err error
	if r.vol, err = volume.Open(fmt.Sprintf("mem:%d?bs=%d", 64<<20, rigBS)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.vol.Close() })
	r.target = testtarget.Start(t, testtarget.Config{NQN: rigNQN, Name: "unit", Volume: r.vol})
	t.Cleanup(r.target.Stop)
	r.ns = r.connect(ownerNQN)
	testfs.Format(t, r.ns)
	r.fsys = r.mount()
	return r
}

// mount mounts the file system read-write as the owner.
func (r *rig) mount() *offloadfs.FS {
	r.t.Helper()
	opts := testfs.Quiet()
	opts.Remote = r.ns
	return testfs.Mount(r.t, r.ns, opts)
}

// metric sums the metric's samples with labels want.
func (r *rig) metric(name string, want map[string]string) float64 {
	r.t.Helper()
	return metricstest.Sum(r.t, r.reg, name, want)
}

func (r *rig) connect(hostNQN string) *host.Namespace {
	r.t.Helper()
	_, ns := testhost.Connect(r.t, r.target.Addr(), rigNQN, 1, host.Options{HostNQN: hostNQN, IOQueues: 2, KeepAlive: -1})
	return ns
}

// engineKind is where an engine runs.
type engineKind int

const (
	onPeer   engineKind = iota // over its own NVMe/TCP connection
	inTarget                   // on the volume directly, through the target's grants
)

func (k engineKind) String() string { return [...]string{"peer", "target"}[k] }

// engine starts an engine of kind with cfg's tasks and policy, serves it
// on loopback, and returns it and a client (with a local engine over the
// owner's device for tasks it turns away).
func (r *rig) engine(kind engineKind, cfg offload.Config) (*offload.Engine, *offload.Client) {
	r.t.Helper()
	cfg.HostNQN = engineNQN
	if cfg.Tasks == nil {
		cfg.Tasks = testTasks(r.t)
	}
	switch kind {
	case onPeer:
		ns := r.connect(engineNQN)
		cfg.Device = ns
		cfg.BeforeTask = func(ctx context.Context) error { return offload.RegisterTaskHost(ctx, ns, engineNQN) }
	case inTarget:
		cfg.Device = offloadfs.VolumeDevice(r.vol)
		srv := r.target.Server()
		cfg.Admit = func(lba, n uint64, write bool) (func(), error) {
			return srv.AdmitGranted(rigNQN, 1, engineNQN, lba, n, write)
		}
	}
	r.reg = prometheus.NewRegistry()
	metrics := offload.NewMetrics(r.reg)
	cfg.Metrics = metrics
	e, addr := testengine.Serve(r.t, cfg)
	local, err := offload.NewEngine(offload.Config{HostNQN: ownerNQN, Device: r.ns, Tasks: cfg.Tasks})
	if err != nil {
		r.t.Fatal(err)
	}
	c, err := offload.Dial(addr, offload.ClientOptions{Name: "client-a", Local: local, Metrics: metrics})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return e, c
}

// write creates name with n pseudo-random bytes and returns them.
func (r *rig) write(name string, n int, seed uint64) []byte {
	r.t.Helper()
	data := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	f, err := r.fsys.Create(name)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		r.t.Fatal(err)
	}
	if err := r.fsys.Sync(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	return data
}

func (r *rig) open(name string) *offloadfs.File {
	r.t.Helper()
	f, err := r.fsys.Open(name)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { f.Close() })
	return f
}

// contents reads a whole file.
func (r *rig) contents(fsys *offloadfs.FS, name string) []byte {
	r.t.Helper()
	b, err := fsys.ReadFile(name)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

func mustEqual(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, want %d (first difference at %d)", what, len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
