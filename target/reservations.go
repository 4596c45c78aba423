package target

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nearstore/nearstore/nvme"
)

// Reservations (NVMe Base spec, "Reservations"; docs/PROTOCOL.md,
// "Reservations"). The subset and the choices:
//
//   - A registrant is a host, named by its host NQN: every controller a
//     host connects under the same NQN shares its registration, as the
//     spec's host (Host Identifier) does, and the NQN is what grants and
//     extent maps already key on. The Connect HOSTID of the controller
//     that last registered or replaced the key is what Reservation Report
//     returns as the host identifier.
//   - All six reservation types, with the spec's command behaviour: the
//     read group (Read and nearstore's Pushdown Read and λ Read) and the
//     write group (Write, Write Zeroes, Dataset Management, Flush and λ
//     Write) fail with Reservation Conflict where the type does not allow
//     the host. A Flush to every namespace (NSID FFFFFFFFh) is not
//     checked. Admin commands are not affected.
//   - Nothing persists through power loss: the state lives with the
//     namespace in memory. CPTPL 10b ("cleared on power on", which is
//     what happens) and 00b are accepted; 11b ("persist") and the
//     reserved 01b fail with Invalid Field; RESCAP does not offer PTPL.
//   - Preempt and Abort is Preempt: the target does not abort the
//     preempted hosts' commands. Commands that were already past the
//     check when a reservation changed complete; later ones see it.
//   - IEKEY on Acquire and Release fails with Invalid Field (RESCAP bit 7:
//     IEKEY as NVMe 1.3 defines it), as the Linux target does.
//   - Reservation Report answers only the extended data structure (EDS):
//     NVMe over Fabrics host identifiers are 128 bits, and the spec
//     answers Host Identifier Inconsistent Format to a report without
//     EDS in that case.
//   - No reservation notifications (log page 80h, Set Features 82h and
//     83h): hosts poll with Reservation Report.
//   - Host NQNs are not authenticated (see grants.go): a reservation
//     keeps honest hosts apart, not hosts that lie about who they are.

// maxRegistrants bounds the registrants of one namespace; every one
// costs memory and a Reservation Report entry.
const maxRegistrants = 1024

// registrant is one registered host.
type registrant struct {
	host   string
	hostID [16]byte
	key    uint64
}

// reservations is the reservation state of one namespace.
type reservations struct {
	mu     sync.Mutex
	regs   []*registrant // in registration order
	rtype  nvme.ReservationType
	holder *registrant // the holder of a type 1-4 reservation; nil for types 5 and 6 (every registrant holds)
	gen    uint32

	// view is what command checks read without the lock, rebuilt on
	// every change: nil while no reservation is held, so that a
	// namespace without one costs a command one atomic load.
	view atomic.Pointer[resvView]
}

// resvView is a held reservation as the command checks see it.
type resvView struct {
	rtype       nvme.ReservationType
	holder      string // "" for the all-registrants types
	registrants map[string]struct{}
}

// allows reports whether host may run a command of the read group
// (write false) or write group (write true) under the reservation.
func (v *resvView) allows(host string, write bool) bool {
	if !write && !v.rtype.ExclusiveAccess() {
		return true
	}
	if v.rtype.RegistrantsAllowed() {
		_, ok := v.registrants[host]
		return ok
	}
	return host == v.holder
}

// holds reports whether host holds the reservation: it is the holder, or
// a registrant under an all-registrants type.
func (r *reservations) holds(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holdsLocked(r.find(host))
}

// unregisterHost removes host's registration, if it has one: a grantee
// whose standing ended (grants.go).
func (r *reservations) unregisterHost(host string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unregisterLocked(func(g *registrant) bool { return g.host == host }) > 0 {
		r.gen++
		r.publishLocked()
	}
}

func (r *reservations) find(host string) *registrant {
	for _, g := range r.regs {
		if g.host == host {
			return g
		}
	}
	return nil
}

// holdsLocked reports whether g holds the reservation.
func (r *reservations) holdsLocked(g *registrant) bool {
	if r.rtype == nvme.ResvNone || g == nil {
		return false
	}
	return r.holder == g || r.rtype.AllRegistrants()
}

// setLocked makes g hold a reservation of type t (for types 5 and 6,
// every registrant holds it).
func (r *reservations) setLocked(t nvme.ReservationType, g *registrant) {
	r.rtype = t
	r.holder = g
	if t.AllRegistrants() {
		r.holder = nil
	}
}

func (r *reservations) releaseLocked() { r.rtype, r.holder = nvme.ResvNone, nil }

// unregisterLocked removes the registrants match selects. A single holder
// unregistered takes its reservation with it; an all-registrants
// reservation ends with its last registrant.
func (r *reservations) unregisterLocked(match func(*registrant) bool) (n int) {
	r.regs = slices.DeleteFunc(r.regs, func(g *registrant) bool {
		if !match(g) {
			return false
		}
		n++
		if g == r.holder {
			r.releaseLocked()
		}
		return true
	})
	if r.rtype.AllRegistrants() && len(r.regs) == 0 {
		r.releaseLocked()
	}
	return n
}

// publishLocked rebuilds the view.
func (r *reservations) publishLocked() {
	if r.rtype == nvme.ResvNone {
		r.view.Store(nil)
		return
	}
	v := &resvView{rtype: r.rtype, registrants: make(map[string]struct{}, len(r.regs))}
	if r.holder != nil {
		v.holder = r.holder.host
	}
	for _, g := range r.regs {
		v.registrants[g.host] = struct{}{}
	}
	r.view.Store(v)
}

const resvConflict = nvme.StatusReservationConflict | nvme.DNR

