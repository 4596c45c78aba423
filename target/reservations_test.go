package target

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// resvOp is one reservation command in a state-machine test.
type resvOp struct {
	host  string
	run   func(r *reservations, host string) nvme.Status
	want  nvme.Status // code only
	label string
}

func regOp(h string, nrkey uint64) resvOp {
	return resvOp{host: h, label: fmt.Sprintf("%s register %d", h, nrkey), run: func(r *reservations, h string) nvme.Status {
		return r.register(h, hostIDOf(h), nvme.ReservationRegisterCDW10(nvme.RegisterActionRegister, false, 0), 0, nrkey)
	}}
}

func unregOp(h string, crkey uint64, iekey bool) resvOp {
	return resvOp{host: h, label: fmt.Sprintf("%s unregister %d iekey=%v", h, crkey, iekey), run: func(r *reservations, h string) nvme.Status {
		return r.register(h, hostIDOf(h), nvme.ReservationRegisterCDW10(nvme.RegisterActionUnregister, iekey, 0), crkey, 0)
	}}
}

func replaceOp(h string, crkey, nrkey uint64, iekey bool) resvOp {
	return resvOp{host: h, label: fmt.Sprintf("%s replace %d->%d iekey=%v", h, crkey, nrkey, iekey), run: func(r *reservations, h string) nvme.Status {
		return r.register(h, hostIDOf(h), nvme.ReservationRegisterCDW10(nvme.RegisterActionReplace, iekey, 0), crkey, nrkey)
	}}
}

func rawRegOp(h string, cdw10 uint32) resvOp {
	return resvOp{host: h, label: fmt.Sprintf("%s register cdw10=%#x", h, cdw10), run: func(r *reservations, h string) nvme.Status {
		return r.register(h, hostIDOf(h), cdw10, 0, 1)
	}}
}

func acqOp(h string, action uint8, t nvme.ReservationType, crkey, prkey uint64) resvOp {
	return rawAcqOp(h, nvme.ReservationAcquireCDW10(action, false, t), crkey, prkey)
}

func rawAcqOp(h string, cdw10 uint32, crkey, prkey uint64) resvOp {
	return resvOp{host: h, label: fmt.Sprintf("%s acquire cdw10=%#x key %d prkey %d", h, cdw10, crkey, prkey), run: func(r *reservations, h string) nvme.Status {
		return r.acquire(h, cdw10, crkey, prkey)
	}}
}

func relOp(h string, action uint8, t nvme.ReservationType, crkey uint64) resvOp {
	return rawRelOp(h, nvme.ReservationAcquireCDW10(action, false, t), crkey)
}

func rawRelOp(h string, cdw10 uint32, crkey uint64) resvOp {
	return resvOp{host: h, label: fmt.Sprintf("%s release cdw10=%#x key %d", h, cdw10, crkey), run: func(r *reservations, h string) nvme.Status {
		return r.release(h, cdw10, crkey)
	}}
}

func (o resvOp) is(st nvme.Status) resvOp { o.want = st; return o }

func hostIDOf(h string) [16]byte {
	var id [16]byte
	copy(id[:], h)
	return id
}

const (
	stOK       = nvme.StatusSuccess
	stConflict = nvme.StatusReservationConflict
	stInvalid  = nvme.StatusInvalidField
)

const (
	acquire = nvme.AcquireActionAcquire
	preempt = nvme.AcquireActionPreempt
	abort   = nvme.AcquireActionPreemptAndAbort
	release = nvme.ReleaseActionRelease
	clr     = nvme.ReleaseActionClear
	rWE     = nvme.ResvWriteExclusive
	rEA     = nvme.ResvExclusiveAccess
	rWERO   = nvme.ResvWriteExclusiveRegOnly
	rEARO   = nvme.ResvExclusiveAccessRegOnly
	rWEAR   = nvme.ResvWriteExclusiveAllRegs
	rEAAR   = nvme.ResvExclusiveAccessAllRegs
)

