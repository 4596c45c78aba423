package offloadfs

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
)

// Ownership. One host owns a file system at a time: it alone allocates,
// writes metadata and commits; any number of others may mount the
// committed state read-only. On a device that takes NVMe reservations (a
// *host.Namespace) the owner makes that a rule the target enforces, not
// a convention: a read-write mount registers a key and acquires a Write
// Exclusive – Registrants Only reservation on the namespace. A second
// would-be owner's Acquire then fails, so its Mount fails with ErrOwned
// (after unregistering again, since a registrant may write under this
// type), while reads by anyone stay allowed. A task host writing under a
// read-write grant registers a key of its own first; the grant still
// confines it to its blocks.
//
// The rules that make a take-over safe against a live owner:
//
//  1. A clean unmount keeps the reservation (the namespace is parked with
//     its last owner) and records "clean" in the superblock's owner
//     state. So the reservation is held for as long as the namespace
//     holds the file system, and a host whose key was preempted stays
//     refused by the target for good: it can never write again, data
//     blocks included, until it mounts again.
//  2. A mount that finds the reservation held takes it (preempting the
//     holder's key) only if the superblock says clean, or with
//     Options.TakeOver. Anything else is a live or crashed owner:
//     ErrOwned. Two hosts racing for a parked namespace name the same
//     key in Preempt; the second finds it gone and gets ErrOwned.
//  3. Every read-write mount, once it holds the reservation and before
//     it writes anything else, increments the superblock's mount
//     generation; before each metadata commit the owner reads it back.
//     A different generation, or a write the target refuses with
//     Reservation Conflict, fences the mount: it fails with ErrFenced
//     and changes nothing more. The generation covers what the
//     reservation cannot: reservations do not survive a target restart.
//
// The reservation is the host's (the target identifies registrants by
// host NQN), so an owner that crashed and mounts again from the same host
// simply takes it back. A mount with a Remote claims the reservation
// again when its synchronizer finds the target restarted, and is fenced
// if another host mounted meanwhile.

// ownerResvType is the reservation a read-write mount holds.
const ownerResvType = nvme.ResvWriteExclusiveRegOnly

// ErrOwned means another host owns the file system: it holds the
// namespace's reservation. Mount read-only, or, if that owner is known
// to be dead, mount with Options.TakeOver.
var ErrOwned = errors.New("offloadfs: another host owns the file system (it holds the namespace's reservation)")

// ErrFenced means another host took the file system over while this
// mount owned it (Options.TakeOver). The mount accepts no more changes,
// so it cannot overwrite the new owner's: it is read-only until it is
// unmounted and mounted again. It matches syscall.EROFS.
var ErrFenced error = &sysError{"offloadfs: another host took this file system over; this mount is fenced and read-only until it is unmounted and mounted again", syscall.EROFS}

// Reserver is a device that takes NVMe reservations; *host.Namespace is
// one. A read-write mount on a Reserver owns the namespace (see above).
type Reserver interface {
	Register(ctx context.Context, o host.RegisterOpts) error
	Acquire(ctx context.Context, o host.AcquireOpts) error
	Release(ctx context.Context, o host.ReleaseOpts) error
	Report(ctx context.Context) (nvme.ReservationStatus, error)
}

var _ Reserver = (*host.Namespace)(nil)

// ownership is a read-write mount's claim on a Reserver.
type ownership struct {
	r   Reserver
	dev Device // the same device: its superblock says whether a holder is parked
	key uint64
}

// newOwnership picks a fresh non-zero key for this mount.
func newOwnership(r Reserver, dev Device) *ownership {
	var b [8]byte
	for {
		_, _ = crand.Read(b[:])
		if k := binary.LittleEndian.Uint64(b[:]); k != 0 {
			return &ownership{r: r, dev: dev, key: k}
		}
	}
}

// claimMode says whom claim may preempt.
type claimMode int

const (
	// claimFree takes the reservation only if no other host holds it:
	// an owner reclaiming it after a target restart.
	claimFree claimMode = iota
	// claimParked also takes it from a holder whose file system the
	// superblock says was unmounted cleanly (rule 2): every new mount.
	claimParked
	// claimTakeOver takes it from any holder: Options.TakeOver.
	claimTakeOver
)

