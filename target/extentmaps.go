package target

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
)

// Extent maps: the target's copy of the maps of files that hosts keep on
// their namespaces (docs/PROTOCOL.md, "Extent Map Put").
//
// A file system on a namespace belongs to one host, which allocates its
// extents and keeps its inodes; the target never changes metadata. The
// owner's synchronizer pushes each inode's map, versioned, and a function
// request that names a file by inode runs on the map the target holds for
// that version, or not at all. Maps are kept per namespace and per host
// NQN: a request is resolved against the maps its own host put, so one
// host can never make the target read another's files (or its own files'
// old blocks) by naming inodes and versions.
//
// Concurrency: a Put changes a host's table under a mutex held only to
// swap entries in; a request resolving its files holds the read side just
// as long. Stored maps are never modified, so a request keeps the maps it
// started with for as long as it runs, whatever Puts arrive meanwhile
// (the owner's host checks versions again on completion and discards the
// result of a request whose maps changed). Ordinary reads and writes never
// look at maps at all.

// queryResultHeader is the Extent Map Query result header: the number of
// entries (4), reserved (12).
const (
	queryResultHeader = 16
	queryEntrySize    = 16
	// maxQueryInodes is what fits the admin queue's 8 KiB of in-capsule
	// data: the query's inodes travel in the capsule.
	maxQueryInodes = adminInCapsuleData / 8
)

// noEntry is completion DW0 of a Bad Extent Map status that is about the
// payload's header rather than one of its entries.
const noEntry = 0xFFFFFFFF

// heldMap is one inode's entry in a host's table: its map, or, removed,
// the version its removal carried (so that a late older map stays out).
type heldMap struct {
	pushdown.File
	removed bool
}

// mapTable is the maps one host put on one namespace.
type mapTable struct {
	mu    sync.RWMutex
	byIno map[uint64]heldMap
	// live counts the entries that are maps rather than removals; extents
	// counts their extents. Both feed the limits and the gauges.
	live, extents int
}

// nsMeta is what hosts have told the target about one namespace: the
// extent maps of each host, and the grants.
type nsMeta struct {
	ssNQN string
	nsid  uint32

	mu     sync.RWMutex // guards the tables map, not the tables
	tables map[string]*mapTable

	grants grantTable
}

// meta returns the metadata of a namespace, creating it if create is
// set; without create it may return nil.
func (s *Server) meta(ss *subsystem, ns *namespace, create bool) *nsMeta {
	s.metaMu.RLock()
	m := s.metas[ns]
	s.metaMu.RUnlock()
	if m != nil || !create {
		return m
	}
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	if m = s.metas[ns]; m == nil {
		m = &nsMeta{ssNQN: ss.nqn, nsid: ns.id, tables: make(map[string]*mapTable)}
		s.metas[ns] = m
	}
	return m
}

