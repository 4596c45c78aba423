package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/stamptest"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
)

// otherNQN is a second would-be owner.
const otherNQN = "nqn.2026-11.io.nearstore:other"

// TestOneOwner: while a host owns the file system (the environment's
// read-write mount holds the namespace's reservation), another host's
// read-write mount fails with ErrOwned and writes nothing, its raw writes
// are refused by the target, and its read-only mount works. Once the
// owner unmounts, the other host can own it.
func TestOneOwner(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	f, _ := e.create("f", 1, 16<<10)
	if err := e.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	quiet := offloadfs.Options{Logger: slog.New(slog.DiscardHandler), CommitInterval: -1}
	_, other := e.connect(otherNQN, 1)
	if _, err := offloadfs.Mount(ctx, other, quiet); !errors.Is(err, offloadfs.ErrOwned) {
		t.Fatalf("a second read-write mount: %v, want ErrOwned", err)
	}
	if _, err := other.WriteAtContext(ctx, make([]byte, bs), 0); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("a raw write by the other host: %v, want Reservation Conflict", err)
	}
	// The refused mount left no registration behind (a registrant could
	// write under the owner's reservation type).
	st, err := e.ns.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.NumRegistrants != 1 || !st.Registrants[0].Holder || st.Type != nvme.ResvWriteExclusiveRegOnly {
		t.Fatalf("reservation after the refused mount: %+v", st)
	}

	ro, err := offloadfs.MountReadOnly(ctx, other, quiet)
	if err != nil {
		t.Fatalf("a read-only mount by the other host: %v", err)
	}
	g, err := ro.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.ReadAt(make([]byte, 16<<10), 0); err != nil && err != io.EOF {
		t.Fatalf("reading through the read-only mount: %v", err)
	}
	g.Close()
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	// The owner is unaffected, and once it unmounts the other host may
	// own the file system.
	if _, err := f.WriteAt(make([]byte, bs), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := e.fsys.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := offloadfs.Mount(ctx, other, quiet)
	if err != nil {
		t.Fatalf("mounting after the owner unmounted: %v", err)
	}
	e.fsys = nil
	if _, err := e.ns.WriteAtContext(ctx, make([]byte, bs), 0); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("the former owner's raw write: %v, want Reservation Conflict", err)
	}
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOwnerCrash: an owner that dies keeps the reservation (it is the
// host's). The same host mounting again takes it back; another host gets
// ErrOwned unless it takes over, which preempts the dead owner so its
// writes are refused from then on.
func TestOwnerCrash(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	e.create("f", 1, 16<<10)
	if err := e.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// The owner "dies": its connection goes and it never unmounts.
	quiet := offloadfs.Options{Logger: slog.New(slog.DiscardHandler), CommitInterval: -1}
	e.ctrl.Close()
	dead := e.fsys
	e.fsys = nil
	t.Cleanup(func() { _ = dead.Close() })

	// The same host comes back: it owns the file system again.
	_, again := e.connect(ownerNQN, 1)
	back, err := offloadfs.Mount(ctx, again, quiet)
	if err != nil {
		t.Fatalf("the owner's host mounting again: %v", err)
	}
	if err := back.Close(); err != nil {
		t.Fatal(err)
	}
	// It "dies" again, holding the reservation this time.
	_, again2 := e.connect(ownerNQN, 1)
	held, err := offloadfs.Mount(ctx, again2, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Close() })

	_, other := e.connect(otherNQN, 1)
	if _, err := offloadfs.Mount(ctx, other, quiet); !errors.Is(err, offloadfs.ErrOwned) {
		t.Fatalf("another host mounting without TakeOver: %v, want ErrOwned", err)
	}
	take := quiet
	take.TakeOver = true
	next, err := offloadfs.Mount(ctx, other, take)
	if err != nil {
		t.Fatalf("taking over: %v", err)
	}
	e.fsys = nil
	if _, err := again2.WriteAtContext(ctx, make([]byte, bs), 0); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("the preempted owner's raw write: %v, want Reservation Conflict", err)
	}
	if _, err := next.Stat("f"); err != nil {
		t.Fatal(err)
	}
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOwnerAfterTargetRestart: a target restart drops reservations; the
// owner's synchronizer claims the reservation again when it finds the
// target restarted.
func TestOwnerAfterTargetRestart(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	f, _ := e.create("f", 1, 16<<10)
	e.syncRemote()
	e.restart()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A request naming the file finds the maps gone, which makes the
		// synchronizer push them all again, claiming first.
		e.stampAt(f, 0)
		st, err := e.ns.Report(ctx)
		if err == nil && st.NumRegistrants == 1 && st.Registrants[0].Holder {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the owner never claimed the restarted target's reservation: %+v, %v", st, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, other := e.connect(otherNQN, 1)
	if _, err := other.WriteAtContext(ctx, make([]byte, bs), 0); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("another host's raw write after the restart: %v, want Reservation Conflict", err)
	}
}

