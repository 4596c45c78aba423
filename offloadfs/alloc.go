package offloadfs

import (
	"math/bits"
)

// bitmap is a set of numbered things (blocks or inodes), one bit each.
type bitmap []uint64

func newBitmap(n uint64) bitmap { return make(bitmap, ceilDiv(n, 64)) }

func (b bitmap) get(i uint64) bool { return b[i/64]&(1<<(i%64)) != 0 }

// setRange sets bits [start, start+n).
func (b bitmap) setRange(start, n uint64) {
	for i := start; i < start+n; {
		w, off := i/64, i%64
		k := min(64-off, start+n-i)
		b[w] |= mask(off, k)
		i += k
	}
}

// clearRange clears bits [start, start+n).
func (b bitmap) clearRange(start, n uint64) {
	for i := start; i < start+n; {
		w, off := i/64, i%64
		k := min(64-off, start+n-i)
		b[w] &^= mask(off, k)
		i += k
	}
}

// allSet reports whether bits [start, start+n) are all set.
func (b bitmap) allSet(start, n uint64) bool {
	for i := start; i < start+n; {
		w, off := i/64, i%64
		k := min(64-off, start+n-i)
		if m := mask(off, k); b[w]&m != m {
			return false
		}
		i += k
	}
	return true
}

// anySet reports whether any of bits [start, start+n) is set.
func (b bitmap) anySet(start, n uint64) bool {
	for i := start; i < start+n; {
		w, off := i/64, i%64
		k := min(64-off, start+n-i)
		if b[w]&mask(off, k) != 0 {
			return true
		}
		i += k
	}
	return false
}

// mask returns k set bits starting at bit off (k ≥ 1, off+k ≤ 64).
func mask(off, k uint64) uint64 {
	if k == 64 {
		return ^uint64(0)
	}
	return (1<<k - 1) << off
}

// nextClear returns the first clear bit in [from, limit), or limit.
func (b bitmap) nextClear(from, limit uint64) uint64 {
	for from < limit {
		w := ^b[from/64] >> (from % 64)
		if w != 0 {
			return min(from+uint64(bits.TrailingZeros64(w)), limit)
		}
		from = (from/64 + 1) * 64
	}
	return limit
}

// nextSet returns the first set bit in [from, limit), or limit.
func (b bitmap) nextSet(from, limit uint64) uint64 {
	for from < limit {
		w := b[from/64] >> (from % 64)
		if w != 0 {
			return min(from+uint64(bits.TrailingZeros64(w)), limit)
		}
		from = (from/64 + 1) * 64
	}
	return limit
}

// allocator hands out data blocks. It keeps two views of the bitmap:
//
//   - onDisk is the bitmap as the running transaction will commit it;
//     freeing clears it at once.
//   - inUse is what allocation avoids: onDisk plus the blocks freed by
//     transactions not yet committed. Until the transaction that frees a
//     block commits, a crash would give the block back to its old owner,
//     so it must not be handed out (and written) before then.
//
// All methods run under the file system's metadata lock.
type allocator struct {
	onDisk bitmap
	inUse  bitmap
	lo, hi uint64 // the data area
	free   uint64 // clear bits of inUse in [lo, hi)
	cursor uint64 // next-fit position for new extents
	// align is the alignment, in blocks, of new extents of at least that
	// many blocks (1 MiB): devices move aligned runs fastest (SSD pages,
	// RAID stripes, the 1 MiB chunks of mem volumes).
	align uint64
}

func newAllocator(onDisk bitmap, lo, hi, align uint64) *allocator {
	a := &allocator{onDisk: onDisk, inUse: append(bitmap(nil), onDisk...), lo: lo, hi: hi, cursor: lo, align: max(align, 1)}
	for i := lo; i < hi; {
		s := a.inUse.nextClear(i, hi)
		e := a.inUse.nextSet(s, hi)
		a.free += e - s
		i = e
	}
	return a
}

// runAt returns how many free blocks start at blk, up to limit.
func (a *allocator) runAt(blk, limit uint64) uint64 {
	if blk < a.lo || blk >= a.hi {
		return 0
	}
	return a.inUse.nextSet(blk, min(a.hi, blk+limit)) - blk
}