// TestReservationStateMachine runs sequences of reservation commands
// against one namespace's state and checks every status and the state
// Reservation Report would show at the end.
func TestReservationStateMachine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ops     []resvOp
		rtype   nvme.ReservationType
		holders []string
		regs    map[string]uint64
		gen     uint32
	}{
		{
			name: "register acquire release",
			ops:  []resvOp{regOp("A", 1), acqOp("A", acquire, rWE, 1, 0), relOp("A", release, rWE, 1)},
			regs: map[string]uint64{"A": 1}, gen: 1,
		},
		{
			name: "register again: same key succeeds, another key conflicts",
			ops:  []resvOp{regOp("A", 1), regOp("A", 1), regOp("A", 2).is(stConflict)},
			regs: map[string]uint64{"A": 1}, gen: 2,
		},
		{
			name: "unregister checks the key unless IEKEY",
			ops: []resvOp{regOp("A", 1), unregOp("A", 2, false).is(stConflict), unregOp("A", 2, true),
				unregOp("A", 1, false).is(stConflict), unregOp("B", 0, true).is(stConflict)},
			regs: map[string]uint64{}, gen: 2,
		},
		{
			name: "replace",
			ops: []resvOp{regOp("A", 1), replaceOp("A", 1, 5, false), replaceOp("A", 1, 6, false).is(stConflict),
				replaceOp("A", 0, 7, true), replaceOp("B", 0, 8, true).is(stConflict)},
			regs: map[string]uint64{"A": 7}, gen: 3,
		},
		{
			name: "register: CPTPL and action checked",
			ops: []resvOp{
				rawRegOp("A", nvme.ReservationRegisterCDW10(0, false, nvme.CPTPLPersist)).is(stInvalid),
				rawRegOp("A", nvme.ReservationRegisterCDW10(0, false, 1)).is(stInvalid),
				rawRegOp("A", 3).is(stInvalid),
				rawRegOp("A", nvme.ReservationRegisterCDW10(0, false, nvme.CPTPLClear)),
			},
			regs: map[string]uint64{"A": 1}, gen: 1,
		},
		{
			name: "acquire needs a registration, the key and a valid type",
			ops: []resvOp{acqOp("B", acquire, rWE, 0, 0).is(stConflict), regOp("A", 1),
				acqOp("A", acquire, rWE, 2, 0).is(stConflict),
				acqOp("A", acquire, 0, 1, 0).is(stInvalid), acqOp("A", acquire, 7, 1, 0).is(stInvalid),
				rawAcqOp("A", nvme.ReservationAcquireCDW10(acquire, true, rWE), 1, 0).is(stInvalid),
				rawAcqOp("A", nvme.ReservationAcquireCDW10(3, false, rWE), 1, 0).is(stInvalid)},
			regs: map[string]uint64{"A": 1}, gen: 1,
		},
		{
			name: "acquire held: same holder and type succeeds, otherwise conflict",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), acqOp("A", acquire, rWERO, 1, 0),
				acqOp("B", acquire, rWERO, 2, 0).is(stConflict), acqOp("A", acquire, rWERO, 1, 0),
				acqOp("A", acquire, rWE, 1, 0).is(stConflict)},
			rtype: rWERO, holders: []string{"A"}, regs: map[string]uint64{"A": 1, "B": 2}, gen: 2,
		},
		{
			name: "the holder unregistering releases",
			ops:  []resvOp{regOp("A", 1), regOp("B", 2), acqOp("A", acquire, rEA, 1, 0), unregOp("A", 1, false)},
			regs: map[string]uint64{"B": 2}, gen: 3,
		},
		{
			name: "release: non-holder does nothing, wrong type is invalid, wrong key conflicts",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), acqOp("A", acquire, rWE, 1, 0),
				relOp("B", release, rWE, 2), relOp("A", release, rEA, 1).is(stInvalid),
				relOp("A", release, rWE, 9).is(stConflict), relOp("C", release, rWE, 0).is(stConflict),
				rawRelOp("A", nvme.ReservationAcquireCDW10(release, true, rWE), 1).is(stInvalid),
				rawRelOp("A", nvme.ReservationAcquireCDW10(2, false, rWE), 1).is(stInvalid)},
			rtype: rWE, holders: []string{"A"}, regs: map[string]uint64{"A": 1, "B": 2}, gen: 2,
		},
		{
			name: "release without a reservation succeeds",
			ops:  []resvOp{regOp("A", 1), relOp("A", release, rWE, 1)},
			regs: map[string]uint64{"A": 1}, gen: 1,
		},
		{
			name: "clear by any registrant",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), acqOp("A", acquire, rEARO, 1, 0),
				relOp("B", clr, 0, 3).is(stConflict), relOp("B", clr, 0, 2)},
			regs: map[string]uint64{}, gen: 3,
		},
		{
			name: "preempt the holder",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), regOp("C", 1), acqOp("A", acquire, rWE, 1, 0),
				acqOp("B", preempt, rEA, 2, 1)},
			rtype: rEA, holders: []string{"B"}, regs: map[string]uint64{"B": 2}, gen: 4,
		},
		{
			name: "preempt and abort is preempt",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), acqOp("A", acquire, rWE, 1, 0),
				acqOp("B", abort, rWERO, 2, 1)},
			rtype: rWERO, holders: []string{"B"}, regs: map[string]uint64{"B": 2}, gen: 3,
		},
		{
			name: "preempt a non-holder's key only unregisters it",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), regOp("C", 3), acqOp("A", acquire, rWE, 1, 0),
				acqOp("B", preempt, rEA, 2, 3), acqOp("B", preempt, rEA, 2, 9).is(stConflict),
				acqOp("B", preempt, rEA, 2, 0).is(stInvalid)},
			rtype: rWE, holders: []string{"A"}, regs: map[string]uint64{"A": 1, "B": 2}, gen: 4,
		},
		{
			name: "the holder preempts itself: the type changes",
			ops: []resvOp{regOp("A", 1), regOp("B", 1), acqOp("A", acquire, rWE, 1, 0),
				acqOp("A", preempt, rEARO, 1, 1)},
			rtype: rEARO, holders: []string{"A"}, regs: map[string]uint64{"A": 1}, gen: 3,
		},
		{
			name: "preempt without a reservation unregisters",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), acqOp("B", preempt, rWE, 2, 1),
				acqOp("B", preempt, rWE, 2, 5).is(stConflict)},
			regs: map[string]uint64{"B": 2}, gen: 3,
		},
		{
			name: "all registrants hold; any releases it",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), acqOp("A", acquire, rWEAR, 1, 0),
				acqOp("B", acquire, rWEAR, 2, 0), acqOp("B", acquire, rWE, 2, 0).is(stConflict),
				relOp("B", release, rWEAR, 2)},
			regs: map[string]uint64{"A": 1, "B": 2}, gen: 2,
		},
		{
			name: "all registrants: it lasts while a registrant does",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), regOp("C", 3), acqOp("A", acquire, rEAAR, 1, 0),
				unregOp("A", 1, false), unregOp("C", 3, false)},
			rtype: rEAAR, holders: []string{"B"}, regs: map[string]uint64{"B": 2}, gen: 5,
		},
		{
			name: "all registrants: ends with the last one",
			ops:  []resvOp{regOp("A", 1), acqOp("A", acquire, rEAAR, 1, 0), unregOp("A", 1, false)},
			regs: map[string]uint64{}, gen: 2,
		},
		{
			name: "all registrants: preempt with key 0 takes it over",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), regOp("C", 3), acqOp("A", acquire, rEAAR, 1, 0),
				acqOp("B", preempt, rWE, 2, 0)},
			rtype: rWE, holders: []string{"B"}, regs: map[string]uint64{"B": 2}, gen: 4,
		},
		{
			name: "all registrants: preempt with a key unregisters",
			ops: []resvOp{regOp("A", 1), regOp("B", 2), regOp("C", 3), acqOp("A", acquire, rEAAR, 1, 0),
				acqOp("B", preempt, rEAAR, 2, 3)},
			rtype: rEAAR, holders: []string{"A", "B"}, regs: map[string]uint64{"A": 1, "B": 2}, gen: 4,
		},
		{
			name: "the holder replaces its key and keeps the reservation",
			ops: []resvOp{regOp("A", 1), acqOp("A", acquire, rWE, 1, 0), replaceOp("A", 1, 2, false),
				relOp("A", release, rWE, 1).is(stConflict)},
			rtype: rWE, holders: []string{"A"}, regs: map[string]uint64{"A": 2}, gen: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r reservations
			for i, op := range tc.ops {
				if got := op.run(&r, op.host); got.Code() != op.want {
					t.Fatalf("op %d (%s): %v, want %v", i, op.label, got, op.want)
				} else if !got.OK() && !got.DoNotRetry() {
					t.Fatalf("op %d (%s): %v without DNR", i, op.label, got)
				}
			}
			s := r.status(true)
			regs := map[string]uint64{}
			var holders []string
			for _, e := range s.Registrants {
				h := string(e.HostID[:1])
				regs[h] = e.Key
				if e.Holder {
					holders = append(holders, h)
				}
			}
			if tc.regs == nil {
				tc.regs = map[string]uint64{}
			}
			if s.Type != tc.rtype || !slices.Equal(holders, tc.holders) || !maps.Equal(regs, tc.regs) ||
				s.Generation != tc.gen || int(s.NumRegistrants) != len(tc.regs) {
				t.Fatalf("state: type %v holders %v registrants %v gen %d; want %v %v %v %d",
					s.Type, holders, regs, s.Generation, tc.rtype, tc.holders, tc.regs, tc.gen)
			}
			// The view the command checks read agrees.
			if v := r.view.Load(); (v == nil) != (tc.rtype == nvme.ResvNone) || (v != nil && v.rtype != tc.rtype) {
				t.Fatalf("view %+v for type %v", v, tc.rtype)
			}
		})
	}
}

