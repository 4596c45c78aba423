package leed

import (
	"context"
	"errors"
	"fmt"
)

// Compaction reclaims the tail of each circular log in sub-compactions.
// One sub-compaction reads a bounded piece at the log's committed tail,
// moves what is live in it to the head, and only then commits: it flushes
// the device, and writes a checkpoint with the new tail. Until that
// checkpoint is written the old copies stay where they were and are what
// a crash recovers to; after it, nothing points at them. The rules it
// keeps:
//
//   - a piece of a log is reused only after a checkpoint moved the tail
//     past it, so a live chain or value is never overwritten;
//   - a live item moves under its segment's stripe, which foreground
//     operations on the segment also hold for all of their I/Os;
//   - a sub-compaction reads no further than the space it may use at the
//     head, so moving everything it read always fits, and commits free at
//     least what they used.

// compactOnce runs one sub-compaction: of the value log first if values
// is set, else of the key log first, or of the other if the first frees
// nothing. It reports whether a log's tail advanced: space was freed, or
// live data moved out of the way of the next sub-compaction. The caller
// holds cmu.
func (s *Store) compactOnce(ctx context.Context, values bool) (bool, error) {
	if err := s.writable(); err != nil {
		return false, err
	}
	order := []func(context.Context) (bool, error){s.compactKeys, s.compactValues}
	if values {
		order[0], order[1] = order[1], order[0]
	}
	for _, f := range order {
		advanced, err := f(ctx)
		if err != nil {
			return false, err
		}
		if advanced {
			s.compactions.Add(1)
			return true, nil
		}
	}
	return false, nil
}

// commit makes the moves durable, then the new tails.
func (s *Store) commit(ctx context.Context, ktail, vtail uint64) error {
	if err := s.dev.Flush(); err != nil {
		return s.fail(fmt.Errorf("leed: compaction flush: %w", err))
	}
	s.ckptSeq++
	c := checkpoint{seq: s.ckptSeq, ktail: ktail, vtail: vtail, khead: s.khead.Load(), vhead: s.vhead.Load(), applied: s.appliedFloor}
	if err := s.write(ctx, nil, true, c.marshal(), ckptOff+int64(s.ckptSeq%2)*BucketSize); err != nil {
		return err
	}
	if err := s.dev.Flush(); err != nil {
		return s.fail(fmt.Errorf("leed: checkpoint flush: %w", err))
	}
	s.ktail.Store(ktail)
	s.vtail.Store(vtail)
	return nil
}

// compactKeys moves the live chains among the key log's oldest slots to
// its head.
func (s *Store) compactKeys(ctx context.Context) (bool, error) {
	slots := uint64(s.g.slots)
	tail := s.ktail.Load()
	head := s.khead.Load()
	if head == tail {
		return false, nil
	}
	phys := tail % slots
	n := min(uint64(kCompactMax), slots-phys, head-tail)
	buf := make([]byte, n*BucketSize)
	if err := s.read(ctx, nil, true, buf, s.g.keyLogOff+int64(phys)*BucketSize); err != nil {
		return false, err
	}
	done := uint64(0)
	for done < n {
		v := tail + done
		h, _, err := decodeBucket(buf[done*BucketSize:], nil)
		if err != nil || h.storeID != s.g.id || h.flags&flagSkip != 0 || h.pos != 0 || h.chainVirt != v {
			// Not the start of a chain written at v: a skip marker, or a
			// bucket a later chain of its segment superseded, or one that
			// is corrupt (its segment's reads already fail).
			done++
			continue
		}
		seg := h.segment
		if seg >= s.g.segments {
			done++
			continue
		}
		mu := s.stripe(seg)
		mu.Lock()
		e := s.segtbl[seg]
		if e>>6 != uint32(phys+done) || e&63 != uint32(h.chainLen) {
			mu.Unlock()
			done++
			continue
		}
		// Live: the segment's current chain starts here. If all of it is
		// in buf it is decoded from there (a second read would return the
		// same bytes: chains are written once and the stripe is held).
		var items []item
		var h0 bucketHdr
		if done+uint64(h.chainLen) <= n && !s.isSuspect(seg) {
			items, h0, err = s.decodeChain(buf[done*BucketSize:(done+uint64(h.chainLen))*BucketSize], seg, uint32(phys+done))
		} else {
			items, h0, err = s.readChain(ctx, nil, true, seg)
		}
		if err == nil {
			var ne uint32
			ne, err = s.writeChain(ctx, nil, true, keepKeyMoves, seg, items, h0.opSeq)
			if err == nil {
				s.segtbl[seg] = ne
				s.liveSlots.Add(int64(ne&63) - int64(e&63))
			}
		}
		mu.Unlock()
		if errors.Is(err, errNoSpace) {
			break
		}
		if errors.Is(err, ErrCorrupt) {
			// Left where it is: reads of this segment fail as they did.
			s.log.Error("leed: compaction skips a corrupt chain", "segment", seg, "err", err)
			done++
			continue
		}
		if err != nil {
			return false, err
		}
		done += uint64(h.chainLen)
	}
	if done == 0 {
		return false, nil
	}
	done = min(done, n)
	s.compactedBytes.Add(int64(done) * BucketSize)
	return true, s.commit(ctx, tail+done, s.vtail.Load())
}

// pending is a value entry a value sub-compaction read.
type pending struct {
	phys int64
	buf  []byte // the whole entry
	seg  uint32
}

