package target

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
)

// Grants (docs/PROTOCOL.md, "Grant Put" and "Grant Release"): a host gives
// another host — an offloaded task, a peer — read or read-write access to
// extents of a namespace for a lease. The policy:
//
//   - Only the holder of the namespace's reservation may grant, on the
//     namespace's blocks, to other hosts: the blocks are its to give
//     because the reservation keeps other hosts off them. Without a
//     reservation held, or by any other host, a Grant Put fails with
//     Access Denied, and no host may grant to itself.
//   - A host granted anything on a namespace is a task host there while
//     it has a grant. Every Read, Write, Write Zeroes, Dataset Management
//     deallocation and function request it sends to that namespace must lie
//     entirely inside its unexpired grants, with read-write grants for
//     whatever writes, or it fails with Access Denied. Flush changes no
//     blocks and is always allowed.
//   - Its standing ends with its last grant (released, or expired with
//     nothing running under it): it is then an ordinary host again, and
//     the target unregisters it from the namespace's reservation, where a
//     grantee registers to use a write grant under a Registrants Only
//     reservation. So a lapsed task falls back to what the reservation
//     leaves hosts that are not registered — reads under Write Exclusive,
//     nothing under Exclusive Access — never to a registrant's full
//     access, and a host once granted one block is never locked out for
//     good.
//   - Hosts never granted anything on a namespace — the owner of its file
//     system, stock Linux hosts — are not affected at all, and pay one
//     atomic load per command while no task host exists on the target.
//   - A grant is named by the granting host and its ID. A Put of an ID the
//     host already used replaces that grant (a renewal, or new extents or
//     mode); the Put completes once the commands admitted under the old
//     grant have finished.
//   - A lease runs from when the target applies the Put, by its clock
//     (Config.Now). An expired grant admits nothing new.
//   - Release removes a grant and completes once no command admitted under
//     it is still running: when it completes, the owner may reuse the
//     blocks. Commands admitted before a lease expired may still be
//     running after it, so an owner releases an expired grant too before
//     it reuses the blocks.
//   - Host NQNs are as trustworthy as the subsystem's access control
//     (allowed hosts): grants confine task runtimes that connect under the
//     NQN they were given, not hosts that lie about who they are.

// grant is one grant as the target holds it. Its fields other than
// inflight and released never change once it is published.
type grant struct {
	grantee string
	mode    pushdown.GrantMode
	expires time.Time
	extents []pushdown.Extent

	// inflight counts the commands admitted under the grant and still
	// running; released, once set, admits no more. Together they make
	// Release a barrier (see admit).
	inflight tracker
	released atomic.Bool
}

// grantReleaseAll is Grant Release's CDW12 bit 0: release every grant
// the sending host holds on the namespace, whatever the ID.
const grantReleaseAll = 1

type grantKey struct {
	owner string
	id    uint64
}

// grantTable is the grants on one namespace.
type grantTable struct {
	mu        sync.Mutex
	byKey     map[grantKey]*grant
	taskHosts map[string]struct{} // every host holding a grant here
	// restricted is the server's count of task hosts: it grows and
	// shrinks with taskHosts. resv is the namespace's reservations, which
	// a host leaves when its standing ends. Both are set with the table.
	restricted *atomic.Int64
	resv       *reservations

	// view is what admission reads without the lock: each task host and
	// its grants, rebuilt on every change (grants change rarely; commands
	// are checked all the time).
	view atomic.Pointer[map[string][]*grant]

	// beforeRef, if set, runs in admit between reading the view and
	// taking references: a test's way into the window Release must
	// close. Nil outside tests.
	beforeRef func()
}

// Errors of Grant Put and Release.
var (
	errGrantDenied = errors.New("a task host may not grant")
	errGrantLimit  = errors.New("grant limit reached")
)

// publishLocked rebuilds the view. A task host with no grants left is in
// it with none, so it is denied everything.
func (t *grantTable) publishLocked() {
	v := make(map[string][]*grant, len(t.taskHosts))
	for h := range t.taskHosts {
		v[h] = nil
	}
	for _, g := range t.byKey {
		v[g.grantee] = append(v[g.grantee], g)
	}
	t.view.Store(&v)
}