// take marks an extent allocated.
func (a *allocator) take(x extent) {
	a.onDisk.setRange(x.start, x.n)
	a.inUse.setRange(x.start, x.n)
	a.free -= x.n
	a.cursor = x.end()
	if a.cursor >= a.hi {
		a.cursor = a.lo
	}
}

// release frees an extent in the running transaction; the caller pins it
// until that transaction commits (unpin). It reports false, changing
// nothing, if any of the blocks is not allocated: a double free, which
// only damaged metadata (two owners of a block) can cause.
func (a *allocator) release(x extent) bool {
	if x.start < a.lo || x.end() > a.hi || !a.onDisk.allSet(x.start, x.n) || !a.inUse.allSet(x.start, x.n) {
		return false
	}
	a.onDisk.clearRange(x.start, x.n)
	return true
}

// unpin makes blocks freed by a committed transaction allocatable.
func (a *allocator) unpin(x extent) {
	a.inUse.clearRange(x.start, x.n)
	a.free += x.n
}

// findRun looks for a free run of at least n blocks, next-fit from the
// cursor. It returns the start of the first such run, the longest run
// seen if none is long enough, and whether the first was found.
// With align > 1 the run must start at a multiple of align.
func (a *allocator) findRun(n, align uint64) (start, length uint64, ok bool) {
	var best extent
	for _, r := range [2][2]uint64{{a.cursor, a.hi}, {a.lo, a.cursor}} {
		for i := r[0]; i < r[1]; {
			s := a.inUse.nextClear(i, r[1])
			if s >= r[1] {
				break
			}
			// Runs may continue past the range's end (the wrap point);
			// measure them whole.
			e := a.inUse.nextSet(s, a.hi)
			if as := (s + align - 1) / align * align; as < e && e-as >= n {
				return as, e - as, true
			}
			if e-s > best.n {
				best = extent{s, e - s}
			}
			i = e
		}
	}
	return best.start, best.n, false
}

// allocate returns extents totalling at least need and at most want
// blocks (1 ≤ need ≤ want), preferring one contiguous run: first at goal
// (the block after the file's last extent, so files grow in place), then
// the first free run of want blocks from the cursor, then the first of at
// least need, and only then whatever free runs come next. It stops at
// maxExt extents even if they cover less than need (callers loop).
// ErrNoSpace means fewer than need blocks are free; nothing is allocated
// then.
func (a *allocator) allocate(goal, need, want uint64, maxExt int) ([]extent, error) {
	if need > a.free {
		return nil, ErrNoSpace
	}
	var out []extent
	got := uint64(0)
	grab := func(x extent) {
		for x.n > 0 {
			k := min(x.n, maxExtentBlocks)
			y := extent{x.start, k}
			a.take(y)
			if n := len(out); n > 0 && out[n-1].end() == y.start && out[n-1].n+k <= maxExtentBlocks {
				out[n-1].n += k
			} else {
				out = append(out, y)
			}
			got += k
			x.start += k
			x.n -= k
		}
	}
	if goal != 0 {
		if n := a.runAt(goal, want); n > 0 {
			grab(extent{goal, n})
		}
	}
	if got >= need {
		return out, nil
	}
	if want-got >= a.align {
		if s, _, ok := a.findRun(want-got, a.align); ok {
			grab(extent{s, want - got})
			return out, nil
		}
	}
	if s, n, ok := a.findRun(want-got, 1); ok {
		grab(extent{s, want - got})
		return out, nil
	} else if n >= need-got {
		grab(extent{s, n})
		return out, nil
	}
	// Fragmented: sweep from the cursor, taking runs as they come.
	for i, wrapped := a.cursor, false; got < need && len(out) < maxExt; {
		s := a.inUse.nextClear(i, a.hi)
		if s >= a.hi {
			if wrapped {
				break
			}
			i, wrapped = a.lo, true
			continue
		}
		e := a.inUse.nextSet(s, a.hi)
		grab(extent{s, min(e-s, need-got)})
		i = e
	}
	if got == 0 {
		return nil, corruptf("block bitmap: %d blocks counted free, none found", a.free)
	}
	return out, nil
}

// undo returns extents allocated in the running transaction and never
// committed: they need no pinning.
func (a *allocator) undo(x extent) {
	a.onDisk.clearRange(x.start, x.n)
	a.unpin(x)
}
