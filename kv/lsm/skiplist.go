package lsm

import (
	"math/rand/v2"
	"sync/atomic"
	"unsafe"
)

// The memtable is a skiplist of internal keys laid out in one arena: a
// []byte allocated once, into which nodes are bump-allocated with an
// atomic add. Nodes are never freed; the arena is dropped whole when the
// memtable has been flushed and no reader holds it.
//
// Node layout (offsets are 4-aligned, 0 is nil):
//
//	+0  keyLen  uint32
//	+4  valLen  uint32
//	+8  height  uint32
//	+12 next[height] uint32   offsets of the successors at each level
//	    key bytes, value bytes
//
// Concurrency: inserts are lock-free and may run concurrently with each
// other and with readers. An insert links the new node bottom-up with a
// compare-and-swap per level, recomputing that level's splice when the CAS
// loses. All accesses to next pointers are atomic; key and value bytes are
// written before the node is published by the level-0 CAS and never
// change after, so readers that reached a node through an atomic load see
// them complete. A node is in the list once it is linked at level 0;
// higher levels are only shortcuts. Keys are internal keys and every
// insert's key is distinct (sequence numbers are unique).

const (
	maxHeight      = 20
	nodeHeaderSize = 12
)

type arena struct {
	buf []byte
	n   atomic.Uint64 // bytes handed out; may exceed len(buf) after a failed alloc
}

func newArena(size int) *arena {
	a := &arena{buf: make([]byte, size)}
	a.n.Store(4) // offset 0 is nil
	return a
}

// alloc returns the 4-aligned offset of size fresh bytes, or false if the
// arena is full.
func (a *arena) alloc(size uint32) (uint32, bool) {
	padded := uint64(size+3) &^ 3
	end := a.n.Add(padded)
	if end > uint64(len(a.buf)) {
		return 0, false
	}
	return uint32(end - padded), true
}

// used is the number of bytes allocated, capped at the capacity.
func (a *arena) used() int {
	n := a.n.Load()
	if n > uint64(len(a.buf)) {
		return len(a.buf)
	}
	return int(n)
}

func (a *arena) u32(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&a.buf[off])) }

type skiplist struct {
	a      *arena
	head   uint32
	height atomic.Uint32 // current height of the list, 1..maxHeight
	count  atomic.Int64
}

// nodeSize is the arena bytes one node of the given height takes, before
// alignment.
func nodeSize(keyLen, valLen, height int) int {
	return nodeHeaderSize + 4*height + keyLen + valLen
}

// maxNodeSize bounds the arena bytes one entry can take.
func maxNodeSize(keyLen, valLen int) int { return nodeSize(keyLen, valLen, maxHeight) + 3 }

func newSkiplist(a *arena) *skiplist {
	s := &skiplist{a: a}
	h, ok := s.newNode(nil, nil, maxHeight)
	if !ok {
		panic("lsm: arena too small for a skiplist head")
	}
	s.head = h
	s.height.Store(1)
	return s
}

func (s *skiplist) newNode(key, val []byte, height int) (uint32, bool) {
	nd, ok := s.a.alloc(uint32(nodeSize(len(key), len(val), height)))
	if !ok {
		return 0, false
	}
	*s.a.u32(nd) = uint32(len(key))
	*s.a.u32(nd + 4) = uint32(len(val))
	*s.a.u32(nd + 8) = uint32(height)
	for i := 0; i < height; i++ {
		atomic.StoreUint32(s.a.u32(nd+nodeHeaderSize+4*uint32(i)), 0)
	}
	kv := nd + nodeHeaderSize + 4*uint32(height)
	copy(s.a.buf[kv:], key)
	copy(s.a.buf[kv+uint32(len(key)):], val)
	return nd, true
}

func (s *skiplist) next(nd uint32, level int) uint32 {
	return atomic.LoadUint32(s.a.u32(nd + nodeHeaderSize + 4*uint32(level)))
}

func (s *skiplist) setNext(nd uint32, level int, to uint32) {
	atomic.StoreUint32(s.a.u32(nd+nodeHeaderSize+4*uint32(level)), to)
}

func (s *skiplist) casNext(nd uint32, level int, old, to uint32) bool {
	return atomic.CompareAndSwapUint32(s.a.u32(nd+nodeHeaderSize+4*uint32(level)), old, to)
}

