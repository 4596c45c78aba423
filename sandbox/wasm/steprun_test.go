package wasm

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/nearstore/nearstore/sandbox"
)

// driveData runs DriveSteps on inst with every step's data taken from
// data (16 bytes) and the reads checked by check, if set.
func driveData(ctx context.Context, inst sandbox.Instance, data []byte, check func(step int) error) error {
	step := 0
	return inst.(sandbox.StepDriver).DriveSteps(ctx, []sandbox.Next{{Len: 16}},
		func(reads []sandbox.Next) (uint32, uint64, int, error) {
			step++
			if check != nil {
				if err := check(step); err != nil {
					return 0, 0, 0, err
				}
			}
			d, err := inst.Data(len(data))
			if err != nil {
				return 0, 0, 0, err
			}
			copy(d, data)
			return 0, 0, len(data), nil
		})
}

// TestDriveHostile: a request run by DriveSteps meets every limit a
// request run by Step does, and a broken instance is not pooled.
func TestDriveHostile(t *testing.T) {
	r := newRuntime(t, Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		lim  sandbox.Limits
		want error
	}{
		{"loop", sandbox.Limits{Time: 50 * time.Millisecond}, sandbox.ErrTimeout},
		{"oob", sandbox.Limits{}, sandbox.ErrMemory},
		{"hugeout", sandbox.Limits{}, sandbox.ErrStep},
		{"misc", sandbox.Limits{}, sandbox.ErrStep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := load(t, r, tc.name, tc.lim)
			for range 2 {
				inst, err := m.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				err = driveData(ctx, inst, make([]byte, 16), nil)
				if el := time.Since(start); !errors.Is(err, tc.want) || el > 5*time.Second {
					t.Fatalf("DriveSteps: %v after %v, want %v", err, el, tc.want)
				}
				broken := errors.Is(err, sandbox.ErrTimeout) || errors.Is(err, sandbox.ErrMemory)
				if broken {
					if err := driveData(ctx, inst, make([]byte, 16), nil); err == nil {
						t.Fatal("a broken instance ran again")
					}
				}
				inst.Release()
				if n := len(m.free); broken && n != 0 {
					t.Fatalf("%d broken instances pooled", n)
				}
			}
		})
	}
}

// TestDriveSemantics: results, function errors, errors from the reader,
// the caller's context, and the per-step time limit.
func TestDriveSemantics(t *testing.T) {
	r := newRuntime(t, Options{})
	ctx := context.Background()
	m := load(t, r, "chain", sandbox.Limits{Time: 200 * time.Millisecond})

	t.Run("function error", func(t *testing.T) {
		inst, _ := m.Acquire(ctx)
		defer inst.Release()
		err := driveData(ctx, inst, record(0, 0xdeadbeef), nil)
		var fe *sandbox.FunctionError
		if !errors.As(err, &fe) || fe.Code != -1000 {
			t.Fatalf("got %v, want code -1000", err)
		}
	})
	t.Run("reader error", func(t *testing.T) {
		errRead := errors.New("the device failed")
		for range 2 {
			inst, _ := m.Acquire(ctx)
			// A chain that never ends; the reader fails at step 3.
			err := driveData(ctx, inst, record(16, 1), func(step int) error {
				if step == 3 {
					return errRead
				}
				return nil
			})
			if err != errRead {
				t.Fatalf("got %v, want the reader's error as it is", err)
			}
			if sum := le.Uint64(inst.Scratch()[8:]); sum != 2 {
				t.Fatalf("scratch sum %d after 2 steps, want 2", sum)
			}
			inst.Release()
			// The instance is fine and pooled: the next request uses it.
			if n := len(m.free); n != 1 {
				t.Fatalf("%d instances pooled, want 1", n)
			}
		}
		checkChain(t, m)
	})
	t.Run("reads do not count against the step's time", func(t *testing.T) {
		inst, _ := m.Acquire(ctx)
		defer inst.Release()
		err := driveData(ctx, inst, record(16, 1), func(step int) error {
			switch {
			case step == 1:
			case step <= 3:
				// Longer than Limits.Time, between steps.
				time.Sleep(300 * time.Millisecond)
			default:
				return errors.New("stop")
			}
			return nil
		})
		if err == nil || err.Error() != "stop" {
			t.Fatalf("got %v, want the reader's stop", err)
		}
	})
	t.Run("caller's context", func(t *testing.T) {
		lm := load(t, r, "loop", sandbox.Limits{Time: 10 * time.Second})
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		inst, _ := lm.Acquire(ctx)
		defer inst.Release()
		err := driveData(cctx, inst, make([]byte, 16), nil)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sandbox.ErrTimeout) {
			t.Fatalf("got %v, want the caller's deadline", err)
		}
	})
	t.Run("caller's context between requests", func(t *testing.T) {
		// A context that ends after its request must not touch the
		// instance's next request.
		for range 3 {
			cctx, cancel := context.WithCancel(ctx)
			inst, _ := m.Acquire(ctx)
			if _, err := drive(cctx, inst, chainFiles(), 0, 0, 16); err != nil {
				t.Fatal(err)
			}
			inst.Release()
			cancel()
		}
		checkChain(t, m)
	})
}