// TestReservationRegistrantLimit: registrations stop at maxRegistrants.
func TestReservationRegistrantLimit(t *testing.T) {
	var r reservations
	for i := range maxRegistrants {
		if st := regOp(fmt.Sprint(i), 1).run(&r, fmt.Sprint(i)); !st.OK() {
			t.Fatalf("registrant %d: %v", i, st)
		}
	}
	if st := regOp("one too many", 1).run(&r, "one too many"); st.OK() {
		t.Fatal("registered past the limit")
	}
	if st := regOp("0", 1).run(&r, "0"); !st.OK() {
		t.Fatalf("re-registering at the limit: %v", st)
	}
}

// TestReservationConflictMatrix: for each reservation type, what the
// holder, another registrant and a host that is not registered may do,
// through real hosts over TCP. The expectations are the spec's "command
// behavior in the presence of a reservation" table.
func TestReservationConflictMatrix(t *testing.T) {
	addr, _, _, _, _ := echoServer(t, Config{})
	ctx := context.Background()
	type actor struct {
		name string
		ns   *host.Namespace
		ns2  *host.Namespace
		fn   sandbox.ID
	}
	mk := func(name string) actor {
		c, ns := connectAs(t, addr, "nqn.2026-11.io.nearstore:"+name, 1)
		ns2, err := c.Namespace(2)
		if err != nil {
			t.Fatal(err)
		}
		fn, err := c.LoadFunction(ctx, echoModuleBytes)
		if err != nil {
			t.Fatal(err)
		}
		return actor{name, ns, ns2, fn}
	}
	holder, registrant, other := mk("holder"), mk("registrant"), mk("other")
	blk := make([]byte, 512)
	file := func(lba uint64) []pushdown.File {
		return []pushdown.File{{Size: 512, Extents: []pushdown.Extent{x(lba, 1)}}}
	}
	type access struct {
		name  string
		write bool
		run   func(a actor) error
	}
	accesses := []access{
		{"read", false, func(a actor) error { _, err := a.ns.ReadAt(blk, 0); return err }},
		{"λ read", false, func(a actor) error {
			_, err := a.ns.LambdaRead(ctx, a.fn, file(3), host.Start{Length: 512}, nil, 1024)
			return err
		}},
		{"write", true, func(a actor) error { _, err := a.ns.WriteAt(blk, 512); return err }},
		{"write zeroes", true, func(a actor) error { return a.ns.WriteZeroes(ctx, 1024, 512) }},
		{"deallocate", true, func(a actor) error { return a.ns.Deallocate(ctx, 1024, 512) }},
		{"flush", true, func(a actor) error { return a.ns.Flush(ctx) }},
		{"λ write", true, func(a actor) error {
			_, err := a.ns.LambdaWrite(ctx, a.fn, file(4), host.Start{Length: 512}, nil, blk)
			return err
		}},
	}
	// allowed: registrant read, registrant write, other read, other write.
	for _, tc := range []struct {
		rtype   nvme.ReservationType
		allowed [4]bool
	}{
		{rWE, [4]bool{true, false, true, false}},
		{rEA, [4]bool{false, false, false, false}},
		{rWERO, [4]bool{true, true, true, false}},
		{rEARO, [4]bool{true, true, false, false}},
		{rWEAR, [4]bool{true, true, true, false}},
		{rEAAR, [4]bool{true, true, false, false}},
	} {
		t.Run(tc.rtype.String(), func(t *testing.T) {
			must(t, holder.ns.Register(ctx, host.RegisterOpts{NewKey: 1}))
			must(t, registrant.ns.Register(ctx, host.RegisterOpts{NewKey: 2}))
			must(t, holder.ns.Acquire(ctx, host.AcquireOpts{Type: tc.rtype, Key: 1}))
			for _, who := range []struct {
				a           actor
				read, write bool
			}{
				{holder, true, true},
				{registrant, tc.allowed[0], tc.allowed[1]},
				{other, tc.allowed[2], tc.allowed[3]},
			} {
				for _, ac := range accesses {
					want := who.read
					if ac.write {
						want = who.write
					}
					err := ac.run(who.a)
					switch {
					case want && err != nil:
						t.Errorf("%s %s: %v", who.a.name, ac.name, err)
					case !want && !errors.Is(err, host.ErrReservationConflict):
						t.Errorf("%s %s: %v, want a reservation conflict", who.a.name, ac.name, err)
					}
				}
				// The other namespace has no reservation.
				if _, err := who.a.ns2.WriteAt(blk, 0); err != nil {
					t.Errorf("%s: write to namespace 2: %v", who.a.name, err)
				}
			}
			// Reservation commands are not blocked by the reservation: the
			// host that is not registered may register (and leave again).
			must(t, other.ns.Register(ctx, host.RegisterOpts{NewKey: 3}))
			must(t, other.ns.Register(ctx, host.RegisterOpts{Action: host.UnregisterKey, CurrentKey: 3}))

			s, err := other.ns.Report(ctx)
			must(t, err)
			if s.Type != tc.rtype || s.NumRegistrants != 2 || len(s.Registrants) != 2 {
				t.Fatalf("report %+v", s)
			}
			if s.Registrants[0].Key != 1 || !s.Registrants[0].Holder || s.Registrants[1].Key != 2 ||
				s.Registrants[1].Holder != tc.rtype.AllRegistrants() {
				t.Fatalf("report entries %+v", s.Registrants)
			}
			must(t, registrant.ns.Release(ctx, host.ReleaseOpts{Action: host.ClearReservation, Key: 2}))
			if _, err := other.ns.WriteAt(blk, 512); err != nil {
				t.Fatalf("write after clear: %v", err)
			}
		})
	}
}

