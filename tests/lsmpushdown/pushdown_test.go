// Package lsmpushdown_test checks kv/lsm's pushdown Get end to end: a
// store on offloadfs over NVMe/TCP to a real target, Gets whose on-disk
// part runs as lsm_get at the target, checked against a model while
// flushes and compactions delete tables and offloadfs reuses their
// extents.
package lsmpushdown_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/volume"
)

const testNQN = "nqn.2026-11.io.nearstore:lsm-pushdown"

var limits = sandbox.Limits{Time: 10 * time.Second}

// runtimes makes one runtime of each kind lsm_get is built for.
func runtimes(ctx context.Context) ([]sandbox.Runtime, error) {
	wrt, err := wasm.NewRuntime(ctx, wasm.Options{})
	return []sandbox.Runtime{wrt, ebpf.NewRuntime(ebpf.Options{})}, err
}

// mount starts a target on a memory volume and mounts offloadfs on it, as
// the owner, with host runtimes for requests the target cannot run.
func mount(t *testing.T) *offloadfs.FS {
	t.Helper()
	ctx := context.Background()
	vol, err := volume.Open("mem:128MiB?bs=4096")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	srv := testtarget.Start(t, testtarget.Config{
		NQN: testNQN, Name: "lsm", Volume: vol, Limits: limits,
		Runtimes: func() ([]sandbox.Runtime, error) { return runtimes(ctx) },
	})
	t.Cleanup(srv.Stop)
	ctrl, ns := testhost.Connect(t, srv.Addr(), testNQN, 1, host.Options{
		HostNQN: "nqn.2026-11.io.nearstore:lsm-owner", IOQueues: 4, KeepAlive: -1,
	})
	testfs.Format(t, ns)
	hrts, err := runtimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, rt := range hrts {
			rt.Close(context.Background())
		}
	})
	return testfs.Mount(t, ns, offloadfs.Options{
		CommitInterval: -1,
		Remote:         ns,
		Loader:         ctrl,
		Runtimes:       hrts,
		FunctionLimits: limits,
	})
}

// TestPushdownGetUnderCompaction runs Gets, pushed down, against a model
// while writes make the store flush and compact all the time: one goroutine
// writes and reads back what it wrote; others read keys written once,
// which compactions keep moving between tables. No Get may return a wrong
// value. It runs lsm_get in each runtime it is built for.
func TestPushdownGetUnderCompaction(t *testing.T) {
	for _, kind := range []sandbox.Kind{sandbox.KindWasm, sandbox.KindEBPF} {
		t.Run(kind.String(), func(t *testing.T) { testPushdownGetUnderCompaction(t, kind) })
	}
}

func testPushdownGetUnderCompaction(t *testing.T, kind sandbox.Kind) {
	fsys := mount(t)
	ctx := context.Background()
	opts := lsm.Options{
		MemTableSize:          32 << 10,
		L0CompactionThreshold: 2,
		LBaseMaxBytes:         64 << 10,
		TargetFileSize:        16 << 10,
		Table:                 lsm.TableOptions{BlockSize: 512, BlockRestartInterval: 4},
		BlockCacheSize:        16 << 10, // mostly misses: Gets go to disk
		Logger:                slog.New(slog.DiscardHandler),
		Pusher:                fsys,
		PushdownRuntime:       kind,
		CacheSampleRate:       0.05,
	}
	d, err := lsm.Open(fsys.VFS(), "db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const nkeys = 600
	// Stable keys interleave with changing ones, so every compaction of
	// the changing keys rewrites the tables holding the stable ones.
	stable := func(i int) string { return fmt.Sprintf("k%04d.s", i) }
	moving := func(i int) string { return fmt.Sprintf("k%04d.m", i) }
	stableVal := func(i int) string { return fmt.Sprintf("stable-%d-%s", i, pad(i)) }
	for i := range nkeys {
		if err := d.Set([]byte(stable(i)), []byte(stableVal(i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncRemote(ctx); err != nil {
		t.Fatal(err)
	}
	steps := 2500
	if testing.Short() {
		steps = 1500
	}
	var stop atomic.Bool
	var readerGets atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for !stop.Load() {
				i := rng.IntN(nkeys)
				got, err := d.Get([]byte(stable(i)))
				if err != nil || string(got) != stableVal(i) {
					errs <- fmt.Errorf("reader: Get(%s) = %q, %v; want %q", stable(i), got, err, stableVal(i))
					return
				}
				readerGets.Add(1)
			}
		}()
	}
	model := map[string]string{}
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(k string) {
		t.Helper()
		got, err := d.Get([]byte(k))
		want, ok := model[k]
		switch {
		case !ok && !errors.Is(err, lsm.ErrNotFound):
			t.Fatalf("Get(%s) = %q, %v; want not found", k, got, err)
		case ok && (err != nil || string(got) != want):
			t.Fatalf("Get(%s) = %q, %v; want %q", k, got, err, want)
		}
	}
	for step := range steps {
		i := rng.IntN(nkeys)
		k := moving(i)
		switch op := rng.IntN(20); {
		case op < 14:
			v := fmt.Sprintf("v%d-%s", step, pad(step))
			if err := d.Set([]byte(k), []byte(v), nil); err != nil {
				t.Fatal(err)
			}
			model[k] = v
		case op < 18:
			if err := d.Delete([]byte(k), nil); err != nil {
				t.Fatal(err)
			}
			delete(model, k)
		default:
			// [moving(i), stable(i)) holds moving(i) alone: the
			// readers' keys interleave with the moving ones.
			if err := d.DeleteRange([]byte(moving(i)), []byte(stable(i)), nil); err != nil {
				t.Fatal(err)
			}
			delete(model, k)
		}
		for range 3 {
			check(moving(rng.IntN(nkeys)))
		}
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range nkeys {
		check(moving(i))
	}
	ps, fs, m := d.PushdownStats(), fsys.Stats(), d.Metrics()
	t.Logf("pushdown %+v", ps)
	t.Logf("offloadfs: requests %d, remote %d, not synced %d, stale %d, discarded %d, host runs %d",
		fs.Requests, fs.Sent, fs.NotSynced, fs.Stale, fs.Discarded, fs.Fallbacks)
	t.Logf("flushes %d, compactions %d, reader Gets %d", m.Flush.Count, m.Compact.Count, readerGets.Load())
	if m.Compact.Count < 5 || m.Flush.Count < 5 {
		t.Fatalf("only %d flushes and %d compactions", m.Flush.Count, m.Compact.Count)
	}
	if ps.Pushed == 0 || fs.Remote == 0 || ps.Sampled == 0 || ps.InMemory == 0 {
		t.Fatalf("Gets did not take every path: %+v, %d ran at the target", ps, fs.Remote)
	}
	if ps.HostRuns != fs.Fallbacks || ps.Plain != 0 {
		t.Fatalf("host runs: store counted %d, file system %d; plain %d", ps.HostRuns, fs.Fallbacks, ps.Plain)
	}
}

// pad makes values of a few hundred bytes, so blocks hold few entries.
func pad(i int) string {
	b := make([]byte, 40+i%200)
	for j := range b {
		b[j] = 'a' + byte((i+j)%26)
	}
	return string(b)
}