// put installs a grant from owner at time now and returns the grant it
// replaces, if any, for the caller to drain.
func (t *grantTable) put(owner string, pg *pushdown.Grant, now time.Time, maxGrants int) (old *grant, n int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byKey == nil {
		t.byKey = make(map[grantKey]*grant)
		t.taskHosts = make(map[string]struct{})
	}
	if _, ok := t.taskHosts[owner]; ok {
		return nil, 0, fmt.Errorf("%w: %s holds grants on this namespace", errGrantDenied, owner)
	}
	t.sweepLocked(now)
	key := grantKey{owner, pg.ID}
	old = t.byKey[key]
	_, known := t.taskHosts[pg.Host]
	switch {
	case old == nil && len(t.byKey) >= maxGrants:
		return nil, 0, fmt.Errorf("%w: %d grants", errGrantLimit, len(t.byKey))
	case !known && len(t.taskHosts) >= maxGrants:
		return nil, 0, fmt.Errorf("%w: %d task hosts", errGrantLimit, len(t.taskHosts))
	}
	t.byKey[key] = &grant{
		grantee: pg.Host,
		mode:    pg.Mode,
		expires: now.Add(pg.Lease),
		extents: slices.Clone(pg.Extents),
	}
	if !known {
		t.taskHosts[pg.Host] = struct{}{}
		// Before publishing: once the grantee is in the view, no command
		// may skip the check.
		t.restricted.Add(1)
	}
	t.endStandingLocked()
	t.publishLocked()
	return old, len(t.byKey), nil
}

// endStandingLocked makes every task host without a grant left an
// ordinary host again.
func (t *grantTable) endStandingLocked() {
	if len(t.taskHosts) == 0 {
		return
	}
	holding := make(map[string]bool, len(t.taskHosts))
	for _, g := range t.byKey {
		holding[g.grantee] = true
	}
	for h := range t.taskHosts {
		if !holding[h] {
			delete(t.taskHosts, h)
			t.restricted.Add(-1)
			if t.resv != nil {
				t.resv.unregisterHost(h)
			}
		}
	}
}

// lapse is what admission does for a host it is about to deny: if the
// host's grants have all expired and nothing runs under them, they are
// forgotten and the host's standing ends. It reports whether the host is
// still a task host.
func (t *grantTable) lapse(host string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.taskHosts[host]; !ok {
		return false
	}
	t.sweepLocked(now)
	t.endStandingLocked()
	t.publishLocked()
	_, ok := t.taskHosts[host]
	return ok
}

// release removes owner's grant id and returns it (nil if there is none)
// for the caller to drain.
func (t *grantTable) release(owner string, id uint64, now time.Time) (g *grant, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := grantKey{owner, id}
	if g = t.byKey[key]; g != nil {
		delete(t.byKey, key)
	}
	t.sweepLocked(now)
	t.endStandingLocked()
	t.publishLocked()
	return g, len(t.byKey)
}

// releaseAll removes every grant owner holds and returns them for the
// caller to drain: an owner fencing the grants it made before it
// restarted.
func (t *grantTable) releaseAll(owner string, now time.Time) (gs []*grant, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, g := range t.byKey {
		if k.owner == owner {
			gs = append(gs, g)
			delete(t.byKey, k)
		}
	}
	t.sweepLocked(now)
	t.endStandingLocked()
	t.publishLocked()
	return gs, len(t.byKey)
}

// sweepLocked forgets expired grants nothing is running under, so that
// owners that never release do not fill the table. An expired grant is
// marked released first, so no command can be admitted under it between
// the check and its removal; one still busy stays for Release to drain.
func (t *grantTable) sweepLocked(now time.Time) {
	for k, g := range t.byKey {
		if now.Before(g.expires) {
			continue
		}
		g.released.Store(true)
		select {
		case <-g.inflight.idle():
			delete(t.byKey, k)
		default:
		}
	}
}

// drain waits until no command admitted under g is running, after making
// sure no more can be.
func (g *grant) drain() {
	g.released.Store(true)
	<-g.inflight.idle()
}

// blockRange is a run of blocks a command touches.
type blockRange struct {
	lba, n uint64
	write  bool
}

