package lsm

import (
	"bytes"
	"container/heap"
	"sort"
)

// internalIterator iterates over internal keys in compareInternal order.
// Positioning methods return Valid(). Key and Value are valid until the
// next positioning call. Next may only follow a forward positioning
// (First, SeekGE, Next) and Prev a backward one, except where an
// implementation says otherwise.
type internalIterator interface {
	SeekGE(key []byte) bool
	SeekLT(key []byte) bool
	First() bool
	Last() bool
	Next() bool
	Prev() bool
	Valid() bool
	Key() []byte
	Value() []byte
	Error() error
	Close() error
}

// mergingIter merges child iterators whose keys are all distinct (no
// internal key is in two children: sequence numbers are unique and a
// read state holds each entry once). Next and Prev may follow any
// positioning: a change of direction re-seeks the other children around
// the current key.
type mergingIter struct {
	children []internalIterator
	h        iterHeap
	forward  bool
	err      error
}

type iterHeap struct {
	its     []internalIterator
	reverse bool
}

func (h *iterHeap) Len() int { return len(h.its) }
func (h *iterHeap) Less(i, j int) bool {
	c := compareInternal(h.its[i].Key(), h.its[j].Key())
	if h.reverse {
		return c > 0
	}
	return c < 0
}
func (h *iterHeap) Swap(i, j int) { h.its[i], h.its[j] = h.its[j], h.its[i] }
func (h *iterHeap) Push(x any)    { h.its = append(h.its, x.(internalIterator)) }
func (h *iterHeap) Pop() any {
	n := len(h.its) - 1
	x := h.its[n]
	h.its = h.its[:n]
	return x
}

func newMergingIter(children []internalIterator) *mergingIter {
	return &mergingIter{children: children}
}

// build makes the heap from children positioned by pos.
func (m *mergingIter) build(forward bool, pos func(it internalIterator) bool) bool {
	m.forward = forward
	m.h.its = m.h.its[:0]
	m.h.reverse = !forward
	for _, c := range m.children {
		if pos(c) {
			m.h.its = append(m.h.its, c)
		} else if err := c.Error(); err != nil {
			m.err = err
			m.h.its = m.h.its[:0]
			return false
		}
	}
	heap.Init(&m.h)
	return len(m.h.its) > 0
}

func (m *mergingIter) SeekGE(key []byte) bool {
	return m.build(true, func(it internalIterator) bool { return it.SeekGE(key) })
}

func (m *mergingIter) SeekLT(key []byte) bool {
	return m.build(false, func(it internalIterator) bool { return it.SeekLT(key) })
}

func (m *mergingIter) First() bool {
	return m.build(true, func(it internalIterator) bool { return it.First() })
}

func (m *mergingIter) Last() bool {
	return m.build(false, func(it internalIterator) bool { return it.Last() })
}

func (m *mergingIter) step(next bool) bool {
	top := m.h.its[0]
	var ok bool
	if next {
		ok = top.Next()
	} else {
		ok = top.Prev()
	}
	if ok {
		heap.Fix(&m.h, 0)
	} else {
		if err := top.Error(); err != nil {
			m.err = err
			m.h.its = m.h.its[:0]
			return false
		}
		heap.Pop(&m.h)
	}
	return len(m.h.its) > 0
}

func (m *mergingIter) Next() bool {
	if !m.Valid() {
		return false
	}
	if !m.forward {
		// Re-seek every child to the current key; it is in exactly one.
		cur := append([]byte(nil), m.Key()...)
		if !m.SeekGE(cur) {
			return false
		}
	}
	return m.step(true)
}

func (m *mergingIter) Prev() bool {
	if !m.Valid() {
		return false
	}
	if m.forward {
		cur := append([]byte(nil), m.Key()...)
		return m.SeekLT(cur)
	}
	return m.step(false)
}

