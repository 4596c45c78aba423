package lsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// ErrCorrupt is wrapped by every error about bytes on disk that are not
// what this package wrote: a block whose checksum fails, a footer without
// the magic number, a malformed entry. A *CorruptionError says where.
var ErrCorrupt = errors.New("lsm: corrupt data")

// CorruptionError locates corrupt bytes.
type CorruptionError struct {
	File   string // file name within the store's directory
	Offset int64  // offset of the block or record
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("lsm: corrupt %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

func (e *CorruptionError) Unwrap() error { return ErrCorrupt }

// Blocks (docs/LSM.md, "Blocks"). A block's contents are entries followed
// by a restart array:
//
//	entry:   uvarint shared, uvarint unshared, uvarint valueLen,
//	         key[shared:] (unshared bytes), value
//	restarts: uint32 offset of each restart entry, ascending
//	          uint32 number of restarts (>= 1)
//
// An entry at a restart offset has shared == 0. On disk each block is
// followed by a 4-byte trailer, the CRC32C of the contents; a block handle
// (offset, length) covers the contents only.

const blockTrailerLen = 4

// blockHandle locates a block's contents in a table file.
type blockHandle struct {
	offset uint64
	length uint32
}

// blockHandleLen is a handle's fixed encoding: offset uint64, length
// uint32.
const blockHandleLen = 12

func (h blockHandle) append(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, h.offset)
	return binary.LittleEndian.AppendUint32(dst, h.length)
}

func decodeBlockHandle(b []byte) (blockHandle, bool) {
	if len(b) != blockHandleLen {
		return blockHandle{}, false
	}
	return blockHandle{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:])}, true
}

// blockBuilder builds one block. Keys must be added in increasing order.
type blockBuilder struct {
	buf             []byte
	restarts        []uint32
	restartInterval int
	counter         int
	lastKey         []byte
	entries         int
}

func (w *blockBuilder) add(key, value []byte) {
	shared := 0
	if w.counter < w.restartInterval && w.entries > 0 {
		n := min(len(key), len(w.lastKey))
		for shared < n && key[shared] == w.lastKey[shared] {
			shared++
		}
	} else {
		w.restarts = append(w.restarts, uint32(len(w.buf)))
		w.counter = 0
	}
	w.buf = binary.AppendUvarint(w.buf, uint64(shared))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(key)-shared))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(value)))
	w.buf = append(w.buf, key[shared:]...)
	w.buf = append(w.buf, value...)
	w.lastKey = append(w.lastKey[:0], key...)
	w.counter++
	w.entries++
}

// estimatedSize is the size finish would return.
func (w *blockBuilder) estimatedSize() int { return len(w.buf) + 4*len(w.restarts) + 4 }

func (w *blockBuilder) empty() bool { return w.entries == 0 }

// finish returns the block contents; the builder is reset and the result
// stays valid until the next add.
func (w *blockBuilder) finish() []byte {
	if len(w.restarts) == 0 {
		w.restarts = append(w.restarts, 0)
	}
	for _, r := range w.restarts {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, r)
	}
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(w.restarts)))
	out := w.buf
	w.buf = w.buf[len(w.buf):]
	w.restarts = w.restarts[:0]
	w.counter = 0
	w.entries = 0
	w.lastKey = w.lastKey[:0]
	return out
}

// block is a checked block's contents.
type block struct {
	data        []byte
	restartOff  int // offset of the restart array
	numRestarts int
}

var errBlockFormat = errors.New("malformed block")

