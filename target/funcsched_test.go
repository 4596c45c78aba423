package target

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/internal/metricstest"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/wasm"
)

// queued counts the waiting steps.
func (s *funcScheduler) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, h := range s.hosts {
		n += len(h.queue)
	}
	return n
}

// TestFuncSchedulerFair: with one slot, the waiting host that used least
// CPU goes first, however many steps another host queued first; a host's
// own steps go in order; the CPU is charged to the host's metric; nothing
// is left tracked.
func TestFuncSchedulerFair(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newFuncScheduler(1, time.Millisecond, NewMetrics(reg))
	ctx := context.Background()
	holder, err := s.acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		host string
		slot *cpuSlot
	}
	got := make(chan grant, 4)
	waiters := []string{"a", "a", "a", "b"}
	for i, h := range waiters {
		go func() {
			c, err := s.acquire(ctx, h)
			if err != nil {
				t.Error(err)
				return
			}
			got <- grant{h, c}
		}()
		waitFor(t, "the step to queue", func() bool { return s.queued() == i+1 })
	}
	// a has used 20 ms of CPU so far, b none.
	s.mu.Lock()
	s.hosts["a"].vtime += 20 * time.Millisecond
	s.mu.Unlock()
	holder.release()
	var order []string
	for range waiters {
		g := <-got
		order = append(order, g.host)
		s.mu.Lock()
		if s.running != 1 {
			t.Errorf("%d steps running, 1 slot", s.running)
		}
		s.mu.Unlock()
		// Each ran 5 ms.
		g.slot.start = g.slot.start.Add(-5 * time.Millisecond)
		g.slot.release()
	}
	if want := []string{"b", "a", "a", "a"}; !slices.Equal(order, want) {
		t.Errorf("served %v, want %v", order, want)
	}
	if len(s.hosts) != 0 || s.running != 0 {
		t.Errorf("left: %d hosts, %d running", len(s.hosts), s.running)
	}
	a := map[string]string{"host": "a"}
	if got := metricstest.Sum(t, reg, "nearstore_target_function_cpu_seconds_total", a); got < 0.015 {
		t.Errorf("host a charged %.3f s, want ≥ 0.015", got)
	}
	s.forget("a")
	if got := metricstest.Sum(t, reg, "nearstore_target_function_cpu_seconds_total", a); got != 0 {
		t.Errorf("host a's series kept after forget: %.3f", got)
	}
}

// TestFuncSchedulerBound: no more steps run than slots; a canceled wait
// gives up its place and a yield past the slice with someone waiting
// hands the slot over.
func TestFuncSchedulerBound(t *testing.T) {
	s := newFuncScheduler(2, time.Millisecond, nil)
	ctx := context.Background()
	a, _ := s.acquire(ctx, "a")
	b, _ := s.acquire(ctx, "b")
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.acquire(cctx, "c"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third step with two slots held: %v", err)
	}
	if s.queued() != 0 {
		t.Fatalf("a canceled wait left %d queued", s.queued())
	}
	// A yield within the slice, or with no one waiting, keeps the slot.
	if d, err := a.yield(ctx); d != 0 || err != nil || !a.held {
		t.Fatalf("yield with no one waiting: %v %v held=%v", d, err, a.held)
	}
	got := make(chan *cpuSlot)
	go func() {
		c, err := s.acquire(ctx, "c")
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	waitFor(t, "c to queue", func() bool { return s.waiting() })
	a.start = a.start.Add(-2 * time.Millisecond)
	yielded := make(chan error)
	go func() { _, err := a.yield(ctx); yielded <- err }()
	c := <-got
	c.release()
	if err := <-yielded; err != nil || !a.held {
		t.Fatalf("yield: %v held=%v", err, a.held)
	}
	a.release()
	b.release()
	if len(s.hosts) != 0 || s.running != 0 {
		t.Fatalf("left: %d hosts, %d running", len(s.hosts), s.running)
	}
}

// BenchmarkFuncSchedulerSteps: the cost of a pushdown step's pause and
// resume around its read, with 128 requests of one host contending for
// one slot.
func BenchmarkFuncSchedulerSteps(b *testing.B) {
	s := newFuncScheduler(1, time.Millisecond, nil)
	ctx := context.Background()
	b.SetParallelism(128)
	b.RunParallel(func(pb *testing.PB) {
		c, err := s.acquire(ctx, "a")
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			c.pause()
			if err := c.resume(ctx); err != nil {
				b.Error(err)
				return
			}
		}
		c.release()
	})
}

// TestLazySlot: a call that yields (the eBPF interpreter) takes a slot
// only at its first yield, waiting its turn then, and gives it back at
// the end; one that never yields never touches the scheduler.
func TestLazySlot(t *testing.T) {
	s := newFuncScheduler(1, time.Millisecond, nil)
	ctx := context.Background()
	short := &lazySlot{s: s, host: "a"}
	short.release()
	if len(s.hosts) != 0 || s.running != 0 {
		t.Fatalf("a call that never yielded left %d hosts, %d running", len(s.hosts), s.running)
	}
	holder, _ := s.acquire(ctx, "b")
	long := &lazySlot{s: s, host: "a"}
	yielded := make(chan error)
	go func() { _, err := long.yield(ctx); yielded <- err }()
	waitFor(t, "the first yield to wait for the slot", func() bool { return s.waiting() })
	holder.release()
	if err := <-yielded; err != nil || long.c == nil || !long.c.held {
		t.Fatalf("first yield: %v", err)
	}
	long.release()
	if len(s.hosts) != 0 || s.running != 0 {
		t.Fatalf("left %d hosts, %d running", len(s.hosts), s.running)
	}
}

