package host

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
)

// TestReservations: the owner/reader protocol offloadfs builds on, against
// nearstore's target. The owner registers and takes a Write Exclusive
// reservation; another host still reads, cannot write and cannot acquire,
// until it preempts the owner.
func TestReservations(t *testing.T) {
	checkGoroutines(t)
	addr := startTarget(t)
	ctx := ctxT(t, 20*time.Second)
	connect := func(nqn string, id byte) *Namespace {
		t.Helper()
		_, ns := connectNS(t, ctx, addr, 1, Options{HostNQN: nqn, HostID: [16]byte{id, 0xee}, IOQueues: 1, KeepAlive: -1})
		return ns
	}
	const ownerNQN, readerNQN = "nqn.2026-11.io.nearstore:owner", "nqn.2026-11.io.nearstore:reader"
	const ownerKey, readerKey = 0xA1A1, 0xB2B2
	owner, reader := connect(ownerNQN, 1), connect(readerNQN, 2)
	blk := make([]byte, 512)
	write := func(ns *Namespace) error { _, err := ns.WriteAt(blk, 0); return err }
	read := func(ns *Namespace) error { _, err := ns.ReadAt(blk, 0); return err }
	conflict := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrReservationConflict) {
			t.Fatalf("%s: %v, want ErrReservationConflict", what, err)
		}
		if errors.Is(err, ErrAccessDenied) {
			t.Fatalf("%s: %v matches ErrAccessDenied too", what, err)
		}
	}

	s, err := reader.Report(ctx)
	if err != nil || s.Type != nvme.ResvNone || s.NumRegistrants != 0 || s.Generation != 0 || !s.Extended {
		t.Fatalf("initial report %+v, %v", s, err)
	}
	must(t, owner.Register(ctx, RegisterOpts{NewKey: ownerKey}))
	must(t, owner.Acquire(ctx, AcquireOpts{Type: nvme.ResvWriteExclusive, Key: ownerKey}))
	must(t, write(owner))
	must(t, read(reader))
	conflict("reader write", write(reader))
	must(t, reader.Register(ctx, RegisterOpts{NewKey: readerKey}))
	conflict("second acquire", reader.Acquire(ctx, AcquireOpts{Type: nvme.ResvWriteExclusive, Key: readerKey}))
	conflict("registered reader write", write(reader))
	must(t, reader.Release(ctx, ReleaseOpts{Type: nvme.ResvWriteExclusive, Key: readerKey})) // holds nothing: no-op
	conflict("acquire with the wrong key", owner.Acquire(ctx, AcquireOpts{Type: nvme.ResvWriteExclusive, Key: readerKey}))

	s, err = owner.Report(ctx)
	must(t, err)
	want := []nvme.RegisteredController{
		{CNTLID: 0xFFFF, Holder: true, HostID: [16]byte{1, 0xee}, Key: ownerKey},
		{CNTLID: 0xFFFF, HostID: [16]byte{2, 0xee}, Key: readerKey},
	}
	if s.Type != nvme.ResvWriteExclusive || s.Generation != 2 || s.NumRegistrants != 2 || len(s.Registrants) != 2 ||
		s.Registrants[0] != want[0] || s.Registrants[1] != want[1] {
		t.Fatalf("report %+v, want registrants %+v", s, want)
	}
	if h, ok := s.Holder(); !ok || h.Key != ownerKey {
		t.Fatalf("holder %+v", h)
	}

	// The target cannot persist reservations and says so.
	err = owner.Register(ctx, RegisterOpts{Action: ReplaceKey, CurrentKey: ownerKey, NewKey: ownerKey, CPTPL: nvme.CPTPLPersist})
	if !errors.Is(err, &nvme.StatusError{Status: nvme.StatusInvalidField}) {
		t.Fatalf("CPTPL persist: %v", err)
	}
	if err := owner.Register(ctx, RegisterOpts{CPTPL: 7}); err == nil {
		t.Fatal("CPTPL 7 accepted")
	}

	// Another controller of the reader's host shares its registration.
	reader2 := connect(readerNQN, 3)
	conflict("reader's second controller acquire", reader2.Acquire(ctx, AcquireOpts{Type: nvme.ResvWriteExclusive, Key: readerKey}))

	// The reader takes over: the owner is unregistered and fenced.
	must(t, reader.Acquire(ctx, AcquireOpts{Action: Preempt, Type: nvme.ResvWriteExclusive, Key: readerKey, PreemptKey: ownerKey}))
	conflict("preempted owner write", write(owner))
	conflict("preempted owner acquire", owner.Acquire(ctx, AcquireOpts{Type: nvme.ResvWriteExclusive, Key: ownerKey}))
	must(t, write(reader))
	must(t, write(reader2))
	must(t, read(owner))

	conflict("release with the wrong key", reader.Release(ctx, ReleaseOpts{Type: nvme.ResvWriteExclusive, Key: ownerKey}))
	if err := reader.Release(ctx, ReleaseOpts{Type: nvme.ResvExclusiveAccess, Key: readerKey}); !errors.Is(err, &nvme.StatusError{Status: nvme.StatusInvalidField}) {
		t.Fatalf("release of another type: %v", err)
	}
	must(t, reader.Release(ctx, ReleaseOpts{Type: nvme.ResvWriteExclusive, Key: readerKey}))
	must(t, write(owner))
	must(t, reader.Release(ctx, ReleaseOpts{Action: ClearReservation, Key: readerKey}))
	s, err = reader.Report(ctx)
	if err != nil || s.Type != nvme.ResvNone || s.NumRegistrants != 0 || len(s.Registrants) != 0 {
		t.Fatalf("report after clear %+v, %v", s, err)
	}
}

// TestReservationReportMany: Report returns every registrant when there
// are more than its first buffer holds.
func TestReservationReportMany(t *testing.T) {
	addr := startTarget(t)
	ctx := ctxT(t, 20*time.Second)
	const n = reportEntries + 5
	var first *Namespace
	for i := range n {
		_, ns := connectNS(t, ctx, addr, 2, Options{HostNQN: fmt.Sprintf("nqn.2026-11.io.nearstore:h%d", i), IOQueues: 1, KeepAlive: -1})
		must(t, ns.Register(ctx, RegisterOpts{NewKey: uint64(100 + i)}))
		if i == 0 {
			first = ns
			must(t, ns.Acquire(ctx, AcquireOpts{Type: nvme.ResvExclusiveAccessAllRegs, Key: 100}))
		}
	}
	s, err := first.Report(ctx)
	if err != nil || s.NumRegistrants != n || len(s.Registrants) != n || s.Type != nvme.ResvExclusiveAccessAllRegs {
		t.Fatalf("report: %d of %d registrants, %v", len(s.Registrants), s.NumRegistrants, err)
	}
	for i, r := range s.Registrants {
		if r.Key != uint64(100+i) || !r.Holder {
			t.Fatalf("entry %d: %+v", i, r)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
