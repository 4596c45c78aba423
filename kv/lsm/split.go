package lsm

import (
	"slices"
	"sort"
)

// Query splitting (docs/LSM.md, "Pushdown Get"). A Get is split into the
// part that needs no I/O, done on the host, and the rest, the on-disk
// plan, which can be done anywhere — by the host's ordinary reads or by
// one pushdown request at the storage node.
//
// The in-memory part looks at every source that may hold the key, newest
// first: the memtables, then each table whose user-key range covers the
// key (L0 newest to oldest, then one table per level). For a table it
// applies the bloom filter, then the index (the engine keeps every
// table's index in memory, so this always gives the data block's handle),
// then the block cache. A cached data block is searched at once; the
// first source with an entry for the key settles the Get. When a table's
// data block is not cached, that table and every later candidate become
// the plan, in order: a later table only matters if the earlier ones do
// not hold the key, which only a read can tell.

// planTable is one table of an on-disk plan.
type planTable struct {
	h    tableHandle // holds the reader open until the Get ends
	meta *FileMeta
	// data is the data block that holds the key's newest visible entry
	// if the table has one; top is the table's top-level index block, for
	// walkers that start there.
	data, top blockHandle
	// tomb is the highest range-tombstone seq covering the key, visible at
	// the snapshot, in every source up to and including this table: an
	// entry found here with a lower seq is deleted.
	tomb SeqNum
}

// splitResult is the outcome of a Get's in-memory part: either done (the
// answer is value/err) or a plan to run.
type splitResult struct {
	done  bool
	value []byte
	err   error
	plan  []planTable
	// probed are the tables whose filter and index were consulted; cached
	// are those settled by a cached data block.
	probed, cached int
}

// release drops the plan's table references.
func (s *splitResult) release() {
	for _, p := range s.plan {
		p.h.release()
	}
	s.plan = nil
}

// candidates appends the tables of v that may hold ukey, newest first, to
// out (a caller's buffer, so that a Get allocates nothing for them).
func candidates(out []*FileMeta, v *Version, ukey []byte) []*FileMeta {
	for level, files := range v.Levels {
		if level == 0 {
			for _, f := range files {
				if f.userRange().contains(ukey) {
					out = append(out, f)
				}
			}
			continue
		}
		i := sort.Search(len(files), func(i int) bool {
			r := files[i].userRange()
			return !endsBefore(r.end, r.endExclusive, ukey)
		})
		if i < len(files) && files[i].userRange().contains(ukey) {
			out = append(out, files[i])
		}
	}
	return out
}

// resolveEntry turns the newest visible entry of a key into Get's answer:
// a SET not deleted by a newer range tombstone is its value.
func resolveEntry(ikey, val []byte, tomb SeqNum) ([]byte, error) {
	if keyKind(ikey) != KindSet || tomb > keySeq(ikey) {
		return nil, ErrNotFound
	}
	return slices.Clone(val), nil
}

// split does a Get's in-memory part as of snap over rs. The caller must
// release the result's plan.
func (d *DB) split(rs readState, ukey []byte, snap SeqNum) splitResult {
	return d.splitInto(rs, ukey, snap, nil)
}

// splitInto is split building its search key and plan in b's arrays
// (where they fit), if b is not nil: the plan aliases b.
func (d *DB) splitInto(rs readState, ukey []byte, snap SeqNum, b *pushBufs) splitResult {
	var res splitResult
	var tomb SeqNum
	for _, m := range rs.mems {
		tomb = max(tomb, maxCovering(m.tombstones(), ukey, snap))
		if ikey, val, ok := m.get(ukey, snap); ok {
			res.value, res.err = resolveEntry(ikey, val, tomb)
			res.done = true
			return res
		}
	}
	var sk []byte
	if b != nil {
		sk = appendInternalKey(b.sk[:0], ukey, snap, kindMax)
	} else {
		sk = searchKey(ukey, snap)
	}
	hash := bloomHash(ukey)
	var buf [16]*FileMeta
	cands := candidates(buf[:0], rs.v, ukey)
	for _, f := range cands {
		h, err := d.tc.get(f.FileNum, f.Size)
		if err != nil {
			res.release()
			res.done, res.err = true, err
			return res
		}
		r := h.reader()
		tomb = max(tomb, maxCoveringFrags(r.frags, ukey, snap))
		res.probed++
		i := -1
		if r.filter.mayContain(hash) {
			i = r.blockIndex(sk)
		}
		if i < 0 || i == len(r.index) { // the table cannot hold the key
			h.release()
			continue
		}
		bh := r.wins[i].h // next to the windows blockIndex compared last
		if len(res.plan) == 0 {
			if b, ok := r.cache.get(r.fileNum, bh.offset); ok {
				res.cached++
				ikey, val, found, err := r.searchBlock(b, bh, ukey, sk)
				if err == nil && found {
					res.value, res.err = resolveEntry(ikey, val, tomb)
				} else {
					res.err = err
				}
				h.release()
				if err != nil || found {
					res.done = true
					return res
				}
				continue
			}
		}
		if res.plan == nil {
			if b != nil && len(cands) <= len(b.plan) {
				res.plan = b.plan[:0]
			} else {
				res.plan = make([]planTable, 0, len(cands))
			}
		}
		res.plan = append(res.plan, planTable{h: h, meta: f, data: bh, top: r.top, tomb: tomb})
	}
	if len(res.plan) == 0 {
		res.done, res.err = true, ErrNotFound
	}
	return res
}

// runPlainly runs a plan with the host's ordinary reads, through the block
// cache (filling it): the first table with a visible entry settles it.
func runPlainly(plan []planTable, ukey []byte, snap SeqNum) ([]byte, error) {
	for _, p := range plan {
		ikey, val, found, err := p.h.reader().get(ukey, snap)
		if err != nil {
			return nil, err
		}
		if found {
			return resolveEntry(ikey, val, p.tomb)
		}
	}
	return nil, ErrNotFound
}

// PinnedBytes returns the bytes of index, filter and range-deletion data
// the current version's tables hold in memory, outside the block cache
// (opening any table not yet open). Query splitting relies on them: every
// candidate table's filter and index are consulted without I/O, so the
// on-disk part of a Get is only data blocks.
func (d *DB) PinnedBytes() (uint64, error) {
	rs, err := d.loadReadState()
	if err != nil {
		return 0, err
	}
	defer d.releaseReadState(rs)
	var n uint64
	for _, files := range rs.v.Levels {
		for _, f := range files {
			h, err := d.tc.get(f.FileNum, f.Size)
			if err != nil {
				return n, err
			}
			n += uint64(h.reader().metaLen)
			h.release()
		}
	}
	return n, nil
}
