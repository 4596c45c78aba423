package rubble

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

func openTestStore(t *testing.T, window time.Duration) *Store {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	vol, err := volume.Open("mem:64MiB?bs=4096")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	dev := offloadfs.VolumeDevice(vol)
	if err := offloadfs.Mkfs(ctx, dev, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	fsys, err := offloadfs.Mount(ctx, dev, offloadfs.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	s, err := OpenStore(ctx, StoreConfig{ID: "n1", FS: fsys, Dir: "g0", Slots: 4, SlotSize: 1 << 20,
		Dialer: &TargetDialer{}, FallbackWindow: window, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestFallbackDue checks the measured trigger: a window in which
// shipping took longer than the store's own flushes and compactions
// (and over a second) makes the group fall back; a window without
// shipping does not, nor one that has not ended.
func TestFallbackDue(t *testing.T) {
	s := openTestStore(t, 20*time.Millisecond)
	if s.fallbackDue() {
		t.Fatal("due before the first window ended")
	}
	time.Sleep(30 * time.Millisecond)
	s.mu.Lock()
	s.stats.ShipTime += 3 * time.Second
	s.mu.Unlock()
	if !s.fallbackDue() {
		t.Fatal("3s of shipping against no local work: not due")
	}
	time.Sleep(30 * time.Millisecond)
	if s.fallbackDue() {
		t.Fatal("a window without shipping: due")
	}
	s.mu.Lock()
	s.stats.ShipTime += 500 * time.Millisecond
	s.mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	if s.fallbackDue() {
		t.Fatal("half a second of shipping (under the one-second floor): due")
	}
}

// TestReadsAcrossReplacement reads from the store while it replaces its
// tree again and again (Reset here; a resync swaps it the same way): a
// read that started on the tree being replaced, closed under it, is
// read again from the new tree, so no Get fails, and no Scan fails
// before it gave its function a key.
func TestReadsAcrossReplacement(t *testing.T) {
	s := openTestStore(t, time.Hour)
	ctx := context.Background()
	key := []byte("k")
	if err := s.Import(ctx, []chain.KV{{Key: key, Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errs := make(chan error, 1)
	var reads atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, _, err := s.Get(ctx, key); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
				// A scan that already gave keys when its tree was closed
				// under it fails by Scan's contract (fn would see them
				// twice); one that gave none must be read again.
				gave := false
				err := s.Scan(ctx, nil, nil, func(_, _ []byte) error { gave = true; return nil })
				if err != nil && !gave {
					select {
					case errs <- err:
					default:
					}
				}
				reads.Add(1)
			}
		}()
	}
	for i := range 30 {
		if err := s.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Import(ctx, []chain.KV{{Key: key, Value: []byte{'v', byte(i)}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("a read across a replacement of the tree failed: %v", err)
	default:
	}
	t.Logf("%d reads across 30 replacements", reads.Load())
}

// stuckChain is a chain that cannot commit (its successor hangs, etcd is
// unreachable so the chain does not change): Append returns only when
// released or when its context ends.
type stuckChain struct {
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (c *stuckChain) Append(ctx context.Context, _ []byte) (uint64, error) {
	c.once.Do(func() { close(c.entered) })
	select {
	case <-c.release:
		return 0, errors.New("chain: released")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// TestQuiesceBounded: a primary's Quiesce gives up when its context
// ends, though the flush it waits for is stuck appending its edit to a
// chain that cannot commit: a stopping node bounds that wait
// (quiesceWait) and leaves its chains anyway.
func TestQuiesceBounded(t *testing.T) {
	s := openTestStore(t, time.Hour)
	ch := &stuckChain{entered: make(chan struct{}), release: make(chan struct{})}
	s.Attach(ch)
	s.SetChain(cluster.Chain{Epoch: 1, Members: []string{"n1"}}, "n1")
	ctx := context.Background()
	if _, err := s.ApplyHead(ctx, 1, chain.Op{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- s.DB().Flush(ctx) }()
	<-ch.entered // the flush's edit waits on the chain

	qctx, cancel := context.WithCancel(ctx)
	cancel()
	quiesced := make(chan error, 1)
	go func() { quiesced <- s.Quiesce(qctx) }()
	select {
	case err := <-quiesced:
		if err == nil {
			t.Error("Quiesce: nil with the flush still running")
		}
	case <-time.After(30 * time.Second):
		t.Error("Quiesce did not return when its context ended")
	}
	close(ch.release)
	if err := <-flushed; err == nil {
		t.Error("the flush whose edit the chain did not take succeeded")
	}
}
