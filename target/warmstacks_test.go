package target

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestWarmStacks: run returns only after its function has run, however
// many run at once; a worker waiting takes the next request; and when the
// server's context ends the workers leave, while run still runs what it
// is given.
func TestWarmStacks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	w := newWarmStacks(ctx)

	const callers, each = 64, 100
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				done := false
				w.run(warmFunc(func() {
					time.Sleep(10 * time.Microsecond)
					done = true
				}))
				if !done {
					t.Error("run returned before its function ran")
					return
				}
			}
		}()
	}
	wg.Wait()
	if w.workers.Load() < 1 {
		t.Fatal("no worker waits after the runs")
	}

	// One at a time, requests find the workers waiting (a worker that
	// has not got back to waiting yet may make run start another).
	before := w.workers.Load()
	for range 100 {
		w.run(warmFunc(func() {}))
	}
	if after := w.workers.Load(); after-before >= 100 {
		t.Errorf("%d workers after 100 sequential runs, %d before: workers not reused", after, before)
	}

	// Once the server stops, the workers leave.
	cancel()
	for deadline := time.Now().Add(10 * time.Second); w.workers.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := w.workers.Load(); n != 0 {
		t.Errorf("%d workers left after the context ended", n)
	}
	ok := false
	w.run(warmFunc(func() { ok = true }))
	if !ok {
		t.Error("run after the context ended did not run its function")
	}
}

// TestWarmStacksStart: start returns without waiting, every task it is
// given runs exactly once, tasks that block do not hold up the others
// (each gets a worker), and the workers are kept for the next tasks.
func TestWarmStacksStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newWarmStacks(ctx)

	// 32 tasks that each wait for all 32 to have started: they finish
	// only if each runs on a worker of its own.
	const n = 32
	var started, finished sync.WaitGroup
	started.Add(n)
	finished.Add(n)
	var runs [n]int
	var mu sync.Mutex
	for i := range n {
		w.start(warmFunc(func() {
			started.Done()
			started.Wait()
			mu.Lock()
			runs[i]++
			mu.Unlock()
			finished.Done()
		}))
	}
	finished.Wait()
	for i, k := range runs {
		if k != 1 {
			t.Errorf("task %d ran %d times", i, k)
		}
	}

	// Sequential tasks find the workers waiting.
	before := w.workers.Load()
	for range 100 {
		done := make(chan struct{})
		w.start(warmFunc(func() { close(done) }))
		<-done
	}
	if after := w.workers.Load(); after-before >= 100 {
		t.Errorf("%d workers after 100 sequential tasks, %d before: workers not reused", after, before)
	}
}
