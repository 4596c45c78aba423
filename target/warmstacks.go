package target

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// warmStacks runs pushdown requests on goroutines kept from one request to
// the next, whose stacks have already grown to what a request takes.
//
// Each command runs on a goroutine of its own (conn.dispatch), whose stack
// starts at a few KiB. A pushdown request's reads run inside the wasm call
// (the runtime's callback between steps), so its stack is deepest there,
// and it grows there: each doubling copies the stack and adjusts every
// frame on it, which cost about 5 µs per request, a tenth of a pushdown
// Get's target CPU (docs/BENCHMARKS.md). A request handed to a kept
// goroutine pays two goroutine switches instead.
//
// A request is handed to a worker waiting for one, else a new worker
// starts, so there are about as many as requests run at once. A worker
// that has had no request for warmIdle (looked at every warmIdle) leaves;
// all leave when the server's context ends.
type warmStacks struct {
	ctx  context.Context
	jobs chan *warmJob
	free sync.Pool // *warmJob
	// pushdowns are pushdownTasks to reuse.
	pushdowns sync.Pool
	// workers counts the live workers.
	workers atomic.Int64
}

// warmIdle is how long a worker waits for another request, at least: long
// against the gaps of a steady load, short enough that a server gone idle
// is soon back to the goroutines it had.
const warmIdle = time.Second

// warmJob is one request handed to a worker: t runs, then done is sent.
type warmJob struct {
	t    warmTask
	done chan struct{}
}

// warmTask is work run on a worker.
type warmTask interface{ runWarm() }

// warmFunc runs a function as a warmTask.
type warmFunc func()

func (f warmFunc) runWarm() { f() }

// pushdownTask is a pushdown request run on a worker: its arguments and
// result in one reused object, where a closure would put each on the heap
// per request.
type pushdownTask struct {
	exec *pushdown.Executor
	ctx  context.Context
	dev  pushdown.Device
	mod  sandbox.Module
	req  *pushdown.Request
	res  pushdown.Result
	err  error
}

func (t *pushdownTask) runWarm() { t.res, t.err = t.exec.Pushdown(t.ctx, t.dev, t.mod, t.req) }

// pushdown runs exec.Pushdown(ctx, dev, mod, req) on a worker.
func (w *warmStacks) pushdown(exec *pushdown.Executor, ctx context.Context, dev pushdown.Device, mod sandbox.Module, req *pushdown.Request) (pushdown.Result, error) {
	t, _ := w.pushdowns.Get().(*pushdownTask)
	if t == nil {
		t = new(pushdownTask)
	}
	*t = pushdownTask{exec: exec, ctx: ctx, dev: dev, mod: mod, req: req}
	w.run(t)
	res, err := t.res, t.err
	*t = pushdownTask{}
	w.pushdowns.Put(t)
	return res, err
}

func newWarmStacks(ctx context.Context) *warmStacks {
	return &warmStacks{ctx: ctx, jobs: make(chan *warmJob)}
}

// run runs t on a waiting worker, or on a new one if none waits, and
// returns when t has.
func (w *warmStacks) run(t warmTask) {
	j, _ := w.free.Get().(*warmJob)
	if j == nil {
		j = &warmJob{done: make(chan struct{}, 1)}
	}
	j.t = t
	select {
	case w.jobs <- j:
	default:
		w.workers.Add(1)
		go w.worker(j)
	}
	<-j.done
	j.t = nil
	w.free.Put(j)
}

// worker runs j, then the requests handed to it, until it has had none
// for warmIdle or the server stops. A ticker, rather than a timer reset
// after each request, keeps the clock off the request's path but for one
// reading of it.
func (w *warmStacks) worker(j *warmJob) {
	defer w.workers.Add(-1)
	tick := time.NewTicker(warmIdle)
	defer tick.Stop()
	for j != nil {
		j.t.runWarm()
		j.done <- struct{}{}
		j = w.next(tick.C, time.Now())
	}
}

// next waits for a request: nil once there has been none since idleFrom
// for warmIdle, or the server stops.
func (w *warmStacks) next(tick <-chan time.Time, idleFrom time.Time) *warmJob {
	for {
		select {
		case j := <-w.jobs:
			return j
		case <-tick:
			if time.Since(idleFrom) >= warmIdle {
				return nil
			}
		case <-w.ctx.Done():
			return nil
		}
	}
}
