package wasm

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/sandbox"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// A pushdown request's steps run inside one call into wazero, not one call
// per step (DriveSteps). wazero's per-call cost is the bound on a step
// otherwise: with interruption on (WithCloseOnContextDone), every call
// starts a goroutine to watch its context, and each step also made a
// context with a deadline; together about 2 µs, ten times the cost of
// entering the compiled code. Instead, each instance with a pushdown
// entry has a runner, a second tiny module instance that imports the
// function's pushdown and a host function, and loops:
//
//	(func (export "run") (param $ctx i32) (result i32) (local $r i32)
//	  (block $out
//	    (loop $l
//	      (local.set $r (call $pushdown (local.get $ctx)))
//	      (br_if $out (i32.eqz (call $next (local.get $r))))
//	      ... runnerUnroll times in all, the last one
//	      (br_if $l (call $next (local.get $r)))))
//	  (local.get $r))
//
// $next reads the step's result from the context, calls the caller's
// StepReader for the reads it asks for, fills in the context for the next
// step and returns 1. When the request ends (the function is done, or
// anything failed), $next does not return to end the call: it hands the
// request back to DriveSteps and waits there, inside the call, for the
// instance's next request, and returns 1 for its first step. So the run
// call lasts as long as the instance (a coroutine, iter.Pull: DriveSteps
// switches to it and back once per request), and wazero's goroutine that
// watches the call's context, which it starts on every call, is started
// once per instance rather than once per request. $next returns 0, ending
// the call, only when the instance is closed or put aside (stopRunner).
// Each step's function code still runs under Limits.Time (runCtx), and
// the caller's context still interrupts it.
//
// The loop's body is runnerUnroll steps because wazero leaves the
// compiled code at every loop header it enters, to look for a closed
// instance (WithCloseOnContextDone): one exit per runnerUnroll steps
// instead of one per step, which for a one-step request was about as
// many exits as the function's own search.
const runnerUnroll = 8

// runnerWasm is that module in the binary format (no wabt needed to build
// it; wazero validates it when the Runtime compiles it).
var runnerWasm = buildRunner(runnerUnroll)

// buildRunner returns the runner module with unroll steps per loop
// iteration.
func buildRunner(unroll int) []byte {
	body := []byte{0x01, 0x01, 0x7f}            // 1 local i32
	body = append(body, 0x02, 0x40, 0x03, 0x40) // block $out, loop $l
	for i := range unroll {
		body = append(body,
			0x20, 0x00, // local.get $ctx
			0x10, 0x01, // call $pushdown
			0x22, 0x01, // local.tee $r
			0x10, 0x00) // call $next
		if i < unroll-1 {
			body = append(body, 0x45, 0x0d, 0x01) // i32.eqz, br_if $out
		} else {
			body = append(body, 0x0d, 0x00) // br_if $l
		}
	}
	body = append(body, 0x0b, 0x0b, 0x20, 0x01, 0x0b)  // end loop, end block, local.get $r, end
	code := appendU32([]byte{0x01}, uint32(len(body))) // 1 body
	code = append(code, body...)
	m := []byte{
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
		// type section: 1 type, (i32) -> i32
		0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f,
		// import section, 32 bytes, 2 imports:
		0x02, 0x20, 0x02,
		// "nearstore" "next" func type 0
		0x09, 'n', 'e', 'a', 'r', 's', 't', 'o', 'r', 'e', 0x04, 'n', 'e', 'x', 't', 0x00, 0x00,
		// "fn" "pushdown" func type 0
		0x02, 'f', 'n', 0x08, 'p', 'u', 's', 'h', 'd', 'o', 'w', 'n', 0x00, 0x00,
		// function section: 1 function of type 0 (index 2)
		0x03, 0x02, 0x01, 0x00,
		// export section: "run" func 2
		0x07, 0x07, 0x01, 0x03, 'r', 'u', 'n', 0x00, 0x02,
	}
	// code section: 1 body
	m = appendU32(append(m, 0x0a), uint32(len(code)))
	return append(m, code...)
}