// TestReservationWire: what the NVMe commands look like to a host that
// speaks PDUs itself: Identify advertises reservations, a report without
// EDS is refused as the spec says for 128-bit host identifiers, the report
// honours NUMD, and malformed commands get their statuses.
func TestReservationWire(t *testing.T) {
	_, addr := startServer(t, Config{}, "mem:4MiB")
	a := adminQueue(t, addr, testNQN)
	q := ioQueue(t, addr, a, 1, 0)

	in := make([]byte, nvme.IdentifySize)
	a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminIdentify, CDW10: nvme.CNSController}, nil, in, false))
	var idc nvme.IdentifyController
	must(t, idc.Unmarshal(in))
	if idc.ONCS&nvme.ONCSReservations == 0 {
		t.Fatalf("ONCS %#x lacks reservations", idc.ONCS)
	}
	a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminIdentify, NSID: 1, CDW10: nvme.CNSNamespace}, nil, in, false))
	var idn nvme.IdentifyNamespace
	must(t, idn.Unmarshal(in))
	if idn.RESCAP != nvme.RescapAllTypes|nvme.RescapIEKEY13 {
		t.Fatalf("RESCAP %#x", idn.RESCAP)
	}

	keys := make([]byte, 16)
	binary.LittleEndian.PutUint64(keys[8:], 0xfeed)
	reg := &nvme.Command{Opcode: nvme.IOReservationRegister, NSID: 1}
	q.ok(q.exec(reg, keys, nil, true))
	acq := &nvme.Command{Opcode: nvme.IOReservationAcquire, NSID: 1, CDW10: nvme.ReservationAcquireCDW10(acquire, false, rWERO)}
	binary.LittleEndian.PutUint64(keys, 0xfeed)
	q.ok(q.exec(acq, keys, nil, false)) // by R2T this time

	for _, tc := range []struct {
		name string
		cmd  nvme.Command
		out  []byte
		in   int
		want nvme.Status
	}{
		{"report without EDS", nvme.Command{Opcode: nvme.IOReservationReport, NSID: 1, CDW10: 1023}, nil, 4096, nvme.StatusHostIDInconsistent},
		{"report to no namespace", nvme.Command{Opcode: nvme.IOReservationReport, NSID: 7, CDW10: 1023, CDW11: 1}, nil, 4096, nvme.StatusInvalidNamespace},
		{"report bigger than its buffer", nvme.Command{Opcode: nvme.IOReservationReport, NSID: 1, CDW10: 1023, CDW11: 1}, nil, 512, nvme.StatusSGLDataLenInvalid},
		{"register with 8 bytes", nvme.Command{Opcode: nvme.IOReservationRegister, NSID: 1}, make([]byte, 8), 0, nvme.StatusSGLDataLenInvalid},
		{"release with 16 bytes", nvme.Command{Opcode: nvme.IOReservationRelease, NSID: 1}, make([]byte, 16), 0, nvme.StatusSGLDataLenInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf []byte
			if tc.in > 0 {
				buf = make([]byte, tc.in)
			}
			if c := q.exec(&tc.cmd, tc.out, buf, true); c.Status.Code() != tc.want || !c.Status.DoNotRetry() {
				t.Fatalf("%v, want %v with DNR", c.Status, tc.want)
			}
		})
	}

	// NUMD of 16 dwords: the 64-byte header only, REGCTL counting the
	// entry that did not fit.
	rep := make([]byte, 64)
	q.ok(q.exec(&nvme.Command{Opcode: nvme.IOReservationReport, NSID: 1, CDW10: 15, CDW11: nvme.ReportEDS}, nil, rep, false))
	var s nvme.ReservationStatus
	must(t, s.Unmarshal(rep, true))
	if s.Type != rWERO || s.NumRegistrants != 1 || len(s.Registrants) != 0 || s.Generation != 1 {
		t.Fatalf("short report %+v", s)
	}
	rep = make([]byte, 256)
	q.ok(q.exec(&nvme.Command{Opcode: nvme.IOReservationReport, NSID: 1, CDW10: 63, CDW11: nvme.ReportEDS}, nil, rep, false))
	must(t, s.Unmarshal(rep, true))
	if len(s.Registrants) != 1 || s.Registrants[0].Key != 0xfeed || !s.Registrants[0].Holder ||
		s.Registrants[0].CNTLID != 0xFFFF {
		t.Fatalf("report %+v", s)
	}
	// Another host: its writes conflict, its reads go through.
	_, other := connectAs(t, addr, "nqn.2026-11.io.nearstore:second", 1)
	var se *nvme.StatusError
	if _, err := other.WriteAt(make([]byte, 512), 0); !errors.As(err, &se) ||
		se.Status.Code() != nvme.StatusReservationConflict || !se.Status.DoNotRetry() {
		t.Fatalf("write under another host's reservation: %v", err)
	}
	if _, err := other.ReadAt(make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	q.ok(q.exec(rw(nvme.IOWrite, 1, 0, 1), make([]byte, 512), nil, true))
}

