package lambda

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/volume"
)

const (
	testNQN  = "nqn.2026-11.io.nearstore:lambda-test"
	ownerNQN = "nqn.2026-11.io.nearstore:lambda-owner"
	nsSize   = 64 << 20
	devBS    = 512
)

// limits are the function limits of both sides, generous enough for the
// race detector on a busy machine.
var limits = sandbox.Limits{Time: 20 * time.Second}

// env is a real target serving a memory namespace on TCP loopback, a host
// connected to it, an offloadfs on the namespace with the target as its
// Remote, and a dispatcher on that.
type env struct {
	t    testing.TB
	srv  *testtarget.Target
	fsys *offloadfs.FS
	d    *Dispatcher
	fns  map[string]sandbox.ID
}

type envConfig struct {
	cache        *Cache
	metrics      *Metrics
	profileEvery int
	profileFirst int
	readAhead    int
	logger       *slog.Logger // nil: discard
}

func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, fns: make(map[string]sandbox.ID)}
	vol, err := volume.Open(fmt.Sprintf("mem:%d?bs=%d", nsSize, devBS))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	e.srv = testtarget.Start(t, testtarget.Config{
		NQN: testNQN, Name: "lambda", Volume: vol, Limits: limits,
		Runtimes: func() ([]sandbox.Runtime, error) {
			trt, err := wasm.NewRuntime(ctx, wasm.Options{})
			return []sandbox.Runtime{trt}, err
		},
	})
	t.Cleanup(e.srv.Stop)

	ctrl, ns := testhost.Connect(t, e.srv.Addr(), testNQN, 1, host.Options{HostNQN: ownerNQN, IOQueues: 4, KeepAlive: -1})
	testfs.Format(t, ns)
	hrt, err := wasm.NewRuntime(ctx, wasm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hrt.Close(context.Background()) })
	e.fsys = testfs.Mount(t, ns, offloadfs.Options{
		CommitInterval: -1,
		Remote:         ns,
		Loader:         ctrl,
		Runtimes:       []sandbox.Runtime{hrt},
		FunctionLimits: limits,
	})
	e.d, err = New(ctx, e.fsys, Options{
		Runtimes:     []sandbox.Runtime{hrt},
		Limits:       limits,
		Cache:        cfg.cache,
		Metrics:      cfg.metrics,
		ProfileEvery: cfg.profileEvery,
		ProfileFirst: cfg.profileFirst,
		ReadAhead:    cfg.readAhead,
		Logger:       cmp.Or(cfg.logger, slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.d.Close(context.Background()); err != nil {
			t.Errorf("dispatcher close: %v", err)
		}
	})
	for _, name := range []string{"stats64", "grep", "knn", "bitmap"} {
		mod, err := functions.Module(name, sandbox.KindWasm)
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.d.Register(ctx, Function{Name: name, Module: mod, Native: functions.Native(name)})
		if err != nil {
			t.Fatal(err)
		}
		e.fns[name] = id
	}
	return e
}

// file creates a file holding data, committed and pushed to the target,
// so λ calls on it can run there.
func (e *env) file(name string, data []byte) *offloadfs.File {
	e.t.Helper()
	f := testfs.Create(e.t, e.fsys, name)
	if len(data) > 0 {
		if _, err := f.WriteAt(data, 0); err != nil {
			e.t.Fatal(err)
		}
	}
	e.sync()
	return f
}

// sync commits and waits until the target holds every map.
func (e *env) sync() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.fsys.Sync(ctx); err != nil {
		e.t.Fatal(err)
	}
	if err := e.fsys.SyncRemote(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// contents reads a file's bytes directly (not through the cache).
func contents(t testing.TB, f *offloadfs.File) []byte {
	t.Helper()
	size, err := fileSize(f)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func concat(a, b []byte) []byte { return append(bytes.Clone(a), b...) }
