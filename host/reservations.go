package host

import (
	"context"
	"fmt"

	"github.com/nearstore/nearstore/nvme"
)

// Reservations (NVMe Base spec, "Reservations"; docs/PROTOCOL.md): a host
// registers a key on a namespace and acquires a reservation whose type
// says which other hosts may read or write it. nearstore's target names a
// registrant by its host NQN (Options.HostNQN), so every controller a
// process connects under one NQN shares the registration.

// ErrReservationConflict matches, with errors.Is, the error of a command
// the namespace's reservation does not allow this host, and of a
// reservation command whose key does not match or that another host's
// reservation stands in the way of.
var ErrReservationConflict error = &nvme.StatusError{Status: nvme.StatusReservationConflict}

// RegisterAction is what Register does (RREGA).
type RegisterAction uint8

// Register actions.
const (
	// RegisterKey registers the host with NewKey. Registering again
	// with the key already registered succeeds and changes nothing; with
	// another key it is a conflict.
	RegisterKey RegisterAction = nvme.RegisterActionRegister
	// UnregisterKey unregisters the host; a reservation it alone holds
	// is released.
	UnregisterKey RegisterAction = nvme.RegisterActionUnregister
	// ReplaceKey replaces the host's key with NewKey.
	ReplaceKey RegisterAction = nvme.RegisterActionReplace
)

// RegisterOpts are the fields of a Reservation Register command.
type RegisterOpts struct {
	Action RegisterAction
	// CurrentKey (CRKEY) must match the host's key for UnregisterKey and
	// ReplaceKey, unless IgnoreExistingKey is set.
	CurrentKey uint64
	// NewKey (NRKEY) is the key RegisterKey and ReplaceKey set.
	NewKey            uint64
	IgnoreExistingKey bool
	// CPTPL changes the Persist Through Power Loss state: one of
	// nvme.CPTPLNoChange (the zero value), nvme.CPTPLClear or
	// nvme.CPTPLPersist. nearstore's target does not persist
	// reservations and refuses nvme.CPTPLPersist.
	CPTPL uint8
}

// AcquireAction is what Acquire does (RACQA).
type AcquireAction uint8

// Acquire actions.
const (
	// AcquireReservation takes the reservation if nobody holds one; it
	// is a conflict if another host holds it or it is held with another
	// type.
	AcquireReservation AcquireAction = nvme.AcquireActionAcquire
	// Preempt takes the reservation from the registrants whose key is
	// PreemptKey, unregistering them, or, if PreemptKey is not the
	// holder's, only unregisters them.
	Preempt AcquireAction = nvme.AcquireActionPreempt
	// PreemptAndAbort is Preempt that also aborts the preempted hosts'
	// commands; nearstore's target does not abort them.
	PreemptAndAbort AcquireAction = nvme.AcquireActionPreemptAndAbort
)

// AcquireOpts are the fields of a Reservation Acquire command.
type AcquireOpts struct {
	Action AcquireAction
	Type   nvme.ReservationType
	// Key (CRKEY) is the host's registered key.
	Key uint64
	// PreemptKey (PRKEY) names the registrants to preempt.
	PreemptKey uint64
}

// ReleaseAction is what Release does (RRELA).
type ReleaseAction uint8

// Release actions.
const (
	// ReleaseReservation releases the reservation if the host holds it
	// (Type must then be its type); otherwise it does nothing.
	ReleaseReservation ReleaseAction = nvme.ReleaseActionRelease
	// ClearReservation releases any reservation and unregisters every
	// host.
	ClearReservation ReleaseAction = nvme.ReleaseActionClear
)

// ReleaseOpts are the fields of a Reservation Release command.
type ReleaseOpts struct {
	Action ReleaseAction
	Type   nvme.ReservationType
	// Key (CRKEY) is the host's registered key.
	Key uint64
}

// Register runs Reservation Register on the namespace.
func (ns *Namespace) Register(ctx context.Context, o RegisterOpts) error {
	if o.CPTPL > 3 {
		return fmt.Errorf("host: nsid %d: CPTPL %d out of range", ns.st.nsid, o.CPTPL)
	}
	data := make([]byte, nvme.ResvRegisterDataSize)
	nvme.PutResvKeys(data, o.CurrentKey, o.NewKey)
	cmd := nvme.Command{
		Opcode: nvme.IOReservationRegister,
		CDW10:  nvme.ReservationRegisterCDW10(uint8(o.Action), o.IgnoreExistingKey, o.CPTPL),
	}
	_, err := ns.IO(ctx, &cmd, data, nil)
	return err
}

// Acquire runs Reservation Acquire on the namespace.
func (ns *Namespace) Acquire(ctx context.Context, o AcquireOpts) error {
	data := make([]byte, nvme.ResvAcquireDataSize)
	nvme.PutResvKeys(data, o.Key, o.PreemptKey)
	cmd := nvme.Command{
		Opcode: nvme.IOReservationAcquire,
		CDW10:  nvme.ReservationAcquireCDW10(uint8(o.Action), false, o.Type),
	}
	_, err := ns.IO(ctx, &cmd, data, nil)
	return err
}

// Release runs Reservation Release on the namespace.
func (ns *Namespace) Release(ctx context.Context, o ReleaseOpts) error {
	data := make([]byte, nvme.ResvReleaseDataSize)
	nvme.PutResvKeys(data, o.Key, 0)
	cmd := nvme.Command{
		Opcode: nvme.IOReservationRelease,
		CDW10:  nvme.ReservationAcquireCDW10(uint8(o.Action), false, o.Type),
	}
	_, err := ns.IO(ctx, &cmd, data, nil)
	return err
}

// reportEntries is how many registrants the first Reservation Report
// makes room for; a namespace with more is asked again with room for all.
const reportEntries = 16

// Report runs Reservation Report on the namespace and returns the
// reservation status, with the extended (128-bit host identifier)
// entries.
func (ns *Namespace) Report(ctx context.Context) (nvme.ReservationStatus, error) {
	room := reportEntries
	for try := 0; ; try++ {
		s, err := ns.report(ctx, room)
		if err != nil || len(s.Registrants) >= int(s.NumRegistrants) || try == 2 {
			// Complete, or hosts keep registering faster than we ask:
			// the entries that fitted, and the count of them all.
			return s, err
		}
		room = int(s.NumRegistrants)
	}
}

func (ns *Namespace) report(ctx context.Context, entries int) (nvme.ReservationStatus, error) {
	var s nvme.ReservationStatus
	in := make([]byte, nvme.ResvStatusExtHeaderSize+entries*nvme.ResvRegCtrlExtSize)
	cmd := nvme.Command{
		Opcode: nvme.IOReservationReport,
		CDW10:  uint32(len(in)/4 - 1), // NUMD, zero-based dwords
		CDW11:  nvme.ReportEDS,
	}
	if _, err := ns.IO(ctx, &cmd, nil, in); err != nil {
		return s, err
	}
	if err := s.Unmarshal(in, true); err != nil {
		return s, fmt.Errorf("host: nsid %d: reservation report: %w", ns.st.nsid, err)
	}
	return s, nil
}
