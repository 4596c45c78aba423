package leed

import (
	"testing"
)

// FuzzDecodeBucket: the bucket decoder never panics, accepts only what
// encodes back to the same bytes, and checks its checksum.
func FuzzDecodeBucket(f *testing.F) {
	b := make([]byte, BucketSize)
	var it item
	copy(it.key[:], "seed")
	it.klen, it.vlen, it.voff = 4, 100, 12345
	encodeBucket(b, bucketHdr{chainVirt: 7, segment: 3, chainLen: 2, pos: 1, flags: flagTail, opSeq: 9, storeID: 1}, []item{it, it})
	f.Add(b)
	m := make([]byte, BucketSize)
	encodeBucket(m, bucketHdr{chainVirt: 70, chainLen: 3, flags: flagSkip}, nil)
	f.Add(m)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, items, err := decodeBucket(data, nil)
		if err != nil {
			return
		}
		again := make([]byte, BucketSize)
		encodeBucket(again, h, items)
		if string(again[:64]) != string(data[:64]) {
			t.Fatalf("header does not round-trip")
		}
		for i := range items {
			if items[i].klen == 0 || items[i].klen > MaxKeySize {
				t.Fatalf("item %d key length %d accepted", i, items[i].klen)
			}
		}
	})
}

// FuzzValueEntry: a value entry that passes its checksum decodes to the
// length it claims.
func FuzzValueEntry(f *testing.F) {
	e := make([]byte, entrySize(5))
	encodeEntry(e, 4, []byte("hello"))
	f.Add(e)
	big := make([]byte, entrySize(300))
	encodeEntry(big, padSegment-1, make([]byte, 300))
	f.Add(big)
	f.Add(make([]byte, entryHdrSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < entryHdrSize || !checkEntry(data) {
			return
		}
		h := decodeEntryHdr(data)
		if h.segment > padSegment || h.vlen > maxValueLen {
			t.Fatalf("header decodes out of range: %+v", h)
		}
		if h.segment == padSegment {
			return
		}
		if int(h.vlen) == len(data)-entryHdrSize {
			again := make([]byte, len(data))
			encodeEntry(again, h.segment, data[entryHdrSize:])
			if string(again) != string(data) {
				t.Fatalf("entry does not round-trip")
			}
		}
	})
}
