package target

import (
	"errors"
	"fmt"
	"sync"

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
		m.grants.restricted, m.grants.resv = &s.restricted, &ns.resv
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
// of the controller's host on r's namespace, counting stale requests: the
// target's one extent-version check.
func (s *session) resolveFiles(r *request, files []pushdown.File) ([]pushdown.File, error) {
	if !namesInode(files) {
		return files, nil
	}
	var t *mapTable
	if m := s.srv.meta(s.ss, r.ns, false); m != nil {
		t = m.table(s.ctrl.hostNQN, false)
	}
	out, err := t.resolve(files)
	if errors.Is(err, pushdown.ErrStale) {
		s.srv.metrics.staleRequest(s.ss.nqn, r.ns.id)
	}
	return out, err
}
