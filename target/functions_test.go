package target

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// TestFunctionsBelongToTheirHosts: issue 18's "functions have no owner".
// A host lists only the functions it loaded and cannot unload another's;
// two hosts loading the same module each own it, and it stays loaded until
// both have unloaded it.
func TestFunctionsBelongToTheirHosts(t *testing.T) {
	addr, _, owner, _, fn := echoServer(t, Config{}) // owner loaded fn
	ctx := context.Background()
	other, _ := connectAs(t, addr, "nqn.2026-11.io.nearstore:other", 1)
	fs, err := other.ListFunctions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 0 {
		t.Fatalf("another host lists %d functions it did not load", len(fs))
	}
	if err := other.UnloadFunction(ctx, fn); !isStatus(err, nvme.StatusFunctionNotFound) {
		t.Fatalf("another host unloading the owner's function: %v, want Function Not Found", err)
	}
	if fs, err := owner.ListFunctions(ctx); err != nil || len(fs) != 1 || fs[0].ID != fn {
		t.Fatalf("the owner lists %v, %v", fs, err)
	}
	// Both load it; one unloads; the other still has it.
	if _, err := other.LoadFunction(ctx, echoModuleBytes); err != nil {
		t.Fatal(err)
	}
	if err := owner.UnloadFunction(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if fs, err := other.ListFunctions(ctx); err != nil || len(fs) != 1 {
		t.Fatalf("after the first owner unloaded it, the second lists %v, %v", fs, err)
	}
	if fs, err := owner.ListFunctions(ctx); err != nil || len(fs) != 0 {
		t.Fatalf("after unloading, the first owner lists %v, %v", fs, err)
	}
	if err := other.UnloadFunction(ctx, fn); err != nil {
		t.Fatal(err)
	}
}

func isStatus(err error, st nvme.Status) bool {
	return errors.Is(err, &nvme.StatusError{Status: st})
}

// TestFunctionQuota: a host's loads past its quota fail with Metadata
// Limit and load nothing; another host's loads are unaffected.
func TestFunctionQuota(t *testing.T) {
	addr, _, _, _, _ := echoServer(t, Config{MaxFunctionsPerHost: 3, MaxFunctionBytesPerHost: 1 << 20})
	ctx := context.Background()
	greedy, _ := connectAs(t, addr, "nqn.2026-11.io.nearstore:greedy", 1)
	modBytes := func(i int) []byte { return []byte(fmt.Sprintf("\x00asm\x01\x00\x00\x00module %d", i)) }
	for i := range 3 {
		if _, err := greedy.LoadFunction(ctx, modBytes(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := greedy.LoadFunction(ctx, modBytes(3)); !isStatus(err, nvme.StatusMetadataLimit) {
		t.Fatalf("a fourth function: %v, want Metadata Limit", err)
	}
	// Reloading one it has costs nothing.
	if _, err := greedy.LoadFunction(ctx, modBytes(0)); err != nil {
		t.Fatalf("reloading: %v", err)
	}
	polite, _ := connectAs(t, addr, "nqn.2026-11.io.nearstore:polite", 1)
	if _, err := polite.LoadFunction(ctx, modBytes(3)); err != nil {
		t.Fatalf("another host's load: %v", err)
	}
	if fs, _ := greedy.ListFunctions(ctx); len(fs) != 3 {
		t.Fatalf("greedy lists %d functions", len(fs))
	}
}

// TestCallLimiter: a host's calls past its slots wait for its own to end,
// and another host's are not held up.
func TestCallLimiter(t *testing.T) {
	l := newCallLimiter(2)
	ctx := context.Background()
	ca, cb := l.join("a"), l.join("b") // the hosts' controllers
	a1, _ := l.acquire(ctx, ca)
	a2, _ := l.acquire(ctx, ca)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.acquire(cctx, ca); !errors.Is(err, context.Canceled) {
		t.Fatalf("a third call of a full host: %v", err)
	}
	b, err := l.acquire(ctx, cb)
	if err != nil {
		t.Fatal(err)
	}
	if l.running("a") != 2 || l.running("b") != 1 {
		t.Fatalf("running a=%d b=%d", l.running("a"), l.running("b"))
	}
	l.release(a1)
	l.release(a2)
	l.release(b)
	if len(l.hosts) != 2 {
		t.Fatalf("%d hosts tracked while their controllers live, want 2", len(l.hosts))
	}
	l.leave(ca)
	l.leave(cb)
	if len(l.hosts) != 0 {
		t.Fatalf("%d hosts still tracked", len(l.hosts))
	}
}

// TestCallLimiterOutlivesController: the calls a torn-down controller
// left running still count against its host's bound, both for the host's
// next controller and for its own calls starting late; the host's entry
// goes only with the last of them.
func TestCallLimiterOutlivesController(t *testing.T) {
	l := newCallLimiter(2)
	ctx := context.Background()
	full, cancel := context.WithCancel(ctx)
	cancel()
	old := l.join("a")
	a1, _ := l.acquire(ctx, old)
	a2, _ := l.acquire(ctx, old)
	l.leave(old) // torn down; a1 and a2 still run
	next := l.join("a")
	if _, err := l.acquire(full, next); !errors.Is(err, context.Canceled) {
		t.Fatalf("the next controller's call beside two running: %v, want it to wait", err)
	}
	if n := l.running("a"); n != 2 {
		t.Fatalf("running %d, want 2", n)
	}
	l.release(a1)
	n1, err := l.acquire(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	// A call of the old controller starting now takes the same slots.
	if _, err := l.acquire(full, old); !errors.Is(err, context.Canceled) {
		t.Fatalf("a late call of the old controller beside two running: %v, want it to wait", err)
	}
	l.release(a2)
	l.release(n1)
	l.leave(next)
	if len(l.hosts) != 0 {
		t.Fatalf("%d hosts tracked with no controller or call", len(l.hosts))
	}
	// Once the entry has gone, a late call of the old controller counts
	// on the host's current one.
	third := l.join("a")
	late, err := l.acquire(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if late != third || l.running("a") != 1 {
		t.Fatalf("a late call took entry %p (current %p), running %d", late, third, l.running("a"))
	}
	if _, err := l.acquire(ctx, third); err != nil {
		t.Fatal(err)
	}
	if _, err := l.acquire(full, third); !errors.Is(err, context.Canceled) {
		t.Fatalf("a third call beside a late one and the controller's: %v, want it to wait", err)
	}
}

// TestCallLimiterControllers: a controller holds its host's entry from
// Connect until it goes.
func TestCallLimiterControllers(t *testing.T) {
	s, addr := startServer(t, Config{Runtimes: []sandbox.Runtime{echoRuntime{}}})
	const nqn = "nqn.2026-11.io.nearstore:limited"
	users := func() int64 {
		s.calls.mu.Lock()
		defer s.calls.mu.Unlock()
		if hc := s.calls.hosts[nqn]; hc != nil {
			return hc.users.Load()
		}
		return 0
	}
	c1, _ := connectAs(t, addr, nqn, 1)
	c2, _ := connectAs(t, addr, nqn, 1)
	if n := users(); n != 2 {
		t.Fatalf("%d users of the host's entry with two controllers, want 2", n)
	}
	c1.Close()
	waitFor(t, "one controller to go", func() bool { return users() == 1 })
	c2.Close()
	waitFor(t, "the host's entry to go", func() bool { return users() == 0 })
}

// TestHostStateLease: issue 18's "kept after disconnect". What a host put
// (extent maps) and loaded (functions) stays while it is away less than
// HostStateLease, and goes after it.
func TestHostStateLease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lease time.Duration
		kept  bool
	}{{"back within the lease", time.Hour, true}, {"gone past the lease", 20 * time.Millisecond, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var s *Server
			reg := prometheus.NewRegistry()
			s, addr := startServer(t, Config{HostStateLease: tc.lease, Runtimes: []sandbox.Runtime{echoRuntime{}}, Metrics: NewMetrics(reg)})
			ctx := context.Background()
			const nqn = "nqn.2026-11.io.nearstore:leaving"
			c, ns := connectAs(t, addr, nqn, 1)
			if _, err := c.LoadFunction(ctx, echoModuleBytes); err != nil {
				t.Fatal(err)
			}
			if err := ns.PutExtentMaps(ctx, []pushdown.File{{ID: 7, Version: 3, Size: 512, Extents: []pushdown.Extent{x(10, 1)}}}); err != nil {
				t.Fatal(err)
			}
			c.Close()
			if !tc.kept {
				waitFor(t, "the host's state to go", func() bool { return s.funcs.count(nqn) == 0 })
			}
			c, ns = connectAs(t, addr, nqn, 1)
			vs, err := ns.ExtentMapVersions(ctx, []uint64{7})
			if err != nil {
				t.Fatal(err)
			}
			fs, err := c.ListFunctions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if kept := vs[0] == 3 && len(fs) == 1; kept != tc.kept {
				t.Fatalf("map version %d, %d functions: kept %v, want %v", vs[0], len(fs), kept, tc.kept)
			}
			if !tc.kept {
				if got := gauge(t, reg, "nearstore_target_extent_maps", map[string]string{"nsid": "1"}); got != 0 {
					t.Fatalf("extent maps gauge %v after the host's maps went", got)
				}
			}
		})
	}
}
