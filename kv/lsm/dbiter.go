package lsm

import (
	"bytes"
	"slices"
)

// Iterator iterates over a consistent view of the store (the state when
// it was made, or a snapshot's) in key order, both ways, within optional
// bounds. Range deletions and deletes are applied: it yields only live
// keys. Key and Value are valid until the next positioning call. Not safe
// for concurrent use; Close it to release the tables it holds.
type Iterator struct {
	d      *DB
	rs     readState
	snap   SeqNum
	it     *mergingIter
	tombs  *tombstoneIndex
	lower  []byte
	upper  []byte
	key    []byte
	value  []byte
	valid  bool
	fwd    bool // the internal iterator is at the current key (forward) or before it (backward)
	err    error
	closed bool
}

// NewIter returns an iterator over the current state.
func (d *DB) NewIter(o *IterOptions) (*Iterator, error) {
	return d.newIter(o, d.visibleSeq.Load())
}

func (d *DB) newIter(o *IterOptions, snap SeqNum) (*Iterator, error) {
	rs, err := d.loadReadState()
	if err != nil {
		return nil, err
	}
	it := &Iterator{d: d, rs: rs, snap: snap}
	if o != nil {
		it.lower, it.upper = slices.Clone(o.LowerBound), slices.Clone(o.UpperBound)
	}
	bounds := keyRange{start: it.lower, end: it.upper, endExclusive: true}
	inBounds := func(f *FileMeta) bool {
		r := f.userRange()
		if it.lower != nil && endsBefore(r.end, r.endExclusive, it.lower) {
			return false
		}
		return it.upper == nil || bytes.Compare(r.start, bounds.end) < 0
	}
	var children []internalIterator
	var tombs []tombstone
	for _, m := range rs.mems {
		children = append(children, m.newIter())
		tombs = append(tombs, m.tombstones()...)
	}
	fail := func(err error) (*Iterator, error) {
		for _, c := range children {
			c.Close()
		}
		d.releaseReadState(rs)
		return nil, err
	}
	for level, files := range rs.v.Levels {
		var sel []*FileMeta
		for _, f := range files {
			if inBounds(f) {
				sel = append(sel, f)
			}
		}
		for _, f := range sel {
			if f.RangeDels > 0 {
				h, err := d.tc.get(f.FileNum, f.Size)
				if err != nil {
					return fail(err)
				}
				tombs = append(tombs, h.reader().tombs...)
				h.release()
			}
		}
		if level == 0 {
			for _, f := range sel {
				h, err := d.tc.get(f.FileNum, f.Size)
				if err != nil {
					return fail(err)
				}
				children = append(children, &tableIterHandle{tableIter: h.reader().newIter(), h: h})
			}
		} else if len(sel) > 0 {
			children = append(children, newLevelIter(d.tc, sel))
		}
	}
	it.it = newMergingIter(children)
	it.tombs = newTombstoneIndex(tombs, snap)
	return it, nil
}

// findNext moves forward from the internal position to the first live
// key within bounds.
func (i *Iterator) findNext() bool {
	i.fwd = true
	for i.it.Valid() {
		k := i.it.Key()
		uk := userKey(k)
		if i.upper != nil && bytes.Compare(uk, i.upper) >= 0 {
			break
		}
		seq := keySeq(k)
		if seq > i.snap {
			i.it.Next()
			continue
		}
		if keyKind(k) == KindSet && i.tombs.covering(uk) <= seq {
			i.key = append(i.key[:0], uk...)
			i.value = i.it.Value()
			i.valid = true
			return true
		}
		i.key = append(i.key[:0], uk...)
		i.skipCurrent()
	}
	return i.setInvalid()
}

// skipCurrent moves the internal iterator past every entry of i.key.
func (i *Iterator) skipCurrent() {
	for i.it.Next() && bytes.Equal(userKey(i.it.Key()), i.key) {
	}
}

func (i *Iterator) setInvalid() bool {
	i.valid = false
	if err := i.it.Error(); err != nil && i.err == nil {
		i.err = err
	}
	return false
}

// findPrev moves backward from the internal position to the last live key
// within bounds. For each user key it reads all entries (oldest first) and
// keeps the newest visible one.
func (i *Iterator) findPrev() bool {
	i.fwd = false
	for i.it.Valid() {
		uk := userKey(i.it.Key())
		if i.lower != nil && bytes.Compare(uk, i.lower) < 0 {
			break
		}
		i.key = append(i.key[:0], uk...)
		found := false
		var kind Kind
		var seq SeqNum
		var val []byte
		for {
			k := i.it.Key()
			if s := keySeq(k); s <= i.snap {
				found, kind, seq, val = true, keyKind(k), s, i.it.Value()
			}
			if !i.it.Prev() || !bytes.Equal(userKey(i.it.Key()), i.key) {
				break
			}
		}
		if found && kind == KindSet && i.tombs.covering(i.key) <= seq {
			i.value = val
			i.valid = true
			return true
		}
	}
	return i.setInvalid()
}

// First moves to the first key (>= LowerBound).
func (i *Iterator) First() bool {
	if i.lower != nil {
		return i.SeekGE(i.lower)
	}
	if i.err != nil {
		return false
	}
	i.it.First()
	return i.findNext()
}

// Last moves to the last key (< UpperBound).
func (i *Iterator) Last() bool {
	if i.upper != nil {
		return i.SeekLT(i.upper)
	}
	if i.err != nil {
		return false
	}
	i.it.Last()
	return i.findPrev()
}

// SeekGE moves to the first key >= key.
func (i *Iterator) SeekGE(key []byte) bool {
	if i.err != nil {
		return false
	}
	if i.lower != nil && bytes.Compare(key, i.lower) < 0 {
		key = i.lower
	}
	i.it.SeekGE(searchKey(key, MaxSeqNum))
	return i.findNext()
}

// SeekLT moves to the last key < key.
func (i *Iterator) SeekLT(key []byte) bool {
	if i.err != nil {
		return false
	}
	if i.upper != nil && bytes.Compare(key, i.upper) > 0 {
		key = i.upper
	}
	i.it.SeekLT(searchKey(key, MaxSeqNum))
	return i.findPrev()
}

// Next moves to the next key.
func (i *Iterator) Next() bool {
	if !i.valid {
		return false
	}
	if !i.fwd {
		// The internal iterator is before the current key.
		i.it.SeekGE(searchKey(i.key, MaxSeqNum))
		if i.it.Valid() && bytes.Equal(userKey(i.it.Key()), i.key) {
			i.skipCurrent()
		}
	} else {
		i.skipCurrent()
	}
	return i.findNext()
}

// Prev moves to the previous key.
func (i *Iterator) Prev() bool {
	if !i.valid {
		return false
	}
	if i.fwd {
		i.it.SeekLT(searchKey(i.key, MaxSeqNum))
	}
	return i.findPrev()
}

// Valid reports whether the iterator is at a key.
func (i *Iterator) Valid() bool { return i.valid }

// Key is the current key.
func (i *Iterator) Key() []byte { return i.key }

// Value is the current value.
func (i *Iterator) Value() []byte { return i.value }

// Error is the first error the iterator met (a corrupt or unreadable
// table); once set, the iterator stays invalid.
func (i *Iterator) Error() error { return i.err }

// Close releases the iterator and returns its error, if any.
func (i *Iterator) Close() error {
	if i.closed {
		return ErrClosed
	}
	i.closed = true
	err := i.err
	if cerr := i.it.Close(); err == nil {
		err = cerr
	}
	i.d.releaseReadState(i.rs)
	return err
}
