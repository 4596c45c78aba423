package target

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/sandbox"
)

// funcScheduler runs the target's function code on a bounded number of
// CPU slots, shared out fairly among hosts by the CPU time they used.
//
// Function code (a wazero call, the eBPF interpreter) does not give up its
// OS thread until it returns: Go cannot preempt wazero's native code, and
// has no goroutine priorities. So with as many looping functions as
// GOMAXPROCS, the goroutines serving plain I/O of every other host would
// wait for a thread. The rule is therefore: at most workers function
// steps run at once, workers < GOMAXPROCS (by default GOMAXPROCS-1, at
// least 1), so the rest of the Ps always serve the I/O path.
//
// Fairness: a host waiting for a slot is served in order of its virtual
// time, the CPU its function steps have been charged (start-time fair
// queueing, the continuous form of deficit round robin by CPU time): the
// waiting host that used least goes first, whichever host or how many
// requests it has. A host that comes back after being idle starts at the
// virtual time of the last step dispatched, so idleness earns no credit.
//
// Time slices: a step holds its slot at most slice when someone waits,
// at the points where it can yield: between the steps of a pushdown
// request (its reads run with the slot given back), and every 64 Ki
// instructions of the eBPF interpreter. A wasm call cannot be paused
// inside; it is bounded by the function time limit and charged in full.
type funcScheduler struct {
	workers int
	slice   time.Duration
	metrics *Metrics

	mu      sync.Mutex
	running int
	// waiters counts the steps queued, of all hosts.
	waiters int
	// vnow is the virtual time of the step dispatched last.
	vnow  time.Duration
	hosts map[string]*schedHost
}

// schedHost is one host's standing with the scheduler. The entry goes
// when the host has no step running or waiting (users == 0).
type schedHost struct {
	name  string
	cpu   prometheus.Counter // the host's CPU metric; nil without metrics
	vtime time.Duration
	// queue holds the host's waiting steps, first come first served.
	queue []chan struct{}
	users int
}

// defaultFuncWorkers is Config.FunctionWorkers' default: one P less than
// GOMAXPROCS, for the I/O path, and at least one.
func defaultFuncWorkers() int { return max(1, runtime.GOMAXPROCS(0)-1) }

func newFuncScheduler(workers int, slice time.Duration, m *Metrics) *funcScheduler {
	return &funcScheduler{workers: workers, slice: slice, metrics: m, hosts: make(map[string]*schedHost)}
}

// cpuSlot is one step's claim on the scheduler: held, a slot it runs on
// since start; not held (paused), a place in its host's standing.
type cpuSlot struct {
	s     *funcScheduler
	h     *schedHost
	held  bool
	start time.Time
	// wake is where the scheduler grants a waiting step its slot; one
	// per claim, reused by every wait of its steps.
	wake chan struct{}
}

// acquire waits for a slot for host, or for ctx to end.
func (s *funcScheduler) acquire(ctx context.Context, host string) (*cpuSlot, error) {
	c := s.join(host)
	if err := c.resume(ctx); err != nil {
		c.leave()
		return nil, err
	}
	return c, nil
}

// join returns a claim for host that holds no slot yet (paused): resume
// takes one, release ends the claim.
func (s *funcScheduler) join(host string) *cpuSlot {
	c := new(cpuSlot)
	s.joinInto(c, host)
	return c
}

// joinInto is join into c, a claim of the caller's not held: its wake
// channel, if it has one, is kept for its next wait.
func (s *funcScheduler) joinInto(c *cpuSlot, host string) {
	s.mu.Lock()
	h := s.hosts[host]
	if h == nil {
		h = &schedHost{name: host, vtime: s.vnow, cpu: s.metrics.functionCPUOf(host)}
		s.hosts[host] = h
	} else if h.users == 0 {
		h.vtime = max(h.vtime, s.vnow)
	}
	h.users++
	s.mu.Unlock()
	*c = cpuSlot{s: s, h: h, wake: c.wake}
}