// parseBlock checks a block's restart array. Entries are checked as they
// are read.
func parseBlock(data []byte) (block, error) {
	if len(data) < 4 {
		return block{}, fmt.Errorf("%w: %d bytes", errBlockFormat, len(data))
	}
	n := binary.LittleEndian.Uint32(data[len(data)-4:])
	if n == 0 || uint64(n) > uint64(len(data)-4)/4 {
		return block{}, fmt.Errorf("%w: %d restarts in %d bytes", errBlockFormat, n, len(data))
	}
	ro := len(data) - 4 - 4*int(n)
	prev := -1
	for i := 0; i < int(n); i++ {
		r := int(binary.LittleEndian.Uint32(data[ro+4*i:]))
		if r <= prev || r > ro || (i == 0 && r != 0) {
			return block{}, fmt.Errorf("%w: restart %d at %d", errBlockFormat, i, r)
		}
		prev = r
	}
	// Walk the entries once: each must lie within the entries region,
	// and each restart must be an entry's start with nothing shared, so
	// that iterating forward and backward see the same entries.
	next := 0 // index of the next restart to meet
	prevKeyLen := uint64(0)
	for off := 0; off < ro; {
		if next < int(n) {
			r := int(binary.LittleEndian.Uint32(data[ro+4*next:]))
			if r < off {
				return block{}, fmt.Errorf("%w: restart %d at %d is inside an entry", errBlockFormat, next, r)
			}
			if r == off {
				next++
				prevKeyLen = 0
			}
		}
		p := data[off:ro]
		shared, n1 := binary.Uvarint(p)
		if n1 <= 0 {
			return block{}, fmt.Errorf("%w: entry at %d", errBlockFormat, off)
		}
		unshared, n2 := binary.Uvarint(p[n1:])
		if n2 <= 0 {
			return block{}, fmt.Errorf("%w: entry at %d", errBlockFormat, off)
		}
		vlen, n3 := binary.Uvarint(p[n1+n2:])
		h := n1 + n2 + n3
		if n3 <= 0 || shared > prevKeyLen || unshared > uint64(len(p)-h) || vlen > uint64(len(p)-h)-unshared {
			return block{}, fmt.Errorf("%w: entry at %d", errBlockFormat, off)
		}
		prevKeyLen = shared + unshared
		off += h + int(unshared) + int(vlen)
	}
	if ro == 0 && n == 1 {
		next = 1 // an empty block: its one restart points at the end
	}
	if next != int(n) {
		return block{}, fmt.Errorf("%w: restart %d is not at an entry", errBlockFormat, next)
	}
	return block{data: data, restartOff: ro, numRestarts: int(n)}, nil
}

func (b block) restart(i int) int { return int(binary.LittleEndian.Uint32(b.data[b.restartOff+4*i:])) }

// blockIter iterates over a block's entries. Keys are compared with cmp
// (internal keys for data and range-deletion blocks, and the index).
type blockIter struct {
	b          block
	cmp        func(a, b []byte) int
	off        int // offset of the current entry; == restartOff when exhausted
	next       int // offset of the entry after the current one
	key        []byte
	val        []byte
	valid      bool
	err        error
	keyOwned   []byte
	restartIdx int // restart interval holding the current entry
}

func newBlockIter(b block, cmp func(a, b []byte) int) *blockIter {
	return &blockIter{b: b, cmp: cmp}
}

// decodeAt decodes the entry at off with the previous key in it.key;
// it sets key, val, next.
func (it *blockIter) decodeAt(off int) bool {
	d := it.b.data[:it.b.restartOff]
	if off >= len(d) {
		it.valid = false
		it.off = it.b.restartOff
		return false
	}
	p := d[off:]
	shared, n1 := binary.Uvarint(p)
	if n1 <= 0 {
		return it.corrupt(off)
	}
	unshared, n2 := binary.Uvarint(p[n1:])
	if n2 <= 0 {
		return it.corrupt(off)
	}
	vlen, n3 := binary.Uvarint(p[n1+n2:])
	if n3 <= 0 {
		return it.corrupt(off)
	}
	h := n1 + n2 + n3
	if shared > uint64(len(it.keyOwned)) || unshared > uint64(len(p)-h) || vlen > uint64(len(p)-h)-unshared {
		return it.corrupt(off)
	}
	it.keyOwned = append(it.keyOwned[:shared], p[h:h+int(unshared)]...)
	it.key = it.keyOwned
	vs := h + int(unshared)
	it.val = p[vs : vs+int(vlen) : vs+int(vlen)]
	it.off = off
	it.next = off + vs + int(vlen)
	it.valid = true
	return true
}