// grantRefs are the grants a command was admitted under; release gives
// them back when it completes.
type grantRefs []*grant

func (r grantRefs) release() {
	for _, g := range r {
		g.inflight.done()
	}
}

// admit decides whether host may touch the ranges rs. A host that is not a
// task host may (no refs). A task host may if its grants, unexpired at
// now() and with write access for writes, cover every range; the command
// then holds a reference on each grant it uses until it completes.
//
// Taking the reference and then checking released is what makes Release a
// barrier: Release sets released and then waits for the references to go,
// so either it sees this command's reference and waits for it, or this
// command sees released and backs off — and retries against the view
// published without the grant (a renewal's new grant may cover it).
func (t *grantTable) admit(host string, now func() time.Time, rs []blockRange) (grantRefs, bool) {
	for range 4 {
		v := t.view.Load()
		if v == nil {
			return nil, true
		}
		gs, restricted := (*v)[host]
		if !restricted {
			return nil, true
		}
		at := now()
		var used grantRefs
		for _, r := range rs {
			u, ok := cover(gs, at, r)
			if !ok {
				if !t.lapse(host, at) {
					return nil, true // its last grant ended
				}
				return nil, false
			}
			for _, g := range u {
				if !slices.Contains(used, g) {
					used = append(used, g)
				}
			}
		}
		if t.beforeRef != nil {
			t.beforeRef()
		}
		backedOff := false
		for i, g := range used {
			g.inflight.add()
			if g.released.Load() {
				used[:i+1].release()
				backedOff = true
				break
			}
		}
		if !backedOff {
			return used, true
		}
	}
	return nil, false
}

// extentEnd is the block after x, saturated rather than wrapped (Grant
// Put checks every extent against its namespace, so none should need it).
func extentEnd(x pushdown.Extent) uint64 {
	if e := x.LBA + uint64(x.Blocks); e >= x.LBA {
		return e
	}
	return math.MaxUint64
}

