// Package offloadfs_test holds the end-to-end tests of offloadfs against a
// real target: the target with the real wasm runtime on a loopback TCP
// listener, the real host library, and the file system's synchronizer,
// file-level function calls and grants on top. They check issue 4's
// promises end to end: pushdowns running while the files they name are
// rewritten, truncated, moved and removed never return bytes from blocks
// that are not the file's; a refused or discarded request falls back to
// the host with the same result; a target that restarts is caught up;
// grants confine the grantee and pin the owner.
package offloadfs_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/stamptest"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testmodules"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/volume"
)

const (
	testNQN = "nqn.2026-11.io.nearstore:offloadfs-e2e"
	// ownerNQN is the file system's host; taskNQN a host it grants to.
	ownerNQN = "nqn.2026-11.io.nearstore:owner"
	taskNQN  = "nqn.2026-11.io.nearstore:task"
	nsSize   = 64 << 20
	bs       = 512 // the namespace's block size: every block is stamped
)

// limits are the function limits of both sides, generous enough for the
// race detector on a busy machine.
var limits = sandbox.Limits{Time: 10 * time.Second}

// restart stops the target and starts a new one on the same address and
// volume.
func (e *env) restart() {
	e.t.Helper()
	e.srv = e.srv.Restart()
}

// env is a target, the owner connected to it, and an offloadfs on the
// namespace with the stamp function registered.
type env struct {
	t    testing.TB
	vol  volume.Volume
	srv  *testtarget.Target
	ctrl *host.Controller
	ns   *host.Namespace
	fsys *offloadfs.FS
	reg  *prometheus.Registry
	fn   sandbox.ID
	hrt  *wasm.Runtime // the host's runtime for fallbacks
}

type envConfig struct {
	// wrap, if set, wraps the namespace as the file system's Remote.
	wrap func(offloadfs.Remote) offloadfs.Remote
	// commitInterval is the file system's (default: commits only on Sync).
	commitInterval time.Duration
	// size is the namespace's (default nsSize).
	size int64
}

func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, reg: prometheus.NewRegistry()}
	var err error
	size := cfg.size
	if size == 0 {
		size = nsSize
	}
	if e.vol, err = volume.Open(fmt.Sprintf("mem:%d?bs=%d", size, bs)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.vol.Close() })
	e.srv = testtarget.Start(t, testtarget.Config{
		NQN: testNQN, Name: "e2e", Volume: e.vol, Limits: limits,
		Runtimes: func() ([]sandbox.Runtime, error) {
			wrt, err := wasm.NewRuntime(ctx, wasm.Options{})
			return []sandbox.Runtime{wrt}, err
		},
	})
	// Whichever server is running at the end (restart replaces it) stops
	// after everything registered later: the hosts and the file system.
	t.Cleanup(func() { e.srv.Stop() })
	e.ctrl, e.ns = e.connect(ownerNQN, 4)
	if err := offloadfs.Mkfs(ctx, e.ns, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	if e.hrt, err = wasm.NewRuntime(ctx, wasm.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.hrt.Close(context.Background()) })
	var remote offloadfs.Remote = e.ns
	if cfg.wrap != nil {
		remote = cfg.wrap(remote)
	}
	ci := cfg.commitInterval
	if ci == 0 {
		ci = -1
	}
	e.fsys, err = offloadfs.Mount(ctx, e.ns, offloadfs.Options{
		CommitInterval: ci,
		Logger:         slog.New(slog.DiscardHandler),
		Remote:         remote,
		Loader:         e.ctrl,
		Runtimes:       []sandbox.Runtime{e.hrt},
		FunctionLimits: limits,
		Metrics:        offloadfs.NewMetrics(e.reg),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if e.fsys == nil {
			return // a test closed it
		}
		if err := e.fsys.Close(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	if e.fn, err = e.fsys.RegisterFunction(ctx, readTestdata(t, "stamp.wasm")); err != nil {
		t.Fatal(err)
	}
	return e
}

// connect connects a host under hostNQN, with keep-alive off and fast
// reconnects.
func (e *env) connect(hostNQN string, queues int) (*host.Controller, *host.Namespace) {
	e.t.Helper()
	return testhost.Connect(e.t, e.srv.Addr(), testNQN, 1, host.Options{
		HostNQN: hostNQN, IOQueues: queues, KeepAlive: -1, ReconnectDelay: 20 * time.Millisecond,
	})
}

// syncRemote waits, with a deadline, until the target holds every change.
func (e *env) syncRemote() { e.t.Helper(); stamptest.SyncRemote(e.t, e.fsys) }

func readTestdata(t testing.TB, name string) []byte { return testmodules.Read(t, "testdata", name) }

// delayRemote passes requests to a Remote after a random delay, and
// returns their results after another, as a slow network would: the
// windows in which a file can change between planning, execution and the
// check on completion grow from microseconds to milliseconds. Extent-map
// puts are delayed too, so the target goes on holding a file's old map
// for a while after the file has changed and its old blocks have gone
// to other files: exactly when a request the host did not check could
// read them.
type delayRemote struct {
	offloadfs.Remote
	// req bounds the delays of a request each way; put those of a put,
	// of which only every other one is delayed at all, so puts also
	// overtake requests (which the target then refuses as stale).
	req, put time.Duration

	mu  sync.Mutex
	rng *rand.Rand
}

func (d *delayRemote) nap() {
	d.mu.Lock()
	n := time.Duration(d.rng.Int64N(int64(d.req)))
	d.mu.Unlock()
	time.Sleep(n)
}

func (d *delayRemote) Pushdown(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, scratch []byte) (pushdown.Result, error) {
	d.nap()
	defer d.nap()
	return d.Remote.Pushdown(ctx, fn, files, start, scratch)
}

func (d *delayRemote) UpdateExtentMaps(ctx context.Context, ups []pushdown.MapUpdate) (int, int, error) {
	d.mu.Lock()
	var n time.Duration
	if d.rng.IntN(2) == 0 {
		n = time.Duration(d.rng.Int64N(int64(d.put)))
	}
	d.mu.Unlock()
	time.Sleep(n)
	return d.Remote.UpdateExtentMaps(ctx, ups)
}

func (d *delayRemote) LambdaRead(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, params []byte, outCap int) (pushdown.Result, error) {
	d.nap()
	defer d.nap()
	return d.Remote.LambdaRead(ctx, fn, files, start, params, outCap)
}
