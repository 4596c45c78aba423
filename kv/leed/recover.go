package leed

import (
	"context"
	"fmt"
)

// Recovery rebuilds SegTbl from the key log alone. What it relies on:
//
//   - chain writes are serialized (kmu) and a chain's slots are allocated
//     in increasing virtual order, so a crash tears at most the chain
//     being written, which lies beyond every whole chain; the key log's
//     head is the end of the furthest whole chain;
//   - per segment, a later chain has a larger virtual slot, so the whole
//     chain with the largest one is the segment's current chain;
//   - every slot between the committed tail and the head was written in
//     this lap of the log, by a chain or a skip marker: one that does not
//     decode, or decodes as another slot, is corruption, not a torn
//     write. Its segment cannot be known, so every segment whose current
//     chain is older than it, or that has none, is marked suspect and
//     fails with ErrCorrupt rather than serve what may be stale;
//   - value writes are serialized too (vmu) and a chain records the value
//     log head after the last whole entry, so every entry before the
//     largest head recorded is whole.

// slotInfo is what the scan learned of one slot.
type slotInfo struct {
	ok     bool
	h      bucketHdr
	nitems int
	vbytes int64
}

func (s *Store) recover(ctx context.Context) error {
	cp := make([]byte, 2*BucketSize)
	if err := s.read(ctx, nil, true, cp, ckptOff); err != nil {
		return err
	}
	a, okA := unmarshalCheckpoint(cp)
	b, okB := unmarshalCheckpoint(cp[BucketSize:])
	switch {
	case okA && okB && b.seq > a.seq, !okA && okB:
		a = b
	case !okA && !okB:
		return fmt.Errorf("%w: both checkpoints fail their checksums", ErrCorrupt)
	}
	s.ckptSeq = a.seq
	s.appliedFloor = a.applied
	s.ktail.Store(a.ktail)
	s.vtail.Store(a.vtail)

	slots := uint64(s.g.slots)
	info := make([]slotInfo, slots)
	buf := make([]byte, kCompactMax*BucketSize)
	var items []item
	for first := uint64(0); first < slots; first += kCompactMax {
		n := min(kCompactMax, slots-first)
		if err := s.read(ctx, nil, true, buf[:n*BucketSize], s.g.keyLogOff+int64(first)*BucketSize); err != nil {
			return err
		}
		for i := uint64(0); i < n; i++ {
			h, its, err := decodeBucket(buf[i*BucketSize:], items[:0])
			items = its
			if err != nil || h.storeID != s.g.id || h.chainVirt%slots != (first+i)-uint64(h.pos) || h.segment >= s.g.segments && h.flags&flagSkip == 0 {
				continue
			}
			si := slotInfo{ok: true, h: h, nitems: len(its)}
			for _, it := range its {
				si.vbytes += entrySize(int(it.vlen))
			}
			info[first+i] = si
		}
	}

	// Whole chains, the current one per segment, and the head.
	best := make([]uint64, s.g.segments) // chainVirt+1 of the current chain; 0: none
	head := a.khead
	vhead := a.vhead
	var opSeq uint64
	for p := uint64(0); p < slots; p++ {
		si := &info[p]
		if !si.ok || si.h.pos != 0 {
			continue
		}
		h := si.h
		if h.flags&flagSkip != 0 {
			head = max(head, h.chainVirt+uint64(h.chainLen))
			continue
		}
		n := uint64(h.chainLen)
		whole := p+n <= slots
		for i := uint64(1); whole && i < n; i++ {
			q := &info[p+i]
			whole = q.ok && q.h.chainVirt == h.chainVirt && q.h.segment == h.segment && q.h.chainLen == h.chainLen && uint64(q.h.pos) == i
		}
		if !whole || h.chainVirt+n <= a.ktail {
			continue
		}
		head = max(head, h.chainVirt+n)
		vhead = max(vhead, h.vhead)
		opSeq = max(opSeq, h.opSeq)
		if h.chainVirt+1 > best[h.segment] {
			best[h.segment] = h.chainVirt + 1
		}
	}

	// Every slot of the live region must hold what was written there in
	// this lap. A corrupt bucket whose header still names its segment
	// (the damage is in its items) makes that segment suspect; one whose
	// header is gone makes every segment suspect that may have lost a
	// chain to it.
	var corruptAt uint64
	corrupt := 0
	bySegment := map[uint32]uint64{}
	for v := a.ktail; v < head; {
		si := &info[v%slots]
		if si.ok && si.h.flags&flagSkip != 0 && si.h.chainVirt == v {
			v += max(1, uint64(si.h.chainLen))
			continue
		}
		if !si.ok || si.h.chainVirt+uint64(si.h.pos) != v {
			corrupt++
			b := make([]byte, BucketSize)
			if err := s.read(ctx, nil, true, b, s.g.keyLogOff+int64(v%slots)*BucketSize); err != nil {
				return err
			}
			if seg, ok := s.peekSegment(b, v); ok {
				bySegment[seg] = max(bySegment[seg], v+1)
			} else {
				corruptAt = max(corruptAt, v+1)
			}
		}
		v++
	}

	var objects, live, liveSlots int64
	for seg, bv := range best {
		if bv == 0 {
			continue
		}
		v := bv - 1
		p := v % slots
		n := uint64(info[p].h.chainLen)
		s.segtbl[seg] = uint32(p)<<6 | uint32(n)
		liveSlots += int64(n)
		for i := uint64(0); i < n; i++ {
			objects += int64(info[p+i].nitems)
			live += info[p+i].vbytes
		}
	}
	if corrupt > 0 {
		s.suspect = make([]uint64, (s.g.segments+63)/64)
		marked := 0
		for seg, bv := range best {
			at, named := bySegment[uint32(seg)]
			if bv == 0 && corruptAt > 0 || bv-1 < corruptAt || named && (bv == 0 || bv-1 < at) {
				s.suspect[seg/64] |= 1 << (seg % 64)
				marked++
			}
		}
		s.log.Error("leed: corrupt buckets in the key log; segments that may have lost their newest chain will fail with a corruption error",
			"corrupt_buckets", corrupt, "suspect_segments", marked)
	}
	s.khead.Store(head)
	s.vhead.Store(vhead)
	s.opSeq.Store(max(opSeq, a.applied))
	s.objects.Store(objects)
	s.liveValue.Store(live)
	s.liveSlots.Store(liveSlots)
	s.fgReads.Store(0)
	s.bgReads.Store(0)
	return nil
}

// peekSegment reads the segment a damaged bucket at virtual slot v names,
// if its header is still that of a bucket of this store written at v.
func (s *Store) peekSegment(b []byte, v uint64) (uint32, bool) {
	if le.Uint32(b) != bucketMagic || le.Uint64(b[48:]) != s.g.id {
		return 0, false
	}
	chainVirt, seg, pos, flags := le.Uint64(b[8:]), le.Uint32(b[16:]), b[21], b[22]
	if flags&flagSkip != 0 || chainVirt+uint64(pos) != v || seg >= s.g.segments {
		return 0, false
	}
	return seg, true
}
