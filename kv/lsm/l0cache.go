package lsm

import "slices"

// The L0 cache (docs/LSM.md, "The L0 cache"), OffloadDB's third change:
// with OffloadOptions.L0CacheBytes, a flushed memtable stays in host
// memory after its L0 table is installed, and Gets read it in the
// table's place, until a compaction takes the table out of L0. The
// table is written anyway (with log recycling, by the engine from the
// WAL, so its bytes never cross the network twice), so recovery and
// iterators need nothing new. The rules:
//
//  1. A cached memtable answers exactly as its table would: the flush
//     drops only entries shadowed in their snapshot stripe, which no read
//     sees, and keeps every tombstone.
//  2. A Get reads a cached memtable exactly where it would read its
//     table, in L0's newest-first order, so cached and uncached tables
//     mix freely: a flush that does not fit the budget is an ordinary
//     flush (counted), and what is cached stays.
//  3. An entry leaves when its table leaves L0 (installLocked prunes).
//     Iterators read the tables: a memtable and its table hold the same
//     internal keys, which a merging iterator must not see twice.

// cachedMem is a memtable serving reads in place of its L0 table.
type cachedMem struct {
	m     *memTable
	table uint64
}

// cacheL0Locked offers m, whose L0 table is meta, to the cache (rule 2).
// Called by the flush as it installs the table, with mu held.
func (d *DB) cacheL0Locked(m *memTable, meta *FileMeta) {
	o := d.opts.Offload
	if o == nil || o.L0CacheBytes <= 0 || meta == nil {
		return
	}
	if d.l0cacheBytes+int64(m.size()) > o.L0CacheBytes {
		d.offloadCtr.l0CacheFull.Add(1)
		return
	}
	d.l0cache = append(d.l0cache, cachedMem{m: m, table: meta.FileNum})
	d.l0cacheBytes += int64(m.size())
}

// pruneL0CacheLocked drops the memtables whose tables v's L0 lacks (rule 3).
func (d *DB) pruneL0CacheLocked(v *Version) {
	d.l0cache = slices.DeleteFunc(d.l0cache, func(c cachedMem) bool {
		gone := !slices.ContainsFunc(v.Levels[0], func(f *FileMeta) bool { return f.FileNum == c.table })
		if gone {
			d.l0cacheBytes -= int64(c.m.size())
		}
		return gone
	})
}

// l0CacheMapLocked is the cache as a read state holds it: memtables by
// table number (nil when empty).
func (d *DB) l0CacheMapLocked() map[uint64]*memTable {
	if len(d.l0cache) == 0 {
		return nil
	}
	out := make(map[uint64]*memTable, len(d.l0cache))
	for _, c := range d.l0cache {
		out[c.table] = c.m
	}
	return out
}