// cover returns the grants whose extents together cover r, considering
// only those unexpired at now and, for a write, read-write ones.
func cover(gs []*grant, now time.Time, r blockRange) ([]*grant, bool) {
	if r.n == 0 {
		return nil, true
	}
	lo, hi, carry := r.lba, r.lba+r.n, r.lba+r.n < r.lba
	if carry {
		return nil, false // past the end of any namespace
	}
	usable := func(g *grant) bool {
		return now.Before(g.expires) && (!r.write || g.mode == pushdown.GrantReadWrite)
	}
	// The common case: one extent holds the whole range.
	for _, g := range gs {
		if !usable(g) {
			continue
		}
		for _, x := range g.extents {
			if x.LBA <= lo && hi <= extentEnd(x) {
				return []*grant{g}, true
			}
		}
	}
	type ivl struct {
		lo, hi uint64
		g      *grant
	}
	var ivs []ivl
	for _, g := range gs {
		if !usable(g) {
			continue
		}
		for _, x := range g.extents {
			if xlo, xhi := x.LBA, extentEnd(x); xhi > lo && xlo < hi {
				ivs = append(ivs, ivl{xlo, xhi, g})
			}
		}
	}
	slices.SortFunc(ivs, func(a, b ivl) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	var used []*grant
	cur := lo
	for _, iv := range ivs {
		if iv.lo > cur {
			break
		}
		if iv.hi > cur {
			cur = iv.hi
			used = append(used, iv.g)
		}
		if cur >= hi {
			return used, true
		}
	}
	return nil, false
}

// admit checks the ranges a command touches against its host's grants on
// the command's namespace. It costs one atomic load while no host on the
// server is a task host.
func (s *session) admit(r *request, rs []blockRange) (grantRefs, nvme.Status) {
	if s.srv.restricted.Load() == 0 || r.ns == nil {
		return nil, 0
	}
	m := s.srv.meta(s.ss, r.ns, false)
	if m == nil {
		return nil, 0
	}
	refs, ok := m.grants.admit(s.ctrl.hostNQN, s.srv.cfg.Now, rs)
	if !ok {
		s.srv.metrics.accessDenied(s.ss.nqn, r.ns.id)
		s.log.Debug("access denied", "host", s.ctrl.hostNQN, "nsid", r.ns.id, "opcode", r.sqe.Opcode)
		return nil, nvme.StatusAccessDenied | nvme.DNR
	}
	return refs, 0
}

// admitIO admits an NVM command by its access class: the blocks a Read,
// Write or Write Zeroes names, or a deallocating Dataset Management's
// ranges. Ranges outside the namespace are left to the command, which
// fails with LBA Out of Range. Other commands need no grant here (function
// requests are admitted once their files are resolved, admitFunction).
func (s *session) admitIO(r *request) (grantRefs, nvme.Status) {
	if s.srv.restricted.Load() == 0 || r.ns == nil || r.spec == nil {
		return nil, 0
	}
	sqe := &r.sqe
	ns := r.ns
	var rs []blockRange
	switch r.spec.access.grant {
	case grantLBAs:
		slba, nlb := sqe.SLBA(), uint64(sqe.NLB())
		if _, _, ok := ns.span(slba, nlb); ok {
			rs = append(rs, blockRange{lba: slba, n: nlb, write: r.spec.access.resv == resvWrite})
		}
	case grantDSM:
		if sqe.CDW11&(1<<2) == 0 || len(r.data) < dsmLen(sqe) {
			return nil, 0 // hints only: nothing changes
		}
		data := r.data[:dsmLen(sqe)]
		for i := 0; i+16 <= len(data); i += 16 {
			nlb := uint64(binary.LittleEndian.Uint32(data[i+4:]))
			slba := binary.LittleEndian.Uint64(data[i+8:])
			if _, _, ok := ns.span(slba, nlb); ok {
				rs = append(rs, blockRange{lba: slba, n: nlb, write: true})
			}
		}
	default:
		return nil, 0
	}
	return s.admit(r, rs)
}

// admitFunction admits a function request on its resolved file table:
// every extent of every file is read, and λ Write writes its start file.
func (s *session) admitFunction(r *request, req *pushdown.Request) (grantRefs, nvme.Status) {
	if s.srv.restricted.Load() == 0 {
		return nil, 0
	}
	var rs []blockRange
	for i, f := range req.Files {
		write := r.spec.access.resv == resvWrite && i == int(req.StartFile)
		for _, x := range f.Extents {
			rs = append(rs, blockRange{lba: x.LBA, n: uint64(x.Blocks), write: write})
		}
	}
	return s.admit(r, rs)
}

// ErrNotGranted refuses AdmitGranted: the blocks lie outside the host's
// unexpired grants (or, for a write, its read-write grants).
var ErrNotGranted = errors.New("target: blocks not granted to the host")

// AdmitGranted admits I/O that a process in the target's own process
// does on a host's behalf straight on a namespace's backend (an offload
// engine reading the volume directly), as if the host had sent it:
// blocks [lba, lba+n) of namespace nsid of subsystem subnqn must lie
// inside hostNQN's unexpired grants, read-write ones for a write. Unlike
// a command, it refuses a host that holds no grant at all: such I/O has
// no owner who allowed it. On success the caller calls done when the I/O
// has finished; a Grant Release waits for it, so after the release
// completes the I/O is over, as for a command.
func (s *Server) AdmitGranted(subnqn string, nsid uint32, hostNQN string, lba, n uint64, write bool) (done func(), err error) {
	ss := s.subsys[subnqn]
	if ss == nil {
		return nil, fmt.Errorf("target: no subsystem %q", subnqn)
	}
	ns := ss.namespace(nsid)
	if ns == nil {
		return nil, fmt.Errorf("target: subsystem %q has no namespace %d", subnqn, nsid)
	}
	m := s.meta(ss, ns, false)
	if m == nil || m.grants.view.Load() == nil {
		return nil, ErrNotGranted
	}
	if _, granted := (*m.grants.view.Load())[hostNQN]; !granted {
		return nil, ErrNotGranted
	}
	refs, ok := m.grants.admit(hostNQN, s.cfg.Now, []blockRange{{lba: lba, n: n, write: write}})
	if !ok || len(refs) == 0 {
		// Not under a grant: denied, or no longer a task host (its last
		// grant ended), which for I/O in this process is the same.
		refs.release()
		return nil, ErrNotGranted
	}
	return refs.release, nil
}
