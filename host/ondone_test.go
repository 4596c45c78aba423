package host

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
)

// onDoneLoop is an event loop driven by OnDone, as bench blockio's: every
// delivered read is checked and replaced by the next until n have
// completed. It records what it saw; wait returns once every submitted call
// was delivered.
type onDoneLoop struct {
	t    *testing.T
	ns   *Namespace
	want []byte // every read returns want (the block at each LBA read)
	n    int

	mu         sync.Mutex
	b          *Batch
	submitted  int
	delivered  int
	ok         int
	errs       []error
	submitting bool
	done       chan struct{}
}

func newOnDoneLoop(t *testing.T, ns *Namespace, want []byte, n int) *onDoneLoop {
	l := &onDoneLoop{t: t, ns: ns, want: want, n: n, done: make(chan struct{})}
	l.b = ns.NewBatch()
	l.b.OnDone = l.onDone
	return l
}

// add queues one read; with l.mu held.
func (l *onDoneLoop) add() {
	l.submitted++
	l.b.ReadBlocks(make([]byte, len(l.want)), 0, nil)
}

// submit sends what is queued, unless a submit on another goroutine (or
// further up this one's stack) is under way: that one sends it.
func (l *onDoneLoop) submit() {
	l.mu.Lock()
	if l.submitting {
		l.mu.Unlock()
		return
	}
	l.submitting = true
	for l.b.Len() > 0 {
		b := l.b
		l.b = l.ns.NewBatch()
		l.b.OnDone = l.onDone
		l.mu.Unlock()
		b.Submit(ctxT(l.t, time.Minute))
		l.mu.Lock()
	}
	l.submitting = false
	l.mu.Unlock()
}

func (l *onDoneLoop) onDone(c *Call) {
	l.mu.Lock()
	l.delivered++
	switch {
	case c.Err != nil:
		l.errs = append(l.errs, c.Err)
	case !bytes.Equal(c.In, l.want):
		l.errs = append(l.errs, errors.New("read returned other data"))
	default:
		l.ok++
	}
	again := l.submitted < l.n
	if again {
		l.add()
	}
	if l.delivered == l.submitted {
		close(l.done)
	}
	l.mu.Unlock()
	if again {
		l.submit()
	}
}

// run starts depth reads and waits until n are delivered.
func (l *onDoneLoop) run(depth int, wait time.Duration) {
	l.t.Helper()
	l.mu.Lock()
	for range depth {
		l.add()
	}
	l.mu.Unlock()
	l.submit()
	select {
	case <-l.done:
	case <-time.After(wait):
		l.mu.Lock()
		defer l.mu.Unlock()
		l.t.Fatalf("%d of %d calls delivered after %v", l.delivered, l.submitted, wait)
	}
}

// TestOnDoneEventLoop drives reads from OnDone callbacks, which run on the
// queue's reader and resubmit there: every read completes with the right
// data, at queue depth 1 (one call in flight, replaced from its own
// delivery) and at the queue's full depth (replacements of a burst leave
// together at the reader's next flush).
func TestOnDoneEventLoop(t *testing.T) {
	checkGoroutines(t)
	addr := startTarget(t)
	c, err := Connect(ctxT(t, 5*time.Second), addr, testNQN, Options{IOQueues: 1, QueueDepth: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := c.Namespaces()[0].Queue(0)
	want := bytes.Repeat([]byte("ondone"), 4096/6+1)[:4096]
	if _, err := ns.WriteAtContext(ctxT(t, 5*time.Second), want, 0); err != nil {
		t.Fatal(err)
	}
	for _, depth := range []int{1, 8} {
		l := newOnDoneLoop(t, ns, want, 2000)
		l.run(depth, 30*time.Second)
		if l.ok != l.n || len(l.errs) > 0 {
			t.Fatalf("depth %d: %d of %d reads ok, errors %v", depth, l.ok, l.n, l.errs)
		}
	}
	if st := c.Stats(); st.Commands != st.Completions || st.Errors != 0 || st.DroppedDone != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestOnDoneQueueFull: an OnDone that submits more than the queue has
// free slots gets ErrQueueFull for the excess at once, instead of waiting
// for a slot only its own (blocked) reader could free; the queue keeps
// working.
func TestOnDoneQueueFull(t *testing.T) {
	checkGoroutines(t)
	addr := startTarget(t)
	c, err := Connect(ctxT(t, 5*time.Second), addr, testNQN, Options{IOQueues: 1, QueueDepth: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := c.Namespaces()[0].Queue(0)
	results := make(chan *Call, 16)
	inner := ns.NewBatch()
	inner.OnDone = func(c *Call) { results <- c }
	first := ns.NewBatch()
	first.OnDone = func(*Call) {
		// Both slots are free (the delivered call's CID is free before
		// its delivery): 3 more than that.
		for range 5 {
			inner.ReadBlocks(make([]byte, 512), 0, nil)
		}
		inner.Submit(ctxT(t, 5*time.Second))
	}
	first.ReadBlocks(make([]byte, 512), 0, nil)
	first.Submit(ctxT(t, 5*time.Second))
	var ok, full int
	for range 5 {
		select {
		case c := <-results:
			switch {
			case c.Err == nil:
				ok++
			case errors.Is(c.Err, ErrQueueFull):
				full++
			default:
				t.Fatalf("unexpected error: %v", c.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d ok and %d full of 5 delivered", ok, full)
		}
	}
	if ok != 2 || full != 3 {
		t.Errorf("%d ok, %d ErrQueueFull; want 2 and 3", ok, full)
	}
	if _, err := ns.ReadAtContext(ctxT(t, 5*time.Second), make([]byte, 4096), 0); err != nil {
		t.Fatalf("after ErrQueueFull: %v", err)
	}
}

// TestOnDoneReconnect cuts every connection under an OnDone event loop:
// calls caught by the cut are delivered with ErrConnectionLost (their
// replacements, submitted from the failing queue's deliveries, wait for the
// new association without holding it up), the controller reconnects, and
// the loop runs to the end.
func TestOnDoneReconnect(t *testing.T) {
	checkGoroutines(t)
	addr := startTarget(t)
	p := newProxy(t, addr)
	c, err := Connect(ctxT(t, 5*time.Second), p.addr(), testNQN, Options{IOQueues: 1, QueueDepth: 4, ReconnectDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := c.Namespaces()[0].Queue(0)
	want := bytes.Repeat([]byte{0x5a}, 4096)
	if _, err := ns.WriteAtContext(ctxT(t, 5*time.Second), want, 8192); err != nil {
		t.Fatal(err)
	}
	want = make([]byte, 4096) // the loop reads LBA 0, which holds zeroes
	l := newOnDoneLoop(t, ns, want, 1<<30)
	go func() {
		waitFor(t, 10*time.Second, "reads before the cut", func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.ok >= 100
		})
		p.killAll()
		waitFor(t, 10*time.Second, "reconnect", func() bool { return c.Stats().Reconnects >= 1 })
		// Reads go on over the new association, then the loop ends.
		l.mu.Lock()
		target := l.ok + 100
		l.mu.Unlock()
		waitFor(t, 10*time.Second, "reads after the reconnect", func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.ok >= target
		})
		l.mu.Lock()
		l.n = l.submitted
		l.mu.Unlock()
	}()
	l.run(4, 40*time.Second)
	for _, err := range l.errs {
		if !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("error other than a lost connection: %v", err)
		}
	}
	t.Logf("%d reads ok, %d lost to the cut", l.ok, len(l.errs))
}
