package rubble

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/nearstore/nearstore/pushdown"
)

var (
	testNote = &note{mode: ModeSecondary, applied: 42, slotSize: 1 << 20,
		slots: [][]pushdown.Extent{{{LBA: 100, Blocks: 256}}, {{LBA: 356, Blocks: 100}, {LBA: 900, Blocks: 156}}, {}},
		held:  []bool{true, false, true}}
	testKeptNote = &note{mode: ModeLocal, applied: 7, slotSize: 1 << 20,
		slots: [][]pushdown.Extent{{{LBA: 100, Blocks: 256}}, {{LBA: 356, Blocks: 256}}},
		held:  []bool{false, true},
		kept:  []keptTable{{table: 12, slot: 1, size: 5000, smallestSeq: 3, largestSeq: 90}}}
	testRecord = &record{kind: recEdit, prev: 0xfeed, edit: []byte{1, 2, 3},
		files: map[string][]FileSlot{"n2": {{Table: 7, Slot: 3}}, "n3": {{Table: 7, Slot: 0}, {Table: 8, Slot: 9}}}, base: []byte{9, 9},
		sums: map[uint64]uint32{7: 0xabcdef01, 8: 5}}
)

// TestWireRoundTrip encodes and decodes each message, and refuses every
// truncation and a trailing byte.
func TestWireRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		enc    []byte
		decode func([]byte) (any, error)
		want   any
	}{
		{"note", testNote.encode(), func(b []byte) (any, error) { return decodeNote(b) }, testNote},
		{"note with kept tables", testKeptNote.encode(), func(b []byte) (any, error) { return decodeNote(b) }, testKeptNote},
		{"edit record", testRecord.encode(), func(b []byte) (any, error) { return decodeRecord(b) }, testRecord},
		{"edit record without base", (&record{kind: recEdit, files: map[string][]FileSlot{}}).encode(),
			func(b []byte) (any, error) { return decodeRecord(b) }, &record{kind: recEdit, edit: []byte{}, files: map[string][]FileSlot{}}},
		{"fallback record", (&record{kind: recFallback}).encode(), func(b []byte) (any, error) { return decodeRecord(b) }, &record{kind: recFallback}},
		{"map", encodeMap([]FileSlot{{Table: 5, Slot: 1}, {Table: 6, Slot: 2}}), func(b []byte) (any, error) { return decodeMap(b) },
			[]FileSlot{{Table: 5, Slot: 1}, {Table: 6, Slot: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.decode(tc.enc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for n := range len(tc.enc) {
				if _, err := tc.decode(tc.enc[:n]); err == nil && !(tc.name == "fallback record" && n == 1) {
					t.Fatalf("truncated to %d of %d bytes: accepted", n, len(tc.enc))
				}
			}
			if _, err := tc.decode(append(bytes.Clone(tc.enc), 0)); err == nil {
				t.Fatal("a trailing byte was accepted")
			}
		})
	}
	bad := encodeMap([]FileSlot{{Table: 5, Slot: 1}})
	bad[12] ^= 1
	if _, err := decodeMap(bad); err == nil {
		t.Fatal("a map with a flipped bit was accepted")
	}
}

// FuzzWire feeds the decoders of the chain's notes and records (bytes
// from the network) and of the slot map (from a disk): never a panic,
// and what decodes encodes back to the same bytes.
func FuzzWire(f *testing.F) {
	for _, b := range [][]byte{testNote.encode(), testKeptNote.encode(), testRecord.encode(), (&record{kind: recFallback}).encode(),
		encodeMap([]FileSlot{{Table: 5, Slot: 1}}), {}, {1}, {1, 0, 0}} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := decodeNote(b); err == nil && !bytes.Equal(n.encode(), b) && len(n.held) == len(n.slots) {
			// Unused high bits of the held bitmap are not kept.
			if m, err := decodeNote(n.encode()); err != nil || !reflect.DeepEqual(m, n) {
				t.Fatalf("note %x does not round-trip: %+v, %v", b, m, err)
			}
		}
		if r, err := decodeRecord(b); err == nil {
			if !bytes.Equal(r.encode(), b) {
				if q, err := decodeRecord(r.encode()); err != nil || !reflect.DeepEqual(q, r) {
					t.Fatalf("record %x does not round-trip: %+v, %v", b, q, err)
				}
			}
		}
		if m, err := decodeMap(b); err == nil && !bytes.Equal(encodeMap(m), b) {
			t.Fatalf("map %x does not round-trip", b)
		}
	})
}