// compactValues moves the live entries among the value log's oldest
// bytes to its head, rewriting the chains that point at them.
func (s *Store) compactValues(ctx context.Context) (bool, error) {
	tail := s.vtail.Load()
	head := s.vhead.Load()
	if head == tail {
		return false, nil
	}
	maxEntry := entrySize(int(s.g.maxValue))
	phys := int64(tail % uint64(s.vcap))
	free := s.vcap - int64(head-tail)
	// What it reads must fit in the free space, with the pad (shorter
	// than one entry) that a lap's end may take.
	n := min(int64(vCompactMax), s.vcap-phys, int64(head-tail), free-maxEntry)
	if n <= 0 {
		return false, fmt.Errorf("leed: value log compaction has no room to move entries (%d bytes free)", free)
	}
	buf := make([]byte, n)
	if err := s.read(ctx, nil, true, buf, s.g.valueLogOff+phys); err != nil {
		return false, err
	}
	var entries []pending
	off := int64(0)
	end := tail // virtual end of the entries parsed
	for off < n {
		rest := s.vcap - (phys + off)
		if rest < entryHdrSize {
			end += uint64(rest)
			break
		}
		if off+entryHdrSize > n {
			break
		}
		e := decodeEntryHdr(buf[off:])
		if e.segment == padSegment {
			if !checkEntry(buf[off : off+entryHdrSize]) {
				return false, fmt.Errorf("%w: value log pad at %d fails its checksum", ErrCorrupt, phys+off)
			}
			end += uint64(rest)
			break
		}
		size := entrySize(int(e.vlen))
		if e.vlen > s.g.maxValue || size > s.vcap-(phys+off) {
			return false, fmt.Errorf("%w: value log entry at %d claims %d bytes", ErrCorrupt, phys+off, e.vlen)
		}
		if off+size > n {
			break // read by the next sub-compaction, or when there is room
		}
		b := buf[off : off+size]
		if !checkEntry(b) || e.segment >= s.g.segments {
			return false, fmt.Errorf("%w: value log entry at %d fails its checksum", ErrCorrupt, phys+off)
		}
		entries = append(entries, pending{phys: phys + off, buf: b, seg: e.segment})
		off += size
		end += uint64(size)
	}
	// Segment by segment, in order of first appearance: the tail may move
	// past every entry before the first segment not handled.
	handled := map[uint32]bool{}
	committed := end
	for i, p := range entries {
		if handled[p.seg] {
			continue
		}
		err := s.keyRoomForMove(ctx)
		if err == nil {
			_, err = s.moveValues(ctx, p.seg, entries[i:])
		}
		if err != nil {
			if errors.Is(err, errNoSpace) {
				committed = tail + uint64(p.phys-phys)
				break
			}
			return false, err
		}
		handled[p.seg] = true
	}
	if committed == tail {
		return false, nil
	}
	s.compactedBytes.Add(int64(committed - tail))
	return true, s.commit(ctx, s.ktail.Load(), committed)
}

// keyRoomForMove makes sure the key log can take the chain a value move
// rewrites, compacting the key log if it must, or returns errNoSpace.
// Moving values without that room would leave their new copies dead at
// the value log's head. The caller holds cmu and no stripe.
func (s *Store) keyRoomForMove(ctx context.Context) error {
	need := uint64(maxChainLen + keepValueMoves)
	for range 4 {
		if uint64(s.g.slots)-(s.khead.Load()-s.ktail.Load()) >= need {
			return nil
		}
		advanced, err := s.compactKeys(ctx)
		if err != nil {
			return err
		}
		if !advanced {
			break
		}
	}
	return errNoSpace
}

// moveValues moves seg's live entries among es to the value log's head,
// in one write, and rewrites seg's chain to point at them. It returns the
// bytes moved.
func (s *Store) moveValues(ctx context.Context, seg uint32, es []pending) (int64, error) {
	mu := s.stripe(seg)
	mu.Lock()
	defer mu.Unlock()
	items, h0, err := s.readChain(ctx, nil, true, seg)
	if errors.Is(err, ErrCorrupt) {
		// Its values cannot be told live or dead; reads of the segment
		// fail as they did, and its entries here are reclaimed.
		s.log.Error("leed: value compaction drops the entries of a corrupt segment", "segment", seg, "err", err)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	at := map[int64]int{} // physical offset → item index
	for i := range items {
		at[items[i].voff] = i
	}
	var moved [][]byte
	var which []int
	var bytesMoved int64
	for _, p := range es {
		if p.seg != seg {
			continue
		}
		i, ok := at[p.phys]
		if !ok || int64(items[i].vlen)+entryHdrSize != int64(len(p.buf)) {
			continue // dead
		}
		which = append(which, i)
		moved = append(moved, p.buf)
		bytesMoved += int64(len(p.buf))
	}
	if len(moved) == 0 {
		return 0, nil
	}
	offs, err := s.writeValues(ctx, nil, true, moved...)
	if err != nil {
		return 0, err
	}
	for j, i := range which {
		items[i].voff = offs[j]
	}
	old := s.segtbl[seg]
	e, err := s.writeChain(ctx, nil, true, keepValueMoves, seg, items, h0.opSeq)
	if err != nil {
		return 0, err // the copies just written are dead; the old ones count
	}
	s.segtbl[seg] = e
	s.liveSlots.Add(int64(e&63) - int64(old&63))
	return bytesMoved, nil
}
