package target

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// warmStacks runs the commands that may block (conn.dispatch) on
// goroutines kept from one command to the next, whose stacks have already
// grown to what a command takes.
//
// A goroutine's stack starts at a few KiB. A command's is deepest where it
// waits or reads: a storage function's reads run inside the wasm call (the
// runtime's callback between steps), a simulated device's wait arms a
// timer in a system call. A new goroutine per command grew its stack
// there on every command, and each doubling copies the stack and adjusts
// every frame on it: 8% of the target's CPU in a pushdown run of bench
// lsm, with stack memory freshly faulted in from the allocator on top
// (docs/BENCHMARKS.md). A command handed to a kept goroutine pays one
// goroutine switch instead, as a new goroutine would.
//
// A command is handed to the worker that went idle last, else a new
// worker starts, so there are about as many as commands run at once:
// never fewer, so a command never waits for another to finish. Taking
// the last one keeps the busy workers' stacks in the cache and lets the
// others age: a worker idle for warmIdle (looked at every warmIdle)
// leaves; all leave when the server's context ends, and a command handed
// over after that still runs, on a worker of its own. A worker waits on a
// channel of its own, a plain receive: a select over a shared channel, a
// ticker and the context was 3–4% of the target's CPU in that run.
type warmStacks struct {
	ctx  context.Context
	free sync.Pool // *warmJob
	// workers counts the live workers.
	workers atomic.Int64

	mu sync.Mutex
	// idle are the workers waiting, in the order they went idle; each
	// was idle from generation gen on.
	idle []*warmWorker
	// gen counts the reaper's ticks.
	gen     uint64
	stopped bool
}

// warmWorker is one worker's mailbox: a nil task makes it leave.
type warmWorker struct {
	tasks chan warmTask // capacity 1
	gen   uint64
}

// warmIdle is how long a worker waits for another command, at least: long
// against the gaps of a steady load, short enough that a server gone idle
// is soon back to the goroutines it had.
const warmIdle = time.Second

// warmTask is work run on a worker.
type warmTask interface{ runWarm() }

// warmFunc runs a function as a warmTask.
type warmFunc func()

func (f warmFunc) runWarm() { f() }

// warmJob is a task run for a caller that waits: t runs, then done is
// sent.
type warmJob struct {
	t    warmTask
	done chan struct{}
}

func (j *warmJob) runWarm() {
	j.t.runWarm()
	j.done <- struct{}{}
}

// newWarmStacks starts a pool that lives until ctx ends.
func newWarmStacks(ctx context.Context) *warmStacks {
	w := &warmStacks{ctx: ctx}
	go w.reap()
	return w
}

// start runs t on the worker that went idle last, or on a new one if none
// waits, and returns at once.
func (w *warmStacks) start(t warmTask) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		k := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		k.tasks <- t
		return
	}
	w.mu.Unlock()
	w.workers.Add(1)
	go w.worker(&warmWorker{tasks: make(chan warmTask, 1)}, t)
}

// run runs t as start does and returns when t has.
func (w *warmStacks) run(t warmTask) {
	j, _ := w.free.Get().(*warmJob)
	if j == nil {
		j = &warmJob{done: make(chan struct{}, 1)}
	}
	j.t = t
	w.start(j)
	<-j.done
	j.t = nil
	w.free.Put(j)
}

// worker runs t, then the tasks handed to it, until the reaper or the
// server's end sends it nil.
func (w *warmStacks) worker(k *warmWorker, t warmTask) {
	defer w.workers.Add(-1)
	for t != nil {
		t.runWarm()
		w.mu.Lock()
		if w.stopped {
			w.mu.Unlock()
			return
		}
		k.gen = w.gen
		w.idle = append(w.idle, k)
		w.mu.Unlock()
		t = <-k.tasks
	}
}

// reap sends the workers idle for warmIdle away, every warmIdle, and all
// of them when the server's context ends. A worker that went idle at
// generation g has waited at least one whole tick at g+2; the idle list
// is in the order they went idle, so those are at its start.
func (w *warmStacks) reap() {
	tick := time.NewTicker(warmIdle)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-w.ctx.Done():
			w.mu.Lock()
			w.stopped = true
			for _, k := range w.idle {
				k.tasks <- nil
			}
			w.idle = nil
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		w.gen++
		i := 0
		for i < len(w.idle) && w.gen-w.idle[i].gen >= 2 {
			w.idle[i].tasks <- nil
			i++
		}
		n := copy(w.idle, w.idle[i:])
		clear(w.idle[n:])
		w.idle = w.idle[:n]
		w.mu.Unlock()
	}
}