// BenchmarkReservationCheck: the cost a command pays for the reservation
// check, with no reservation on its namespace and with one held by
// another host that allows the command.
func BenchmarkReservationCheck(b *testing.B) {
	q := &session{ctrl: &controller{hostNQN: "reader"}}
	cmd := &request{ns: &namespace{}, sqe: nvme.Command{Opcode: nvme.IORead}, spec: ioCommands()[nvme.IORead]}
	b.Run("none", func(b *testing.B) {
		for b.Loop() {
			if q.reservationConflict(cmd) != 0 {
				b.Fatal("conflict")
			}
		}
	})
	r := &cmd.ns.resv
	r.register("owner", [16]byte{}, 0, 0, 1)
	r.acquire("owner", nvme.ReservationAcquireCDW10(acquire, false, rWE), 1, 0)
	b.Run("held", func(b *testing.B) {
		for b.Loop() {
			if q.reservationConflict(cmd) != 0 {
				b.Fatal("conflict")
			}
		}
	})
}

// TestRefusedCommandsCountedByOp: a write and a flush the reservation
// refuses count as op "write" and "flush" with result "error", not as
// "other".
func TestRefusedCommandsCountedByOp(t *testing.T) {
	ctx := context.Background()
	addr, reg, _, ns, _ := echoServer(t, Config{})
	if err := ns.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: 1}); err != nil {
		t.Fatal(err)
	}
	if err := ns.Acquire(ctx, host.AcquireOpts{Action: host.AcquireReservation, Type: nvme.ResvWriteExclusive, Key: 1}); err != nil {
		t.Fatal(err)
	}
	_, other := connectAs(t, addr, "nqn.2026-11.io.nearstore:other", 1)
	if _, err := other.WriteAtContext(ctx, make([]byte, 512), 0); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("write by another host: %v", err)
	}
	if err := other.Flush(ctx); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("flush by another host: %v", err)
	}
	for _, op := range []string{"write", "flush"} {
		if n := gauge(t, reg, "nearstore_target_commands_total", map[string]string{"op": op, "result": "error"}); n != 1 {
			t.Errorf("refused %s counted %v times under op=%q, want 1", op, n, op)
		}
	}
	if n := gauge(t, reg, "nearstore_target_commands_total", map[string]string{"op": "other"}); n != 0 {
		t.Errorf("%v commands counted as op=other", n)
	}
}
