package host

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
)

// waitCalls collects n calls from done, failing t if they take longer than
// d: a batch whose capsules stayed in the buffer would never complete.
func waitCalls(t *testing.T, done chan *Call, n int, d time.Duration) []*Call {
	t.Helper()
	timeout := time.After(d)
	calls := make([]*Call, 0, n)
	for len(calls) < n {
		select {
		case c := <-done:
			calls = append(calls, c)
		case <-timeout:
			t.Fatalf("%d of %d calls delivered after %v", len(calls), n, d)
		}
	}
	return calls
}

// TestBatchSubmit writes and reads back through batches larger than the
// queue: Submit must flush what it buffered before it waits for a free
// slot, since only those very commands can free one.
func TestBatchSubmit(t *testing.T) {
	checkGoroutines(t)
	addr := startTarget(t)
	c, err := Connect(ctxT(t, 5*time.Second), addr, testNQN, Options{IOQueues: 2, QueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := c.Namespaces()[0]
	rng := rand.New(rand.NewPCG(1, 2))
	for _, h := range []struct {
		name string
		ns   *Namespace
	}{{"round-robin", ns}, {"pinned", ns.Queue(1)}} {
		t.Run(h.name, func(t *testing.T) {
			const n = 50
			sizes := []int{512, 4096, 64 << 10} // in-capsule and R2T writes
			want := make([][]byte, n)
			done := make(chan *Call, n)
			b := h.ns.NewBatch()
			for i := range n {
				want[i] = make([]byte, sizes[i%len(sizes)])
				fill(rng, want[i])
				b.WriteBlocks(want[i], uint64(i)*128, done)
			}
			if b.Len() != n {
				t.Fatalf("Len %d, want %d", b.Len(), n)
			}
			b.Submit(ctxT(t, 10*time.Second))
			if b.Len() != 0 {
				t.Fatalf("Len %d after Submit", b.Len())
			}
			for _, call := range waitCalls(t, done, n, 10*time.Second) {
				if call.Err != nil {
					t.Fatal(call.Err)
				}
			}
			// The batch is reusable: read everything back with it.
			got := make([][]byte, n)
			for i := range n {
				got[i] = make([]byte, len(want[i]))
				b.ReadBlocks(got[i], uint64(i)*128, done)
			}
			b.Submit(ctxT(t, 10*time.Second))
			for _, call := range waitCalls(t, done, n, 10*time.Second) {
				if call.Err != nil {
					t.Fatal(call.Err)
				}
			}
			for i := range n {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("block run %d: read back differs", i)
				}
			}
		})
	}
	if st := c.Stats(); st.Commands != st.Completions || st.Errors != 0 || st.DroppedDone != 0 {
		t.Errorf("stats %+v", st)
	}
}

// holdReads has ft hold the I/O reads it receives, answering none until
// release: arrived is done once n have come. release answers them all and
// lets later reads through.
func holdReads(ft *fakeTarget, n int) (arrived *sync.WaitGroup, release func()) {
	ch := make(chan struct{})
	arrived = new(sync.WaitGroup)
	var held sync.WaitGroup
	arrived.Add(n)
	ft.setHook(func(fc *fakeConn, cmd *nvme.Command, data []byte) bool {
		if fc.qid == 0 || cmd.Opcode != nvme.IORead {
			return false
		}
		cmd2 := *cmd
		held.Go(func() {
			<-ch
			fc.sendData(cmd2.CID, make([]byte, cmd2.DPTR.Length))
		})
		arrived.Done()
		return true
	})
	return arrived, func() {
		ft.setHook(nil)
		close(ch)
		held.Wait()
	}
}

// TestBatchContext covers a batch's context: already ended at Submit, and
// ending while the commands are in flight.
func TestBatchContext(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{QueueDepth: 8})
	ns := c.Namespaces()[0]

	// A request that fails the namespace's checks is delivered at once.
	b := ns.NewBatch()
	done := make(chan *Call, 8)
	bad := b.ReadBlocks(make([]byte, 100), 0, done)
	if b.Len() != 0 || (<-done) != bad || bad.Err == nil {
		t.Fatalf("misaligned read: Len %d, err %v", b.Len(), bad.Err)
	}

	// Ended before Submit: nothing is sent, everything is delivered.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sent := c.Stats().Commands
	for range 3 {
		b.ReadBlocks(make([]byte, 512), 0, done)
	}
	b.Submit(ctx)
	for _, call := range waitCalls(t, done, 3, 5*time.Second) {
		if !errors.Is(call.Err, context.Canceled) {
			t.Fatalf("submitted with an ended context: %v", call.Err)
		}
	}
	if st := c.Stats(); st.Commands != sent {
		t.Fatalf("%d commands sent with an ended context", st.Commands-sent)
	}

	// Ending in flight: every call is abandoned at once; the slots come
	// back when the controller answers.
	arrived, release := holdReads(ft, 3)
	ctx, cancel = context.WithCancel(context.Background())
	bufs := make([][]byte, 3)
	for i := range bufs {
		bufs[i] = make([]byte, 512)
		b.ReadBlocks(bufs[i], uint64(i), done)
	}
	b.Submit(ctx)
	arrived.Wait()
	cancel()
	for _, call := range waitCalls(t, done, 3, 5*time.Second) {
		if !errors.Is(call.Err, context.Canceled) {
			t.Fatalf("cancelled in flight: %v", call.Err)
		}
	}
	release()
	// The late data must not land in the abandoned buffers.
	if _, err := ns.ReadAtContext(ctxT(t, 5*time.Second), make([]byte, 8*512), 0); err != nil {
		t.Fatal(err)
	}
	for _, buf := range bufs {
		if !bytes.Equal(buf, make([]byte, 512)) {
			t.Fatal("abandoned call's buffer was written")
		}
	}
	if st := c.Stats(); st.Abandoned != 3 {
		t.Errorf("stats %+v", st)
	}

	// Completing normally stops the batch's context watch: cancelling
	// afterwards abandons nothing.
	ctx, cancel = context.WithCancel(context.Background())
	for i := range 3 {
		b.ReadBlocks(make([]byte, 512), uint64(i), done)
	}
	b.Submit(ctx)
	for _, call := range waitCalls(t, done, 3, 5*time.Second) {
		if call.Err != nil {
			t.Fatal(call.Err)
		}
	}
	cancel()
	if st := c.Stats(); st.Abandoned != 3 {
		t.Errorf("abandoned after completion: stats %+v", st)
	}
}

