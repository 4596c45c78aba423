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
	a1, _ := l.acquire(ctx, "a")
	a2, _ := l.acquire(ctx, "a")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.acquire(cctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a third call of a full host: %v", err)
	}
	b, err := l.acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if l.running("a") != 2 || l.running("b") != 1 {
		t.Fatalf("running a=%d b=%d", l.running("a"), l.running("b"))
	}
	l.release(a1)
	l.release(a2)
	l.release(b)
	if len(l.hosts) != 0 {
		t.Fatalf("%d hosts still tracked", len(l.hosts))
	}
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