// register runs Reservation Register for host.
func (r *reservations) register(host string, hostID [16]byte, cdw10 uint32, crkey, nrkey uint64) nvme.Status {
	action, iekey := uint8(cdw10&7), cdw10&nvme.ResvIEKEY != 0
	switch cdw10 >> 30 {
	case nvme.CPTPLNoChange, nvme.CPTPLClear:
	default: // persisting is not offered; 01b is reserved
		return nvme.StatusInvalidField | nvme.DNR
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.find(host)
	switch action {
	case nvme.RegisterActionRegister:
		switch {
		case g != nil && g.key != nrkey:
			return resvConflict
		case g != nil: // registering the same key again changes nothing
		case len(r.regs) >= maxRegistrants:
			return nvme.StatusInternal | nvme.DNR
		default:
			r.regs = append(r.regs, &registrant{host: host, hostID: hostID, key: nrkey})
		}
	case nvme.RegisterActionUnregister:
		if g == nil || (!iekey && g.key != crkey) {
			return resvConflict
		}
		r.unregisterLocked(func(x *registrant) bool { return x == g })
	case nvme.RegisterActionReplace:
		if g == nil || (!iekey && g.key != crkey) {
			return resvConflict
		}
		g.key, g.hostID = nrkey, hostID
	default:
		return nvme.StatusInvalidField | nvme.DNR
	}
	r.gen++
	r.publishLocked()
	return nvme.StatusSuccess
}

// acquire runs Reservation Acquire for host.
func (r *reservations) acquire(host string, cdw10 uint32, crkey, prkey uint64) nvme.Status {
	action, t := uint8(cdw10&7), nvme.ReservationType(cdw10>>8)
	if cdw10&nvme.ResvIEKEY != 0 || !t.Valid() || action > nvme.AcquireActionPreemptAndAbort {
		return nvme.StatusInvalidField | nvme.DNR
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.find(host)
	if g == nil || g.key != crkey {
		return resvConflict
	}
	if action == nvme.AcquireActionAcquire {
		switch {
		case r.rtype == nvme.ResvNone:
			r.setLocked(t, g)
			r.publishLocked()
		case r.holdsLocked(g) && r.rtype == t: // already held: nothing changes
		default:
			return resvConflict
		}
		return nvme.StatusSuccess
	}
	// Preempt (and Preempt and Abort, which aborts nothing here).
	byKey := func(x *registrant) bool { return x.key == prkey }
	othersByKey := func(x *registrant) bool { return x != g && x.key == prkey }
	switch {
	case r.rtype == nvme.ResvNone, r.rtype.AllRegistrants() && prkey != 0,
		!r.rtype.AllRegistrants() && prkey != r.holder.key && prkey != 0:
		// No reservation changes hands: the registrants with the key go.
		if r.unregisterLocked(byKey) == 0 {
			return resvConflict
		}
	case r.rtype.AllRegistrants(): // PRKEY 0: take it over from everyone
		r.unregisterLocked(func(x *registrant) bool { return x != g })
		r.setLocked(t, g)
	case prkey == r.holder.key:
		r.unregisterLocked(othersByKey)
		r.setLocked(t, g)
	default: // PRKEY 0 names no holder
		return nvme.StatusInvalidField | nvme.DNR
	}
	r.gen++
	r.publishLocked()
	return nvme.StatusSuccess
}

// release runs Reservation Release for host.
func (r *reservations) release(host string, cdw10 uint32, crkey uint64) nvme.Status {
	action, t := uint8(cdw10&7), nvme.ReservationType(cdw10>>8)
	if cdw10&nvme.ResvIEKEY != 0 || action > nvme.ReleaseActionClear {
		return nvme.StatusInvalidField | nvme.DNR
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.find(host)
	if g == nil || g.key != crkey {
		return resvConflict
	}
	if action == nvme.ReleaseActionClear {
		r.releaseLocked()
		r.regs = nil
		r.gen++
		r.publishLocked()
		return nvme.StatusSuccess
	}
	if !r.holdsLocked(g) {
		return nvme.StatusSuccess // nothing of the sender's to release
	}
	if t != r.rtype {
		return nvme.StatusInvalidField | nvme.DNR
	}
	r.releaseLocked()
	r.publishLocked()
	return nvme.StatusSuccess
}

// status returns the Reservation Status data structure.
func (r *reservations) status(extended bool) nvme.ReservationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := nvme.ReservationStatus{
		Generation:     r.gen,
		Type:           r.rtype,
		NumRegistrants: uint16(len(r.regs)),
		Extended:       extended,
		Registrants:    make([]nvme.RegisteredController, len(r.regs)),
	}
	for i, g := range r.regs {
		s.Registrants[i] = nvme.RegisteredController{
			CNTLID: 0xFFFF, // registrations belong to hosts, not controllers
			Holder: r.holdsLocked(g),
			HostID: g.hostID,
			Key:    g.key,
		}
	}
	return s
}

// reservationConflict checks an NVM command against its namespace's
// reservation by its access class, and returns Reservation Conflict if the
// reservation does not allow the sending host to run it. With no
// reservation held it costs one atomic load.
func (s *session) reservationConflict(r *request) nvme.Status {
	if r.ns == nil || r.spec == nil || r.spec.access.resv == resvNone {
		return 0
	}
	v := r.ns.resv.view.Load()
	if v == nil || v.allows(s.ctrl.hostNQN, r.spec.access.resv == resvWrite) {
		return 0
	}
	s.log.Debug("reservation conflict", "host", s.ctrl.hostNQN, "nsid", r.ns.id, "opcode", r.sqe.Opcode, "rtype", v.rtype.String())
	return resvConflict
}