// resume waits for a slot for c's host, or for ctx to end.
func (c *cpuSlot) resume(ctx context.Context) error {
	s, h := c.s, c.h
	s.mu.Lock()
	if s.running < s.workers && !s.anyWaitingLocked() {
		s.running++
		s.vnow = max(s.vnow, h.vtime)
		s.mu.Unlock()
		c.held, c.start = true, time.Now()
		return nil
	}
	if c.wake == nil {
		c.wake = make(chan struct{}, 1)
	}
	ch := c.wake
	h.queue = append(h.queue, ch)
	s.waiters++
	s.mu.Unlock()
	select {
	case <-ch:
		c.held, c.start = true, time.Now()
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range h.queue {
		if q == ch {
			h.queue = append(h.queue[:i], h.queue[i+1:]...)
			s.waiters--
			return ctx.Err()
		}
	}
	// Granted as ctx ended: take the grant, so wake is empty for the
	// next wait, and hand the slot on.
	<-ch
	s.running--
	s.dispatchLocked()
	return ctx.Err()
}

// anyWaitingLocked reports whether a step waits; callers hold mu.
func (s *funcScheduler) anyWaitingLocked() bool { return s.waiters > 0 }

// waiting reports whether a step waits for a slot.
func (s *funcScheduler) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anyWaitingLocked()
}

// leaveLocked drops one user of h; callers hold mu.
func (s *funcScheduler) leaveLocked(h *schedHost) {
	if h.users--; h.users == 0 {
		delete(s.hosts, h.name)
	}
}

// dispatchLocked gives free slots to the waiting hosts of least virtual
// time; callers hold mu.
func (s *funcScheduler) dispatchLocked() {
	for s.running < s.workers && s.waiters > 0 {
		var next *schedHost
		for _, h := range s.hosts {
			if len(h.queue) > 0 && (next == nil || h.vtime < next.vtime) {
				next = h
			}
		}
		if next == nil {
			return
		}
		ch := next.queue[0]
		next.queue = next.queue[1:]
		s.waiters--
		s.running++
		s.vnow = max(s.vnow, next.vtime)
		ch <- struct{}{}
	}
}

// pause gives the slot back (a read between steps), charging its host the
// time it ran and keeping the host's standing; resume takes one again.
func (c *cpuSlot) pause() {
	if !c.held {
		return
	}
	s := c.s
	used := time.Since(c.start)
	c.held = false
	s.mu.Lock()
	c.h.vtime += used
	s.running--
	s.dispatchLocked()
	s.mu.Unlock()
	if c.h.cpu != nil {
		c.h.cpu.Add(used.Seconds())
	}
}

// release ends the claim: the slot, if held, goes back.
func (c *cpuSlot) release() {
	c.pause()
	c.leave()
}

// leave ends a claim that holds no slot.
func (c *cpuSlot) leave() {
	c.s.mu.Lock()
	c.s.leaveLocked(c.h)
	c.s.mu.Unlock()
}

// yield is the sandbox.Yield of the step holding c: past its slice with
// a step waiting, it gives the slot back and waits its turn again, and
// returns how long it waited.
func (c *cpuSlot) yield(ctx context.Context) (time.Duration, error) {
	if time.Since(c.start) < c.s.slice || !c.s.waiting() {
		return 0, nil
	}
	t0 := time.Now()
	c.pause()
	err := c.resume(ctx)
	return time.Since(t0), err
}

// forget drops what the scheduler knows of host (its state after it has
// gone); its metric series goes too.
func (s *funcScheduler) forget(host string) {
	s.metrics.forgetFunctionCPU(host)
}

// scheduledModule runs a module's code under the scheduler, on behalf of
// the host whose request acquires it.
//
// A request makes one and acquires one instance from it: the first
// Acquire's wrapper lives in the module's own memory (first, firstDrv),
// so that the request allocates once for both.
type scheduledModule struct {
	sandbox.Module
	s    *funcScheduler
	host string

	used     atomic.Bool
	first    scheduledInstance
	firstDrv scheduledDriver
}

// idleAcquirer is a module that can hand out an idle instance without
// running any of its code (wasm.Module).
type idleAcquirer interface {
	AcquireIdle(ctx context.Context) (inst sandbox.Instance, ok bool, err error)
}