// TestScheduledAcquireIdle: taking an idle wasm instance runs no function
// code, so it needs no CPU slot, while making a new one (its start code
// runs) waits for one.
func TestScheduledAcquireIdle(t *testing.T) {
	ctx := context.Background()
	rt, err := wasm.NewRuntime(ctx, wasm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	code, err := functions.Module("lsm_get", sandbox.KindWasm)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Load(ctx, code, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)
	s := newFuncScheduler(1, time.Millisecond, nil)
	sm := scheduledModule{Module: mod, s: s, host: "a"}
	tctx := sandbox.WithTenant(ctx, "a")
	inst, err := sm.Acquire(tctx)
	if err != nil {
		t.Fatal(err)
	}
	inst.Release()

	holder, _ := s.acquire(ctx, "b")
	defer holder.release()
	short, cancel := context.WithTimeout(tctx, 20*time.Millisecond)
	defer cancel()
	inst, err = sm.Acquire(short)
	if err != nil {
		t.Fatalf("an idle instance with every slot held: %v", err)
	}
	// A second one must be made: it waits for the slot.
	if _, err := sm.Acquire(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a new instance with every slot held: %v", err)
	}
	inst.Release()
}

type probeKey struct{}

// slotProbe is an instance whose compute-entry calls record whether they
// ran holding a slot of s, and Compute whether its context carries a
// working yield.
type slotProbe struct {
	echoInstance
	s              *funcScheduler
	held, yieldSet []bool
}

func (p *slotProbe) noteHeld() {
	p.s.mu.Lock()
	p.held = append(p.held, p.s.running == 1)
	p.s.mu.Unlock()
}

func (p *slotProbe) Input(n int) ([]byte, error)  { p.noteHeld(); return p.echoInstance.Input(n) }
func (p *slotProbe) Output(n int) ([]byte, error) { p.noteHeld(); return p.echoInstance.Output(n) }
func (p *slotProbe) Compute(ctx context.Context, inLen, outCap int) (int, error) {
	p.noteHeld()
	y := sandbox.YieldOf(ctx)
	ok := y != nil
	if ok {
		// The runtime may call it with a context made from the call's.
		d, err := y(context.WithValue(ctx, probeKey{}, 1))
		ok = d == 0 && err == nil
	}
	p.yieldSet = append(p.yieldSet, ok)
	return p.echoInstance.Compute(ctx, inLen, outCap)
}

// TestScheduledInstanceClaim: an instance's calls that run code take a
// slot each, one after another on the instance's one claim, with the
// slot's yield in the call's context; a wait that ends with its context
// leaves nothing queued, and the claim's later waits are granted as
// before; each call gives the slot and the host's standing back.
func TestScheduledInstanceClaim(t *testing.T) {
	s := newFuncScheduler(1, time.Millisecond, nil)
	ctx := context.Background()
	p := &slotProbe{s: s}
	si := &scheduledInstance{Instance: p, s: s, host: "a"}
	idle := func(what string) {
		t.Helper()
		if len(s.hosts) != 0 || s.running != 0 {
			t.Fatalf("after %s: %d hosts, %d running", what, len(s.hosts), s.running)
		}
	}
	compute := func(ctx context.Context) error {
		if _, err := si.Input(4); err != nil {
			return err
		}
		if _, err := si.Output(4); err != nil {
			return err
		}
		_, err := si.Compute(ctx, 4, 4)
		return err
	}
	if err := compute(ctx); err != nil {
		t.Fatal(err)
	}
	idle("a call with the slot free")

	holder, _ := s.acquire(ctx, "b")
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := si.Compute(short, 4, 4); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call with the slot held elsewhere: %v", err)
	}
	if s.queued() != 0 || len(s.hosts) != 1 {
		t.Fatalf("a call that gave up left %d queued, %d hosts", s.queued(), len(s.hosts))
	}
	holder.release()
	for range 2 {
		holder, _ = s.acquire(ctx, "b")
		done := make(chan error)
		go func() { done <- compute(ctx) }()
		waitFor(t, "the call to wait for the slot", func() bool { return s.waiting() })
		holder.release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		idle("a call that waited")
	}
	for i, h := range p.held {
		if !h {
			t.Fatalf("call %d ran without the slot", i)
		}
	}
	if len(p.held) != 9 || len(p.yieldSet) != 3 || slices.Contains(p.yieldSet, false) {
		t.Fatalf("%d calls ran, yields %v", len(p.held), p.yieldSet)
	}
	if _, err := claimYield(ctx); !errors.Is(err, errNoClaim) {
		t.Fatalf("a yield outside any call: %v", err)
	}
}
