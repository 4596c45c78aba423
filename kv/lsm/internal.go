package lsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Kind is the kind of an internal key: what the entry does to its user
// key. The values are part of the on-disk format (docs/LSM.md) and match
// LevelDB's and Pebble's.
type Kind uint8

const (
	// KindDelete: a point tombstone; the key has no value at this seq.
	KindDelete Kind = 0
	// KindSet: the key has this value at this seq.
	KindSet Kind = 1
	// KindRangeDelete: every key in [user key, value) with a lower seq is
	// deleted. Range tombstones live apart from point entries: in a
	// memtable's second skiplist and in a table's range-deletion block.
	KindRangeDelete Kind = 15

	// kindMax is the largest kind; a search key with it sorts before
	// every real entry of the same user key and seq.
	kindMax Kind = 0xff
)

func (k Kind) String() string {
	switch k {
	case KindDelete:
		return "DEL"
	case KindSet:
		return "SET"
	case KindRangeDelete:
		return "RANGEDEL"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// SeqNum is a sequence number. Every entry written gets a distinct one, in
// commit order, starting at 1. It fits in 56 bits.
type SeqNum = uint64

// MaxSeqNum is the largest sequence number a trailer can hold.
const MaxSeqNum SeqNum = 1<<56 - 1

// trailerLen is the length of the trailer that ends every internal key.
const trailerLen = 8

// An internal key is a user key followed by an 8-byte little-endian
// trailer, seq<<8 | kind. Internal keys order by user key ascending, then
// trailer descending, so a user key's newest version comes first.

func makeTrailer(seq SeqNum, k Kind) uint64 { return seq<<8 | uint64(k) }

// appendInternalKey appends the internal key (ukey, seq, kind) to dst.
func appendInternalKey(dst, ukey []byte, seq SeqNum, k Kind) []byte {
	dst = append(dst, ukey...)
	return binary.LittleEndian.AppendUint64(dst, makeTrailer(seq, k))
}

func makeInternalKey(ukey []byte, seq SeqNum, k Kind) []byte {
	return appendInternalKey(make([]byte, 0, len(ukey)+trailerLen), ukey, seq, k)
}

// searchKey is the internal key that sorts before every version of ukey
// visible at seq (those with seq' <= seq).
func searchKey(ukey []byte, seq SeqNum) []byte { return makeInternalKey(ukey, seq, kindMax) }

// userKey returns the user key of a well-formed internal key.
func userKey(ikey []byte) []byte { return ikey[:len(ikey)-trailerLen] }

func trailer(ikey []byte) uint64 { return binary.LittleEndian.Uint64(ikey[len(ikey)-trailerLen:]) }

func keySeq(ikey []byte) SeqNum { return trailer(ikey) >> 8 }

func keyKind(ikey []byte) Kind { return Kind(trailer(ikey)) }

// compareInternal orders internal keys: user key ascending, then trailer
// descending. Both must be well formed (at least trailerLen bytes).
func compareInternal(a, b []byte) int {
	if c := bytes.Compare(userKey(a), userKey(b)); c != 0 {
		return c
	}
	ta, tb := trailer(a), trailer(b)
	switch {
	case ta > tb:
		return -1
	case ta < tb:
		return 1
	}
	return 0
}

// validInternalKey reports whether b can be an internal key.
func validInternalKey(b []byte) bool { return len(b) >= trailerLen }

func formatKey(ikey []byte) string {
	if !validInternalKey(ikey) {
		return fmt.Sprintf("invalid(%q)", ikey)
	}
	return fmt.Sprintf("%q#%d,%s", userKey(ikey), keySeq(ikey), keyKind(ikey))
}