func (it *blockIter) corrupt(off int) bool {
	it.err = fmt.Errorf("%w: entry at %d", errBlockFormat, off)
	it.valid = false
	return false
}

// seekRestart positions at the first entry of restart interval i.
func (it *blockIter) seekRestart(i int) bool {
	it.keyOwned = it.keyOwned[:0]
	it.restartIdx = i
	return it.decodeAt(it.b.restart(i))
}

func (it *blockIter) First() bool {
	if it.b.restartOff == 0 {
		it.valid = false
		return false
	}
	return it.seekRestart(0)
}

func (it *blockIter) Next() bool {
	if !it.valid {
		return false
	}
	if it.restartIdx+1 < it.b.numRestarts && it.next >= it.b.restart(it.restartIdx+1) {
		it.restartIdx++
	}
	return it.decodeAt(it.next)
}

func (it *blockIter) Last() bool {
	if it.b.restartOff == 0 {
		it.valid = false
		return false
	}
	if !it.seekRestart(it.b.numRestarts - 1) {
		return false
	}
	for it.next < it.b.restartOff {
		if !it.decodeAt(it.next) {
			return false
		}
	}
	return true
}

// seekInterval positions at the first entry of the restart interval a
// seek for target starts from (searchRestarts) and returns that
// interval; false if the block has no entries or the entry cannot be
// decoded.
func (it *blockIter) seekInterval(target []byte) (int, bool) {
	if it.b.restartOff == 0 {
		it.valid = false
		return 0, false
	}
	i := it.searchRestarts(target)
	if it.err != nil || !it.seekRestart(i) {
		return 0, false
	}
	return i, true
}

// searchRestarts returns the last restart interval whose first key is <
// target (0 if none).
func (it *blockIter) searchRestarts(target []byte) int {
	i := sort.Search(it.b.numRestarts, func(i int) bool {
		it.keyOwned = it.keyOwned[:0]
		if !it.decodeAt(it.b.restart(i)) {
			return true
		}
		return it.cmp(it.key, target) >= 0
	})
	if i > 0 {
		i--
	}
	return i
}

// SeekGE positions at the first entry with key >= target.
func (it *blockIter) SeekGE(target []byte) bool {
	if _, ok := it.seekInterval(target); !ok {
		return false
	}
	for it.cmp(it.key, target) < 0 {
		if !it.Next() {
			return false
		}
	}
	return true
}

// SeekLT positions at the last entry with key < target.
func (it *blockIter) SeekLT(target []byte) bool {
	i, ok := it.seekInterval(target)
	if !ok {
		return false
	}
	if it.cmp(it.key, target) >= 0 {
		it.valid = false
		return false
	}
	last := it.off
	for it.next < it.b.restartOff {
		if !it.Next() {
			return false
		}
		if it.cmp(it.key, target) >= 0 {
			break
		}
		last = it.off
	}
	if it.off == last {
		return true
	}
	// Overshot: rescan the interval holding last up to it.
	if !it.seekRestart(i) {
		return false
	}
	for it.off < last {
		if !it.Next() {
			return false
		}
	}
	return true
}

// Prev steps back by rescanning the current restart interval.
func (it *blockIter) Prev() bool {
	if !it.valid {
		return false
	}
	target := it.off
	i := it.restartIdx
	if it.b.restart(i) == target {
		if i == 0 {
			it.valid = false
			return false
		}
		i--
	}
	if !it.seekRestart(i) {
		return false
	}
	for it.next < target {
		if !it.decodeAt(it.next) {
			return false
		}
	}
	return true
}

func (it *blockIter) Valid() bool   { return it.valid }
func (it *blockIter) Key() []byte   { return it.key }
func (it *blockIter) Value() []byte { return it.val }
func (it *blockIter) Error() error  { return it.err }