// Names the runner imports. hostModule is registered in the Runtime's
// namespace; user modules cannot import it (checkImports allows only
// WASI). runnerFn is resolved to the instance's own function module.
const (
	hostModule = "nearstore"
	hostNext   = "next"
	runnerFn   = "fn"
	runnerRun  = "run"
)

// instantiateHost registers the host module and compiles the runner.
func (r *Runtime) instantiateHost(ctx context.Context) error {
	_, err := r.rt.NewHostModuleBuilder(hostModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(next), []api.ValueType{i32}, []api.ValueType{i32}).
		Export(hostNext).
		Instantiate(ctx)
	if err != nil {
		return fmt.Errorf("wasm: host module: %w", err)
	}
	r.runner, err = r.rt.CompileModule(ctx, runnerWasm)
	if err != nil {
		return fmt.Errorf("wasm: compiling the step runner: %w", err)
	}
	return nil
}

// instantiateRunner makes s's runner, importing s's pushdown.
func (s *state) instantiateRunner(ctx context.Context) error {
	rctx := experimental.WithImportResolver(ctx, func(name string) api.Module {
		if name == runnerFn {
			return s.mod
		}
		return nil
	})
	mod, err := s.m.rt.rt.InstantiateModule(rctx, s.m.rt.runner, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		return fmt.Errorf("wasm: instantiating the step runner: %w", err)
	}
	s.runner = mod
	s.run = mod.ExportedFunction(runnerRun)
	return nil
}

// runKey finds the state of a run call in its context.
type runKey struct{}

// next is the host function $next, called by the runner after each step.
func next(ctx context.Context, _ api.Module, stack []uint64) {
	s, _ := ctx.Value(runKey{}).(*state)
	if s == nil || s.drive.read == nil {
		// Only the runner imports $next, and only DriveSteps calls it.
		panic(errors.New("wasm: step runner called outside a request"))
	}
	if s.nextStep(int32(uint32(stack[0]))) == 1 {
		stack[0] = 1
		return
	}
	// The request ended: hand it back to DriveSteps and wait for the next
	// one, whose first step DriveSteps has set up, or for stopRunner.
	if s.yield == nil || !s.yield(nil) {
		stack[0] = 0
		return
	}
	stack[0] = 1
}

// driving is the state of a DriveSteps call, between steps.
type driving struct {
	read sandbox.StepReader
	// err ends the run: a step's or read's error; done: a step set done.
	err  error
	done bool
	next [sandbox.MaxFanout]sandbox.Next
}

var _ sandbox.StepDriver = (*instance)(nil)

// DriveSteps runs a request's steps in one call into wazero; see
// sandbox.StepDriver.
func (h *instance) DriveSteps(ctx context.Context, first []sandbox.Next, read sandbox.StepReader) error {
	s := h.s
	if s == nil {
		return errReleased
	}
	if s.pushdown == nil {
		return fmt.Errorf("wasm: DriveSteps: %w (pushdown)", sandbox.ErrNoEntry)
	}
	if s.broken {
		return errBroken
	}
	f, off, n, err := read(first)
	if err != nil {
		return err
	}
	if err := s.setStep(f, off, n); err != nil {
		return err
	}
	d := &s.drive
	*d = driving{read: read}
	defer func() { d.read = nil }()
	if s.pull == nil {
		s.startRunner()
	}
	rc := s.rc
	rc.begin(ctx)
	rc.beginStep()
	err, ok := s.pull()
	rc.endStep()
	rc.end()
	if !ok {
		// The run call ended without handing a request back, which only
		// stopRunner makes it do.
		s.broken = true
		return errors.New("wasm: internal error: the step runner ended during a request")
	}
	if err == nil && d.err == nil && rc.Err() != nil {
		err = rc.Err()
	}
	if err != nil {
		s.broken = true
		return s.classify(ctx, exportPushdown, err)
	}
	if d.err != nil {
		return d.err
	}
	if !d.done {
		s.broken = true
		return errors.New("wasm: internal error: the step runner returned before the function was done")
	}
	return nil
}

