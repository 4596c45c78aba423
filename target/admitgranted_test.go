package target

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testclock"
	"github.com/nearstore/nearstore/pushdown"
)

// TestAdmitGranted: I/O done in the target's process on a host's behalf
// is held to that host's grants as its commands would be — except that a
// host never granted anything gets nothing — and a Grant Release waits
// for such I/O admitted before it.
func TestAdmitGranted(t *testing.T) {
	clock := testclock.New(time.Unix(1_000_000, 0))
	srv, addr := startServer(t, Config{Now: clock.Now}, "mem:16MiB")
	_, owner := connectAs(t, addr, "nqn.2026-11.io.nearstore:owner", 1)
	holdReservation(t, owner) // only the reservation holder grants
	ctx := context.Background()
	const engine = "nqn.2026-11.io.nearstore:engine"
	admit := func(lba, n uint64, write bool) error {
		done, err := srv.AdmitGranted(testNQN, 1, engine, lba, n, write)
		if err == nil {
			done()
		}
		return err
	}
	if err := admit(0, 1, false); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("a host never granted anything: %v, want ErrNotGranted", err)
	}
	if _, err := srv.AdmitGranted("nqn.no-such", 1, engine, 0, 1, false); err == nil {
		t.Fatal("an unknown subsystem admitted")
	}
	if _, err := srv.AdmitGranted(testNQN, 9, engine, 0, 1, false); err == nil {
		t.Fatal("an unknown namespace admitted")
	}
	if err := owner.Grant(ctx, pushdown.Grant{ID: 1, Host: engine, Mode: pushdown.GrantRead, Lease: time.Minute,
		Extents: []pushdown.Extent{x(100, 8)}}); err != nil {
		t.Fatal(err)
	}
	if err := owner.Grant(ctx, pushdown.Grant{ID: 2, Host: engine, Mode: pushdown.GrantReadWrite, Lease: 2 * time.Minute,
		Extents: []pushdown.Extent{x(200, 4)}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		lba, n   uint64
		write    bool
		admitted bool
	}{
		{"read inside", 100, 8, false, true},
		{"read straddling the end", 107, 2, false, false},
		{"read outside", 0, 1, false, false},
		{"write into the read grant", 100, 1, true, false},
		{"write into the read-write grant", 200, 4, true, true},
		{"write past it", 200, 5, true, false},
	} {
		if err := admit(c.lba, c.n, c.write); (err == nil) != c.admitted || err != nil && !errors.Is(err, ErrNotGranted) {
			t.Errorf("%s: %v, want admitted %v", c.name, err, c.admitted)
		}
	}
	// Release waits for I/O admitted under the grant.
	done, err := srv.AdmitGranted(testNQN, 1, engine, 200, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- owner.ReleaseGrant(ctx, 2) }()
	select {
	case err := <-released:
		t.Fatalf("the release completed with I/O admitted under the grant still running (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	done()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if err := admit(200, 1, true); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("after the release: %v, want ErrNotGranted", err)
	}
	clock.Advance(time.Minute)
	if err := admit(100, 1, false); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("after the lease: %v, want ErrNotGranted", err)
	}
}
