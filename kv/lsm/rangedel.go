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

// fragment is a piece of the key space [start, end) and the seqs of the
// tombstones covering all of it, descending.
type fragment struct {
	start, end []byte
	seqs       []SeqNum
}

// fragmentTombstones cuts tombstones at every start and end key into
// disjoint fragments, sorted, each with the seqs that cover it. It sweeps
// the sorted boundaries once, keeping the tombstones active at each: the
// cost is the output's size plus a sort.
func fragmentTombstones(ts []tombstone) []fragment {
	var live []tombstone
	var points [][]byte
	for _, t := range ts {
		if bytes.Compare(t.start, t.end) < 0 {
			live = append(live, t)
			points = append(points, t.start, t.end)
		}
	}
	if len(live) == 0 {
		return nil
	}
	slices.SortFunc(live, func(a, b tombstone) int { return bytes.Compare(a.start, b.start) })
	slices.SortFunc(points, bytes.Compare)
	points = slices.CompactFunc(points, bytes.Equal)
	var frags []fragment
	var active []tombstone
	next := 0
	for i := 0; i+1 < len(points); i++ {
		p := points[i]
		// Drop tombstones that ended; add those that start here.
		kept := active[:0]
		for _, t := range active {
			if bytes.Compare(t.end, p) > 0 {
				kept = append(kept, t)
			}
		}
		active = kept
		for next < len(live) && bytes.Equal(live[next].start, p) {
			active = append(active, live[next])
			next++
		}
		if len(active) == 0 {
			continue
		}
		f := fragment{start: p, end: points[i+1], seqs: make([]SeqNum, len(active))}
		for j, t := range active {
			f.seqs[j] = t.seq
		}
		slices.SortFunc(f.seqs, func(a, b SeqNum) int {
			switch {
			case a > b:
				return -1
			case a < b:
				return 1
			}
			return 0
		})
		frags = append(frags, f)
	}
	return frags
}

// findFragment returns the fragment covering k, or nil.
func findFragment(frags []fragment, k []byte) *fragment {
	i := sort.Search(len(frags), func(i int) bool { return bytes.Compare(frags[i].end, k) > 0 })
	if i < len(frags) && bytes.Compare(frags[i].start, k) <= 0 {
		return &frags[i]
	}
	return nil
}

// maxCoveringFrags is maxCovering over fragments: O(log n) to find k's
// fragment, then its seqs, highest first.
func maxCoveringFrags(frags []fragment, k []byte, snap SeqNum) SeqNum {
	if f := findFragment(frags, k); f != nil {
		for _, s := range f.seqs {
			if s <= snap {
				return s
			}
		}
	}
	return 0
}

// tombstoneIndex answers "the highest visible tombstone seq covering k" in
// O(log n) for one read (iterator) at snapshot snap.
type tombstoneIndex struct {
	frags []fragment
	snap  SeqNum
}

// newTombstoneIndex indexes the tombstones for reads at snap.
func newTombstoneIndex(ts []tombstone, snap SeqNum) *tombstoneIndex {
	var vis []tombstone
	for _, t := range ts {
		if t.seq <= snap {
			vis = append(vis, t)
		}
	}
	return &tombstoneIndex{frags: fragmentTombstones(vis), snap: snap}
}

// covering returns the highest visible tombstone seq covering k, or 0.
func (ti *tombstoneIndex) covering(k []byte) SeqNum {
	if f := findFragment(ti.frags, k); f != nil {
		return f.seqs[0]
	}
	return 0
}
