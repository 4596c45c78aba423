package offloadfs

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
)

// Ownership. One host owns a file system at a time: it alone allocates,
// writes metadata and commits; any number of others may mount the
// committed state read-only. On a device that takes NVMe reservations (a
// *host.Namespace) the owner makes that a rule the target enforces, not
// a convention: a read-write mount registers a key and acquires a Write
// Exclusive – Registrants Only reservation on the namespace, and holds it
// until Close. A second would-be owner's Acquire then fails, so its
// Mount fails with ErrOwned (after unregistering again, since a
// registrant may write under this type), while reads by anyone stay
// allowed. A task host writing under a read-write grant registers a key
// of its own first; the grant still confines it to its blocks.
//
// The reservation is the host's (the target identifies registrants by
// host NQN), so an owner that crashed and mounts again from the same host
// simply takes it back. Another host takes over from an owner that died
// only when told to (Options.TakeOver), by preempting the holder's key.
// Reservations do not survive a target restart; a mount with a Remote
// claims the reservation again when its synchronizer finds the target
// restarted, and fails the file system if another host got it meanwhile.

// ownerResvType is the reservation a read-write mount holds.
const ownerResvType = nvme.ResvWriteExclusiveRegOnly

// ErrOwned means another host owns the file system: it holds the
// namespace's reservation. Mount read-only, or, if that owner is known
// to be dead, mount with Options.TakeOver.
var ErrOwned = errors.New("offloadfs: another host owns the file system (it holds the namespace's reservation)")

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
	key uint64
}

// newOwnership picks a fresh non-zero key for this mount.
func newOwnership(r Reserver) *ownership {
	var b [8]byte
	for {
		_, _ = crand.Read(b[:])
		if k := binary.LittleEndian.Uint64(b[:]); k != 0 {
			return &ownership{r: r, key: k}
		}
	}
}

// claim registers the mount's key (replacing one this host left, say by
// crashing) and acquires the owner's reservation; with takeOver it
// preempts another holder.
func (o *ownership) claim(ctx context.Context, takeOver bool) error {
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
	if rerr == nil && holder != nil && takeOver {
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