// Acquire runs under a slot: a new wasm instance runs the module's start
// code. An idle instance, and an eBPF instance (Go memory, no program code
// to run to make one), need none.
func (m *scheduledModule) Acquire(ctx context.Context) (sandbox.Instance, error) {
	var inst sandbox.Instance
	var err error
	ok := false
	if ia, can := m.Module.(idleAcquirer); can {
		if inst, ok, err = ia.AcquireIdle(ctx); err != nil {
			return nil, err
		}
	}
	switch {
	case ok:
	case m.Kind() == sandbox.KindEBPF:
		inst, err = m.Module.Acquire(ctx)
	default:
		var slot *cpuSlot
		if slot, err = m.s.acquire(ctx, m.host); err != nil {
			return nil, err
		}
		inst, err = m.Module.Acquire(sandbox.WithYield(ctx, slot.yield))
		slot.release()
	}
	if err != nil {
		return nil, err
	}
	own := m.used.CompareAndSwap(false, true)
	si := &m.first
	if !own {
		si = new(scheduledInstance)
	}
	*si = scheduledInstance{Instance: inst, s: m.s, host: m.host}
	if y, ok := inst.(sandbox.Yielder); ok {
		si.yieldsStep, si.yieldsCompute = y.Yields(false), y.Yields(true)
	}
	if d, ok := inst.(sandbox.StepDriver); ok {
		sd := &m.firstDrv
		if !own {
			sd = new(scheduledDriver)
		}
		*sd = scheduledDriver{scheduledInstance: si, d: d}
		return sd, nil
	}
	return si, nil
}

// scheduledInstance takes a slot for every call that may run function
// code.
type scheduledInstance struct {
	sandbox.Instance
	s    *funcScheduler
	host string
	// lazy is the claim of a call that yields (runEntry), and claim
	// that of a call that takes its slot before running code; lazyCtx
	// and claimCtx are the contexts carrying their yields, pointed at
	// each call's context. The instance's calls are sequential, so each
	// serves every call in turn, and a step allocates nothing.
	lazy     lazySlot
	claim    cpuSlot
	lazyCtx  yieldContext
	claimCtx yieldContext
	// yieldsStep and yieldsCompute are what the instance's
	// sandbox.Yielder said of its entries when it was acquired.
	yieldsStep, yieldsCompute bool
}

// claimCall readies the instance's claim for one call, holding no slot
// yet, and returns ctx carrying the claim's yield, until the claim's
// release.
func (i *scheduledInstance) claimCall(ctx context.Context) context.Context {
	i.s.joinInto(&i.claim, i.host)
	return i.claimCtx.call(ctx, &i.claim)
}

// take is claimCall, then waits for a slot, or for ctx to end.
func (i *scheduledInstance) take(ctx context.Context) (context.Context, error) {
	cctx := i.claimCall(ctx)
	if err := i.claim.resume(ctx); err != nil {
		i.claim.leave()
		return nil, err
	}
	return cctx, nil
}

// noCode reports whether the instance's Input and Output run no function
// code (sandbox.Yielder), so they need no slot.
func (i *scheduledInstance) noCode() bool {
	_, ok := i.Instance.(sandbox.Yielder)
	return ok
}

func (i *scheduledInstance) Input(n int) ([]byte, error) {
	if i.noCode() {
		return i.Instance.Input(n)
	}
	if _, err := i.take(context.Background()); err != nil {
		return nil, err
	}
	b, err := i.Instance.Input(n)
	i.claim.release()
	return b, err
}

func (i *scheduledInstance) Output(n int) ([]byte, error) {
	if i.noCode() {
		return i.Instance.Output(n)
	}
	if _, err := i.take(context.Background()); err != nil {
		return nil, err
	}
	b, err := i.Instance.Output(n)
	i.claim.release()
	return b, err
}

// yields reports whether the instance's calls of an entry (compute or
// pushdown) yield by themselves (sandbox.Yielder): such a call starts
// without a slot and takes one at its first yield, so a short step costs
// the scheduler nothing.
func (i *scheduledInstance) yields(compute bool) bool {
	if compute {
		return i.yieldsCompute
	}
	return i.yieldsStep
}

// lazyCall returns ctx carrying the instance's lazy claim's yield, for
// one call at a time (the instance's calls are sequential), until the
// next lazyCall.
func (i *scheduledInstance) lazyCall(ctx context.Context) context.Context {
	if i.lazy.s == nil {
		i.lazy = lazySlot{s: i.s, host: i.host}
	}
	return i.lazyCtx.call(ctx, &i.lazy)
}

