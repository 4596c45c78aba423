package lsm

import "bytes"

// memTable holds recent writes: point entries in one skiplist and range
// tombstones in another, both in one arena. It is mutable until the commit
// pipeline rotates it; after that it is immutable and waits to be flushed.
// Its entries are all in WAL logNum (or a later log, for a memtable made
// bigger for one large batch, whose entries are in the same log).
type memTable struct {
	arena     *arena
	points    *skiplist
	rangeDels *skiplist
	logNum    uint64
	// walRefs, with log recycling, are where each batch applied to the
	// memtable starts in its WAL, in seq order; appended by the commit
	// leader while the memtable is mutable, read once it is not.
	walRefs []walRef
}

// memTableOverhead is what a memtable's two skiplist heads take: two
// nodes of maxHeight with no key or value, each aligned.
const memTableOverhead = 2 * (nodeHeaderSize + 4*maxHeight + 3)

func newMemTable(capacity int, logNum uint64) *memTable {
	a := newArena(capacity + memTableOverhead + 4)
	return &memTable{arena: a, points: newSkiplist(a), rangeDels: newSkiplist(a), logNum: logNum}
}

// hasRoom reports whether n more bytes (an estimate from
// maxNodeSize) fit.
func (m *memTable) hasRoom(n int) bool { return m.arena.used()+n <= len(m.arena.buf) }

func (m *memTable) empty() bool {
	return m.points.count.Load() == 0 && m.rangeDels.count.Load() == 0
}

func (m *memTable) size() int { return m.arena.used() }

// batchMemSize bounds the arena bytes a batch's entries take.
func batchMemSize(ents []batchEntry) int {
	n := 0
	for _, e := range ents {
		n += maxNodeSize(len(e.key)+trailerLen, len(e.value))
	}
	return n
}

// apply inserts a batch's entries with sequence numbers seq, seq+1, ...
// It returns false if the arena filled, which hasRoom's check before
// rules out.
func (m *memTable) apply(seq SeqNum, ents []batchEntry) bool {
	var kbuf []byte
	for i, e := range ents {
		kbuf = appendInternalKey(kbuf[:0], e.key, seq+SeqNum(i), e.kind)
		l := m.points
		if e.kind == KindRangeDelete {
			l = m.rangeDels
		}
		if !l.add(kbuf, e.value) {
			return false
		}
	}
	return true
}

// get returns the newest point entry of ukey with seq <= snap.
func (m *memTable) get(ukey []byte, snap SeqNum) (ikey, value []byte, ok bool) {
	nd := m.points.seekGE(searchKey(ukey, snap))
	if nd == 0 {
		return nil, nil, false
	}
	k := m.points.key(nd)
	if !bytes.Equal(userKey(k), ukey) {
		return nil, nil, false
	}
	return k, m.points.value(nd), true
}

// tombstones returns the memtable's range tombstones (aliasing the arena).
func (m *memTable) tombstones() []tombstone {
	var ts []tombstone
	for nd := m.rangeDels.first(); nd != 0; nd = m.rangeDels.next(nd, 0) {
		k := m.rangeDels.key(nd)
		ts = append(ts, tombstone{start: userKey(k), end: m.rangeDels.value(nd), seq: keySeq(k)})
	}
	return ts
}

func (m *memTable) newIter() *skiplistIter { return &skiplistIter{s: m.points} }
