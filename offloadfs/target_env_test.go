package offloadfs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/stamptest"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testmodules"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/volume"
)

// The tests of the synchronizer, the file-level function calls and grants
// run against the real target: package target serving a memory volume on
// a loopback TCP listener, the owner connected to it with package host
// (the connection is both the file system's device and its Remote), and
// the eBPF runtime on both sides (the lightest of the two under the race
// detector). Conditions a test needs are made the real way: a restarted
// target, Function Unload, Extent Map Puts sent on the owner's
// connection; what the target did is read back with Extent Map Query and
// its Prometheus metrics. tests/offloadfs adds the wasm runtime and races.
const (
	envNQN   = "nqn.2026-11.io.nearstore:offloadfs-unit"
	ownerNQN = "nqn.2026-11.io.nearstore:owner"
	// taskNQN is a host the file system grants to.
	taskNQN = "nqn.2026-11.io.nearstore:task"
	envBS   = 512 // the namespace's block size: every block is stamped
)

// envLimits bound functions on both sides, generously for the race
// detector on a busy machine.
var envLimits = sandbox.Limits{Time: 10 * time.Second}

// testTarget is the environment's target, restartable on the same
// address and volume (testtarget), with counters the tests read.
type testTarget struct{ *testtarget.Target }

// ran is how many function requests of op (pushdown, lambda_read,
// lambda_write) the target completed with result (ok, error).
func (s testTarget) ran(op, result string) int {
	return int(s.Metric("nearstore_target_commands_total", map[string]string{"op": op, "result": result}))
}

// grants is how many grants the target holds.
func (s testTarget) grants() int {
	return int(s.Metric("nearstore_target_grants", nil))
}

// remoteEnv is a file system on a namespace of a real target, with the
// stamp function registered on both sides.
type remoteEnv struct {
	t      testing.TB
	vol    volume.Volume
	target testTarget
	ctrl   *host.Controller
	ns     *host.Namespace
	fsys   *offloadfs.FS
	fn     sandbox.ID
}

// newRemoteEnv starts a target, connects the owner, formats the namespace
// and mounts it with the connection as Remote; mutate may change the
// options first (wrap Remote, set OnCommit, Metrics).
func newRemoteEnv(t testing.TB, mutate func(*offloadfs.Options)) *remoteEnv {
	t.Helper()
	ctx := context.Background()
	e := &remoteEnv{t: t}
	var err error
	if e.vol, err = volume.Open(fmt.Sprintf("mem:%d?bs=%d", 64<<20, envBS)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.vol.Close() })
	e.target = testTarget{testtarget.Start(t, testtarget.Config{
		NQN: envNQN, Name: "unit", Volume: e.vol, Limits: envLimits,
		Runtimes: func() ([]sandbox.Runtime, error) {
			return []sandbox.Runtime{ebpf.NewRuntime(ebpf.Options{Logger: slog.New(slog.DiscardHandler)})}, nil
		},
	})}
	// Whichever target runs at the end (restart replaces it) stops after
	// everything registered later: the host and the file system.
	t.Cleanup(func() { e.target.Stop() })
	e.ctrl, e.ns = e.connect(ownerNQN)
	if err := offloadfs.Mkfs(ctx, e.ns, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := testfs.Quiet()
	opts.Remote = e.ns
	opts.Loader = e.ctrl
	opts.Runtimes = []sandbox.Runtime{ebpf.NewRuntime(ebpf.Options{Logger: slog.New(slog.DiscardHandler)})}
	opts.FunctionLimits = envLimits
	if mutate != nil {
		mutate(&opts)
	}
	if e.fsys, err = offloadfs.Mount(ctx, e.ns, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Tests may have closed it already.
		if err := e.fsys.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			t.Errorf("unmount: %v", err)
		}
	})
	if e.fn, err = e.fsys.RegisterFunction(ctx, stampModule(t)); err != nil {
		t.Fatal(err)
	}
	return e
}

// connect connects a host under hostNQN, with keep-alive off and fast
// reconnects (for restarts).
func (e *remoteEnv) connect(hostNQN string) (*host.Controller, *host.Namespace) {
	e.t.Helper()
	return testhost.Connect(e.t, e.target.Addr(), envNQN, 1, host.Options{
		HostNQN: hostNQN, IOQueues: 2, KeepAlive: -1, ReconnectDelay: 20 * time.Millisecond,
	})
}

// restart stops the target and starts a new one on the same address and
// volume: the data stays, the extent maps and functions are gone. The
// owner's connection reconnects on its own.
func (e *remoteEnv) restart() {
	e.t.Helper()
	e.target = testTarget{e.target.Restart()}
}

// loadAgain loads the stamp function at the target again, bypassing the
// file system (as an operator or another host would), once the owner has
// reconnected: a command sent on the connection the restart broke fails
// with ErrConnectionLost, and is sent again.
func (e *remoteEnv) loadAgain() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := e.ctrl.LoadFunction(ctx, stampModule(e.t))
		cancel()
		switch {
		case err == nil:
			return
		case !errors.Is(err, host.ErrConnectionLost) || time.Now().After(deadline):
			e.t.Fatalf("loading the function again: %v", err)
		}
	}
}

// held returns the version of ino's map the target holds (0: none, or a
// removal), by Extent Map Query.
func (e *remoteEnv) held(ino uint64) uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vs, err := e.ns.ExtentMapVersions(ctx, []uint64{ino})
	if err != nil {
		e.t.Fatal(err)
	}
	return vs[0]
}

// syncRemote waits, with a deadline, for the target to hold every change.
func (e *remoteEnv) syncRemote() { e.t.Helper(); stamptest.SyncRemote(e.t, e.fsys) }

// create writes a stamped file of n bytes, generation gen, and returns it
// with its inode.
func (e *remoteEnv) create(name string, gen uint64, n int) (*offloadfs.File, uint64) {
	e.t.Helper()
	return stamptest.Create(e.t, e.fsys, name, gen, n, envBS)
}

// stampAt pushes the stamp function down on f at off and returns the
// stamp it saw.
func (e *remoteEnv) stampAt(f *offloadfs.File, off int64) stamptest.Rec {
	e.t.Helper()
	return stamptest.At(e.t, e.fsys, e.fn, f, off)
}

// stampModule returns tests/offloadfs's stamp function built for eBPF.
func stampModule(t testing.TB) []byte {
	return testmodules.Read(t, "..", "tests", "offloadfs", "testdata", "stamp.o")
}