// claim registers the mount's key (replacing one this host left, say by
// crashing) and acquires the owner's reservation, preempting another
// holder where mode allows.
func (o *ownership) claim(ctx context.Context, mode claimMode) error {
	err := o.r.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: o.key})
	if errors.Is(err, host.ErrReservationConflict) {
		// Registered already under another key: an earlier mount from
		// this host.
		err = o.r.Register(ctx, host.RegisterOpts{Action: host.ReplaceKey, NewKey: o.key, IgnoreExistingKey: true})
	}
	if err != nil {
		return fmt.Errorf("offloadfs: registering a reservation key: %w", err)
	}
	err = o.r.Acquire(ctx, host.AcquireOpts{Action: host.AcquireReservation, Type: ownerResvType, Key: o.key})
	if !errors.Is(err, host.ErrReservationConflict) {
		if err != nil {
			return fmt.Errorf("offloadfs: acquiring the owner's reservation: %w", err)
		}
		return nil
	}
	st, rerr := o.r.Report(ctx)
	var holder *nvme.RegisteredController
	for i := range st.Registrants {
		if st.Registrants[i].Holder {
			holder = &st.Registrants[i]
		}
	}
	if rerr == nil && holder != nil && (mode == claimTakeOver || mode == claimParked && o.parked()) {
		err = o.r.Acquire(ctx, host.AcquireOpts{Action: host.Preempt, Type: ownerResvType, Key: o.key, PreemptKey: holder.Key})
		if err != nil {
			return fmt.Errorf("offloadfs: taking over from host ID %x: %w", holder.HostID, err)
		}
		return nil
	}
	// Not the owner: stop being a registrant, who may write.
	if uerr := o.r.Register(ctx, host.RegisterOpts{Action: host.UnregisterKey, CurrentKey: o.key}); uerr != nil {
		return fmt.Errorf("%w; and unregistering again failed, so this host may still write: %w", ErrOwned, uerr)
	}
	switch {
	case rerr != nil:
		return fmt.Errorf("%w (reading who holds it: %w)", ErrOwned, rerr)
	case holder == nil:
		return fmt.Errorf("%w (a reservation of type %d is held)", ErrOwned, st.Type)
	}
	return fmt.Errorf("%w: held by host ID %x", ErrOwned, holder.HostID)
}

// parked reports whether the device's superblock says no read-write
// mount is active (rule 1), so its reservation's holder is a parked
// owner and not a live or crashed one.
func (o *ownership) parked() bool {
	sb, err := readSuperblock(o.dev)
	return err == nil && sb.clean
}

// release gives the reservation up and unregisters the key, at unmount.
func (o *ownership) release(ctx context.Context) error {
	err := o.r.Release(ctx, host.ReleaseOpts{Action: host.ReleaseReservation, Type: ownerResvType, Key: o.key})
	if uerr := o.r.Register(ctx, host.RegisterOpts{Action: host.UnregisterKey, CurrentKey: o.key}); err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("offloadfs: releasing the owner's reservation: %w", err)
	}
	return nil
}

// readSuperblock reads and decodes the device's superblock.
func readSuperblock(dev Device) (*superblock, error) {
	raw := make([]byte, superSize)
	if _, err := dev.ReadAt(raw, 0); err != nil {
		return nil, fmt.Errorf("offloadfs: read superblock: %w", err)
	}
	return decodeSuperblock(raw)
}

// writeOwnerState writes sb's owner state: the whole first device block
// (superblock and the zeroes after it), which the device writes
// atomically, then a flush.
func writeOwnerState(ctx context.Context, dev Device, sb *superblock) error {
	b := make([]byte, max(dev.BlockSize(), superSize))
	copy(b, sb.encode())
	if _, err := dev.WriteAt(b, 0); err != nil {
		return fmt.Errorf("offloadfs: write the superblock's owner state: %w", err)
	}
	if err := dev.Flush(ctx); err != nil {
		return fmt.Errorf("offloadfs: flush the superblock's owner state: %w", err)
	}
	return nil
}

// checkFence is rule 3's check, before a commit writes metadata: the
// superblock must still carry this mount's generation. A different one
// fails the file system with ErrFenced; a failed read fails only this
// call, and the transaction waits for the next commit.
func (fsys *FS) checkFence() error {
	sb, err := readSuperblock(fsys.dev)
	if err != nil {
		return fmt.Errorf("offloadfs: commit: checking the mount generation: %w", err)
	}
	if sb.uuid != fsys.sb.uuid || sb.gen != fsys.sb.gen {
		return fsys.fail(fmt.Errorf("%w (this mount is generation %d; the device now has generation %d of file system %x)",
			ErrFenced, fsys.sb.gen, sb.gen, sb.uuid[:4]))
	}
	return nil
}

// Detect reports whether dev holds an offloadfs, or the remains of one:
// a superblock with the file system's magic, whether or not it verifies.
// Block-level commands that overwrite a namespace ask it first.
func Detect(dev Device) (bool, error) {
	raw := make([]byte, superSize)
	if _, err := dev.ReadAt(raw, 0); err != nil {
		return false, fmt.Errorf("offloadfs: read superblock: %w", err)
	}
	return string(raw[:len(superMagic)]) == superMagic, nil
}

// Evict frees a namespace that holds a file system for other uses: it
// claims the owner's reservation as a mount would (from a parked owner,
// or from any with takeOver), then releases it and unregisters, so any
// host may write the namespace again. The file system is left as it is;
// whoever writes next destroys it. It fails with ErrOwned while another
// host has the file system mounted read-write.
func Evict(ctx context.Context, dev Device, takeOver bool) error {
	r, ok := dev.(Reserver)
	if !ok {
		return nil
	}
	o := newOwnership(r, dev)
	mode := claimParked
	if takeOver {
		mode = claimTakeOver
	}
	if err := o.claim(ctx, mode); err != nil {
		return err
	}
	return o.release(ctx)
}
