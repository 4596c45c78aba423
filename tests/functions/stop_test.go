package functions_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/sandbox"
)

// TestCloseStopsLoopingFunction: a function that never returns, with
// limits that would let it run for an hour, is stopped when the target
// closes: Close returns promptly, the host's request fails, and nothing of
// the target is left running while the runtimes are still open. Not parallel: it counts the
// process's goroutines.
func TestCloseStopsLoopingFunction(t *testing.T) {
	forever := sandbox.Limits{Time: time.Hour, MaxInstructions: 1 << 62, MaxBackJumps: 1 << 62}
	for _, kind := range kinds {
		for _, c := range []struct {
			name string
			run  func(context.Context, *host.Namespace, sandbox.ID) error
		}{
			{"pushdown", pushdownCall(modeLoop, 0, block0)},
			{"λ read", lambdaReadCall(modeLoop, block0, 64)},
		} {
			t.Run(fmt.Sprintf("%s/%s", kind, c.name), func(t *testing.T) {
				leaks := testtarget.LeakCheck(t)
				e := newEnv(t, envConfig{limits: forever})
				fn := e.loadBytes(hostileModule(t, kind))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				ran := make(chan error, 1)
				go func() { ran <- c.run(ctx, e.ns, fn) }()
				e.waitCalls(ctx, fn, 1)
				time.Sleep(50 * time.Millisecond) // well into its loop

				closed := make(chan error, 1)
				go func() { closed <- e.srv.Close() }()
				select {
				case err := <-closed:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Close waited for the looping function")
				}
				if err := <-ran; err == nil {
					t.Fatal("the looping request succeeded")
				}
				// Before the runtimes close (in the cleanup), which would
				// stop the function whether or not Close had.
				e.ctrl.Close()
				leaks()
			})
		}
	}
}

// waitCalls waits until the target has started function fn n times.
func (e *env) waitCalls(ctx context.Context, fn sandbox.ID, n uint64) {
	e.t.Helper()
	for {
		fs, err := e.ctrl.ListFunctions(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, f := range fs {
			if f.ID == fn && f.Calls >= n {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHostGoneStopsLoopingFunction: when the host that sent a looping
// function's request goes away, the function stops with its connection;
// the target goes on serving everyone else.
func TestHostGoneStopsLoopingFunction(t *testing.T) {
	forever := sandbox.Limits{Time: time.Hour, MaxInstructions: 1 << 62, MaxBackJumps: 1 << 62}
	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			e := newEnv(t, envConfig{limits: forever})
			fn := e.loadBytes(hostileModule(t, kind))
			leaks := testtarget.LeakCheck(t)
			ctrl, ns := e.connectAs("nqn.2026-11.io.nearstore:gone", 1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- pushdownCall(modeLoop, 0, block0)(ctx, ns, fn) }()
			e.waitCalls(ctx, fn, 1)
			time.Sleep(50 * time.Millisecond) // well into its loop

			ctrl.Close()
			if err := <-ran; err == nil {
				t.Fatal("the looping request succeeded")
			}
			leaks() // the host's queues and the function's run are gone
			if _, err := e.ns.ReadAtContext(ctx, make([]byte, bs), 0); err != nil {
				t.Fatalf("the other host's read: %v", err)
			}
		})
	}
}