// table returns a host's map table, creating it if create is set.
func (m *nsMeta) table(host string, create bool) *mapTable {
	m.mu.RLock()
	t := m.tables[host]
	m.mu.RUnlock()
	if t != nil || !create {
		return t
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t = m.tables[host]; t == nil {
		t = &mapTable{byIno: make(map[uint64]heldMap)}
		m.tables[host] = t
	}
	return t
}

// errMapLimit refuses a Put that would take a host over its limits.
var errMapLimit = errors.New("extent map limit reached")

// mapDelta is what applying a batch did, for the completion and metrics.
type mapDelta struct {
	applied, ignored int
	live, extents    int // changes in live maps and their extents
}

// apply applies a batch of updates in order, all or nothing: an update
// whose version is not newer than the held one is ignored (the
// synchronizer may resend), and a batch that would leave more than
// maxEntries entries or maxExtents extents changes nothing and fails with
// errMapLimit.
func (t *mapTable) apply(ups []pushdown.MapUpdate, maxEntries, maxExtents int) (mapDelta, error) {
	type pending struct {
		m       heldMap
		present bool
	}
	var d mapDelta
	t.mu.Lock()
	defer t.mu.Unlock()
	// Work out the batch's effect in an overlay first, so that a batch
	// over the limits leaves the table as it was.
	overlay := make(map[uint64]pending, len(ups))
	get := func(ino uint64) (heldMap, bool) {
		if p, ok := overlay[ino]; ok {
			return p.m, p.present
		}
		h, ok := t.byIno[ino]
		return h, ok
	}
	for _, u := range ups {
		cur, has := get(u.ID)
		switch {
		case u.Remove && u.Version == 0:
			// Unconditional: drop the entry, version floor and all.
			if !has {
				d.ignored++
				continue
			}
			overlay[u.ID] = pending{}
		case has && u.Version <= cur.Version:
			d.ignored++
			continue
		default:
			overlay[u.ID] = pending{m: heldMap{File: u.File, removed: u.Remove}, present: true}
		}
		d.applied++
	}
	entries := len(t.byIno)
	for ino, p := range overlay {
		old, had := t.byIno[ino]
		if had {
			entries--
			if !old.removed {
				d.live--
				d.extents -= len(old.Extents)
			}
		}
		if p.present {
			entries++
			if !p.m.removed {
				d.live++
				d.extents += len(p.m.Extents)
			}
		}
	}
	if entries > maxEntries || t.extents+d.extents > maxExtents {
		return mapDelta{}, fmt.Errorf("%w: %d entries (at most %d), %d extents (at most %d)",
			errMapLimit, entries, maxEntries, t.extents+d.extents, maxExtents)
	}
	for ino, p := range overlay {
		if p.present {
			t.byIno[ino] = p.m
		} else {
			delete(t.byIno, ino)
		}
	}
	t.live += d.live
	t.extents += d.extents
	return d, nil
}

// version returns what the table holds for an inode: the version (0 if
// nothing), whether it is a removal, and the map's extent count.
func (t *mapTable) version(ino uint64) (v uint64, removed bool, extents int) {
	h, ok := t.byIno[ino]
	if !ok {
		return 0, false, 0
	}
	return h.Version, h.removed, len(h.Extents)
}

// resolve runs pushdown.ResolveFiles against the table (which may be nil:
// the host has put no maps).
func (t *mapTable) resolve(files []pushdown.File) ([]pushdown.File, error) {
	if t == nil {
		return pushdown.ResolveFiles(files, func(uint64) (pushdown.File, bool) { return pushdown.File{}, false })
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return pushdown.ResolveFiles(files, func(ino uint64) (pushdown.File, bool) {
		h, ok := t.byIno[ino]
		return h.File, ok && !h.removed
	})
}

// namesInode reports whether any file of a request is named by inode,
// so raw-namespace requests skip the map lookup.
func namesInode(files []pushdown.File) bool {
	for i := range files {
		if files[i].ID != 0 {
			return true
		}
	}
	return false
}

// resolveFiles resolves a function request's file table against the maps
// of the controller's host on cmd's namespace, counting stale requests.
func (q *queue) resolveFiles(cmd *command, files []pushdown.File) ([]pushdown.File, error) {
	if !namesInode(files) {
		return files, nil
	}
	var t *mapTable
	if m := q.srv.meta(q.ss, cmd.ns, false); m != nil {
		t = m.table(q.ctrl.hostNQN, false)
	}
	out, err := t.resolve(files)
	if errors.Is(err, pushdown.ErrStale) {
		q.srv.metrics.staleRequest(q.ss.nqn, cmd.ns.id)
	}
	return out, err
}

// badMap completes a command whose payload breaks the rules with Bad
// Extent Map, DW0 naming the entry at fault.
func (q *queue) badMap(cmd *command, err error) {
	dw0 := uint32(noEntry)
	var ee *pushdown.EntryError
	if errors.As(err, &ee) && ee.Index >= 0 {
		dw0 = uint32(ee.Index)
	}
	q.log.Info("extent map or grant refused", "op", cmd.op, "host", q.ctrl.hostNQN, "err", err)
	q.complete(cmd, nvme.StatusBadExtentMap|nvme.DNR, dw0)
}

// extentMapPut runs Extent Map Put: the whole batch is checked before any
// of it is applied. Completion DW0 is the number of updates applied, DW1
// the number ignored as not newer than what the target holds.
func (q *queue) extentMapPut(cmd *command) {
	cmd.op = "extent_map_put"
	ns := q.ss.namespace(cmd.sqe.NSID)
	if ns == nil {
		q.complete(cmd, nvme.StatusInvalidNamespace|nvme.DNR, 0)
		return
	}
	cmd.ns = ns
	ups, err := pushdown.UnmarshalMapUpdates(cmd.data)
	if err != nil {
		q.badMap(cmd, err)
		return
	}
	for i := range ups {
		if ups[i].Remove {
			continue
		}
		if err := pushdown.CheckMap(&ups[i].File, ns.blocks, ns.blockSize); err != nil {
			q.badMap(cmd, &pushdown.EntryError{Index: i, Err: err})
			return
		}
	}
	m := q.srv.meta(q.ss, ns, true)
	t := m.table(q.ctrl.hostNQN, true)
	cfg := &q.srv.cfg
	d, err := t.apply(ups, cfg.MaxExtentMaps, cfg.MaxExtentMapExtents)
	if err != nil {
		q.log.Warn("extent map put refused", "host", q.ctrl.hostNQN, "nsid", ns.id, "err", err)
		q.complete(cmd, nvme.StatusMetadataLimit|nvme.DNR, 0)
		return
	}
	q.srv.metrics.mapsChanged(m.ssNQN, ns.id, d)
	q.completeWith(cmd, nvme.StatusSuccess, uint32(d.applied), uint32(d.ignored), nil)
}

// extentMapQuery runs Extent Map Query: for each inode of the request,
// what the target holds of the host's maps. The result is a 16-byte
// header — count (4), reserved (12) — then one 16-byte entry per inode,
// in order: version (8; 0 if none), flags (4; bit 0: removed, the version
// being the removal's), number of extents (4).
func (q *queue) extentMapQuery(cmd *command) {
	cmd.op = "extent_map_query"
	ns := q.ss.namespace(cmd.sqe.NSID)
	if ns == nil {
		q.complete(cmd, nvme.StatusInvalidNamespace|nvme.DNR, 0)
		return
	}
	cmd.ns = ns
	n := len(cmd.data) / 8
	if len(cmd.data)%8 != 0 || n == 0 || n > maxQueryInodes {
		q.badMap(cmd, fmt.Errorf("%w: query of %d bytes (want 1 to %d inodes of 8 bytes)", pushdown.ErrMalformed, len(cmd.data), maxQueryInodes))
		return
	}
	size := queryResultHeader + queryEntrySize*n
	if cmd.inCap < size {
		q.complete(cmd, nvme.StatusSGLDataLenInvalid|nvme.DNR, 0)
		return
	}
	out := make([]byte, size)
	binary.LittleEndian.PutUint32(out, uint32(n))
	var t *mapTable
	if m := q.srv.meta(q.ss, ns, false); m != nil {
		t = m.table(q.ctrl.hostNQN, false)
	}
	if t != nil {
		t.mu.RLock()
		for i := range n {
			v, removed, nx := t.version(binary.LittleEndian.Uint64(cmd.data[8*i:]))
			e := out[queryResultHeader+queryEntrySize*i:]
			binary.LittleEndian.PutUint64(e, v)
			if removed {
				binary.LittleEndian.PutUint32(e[8:], 1)
			}
			binary.LittleEndian.PutUint32(e[12:], uint32(nx))
		}
		t.mu.RUnlock()
	}
	q.completeWith(cmd, nvme.StatusSuccess, uint32(n), 0, out)
}