// nextStep ends a step that returned ret: it returns 0 to end the run
// (done, or an error in s.drive.err), or 1 after reading the next step's
// data and setting up its context.
func (s *state) nextStep(ret int32) uint64 {
	d := &s.drive
	s.rc.endStep()
	if err := s.rc.Err(); err != nil {
		// The step's time ran out, or the caller's context ended, just as
		// it returned: end the request as if it had been interrupted.
		s.broken = true
		d.err = s.m.classify(s.rc.parent, exportPushdown, err)
		return 0
	}
	done, more, err := s.stepResult(ret, d.next[:0])
	if err != nil {
		d.err = err
		return 0
	}
	if done {
		d.done = true
		return 0
	}
	f, off, n, err := d.read(more)
	if err == nil {
		err = s.setStep(f, off, n)
	}
	if err != nil {
		d.err = err
		return 0
	}
	s.rc.beginStep()
	return 1
}

// startRunner starts s's run call as a coroutine, with a new runCtx
// (wazero watches the context of the call it was started with, for the
// whole call). The coroutine runs the call until stopRunner: each pull
// resumes it with a request set up in s.drive and s.ctx and returns when
// the request ends (nil) or the call fails (its error; the instance is
// then broken, and the call over).
func (s *state) startRunner() {
	s.rc = newRunCtx(s)
	rc := s.rc
	s.pull, s.stop = iter.Pull(func(yield func(error) bool) {
		s.yield = yield
		s.runStack[0] = uint64(s.ctx.ptr)
		err := s.run.CallWithStack(rc, s.runStack[:])
		s.yield = nil
		if err == nil {
			// Only a refused yield ($next returning 0) ends the call
			// without an error: the runner is being stopped.
			return
		}
		yield(err)
	})
}

// stopRunner ends s's run call, if there is one, between requests: the
// waiting $next returns 0 and the call returns. An instance is stopped
// before it is closed or put aside as a spare (whose coroutine would
// otherwise keep it, and its goroutines, alive for good).
func (s *state) stopRunner() {
	if s.stop != nil {
		s.stop()
		s.pull, s.stop = nil, nil
		s.rc.stopTimer()
	}
}

// runCtx is the context of a run call: wazero watches its Done channel
// (one goroutine per call, so one per instance) and closes the runner when
// it is closed. It is closed when a step's function code has run for
// Limits.Time (the limit is per step, as for a call per step: the time
// the caller spends reading between steps does not count), or when the
// caller's context ends (noticed within cancelPoll), only while a request
// runs (begin to end). Each request of the call is a generation; one
// whose Done was closed breaks the instance.
type runCtx struct {
	s     *state
	limit time.Duration
	done  chan struct{}
	timer *time.Timer
	epoch time.Time

	// st is the request's generation (st>>8) and why done was closed
	// (st&0xff, one of the why constants). Only the request's goroutine
	// moves the generation on; the timer and the caller's context may
	// close done only within the generation they saw.
	st atomic.Uint64
	// stepStart is when the running step began, in nanoseconds since
	// epoch plus one, or 0 between steps.
	stepStart atomic.Int64
	// armed: the timer is set (arm).
	armed atomic.Bool

	// parentDone is the caller's context's Done channel, which the timer
	// polls (cancelPoll) while the request runs; nil if it has none.
	mu         sync.Mutex
	parentDone <-chan struct{}

	// Used by the request's goroutine only.
	parent context.Context
}

// cancelPoll is how often the timer looks at the caller's context while a
// request runs. Polling costs nothing per request; hooking the context
// (context.AfterFunc) cost an allocation and two locks of the parent per
// request, about 50 ns a step.
const cancelPoll = 5 * time.Millisecond

