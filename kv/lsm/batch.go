package lsm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A Batch is a sequence of writes applied atomically: a reader sees all of
// them or none, and after a crash either all are recovered or none.
//
// Its encoding is what the WAL holds, one batch per record (docs/LSM.md,
// "Batch"):
//
//	+0  seq   uint64   sequence number of the first entry
//	+8  count uint32   number of entries
//	+12 entries: kind uint8, uvarint key length, key,
//	             then for SET and RANGEDEL: uvarint value length, value
//	             (a RANGEDEL's value is the exclusive end key)
//
// The i-th entry gets sequence number seq+i. A Batch is not safe for
// concurrent use; it must not be changed while being committed.
type Batch struct {
	data  []byte
	count uint32
}

const batchHeaderLen = 12

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{} }

func (b *Batch) init() {
	if len(b.data) == 0 {
		b.data = make([]byte, batchHeaderLen, 64)
	}
}

func (b *Batch) add(k Kind, key, value []byte) {
	b.init()
	b.data = append(b.data, byte(k))
	b.data = binary.AppendUvarint(b.data, uint64(len(key)))
	b.data = append(b.data, key...)
	if k != KindDelete {
		b.data = binary.AppendUvarint(b.data, uint64(len(value)))
		b.data = append(b.data, value...)
	}
	b.count++
	binary.LittleEndian.PutUint32(b.data[8:], b.count)
}

// Set adds a write of value to key.
func (b *Batch) Set(key, value []byte) { b.add(KindSet, key, value) }

// Delete adds a deletion of key.
func (b *Batch) Delete(key []byte) { b.add(KindDelete, key, nil) }

// DeleteRange adds a deletion of every key in [start, end). It does
// nothing if start >= end.
func (b *Batch) DeleteRange(start, end []byte) {
	if string(start) >= string(end) {
		return
	}
	b.add(KindRangeDelete, start, end)
}

// Count is the number of entries.
func (b *Batch) Count() int { return int(b.count) }

// Empty reports whether the batch has no entries.
func (b *Batch) Empty() bool { return b.count == 0 }

// Reset empties the batch, keeping its buffer.
func (b *Batch) Reset() {
	if len(b.data) > 0 {
		b.data = b.data[:batchHeaderLen]
		clear(b.data)
	}
	b.count = 0
}

// Repr returns the batch's encoding; it is valid until the batch changes.
func (b *Batch) Repr() []byte { b.init(); return b.data }

func (b *Batch) setSeq(seq SeqNum) {
	b.init()
	binary.LittleEndian.PutUint64(b.data, seq)
}

func (b *Batch) seq() SeqNum { return binary.LittleEndian.Uint64(b.data) }

// errBadBatch is wrapped by every batch decoding error.
var errBadBatch = errors.New("malformed batch")

// batchEntry is one decoded entry.
type batchEntry struct {
	kind       Kind
	key, value []byte
}

// decodeBatch checks a batch encoding and returns its first seq and its
// entries, which alias repr.
func decodeBatch(repr []byte) (SeqNum, []batchEntry, error) {
	if len(repr) < batchHeaderLen {
		return 0, nil, fmt.Errorf("%w: %d bytes, header is %d", errBadBatch, len(repr), batchHeaderLen)
	}
	seq := binary.LittleEndian.Uint64(repr)
	count := binary.LittleEndian.Uint32(repr[8:])
	// Each entry takes at least 2 bytes, so count is bounded by the input.
	if uint64(count) > uint64(len(repr)) {
		return 0, nil, fmt.Errorf("%w: count %d exceeds size", errBadBatch, count)
	}
	ents := make([]batchEntry, 0, count)
	p := repr[batchHeaderLen:]
	readBytes := func() ([]byte, bool) {
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) {
			return nil, false
		}
		v := p[w : w+int(n) : w+int(n)]
		p = p[w+int(n):]
		return v, true
	}
	for i := uint32(0); i < count; i++ {
		if len(p) == 0 {
			return 0, nil, fmt.Errorf("%w: entry %d missing", errBadBatch, i)
		}
		e := batchEntry{kind: Kind(p[0])}
		p = p[1:]
		var ok bool
		if e.key, ok = readBytes(); !ok {
			return 0, nil, fmt.Errorf("%w: entry %d key", errBadBatch, i)
		}
		switch e.kind {
		case KindDelete:
		case KindSet, KindRangeDelete:
			if e.value, ok = readBytes(); !ok {
				return 0, nil, fmt.Errorf("%w: entry %d value", errBadBatch, i)
			}
		default:
			return 0, nil, fmt.Errorf("%w: entry %d kind %d", errBadBatch, i, e.kind)
		}
		ents = append(ents, e)
	}
	if len(p) != 0 {
		return 0, nil, fmt.Errorf("%w: %d trailing bytes", errBadBatch, len(p))
	}
	if count > 0 && seq+uint64(count)-1 > MaxSeqNum {
		return 0, nil, fmt.Errorf("%w: seq %d overflows", errBadBatch, seq)
	}
	return seq, ents, nil
}