// TestGranteeWritesUnderOwnership: the owner's reservation lets
// registrants write, so a task host with a read-write grant registers a
// key of its own and writes its grant; the grant still confines it.
func TestGranteeWritesUnderOwnership(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	f, _ := e.create("shared", 1, 32<<10)
	other, _ := e.create("private", 2, 32<<10)
	if err := e.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	_, task := e.connect(taskNQN, 1)
	g, err := e.fsys.Grant(ctx, taskNQN, []*offloadfs.File{f}, pushdown.GrantReadWrite, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	in := int64(g.Extents()[0].LBA) * bs
	om, _ := other.Extents()
	out := int64(om.Extents[0].LBA) * bs
	if _, err := task.WriteAtContext(ctx, make([]byte, bs), in); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("an unregistered grantee writing its grant: %v, want Reservation Conflict", err)
	}
	if err := task.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: 0x7a5c}); err != nil {
		t.Fatal(err)
	}
	if _, err := task.WriteAtContext(ctx, make([]byte, bs), in); err != nil {
		t.Fatalf("a registered grantee writing its grant: %v", err)
	}
	if _, err := task.WriteAtContext(ctx, make([]byte, bs), out); !errors.Is(err, host.ErrAccessDenied) {
		t.Fatalf("a registered grantee writing outside its grant: %v, want Access Denied", err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTakeOverFencesLiveOwner: a take-over from an owner that is still
// alive fences it for good. The preempted owner's data writes and commits
// fail with ErrFenced (and EROFS), before and after the new owner has
// unmounted, so its stale metadata never overwrites the new owner's: the
// new owner's file survives, the preempted owner's later changes do not
// appear, fsck is clean, and a third mount takes the parked namespace
// without a take-over.
func TestTakeOverFencesLiveOwner(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	old := e.fsys
	f, _ := e.create("old", 1, 16<<10)
	if err := old.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	quiet := offloadfs.Options{Logger: slog.New(slog.DiscardHandler), CommitInterval: -1}
	take := quiet
	take.TakeOver = true
	_, other := e.connect(otherNQN, 1)
	next, err := offloadfs.Mount(ctx, other, take)
	if err != nil {
		t.Fatalf("taking over: %v", err)
	}
	want := bytes.Repeat([]byte("new owner's file "), 1000)
	g, err := next.Create("r.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := next.Close(); err != nil {
		t.Fatalf("the new owner's unmount: %v", err)
	}

	// The new owner has gone; the preempted one tries to carry on.
	if _, err := f.WriteAt(make([]byte, bs), 0); !errors.Is(err, offloadfs.ErrFenced) || !errors.Is(err, syscall.EROFS) {
		t.Fatalf("the preempted owner's data write: %v, want ErrFenced (EROFS)", err)
	}
	if _, err := old.Create("live.txt"); !errors.Is(err, offloadfs.ErrFenced) {
		t.Fatalf("the preempted owner's create: %v, want ErrFenced", err)
	}
	if err := old.Sync(ctx); !errors.Is(err, offloadfs.ErrFenced) {
		t.Fatalf("the preempted owner's sync: %v, want ErrFenced", err)
	}
	f.Close()
	if err := old.Close(); !errors.Is(err, offloadfs.ErrFenced) {
		t.Fatalf("the preempted owner's unmount: %v, want ErrFenced", err)
	}
	e.fsys = nil
	if _, err := e.ns.WriteAtContext(ctx, make([]byte, bs), 0); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("the preempted owner's raw write after the new owner unmounted: %v, want Reservation Conflict", err)
	}

	// A third host mounts the parked namespace without --take-over.
	_, third := e.connect("nqn.2026-11.io.nearstore:third", 1)
	fsys, err := offloadfs.Mount(ctx, third, quiet)
	if err != nil {
		t.Fatalf("mounting the parked namespace: %v", err)
	}
	defer fsys.Close()
	h, err := fsys.Open("r.md")
	if err != nil {
		t.Fatalf("the new owner's file: %v", err)
	}
	got := make([]byte, len(want)+1)
	n, err := h.ReadAt(got, 0)
	if err != io.EOF || !bytes.Equal(got[:n], want) {
		t.Fatalf("the new owner's file: %d bytes, %v; want its %d bytes", n, err, len(want))
	}
	h.Close()
	if _, err := fsys.Stat("live.txt"); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("the preempted owner's file: %v, want it absent", err)
	}
	r, err := fsys.Fsck(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("fsck after the take-over: %v", err)
	}
}

// TestFencedAfterTargetRestart: reservations do not survive a target
// restart, so a preempted owner could acquire one again; the mount
// generation in the superblock still fences it.
func TestFencedAfterTargetRestart(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	old := e.fsys
	f, _ := e.create("old", 1, 16<<10)
	e.syncRemote()

	take := offloadfs.Options{Logger: slog.New(slog.DiscardHandler), CommitInterval: -1, TakeOver: true}
	_, other := e.connect(otherNQN, 1)
	next, err := offloadfs.Mount(ctx, other, take)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	e.restart()
	// A request naming the file makes the old owner's synchronizer find
	// the target restarted and claim the reservation again: the claim
	// succeeds (nobody holds one), the generation check does not.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _ = old.Pushdown(ctx, e.fn, []*offloadfs.File{f}, host.Start{Length: stamptest.Size}, stamptest.Scratch(-1, 0))
		if _, err := old.Create("x"); errors.Is(err, offloadfs.ErrFenced) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the preempted owner was never fenced after the target restarted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.Close()
	if err := old.Close(); !errors.Is(err, offloadfs.ErrFenced) {
		t.Fatalf("the preempted owner's unmount: %v, want ErrFenced", err)
	}
	e.fsys = nil
}