func (m *mergingIter) Valid() bool   { return m.err == nil && len(m.h.its) > 0 }
func (m *mergingIter) Key() []byte   { return m.h.its[0].Key() }
func (m *mergingIter) Value() []byte { return m.h.its[0].Value() }
func (m *mergingIter) Error() error  { return m.err }
func (m *mergingIter) Close() error {
	err := m.err
	for _, c := range m.children {
		if e := c.Close(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// levelIter concatenates the tables of one level L1+, opening one at a
// time through the table cache.
type levelIter struct {
	tc    *tableCache
	files []*FileMeta
	i     int
	h     tableHandle
	open  bool
	it    *tableIter
	err   error
}

func newLevelIter(tc *tableCache, files []*FileMeta) *levelIter {
	return &levelIter{tc: tc, files: files, i: -1}
}

func (l *levelIter) load(i int) bool {
	if l.open && l.i == i {
		return true
	}
	l.closeTable()
	l.i = i
	if i < 0 || i >= len(l.files) {
		return false
	}
	h, err := l.tc.get(l.files[i].FileNum, l.files[i].Size)
	if err != nil {
		l.err = err
		return false
	}
	l.h, l.open = h, true
	l.it = h.reader().newIter()
	return true
}

func (l *levelIter) closeTable() {
	if l.open {
		if err := l.it.Error(); err != nil && l.err == nil {
			l.err = err
		}
		l.h.release()
		l.open = false
		l.it = nil
	}
}

func (l *levelIter) fwd(ok bool) bool {
	for !ok {
		if l.err != nil || (l.it != nil && l.it.Error() != nil) {
			if l.err == nil {
				l.err = l.it.Error()
			}
			return false
		}
		if !l.load(l.i + 1) {
			return false
		}
		ok = l.it.First()
	}
	return true
}

func (l *levelIter) bwd(ok bool) bool {
	for !ok {
		if l.err != nil || (l.it != nil && l.it.Error() != nil) {
			if l.err == nil {
				l.err = l.it.Error()
			}
			return false
		}
		if !l.load(l.i - 1) {
			return false
		}
		ok = l.it.Last()
	}
	return true
}

func (l *levelIter) SeekGE(key []byte) bool {
	uk := userKey(key)
	// First table whose range does not end before key.
	i := sort.Search(len(l.files), func(i int) bool {
		r := l.files[i].userRange()
		return !endsBefore(r.end, r.endExclusive, uk)
	})
	if !l.load(i) {
		return false
	}
	return l.fwd(l.it.SeekGE(key))
}

func (l *levelIter) SeekLT(key []byte) bool {
	uk := userKey(key)
	// Last table starting at or before key.
	i := sort.Search(len(l.files), func(i int) bool {
		return bytes.Compare(userKey(l.files[i].Smallest), uk) > 0
	}) - 1
	if !l.load(i) {
		return false
	}
	return l.bwd(l.it.SeekLT(key))
}

func (l *levelIter) First() bool {
	if !l.load(0) {
		return false
	}
	return l.fwd(l.it.First())
}

func (l *levelIter) Last() bool {
	if !l.load(len(l.files) - 1) {
		return false
	}
	return l.bwd(l.it.Last())
}

func (l *levelIter) Next() bool    { return l.open && l.fwd(l.it.Next()) }
func (l *levelIter) Prev() bool    { return l.open && l.bwd(l.it.Prev()) }
func (l *levelIter) Valid() bool   { return l.open && l.err == nil && l.it.Valid() }
func (l *levelIter) Key() []byte   { return l.it.Key() }
func (l *levelIter) Value() []byte { return l.it.Value() }
func (l *levelIter) Error() error {
	if l.err != nil {
		return l.err
	}
	if l.open {
		return l.it.Error()
	}
	return nil
}
func (l *levelIter) Close() error {
	l.closeTable()
	return l.err
}

// tableIterHandle is a single table's iterator holding its cache handle.
type tableIterHandle struct {
	*tableIter
	h tableHandle
}

func (t *tableIterHandle) Close() error {
	err := t.tableIter.Close()
	t.h.release()
	return err
}