// yielder is a claim whose yield a call's context carries.
type yielder interface {
	yield(ctx context.Context) (time.Duration, error)
}

// yieldContext is a call's context carrying a claim's yield as
// claimYield, one function for every claim, which finds the claim in the
// context it is called with: a bound method value would be an
// allocation per request.
type yieldContext struct {
	sandbox.YieldContext
	claim yielder
}

// claimKey is yieldContext's Value key for its claim.
type claimKey struct{}

// call points c at ctx and claim, for one call, and returns it.
func (c *yieldContext) call(ctx context.Context, claim yielder) context.Context {
	c.Context, c.Yield, c.claim = ctx, claimYield, claim
	return c
}

// Value returns c's claim for claimKey, else what the YieldContext does.
func (c *yieldContext) Value(key any) any {
	if _, ok := key.(claimKey); ok {
		return c.claim
	}
	return c.YieldContext.Value(key)
}

// errNoClaim: a yield called with a context that does not carry its
// claim, which only a runtime calling its Yield with an unrelated
// context would do.
var errNoClaim = errors.New("target: internal error: a function yielded outside its call's context")

// claimYield is the Yield of every yieldContext: the yield of the claim
// the context it is called with carries.
func claimYield(ctx context.Context) (time.Duration, error) {
	if y, ok := ctx.Value(claimKey{}).(yielder); ok {
		return y.yield(ctx)
	}
	return 0, errNoClaim
}

// lazySlot is a call's claim taken at its first yield.
type lazySlot struct {
	s    *funcScheduler
	host string
	c    *cpuSlot
}

func (l *lazySlot) yield(ctx context.Context) (time.Duration, error) {
	if l.c != nil {
		return l.c.yield(ctx)
	}
	t0 := time.Now()
	c, err := l.s.acquire(ctx, l.host)
	if err != nil {
		return 0, err
	}
	l.c = c
	return time.Since(t0), nil
}

// release gives the claim back, if the call took one.
func (l *lazySlot) release() {
	if l.c != nil {
		l.c.release()
		l.c = nil
	}
}

// Step and Compute release without defer: a deferred call here cost a
// stack growth per request on the command's goroutine.
func (i *scheduledInstance) Step(ctx context.Context, curFile uint32, curOffset uint64, n int) (bool, []sandbox.Next, error) {
	if i.yields(false) {
		done, next, err := i.Instance.Step(i.lazyCall(ctx), curFile, curOffset, n)
		i.lazy.release()
		return done, next, err
	}
	cctx, err := i.take(ctx)
	if err != nil {
		return false, nil, err
	}
	done, next, err := i.Instance.Step(cctx, curFile, curOffset, n)
	i.claim.release()
	return done, next, err
}

func (i *scheduledInstance) Compute(ctx context.Context, inLen, outCap int) (int, error) {
	if i.yields(true) {
		n, err := i.Instance.Compute(i.lazyCall(ctx), inLen, outCap)
		i.lazy.release()
		return n, err
	}
	cctx, err := i.take(ctx)
	if err != nil {
		return 0, err
	}
	n, err := i.Instance.Compute(cctx, inLen, outCap)
	i.claim.release()
	return n, err
}

// scheduledDriver is a scheduledInstance whose runtime drives a
// request's steps itself: the slot is given back while each read runs.
type scheduledDriver struct {
	*scheduledInstance
	d sandbox.StepDriver
}

// DriveSteps holds a slot while function code runs. The claim starts
// without one: a StepDriver reads the first step's data before it runs
// any function code, and takes one after that read.
func (i *scheduledDriver) DriveSteps(ctx context.Context, first []sandbox.Next, read sandbox.StepReader) error {
	cctx := i.claimCall(ctx)
	slot := &i.claim
	defer slot.release()
	return i.d.DriveSteps(cctx, first, func(next []sandbox.Next) (uint32, uint64, int, error) {
		slot.pause()
		f, off, n, err := read(next)
		if err != nil {
			return 0, 0, 0, err
		}
		if err := slot.resume(ctx); err != nil {
			return 0, 0, 0, err
		}
		return f, off, n, nil
	})
}
