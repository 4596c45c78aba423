package lsm

import (
	"bytes"
	"slices"
	"sort"
)

// A tombstone deletes every entry of a user key in [start, end) with a
// sequence number below seq.
type tombstone struct {
	start, end []byte
	seq        SeqNum
}

func (t tombstone) clone() tombstone {
	return tombstone{start: slices.Clone(t.start), end: slices.Clone(t.end), seq: t.seq}
}

func (t tombstone) covers(k []byte) bool {
	return bytes.Compare(t.start, k) <= 0 && bytes.Compare(k, t.end) < 0
}

// maxCovering returns the highest seq <= snap of a tombstone in ts that
// covers k, or 0.
func maxCovering(ts []tombstone, k []byte, snap SeqNum) SeqNum {
	var m SeqNum
	for _, t := range ts {
		if t.seq <= snap && t.seq > m && t.covers(k) {
			m = t.seq
		}
	}
	return m
}

// fragment is a piece of the key space [start, end) with the highest
// covering tombstone seq visible to a read.
type fragment struct {
	start, end []byte
	seq        SeqNum
}

// tombstoneIndex answers "the highest visible tombstone seq covering k" in
// O(log n) for one read (iterator) at snapshot snap.
type tombstoneIndex struct {
	frags []fragment // sorted, disjoint
}

// newTombstoneIndex fragments the tombstones visible at snap.
func newTombstoneIndex(ts []tombstone, snap SeqNum) *tombstoneIndex {
	var vis []tombstone
	var points [][]byte
	for _, t := range ts {
		if t.seq <= snap && bytes.Compare(t.start, t.end) < 0 {
			vis = append(vis, t)
			points = append(points, t.start, t.end)
		}
	}
	ti := &tombstoneIndex{}
	if len(vis) == 0 {
		return ti
	}
	slices.SortFunc(points, bytes.Compare)
	points = slices.CompactFunc(points, bytes.Equal)
	for i := 0; i+1 < len(points); i++ {
		f := fragment{start: points[i], end: points[i+1]}
		for _, t := range vis {
			if bytes.Compare(t.start, f.start) <= 0 && bytes.Compare(f.end, t.end) <= 0 && t.seq > f.seq {
				f.seq = t.seq
			}
		}
		if f.seq > 0 {
			ti.frags = append(ti.frags, f)
		}
	}
	return ti
}

// covering returns the highest visible tombstone seq covering k, or 0.
func (ti *tombstoneIndex) covering(k []byte) SeqNum {
	i := sort.Search(len(ti.frags), func(i int) bool { return bytes.Compare(ti.frags[i].end, k) > 0 })
	if i < len(ti.frags) && bytes.Compare(ti.frags[i].start, k) <= 0 {
		return ti.frags[i].seq
	}
	return 0
}
