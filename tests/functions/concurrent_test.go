package functions_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// TestConcurrentOneQueue: many pushdowns in flight on one I/O queue at
// once, with ordinary reads and λ reads among them, and no function blocks
// the queue. The first held lookups are stopped at the target in their
// first read until all of them have arrived there, which can only happen
// if the target runs them side by side; while they are held, hundreds of
// other lookups (both runtimes), λ reads and ordinary reads on the same
// queue complete, every answer checked; then the held ones are let go and
// complete correctly too.
func TestConcurrentOneQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: generous, ioQueues: 1})
	if n := e.ctrl.IOQueues(); n != 1 {
		t.Fatalf("%d I/O queues, want 1", n)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	tr := writeTree(t, e.ns, sortedKeys(rng, 5000), 4)
	ctx := context.Background()
	fns := map[sandbox.Kind]sandbox.ID{}
	for _, kind := range kinds {
		fns[kind] = e.load("btree_lookup", kind)
	}
	stats := e.load("stats64", sandbox.KindEBPF)

	// Hold the first `held` reads of the root until all have arrived and
	// the test lets them go; later reads of the root pass.
	const held = 16
	root := int64(tr.files[0].Extents[0].LBA) * bs
	var (
		mu       sync.Mutex
		arrived  int
		allHeld  = make(chan struct{})
		release  = make(chan struct{})
		released bool
	)
	e.vols[0].setGate(func(off, n int64) {
		if off != root {
			return
		}
		mu.Lock()
		if arrived >= held || released {
			mu.Unlock()
			return
		}
		arrived++
		if arrived == held {
			close(allHeld)
		}
		mu.Unlock()
		<-release
	})
	t.Cleanup(func() {
		mu.Lock()
		if !released {
			released = true
			close(release)
		}
		mu.Unlock()
		e.vols[0].setGate(nil)
	})

	type heldCall struct {
		key uint64
		res pushdown.Result
		err error
	}
	heldDone := make(chan heldCall, held)
	for i := range held {
		key := tr.keys[rng.IntN(len(tr.keys))]
		fn := fns[kinds[i%len(kinds)]]
		go func() {
			scratch := make([]byte, sandbox.ScratchSize)
			functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: functions.DefaultValueSize}.Encode(scratch)
			res, err := e.ns.Pushdown(ctx, fn, tr.files, host.Start{Length: functions.NodeSize}, scratch)
			heldDone <- heldCall{key, res, err}
		}()
	}
	select {
	case <-allHeld:
	case <-time.After(30 * time.Second):
		mu.Lock()
		n := arrived
		mu.Unlock()
		t.Fatalf("only %d of %d pushdowns reached the target's backend together: the target does not run them side by side", n, held)
	}

	// Everything else, on the same queue, while those are held.
	const workers, rounds = 32, 12
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*3)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for range rounds {
				// A lookup, present or absent, checked against the
				// host-side reference.
				key := tr.keys[rng.IntN(len(tr.keys))] + uint64(rng.IntN(2))
				kind := kinds[rng.IntN(len(kinds))]
				scratch := make([]byte, sandbox.ScratchSize)
				functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: functions.DefaultValueSize}.Encode(scratch)
				ref := bytes.Clone(scratch)
				if _, err := functions.RunPushdown(functions.BTreeStep, ref, [][]byte{tr.index, tr.values},
					sandbox.Next{Len: functions.NodeSize}, sandbox.Limits{}); err != nil {
					errs <- err
					return
				}
				res, err := e.ns.Pushdown(ctx, fns[kind], tr.files, host.Start{Length: functions.NodeSize}, scratch)
				if err != nil || !bytes.Equal(res.Output, ref) {
					errs <- fmt.Errorf("%v lookup of %d: %v (scratch matches: %v)", kind, key, err, err == nil && bytes.Equal(res.Output, ref))
					return
				}
				// An ordinary read of one extent of the index.
				i := rng.IntN(len(tr.files[0].Extents))
				x := tr.files[0].Extents[i]
				got := make([]byte, int(x.Blocks)*bs)
				if _, err := e.ns.ReadAt(got, int64(x.LBA)*bs); err != nil {
					errs <- fmt.Errorf("read: %w", err)
					return
				}
				want := make([]byte, len(got))
				copy(want, tr.index[min(i*7*bs, len(tr.index)):])
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("read of index extent %d returned other bytes than written", i)
					return
				}
				// A λ read of stats64 over a stretch of the value log.
				off := uint64(rng.IntN(len(tr.values)/8-64)) * 8
				lr, err := e.ns.LambdaRead(ctx, stats, []pushdown.File{tr.files[1]}, host.Start{File: 0, Offset: off, Length: 512}, nil, functions.StatsSize)
				wantStats, _ := functions.Stats64(tr.values[off : off+512])
				if gotStats, perr := functions.ParseStats(lr.Output); err != nil || perr != nil || gotStats != wantStats {
					errs <- fmt.Errorf("λ read at %d: %+v, %v; want %+v", off, gotStats, err, wantStats)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case c := <-heldDone:
		t.Fatalf("a held pushdown (key %d) completed before it was let go: %v", c.key, c.err)
	default:
	}

	mu.Lock()
	released = true
	close(release)
	mu.Unlock()
	for range held {
		c := <-heldDone
		if c.err != nil {
			t.Errorf("held lookup of %d: %v", c.key, c.err)
			continue
		}
		r, err := functions.ParseBTreeResult(c.res.Output)
		if err != nil || r.Status != functions.BTreeFound || !bytes.Equal(r.Value, functions.BTreeValue(c.key, functions.DefaultValueSize)) {
			t.Errorf("held lookup of %d: status %d, value %x, %v", c.key, r.Status, r.Value, err)
		}
	}
}