// TestBatchReconnect submits a batch right after every connection was cut:
// it waits for the new association (or retries there, if it found the old
// one still looking alive) and completes.
func TestBatchReconnect(t *testing.T) {
	addr := startTarget(t)
	p := newProxy(t, addr)
	c, err := Connect(ctxT(t, 5*time.Second), p.addr(), testNQN, Options{QueueDepth: 4, ReconnectDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := c.Namespaces()[0]
	const n = 12
	done := make(chan *Call, n)
	b := ns.NewBatch()
	for round := range 3 {
		p.killAll()
		for i := range n {
			b.WriteBlocks(bytes.Repeat([]byte{byte(round)}, 512), uint64(i), done)
		}
		b.Submit(ctxT(t, 10*time.Second))
		failed := 0
		for _, call := range waitCalls(t, done, n, 10*time.Second) {
			// Commands caught in flight by the loss fail; none hang.
			if call.Err != nil {
				if !errors.Is(call.Err, ErrConnectionLost) {
					t.Fatalf("round %d: %v", round, call.Err)
				}
				failed++
			}
		}
		t.Logf("round %d: %d of %d lost to the cut", round, failed, n)
	}
}

// warnRecorder keeps the messages of warnings and errors logged.
type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	w.msgs = append(w.msgs, msg)
	return nil
}
func (w *warnRecorder) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnRecorder) WithGroup(string) slog.Handler      { return w }

// TestCloseQuiet: an orderly Close is not a connection loss and must not
// log like one (the target closing the I/O connections when the admin
// connection goes used to surface as "queue failed: EOF").
func TestCloseQuiet(t *testing.T) {
	addr := startTarget(t)
	for range 5 {
		rec := &warnRecorder{}
		c, err := Connect(ctxT(t, 5*time.Second), addr, testNQN, Options{IOQueues: 4, Logger: slog.New(rec)})
		if err != nil {
			t.Fatal(err)
		}
		ns := c.Namespaces()[0]
		if _, err := ns.ReadAtContext(ctxT(t, 5*time.Second), make([]byte, 4096), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		msgs := rec.msgs
		rec.mu.Unlock()
		if len(msgs) > 0 {
			t.Fatalf("Close logged warnings: %q", msgs)
		}
	}
}

// TestLoneCallsShareContextWatch: calls submitted one at a time under one
// context share the queue's watch of it. Ending the context abandons
// every one in flight; calls that completed before are not abandoned
// afterwards; a call under another context replaces the watch, and the
// ended context refuses new calls.
func TestLoneCallsShareContextWatch(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{QueueDepth: 8})
	ns := c.Namespaces()[0]
	arrived, release := holdReads(ft, 3)
	done := make(chan *Call, 8)
	ctxA, cancelA := context.WithCancel(context.Background())
	for i := range 3 {
		ns.ReadBlocks(ctxA, make([]byte, 512), uint64(i), done)
	}
	arrived.Wait()
	cancelA()
	for _, call := range waitCalls(t, done, 3, 5*time.Second) {
		if !errors.Is(call.Err, context.Canceled) {
			t.Fatalf("cancelled in flight: %v", call.Err)
		}
	}
	release()
	if call := ns.ReadBlocks(ctxA, make([]byte, 512), 0, done); !errors.Is((<-done).Err, context.Canceled) {
		t.Fatalf("submitted under an ended context: %v", call.Err)
	}
	ctxB, cancelB := context.WithCancel(context.Background())
	for i := range 3 {
		ns.ReadBlocks(ctxB, make([]byte, 512), uint64(i), done)
	}
	for _, call := range waitCalls(t, done, 3, 5*time.Second) {
		if call.Err != nil {
			t.Fatal(call.Err)
		}
	}
	cancelB()
	if st := c.Stats(); st.Abandoned != 3 {
		t.Errorf("abandoned %d, want the 3 in flight under the first context", st.Abandoned)
	}
}