// Why a runCtx's done is (or is not) closed.
const (
	whyRunning  = 0
	whyDeadline = 1
	whyCanceled = 2
	whyIdle     = 3 // between requests; done stays open
)

func newRunCtx(s *state) *runCtx {
	c := &runCtx{s: s, limit: s.m.lim.Time, done: make(chan struct{}), epoch: time.Now()}
	c.st.Store(whyIdle)
	c.timer = time.AfterFunc(time.Hour, c.onTimer)
	c.timer.Stop()
	return c
}

// begin starts a request's run call on behalf of parent.
func (c *runCtx) begin(parent context.Context) {
	gen := c.st.Load()>>8 + 1
	c.parent = parent
	c.st.Store(gen << 8)
	pd := parent.Done()
	c.mu.Lock()
	c.parentDone = pd
	c.mu.Unlock()
	if pd != nil && parent.Err() != nil {
		c.close(gen, whyCanceled)
	}
	c.arm()
}

// end stops watching the clock and the caller's context for the request.
// The timer is left to run out: it finds the runCtx idle and stops.
func (c *runCtx) end() {
	gen := c.st.Load() >> 8
	c.st.CompareAndSwap(gen<<8|whyRunning, gen<<8|whyIdle)
	c.mu.Lock()
	c.parentDone = nil
	c.mu.Unlock()
	c.stepStart.Store(0)
}

// checkEvery is how often at most the timer looks at a running request:
// Limits.Time, or cancelPoll if that is shorter (any request may bring a
// caller's context to watch).
func (c *runCtx) checkEvery() time.Duration { return min(c.limit, cancelPoll) }

// arm starts the timer unless it is already armed. The timer is not
// stopped and started per request (two timer-heap operations, about as
// much as the rest of a request's bookkeeping): once armed it fires every
// checkEvery while requests keep coming, and disarms itself when it fires
// between requests. Invariant: while armed is set, the timer will fire,
// or its callback runs and has not yet cleared armed; the callback clears
// armed before it looks at st, and begin sets st before arm, so a request
// that begins is always watched.
func (c *runCtx) arm() {
	if c.armed.CompareAndSwap(false, true) {
		c.timer.Reset(c.checkEvery())
	}
}

// stopTimer stops the timer for good (the run call is over).
func (c *runCtx) stopTimer() { c.timer.Stop() }

func (c *runCtx) now() int64 { return int64(time.Since(c.epoch)) + 1 }

func (c *runCtx) beginStep() { c.stepStart.Store(c.now()) }

func (c *runCtx) endStep() { c.stepStart.Store(0) }

func (c *runCtx) onTimer() {
	c.armed.Store(false)
	st := c.st.Load()
	if st&0xff != whyRunning {
		return // idle: the next begin arms the timer again
	}
	c.mu.Lock()
	pd := c.parentDone
	c.mu.Unlock()
	if pd != nil {
		select {
		case <-pd:
			c.close(st>>8, whyCanceled)
			return
		default:
		}
	}
	wait := c.checkEvery()
	if start := c.stepStart.Load(); start != 0 {
		ran := time.Duration(c.now() - start)
		if ran >= c.limit {
			c.close(st>>8, whyDeadline)
			return
		}
		wait = min(wait, c.limit-ran)
	}
	if c.armed.CompareAndSwap(false, true) {
		c.timer.Reset(wait)
	}
}

// close closes done for why, if generation gen is still running.
func (c *runCtx) close(gen uint64, why uint64) {
	if c.st.CompareAndSwap(gen<<8|whyRunning, gen<<8|why) {
		close(c.done)
	}
}

func (c *runCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *runCtx) Done() <-chan struct{}       { return c.done }

func (c *runCtx) Err() error {
	switch c.st.Load() & 0xff {
	case whyDeadline:
		return context.DeadlineExceeded
	case whyCanceled:
		return context.Canceled
	}
	return nil
}

func (c *runCtx) Value(key any) any {
	if key == (runKey{}) {
		return c.s
	}
	return c.parent.Value(key)
}