// TestSparePool: instances released past PoolSize are kept as spares and
// handed out again, not closed.
func TestSparePool(t *testing.T) {
	r := newRuntime(t, Options{PoolSize: 2})
	m := load(t, r, "chain", sandbox.Limits{})
	ctx := context.Background()
	held := map[*state]bool{}
	var insts []sandbox.Instance
	for range 10 {
		inst, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[inst.(*instance).s] = true
		insts = append(insts, inst)
	}
	for _, inst := range insts {
		inst.Release()
	}
	if n := len(m.free); n != 2 {
		t.Fatalf("%d instances in the free list, want PoolSize 2", n)
	}
	reused := 0
	for range 10 {
		inst, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if held[inst.(*instance).s] {
			reused++
		}
		defer inst.Release()
	}
	// sync.Pool may drop spares at any GC; most come back.
	if reused < 3 {
		t.Errorf("%d of 10 instances reused", reused)
	}
	checkChain(t, m)
}

// TestLargeInstanceIsSpare: an instance whose memory grew past keepBytes
// for a large input is not kept for good.
func TestLargeInstanceIsSpare(t *testing.T) {
	r := newRuntime(t, Options{})
	m := load(t, r, "stats64", sandbox.Limits{})
	ctx := context.Background()
	if _, err := sandbox.Compute(ctx, m, randomU64s(1<<18, 1), 32); err != nil { // 2 MiB
		t.Fatal(err)
	}
	if n := len(m.free); n != 0 {
		t.Fatalf("%d instances kept after a 2 MiB input, want 0", n)
	}
	if _, err := sandbox.Compute(ctx, m, randomU64s(16, 1), 32); err != nil {
		t.Fatal(err)
	}
}

// TestDriveLongLivedCall: an instance's requests share one run call
// (steprun.go), which must not change what a request sees: the caller's
// context still interrupts a later request of the same instance, that
// instance is then not pooled, and stopping the calls (spares, Close)
// leaves no goroutine behind.
func TestDriveLongLivedCall(t *testing.T) {
	ctx := context.Background()
	base := runtime.NumGoroutine()
	r, err := NewRuntime(ctx, Options{PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := load(t, r, "chain", sandbox.Limits{Time: 10 * time.Second})

	inst, _ := m.Acquire(ctx)
	for i := range 20 {
		if steps, err := drive(ctx, inst, chainFiles(), 0, 0, 16); err != nil || steps != 4 {
			t.Fatalf("request %d: %d steps, %v", i, steps, err)
		}
	}
	// A never-ending chain whose caller gives up at its fifth read.
	cctx, cancel := context.WithCancel(ctx)
	err = driveData(cctx, inst, record(16, 1), func(step int) error {
		if step == 5 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a later request whose caller gave up: %v, want context.Canceled", err)
	}
	inst.Release()
	if n := len(m.free); n != 0 {
		t.Fatalf("%d interrupted instances pooled", n)
	}

	// Two instances for a pool of one: one stays, one is a spare, and
	// each ran requests on its own call.
	a, _ := m.Acquire(ctx)
	b, _ := m.Acquire(ctx)
	for _, inst := range []sandbox.Instance{a, b} {
		if _, err := drive(ctx, inst, chainFiles(), 0, 0, 16); err != nil {
			t.Fatal(err)
		}
	}
	a.Release()
	b.Release()
	checkChain(t, m)
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The runners' coroutines and wazero's watchers of their calls end
	// with them (the interrupted one's when it was released).
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Fatalf("%d goroutines after closing, %d before", n, base)
	}
}