func (s *skiplist) key(nd uint32) []byte {
	kl := *s.a.u32(nd)
	h := *s.a.u32(nd + 8)
	off := nd + nodeHeaderSize + 4*h
	return s.a.buf[off : off+kl : off+kl]
}

func (s *skiplist) value(nd uint32) []byte {
	kl, vl, h := *s.a.u32(nd), *s.a.u32(nd + 4), *s.a.u32(nd + 8)
	off := nd + nodeHeaderSize + 4*h + kl
	return s.a.buf[off : off+vl : off+vl]
}

func randomHeight() int {
	// p = 1/4 per level, as LevelDB.
	r := rand.Uint32()
	h := 1
	for h < maxHeight && r&3 == 0 {
		h++
		r >>= 2
	}
	return h
}

// findSpliceForLevel walks level from before and returns the last node
// whose key is < key and its successor.
func (s *skiplist) findSpliceForLevel(key []byte, level int, before uint32) (prev, next uint32) {
	for {
		next = s.next(before, level)
		if next == 0 || compareInternal(s.key(next), key) >= 0 {
			return before, next
		}
		before = next
	}
}

// add inserts the internal key with its value. It returns false, having
// changed nothing visible, if the arena is full.
func (s *skiplist) add(key, val []byte) bool {
	height := randomHeight()
	nd, ok := s.newNode(key, val, height)
	if !ok {
		return false
	}
	for {
		lh := s.height.Load()
		if uint32(height) <= lh || s.height.CompareAndSwap(lh, uint32(height)) {
			break
		}
	}
	var prev, next [maxHeight]uint32
	before := s.head
	for level := maxHeight - 1; level >= 0; level-- {
		prev[level], next[level] = s.findSpliceForLevel(key, level, before)
		before = prev[level]
	}
	for level := 0; level < height; level++ {
		for {
			s.setNext(nd, level, next[level])
			if s.casNext(prev[level], level, next[level], nd) {
				break
			}
			prev[level], next[level] = s.findSpliceForLevel(key, level, prev[level])
		}
	}
	s.count.Add(1)
	return true
}

// seekGE returns the first node with key >= key, or 0.
func (s *skiplist) seekGE(key []byte) uint32 {
	before := s.head
	var next uint32
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		before, next = s.findSpliceForLevel(key, level, before)
	}
	return next
}

// seekLT returns the last node with key < key, or 0.
func (s *skiplist) seekLT(key []byte) uint32 {
	before := s.head
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		before, _ = s.findSpliceForLevel(key, level, before)
	}
	if before == s.head {
		return 0
	}
	return before
}

func (s *skiplist) first() uint32 { return s.next(s.head, 0) }

func (s *skiplist) last() uint32 {
	nd := s.head
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		for {
			n := s.next(nd, level)
			if n == 0 {
				break
			}
			nd = n
		}
	}
	if nd == s.head {
		return 0
	}
	return nd
}

// skiplistIter is an internalIterator over a skiplist.
type skiplistIter struct {
	s  *skiplist
	nd uint32
}

func (it *skiplistIter) SeekGE(key []byte) bool { it.nd = it.s.seekGE(key); return it.nd != 0 }
func (it *skiplistIter) SeekLT(key []byte) bool { it.nd = it.s.seekLT(key); return it.nd != 0 }
func (it *skiplistIter) First() bool            { it.nd = it.s.first(); return it.nd != 0 }
func (it *skiplistIter) Last() bool             { it.nd = it.s.last(); return it.nd != 0 }
func (it *skiplistIter) Next() bool {
	it.nd = it.s.next(it.nd, 0)
	return it.nd != 0
}

// Prev searches from the top: the list has no back pointers.
func (it *skiplistIter) Prev() bool {
	it.nd = it.s.seekLT(it.s.key(it.nd))
	return it.nd != 0
}
func (it *skiplistIter) Valid() bool   { return it.nd != 0 }
func (it *skiplistIter) Key() []byte   { return it.s.key(it.nd) }
func (it *skiplistIter) Value() []byte { return it.s.value(it.nd) }
func (it *skiplistIter) Error() error  { return nil }
func (it *skiplistIter) Close() error  { return nil }
