package lsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// sampleBlock builds a block of n entries for fuzz seeds.
func sampleBlock(n, restart int) []byte {
	b := blockBuilder{restartInterval: restart}
	for i := 0; i < n; i++ {
		b.add(makeInternalKey([]byte(fmt.Sprintf("key%04d", i)), SeqNum(i+1), KindSet), []byte(fmt.Sprintf("v%d", i)))
	}
	return bytes.Clone(b.finish())
}

// FuzzBlock feeds arbitrary bytes to the block parser and iterator: they
// must return an error or entries, never panic or loop, and a well-formed
// block must iterate the same both ways.
func FuzzBlock(f *testing.F) {
	f.Add(sampleBlock(10, 3), []byte("key0005"))
	f.Add(sampleBlock(1, 1), []byte("a"))
	f.Add(sampleBlock(40, 16), []byte("zzz"))
	f.Add([]byte{0, 0, 0, 0}, []byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0}, []byte{})
	f.Fuzz(func(t *testing.T, data []byte, target []byte) {
		b, err := parseBlock(data)
		if err != nil {
			return
		}
		var fwd [][]byte
		it := newBlockIter(b, compareInternalChecked)
		for ok := it.First(); ok && len(fwd) <= len(data); ok = it.Next() {
			fwd = append(fwd, bytes.Clone(it.Key()))
		}
		if len(fwd) > len(data) {
			t.Fatalf("%d entries from %d bytes", len(fwd), len(data))
		}
		fwdErr := it.Error()
		var bwd [][]byte
		for ok := it.Last(); ok && len(bwd) <= len(data); ok = it.Prev() {
			bwd = append(bwd, bytes.Clone(it.Key()))
		}
		if fwdErr == nil && it.Error() == nil {
			if len(bwd) != len(fwd) {
				t.Fatalf("%d entries forward, %d backward", len(fwd), len(bwd))
			}
			for i := range fwd {
				if !bytes.Equal(fwd[i], bwd[len(bwd)-1-i]) {
					t.Fatalf("entry %d differs forward and backward", i)
				}
			}
		}
		tk := target
		if !validInternalKey(tk) {
			tk = append(bytes.Clone(target), make([]byte, trailerLen)...)
		}
		it.SeekGE(tk)
		it.SeekLT(tk)
	})
}

// FuzzFooter: decodeFooter accepts only footers whose handles lie inside
// the table, and whatever it accepts re-encodes to the same bytes.
func FuzzFooter(f *testing.F) {
	ft := footer{index: blockHandle{100, 50}, filter: blockHandle{154, 20}, rangeDel: blockHandle{178, 8}, props: blockHandle{190, 40}}
	f.Add(ft.encode(), int64(300))
	f.Add(make([]byte, footerLen), int64(64))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		got, err := decodeFooter(b, size)
		if err != nil {
			return
		}
		for _, h := range []blockHandle{got.index, got.filter, got.rangeDel, got.props} {
			if h.offset+uint64(h.length)+blockTrailerLen > uint64(size)-footerLen {
				t.Fatalf("accepted handle %+v in a table of %d bytes", h, size)
			}
		}
		if !bytes.Equal(got.encode(), b) {
			t.Fatal("footer does not re-encode to its bytes")
		}
	})
}

// FuzzTable opens arbitrary bytes as a table and reads it all: errors are
// fine, panics are not, and corruption is reported as ErrCorrupt.
func FuzzTable(f *testing.F) {
	fs := newMemFS()
	w, _ := fs.Create("seed")
	tw := newTableWriter(w, TableOptions{BlockSize: 64, BlockRestartInterval: 2})
	for i := 0; i < 6; i++ {
		tw.add(makeInternalKey([]byte(fmt.Sprintf("k%03d", i)), SeqNum(i+1), KindSet), []byte("value"))
	}
	tw.addTombstone(tombstone{start: []byte("k005"), end: []byte("k009"), seq: 100})
	tw.finish()
	f.Add(bytes.Clone(fs.names["/seed"].data))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := newMemFS()
		nf, _ := fs.Create("t")
		nf.Write(data)
		r, err := openTable(nf, "t", 1, int64(len(data)), nil)
		if err != nil {
			return
		}
		it := r.newIter()
		n := 0
		for ok := it.First(); ok && n <= len(data); ok = it.Next() {
			n++
		}
		if n > len(data) {
			t.Fatal("more entries than bytes")
		}
		r.get([]byte("k010"), MaxSeqNum)
	})
}

// FuzzVersionEdit: decoding never panics, and what decodes re-encodes to
// an edit that decodes the same.
func FuzzVersionEdit(f *testing.F) {
	e := &VersionEdit{LogNumber: 5, NextFileNum: 9, LastSeq: 1234,
		DeletedFiles: []DeletedFile{{Level: 1, FileNum: 3}},
		NewFiles: []NewFile{{Level: 2, Meta: &FileMeta{FileNum: 8, Size: 4096,
			Smallest: makeInternalKey([]byte("a"), 5, KindSet), Largest: makeInternalKey([]byte("z"), MaxSeqNum, KindRangeDelete),
			SmallestSeq: 1, LargestSeq: 7, RangeDels: 1}}}}
	f.Add(e.Encode(nil))
	f.Add([]byte{5, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeVersionEdit(b)
		if err != nil {
			return
		}
		enc := e.Encode(nil)
		e2, err := DecodeVersionEdit(enc)
		if err != nil {
			t.Fatalf("re-encoded edit does not decode: %v", err)
		}
		if !bytes.Equal(e2.Encode(nil), enc) {
			t.Fatal("edit encoding is not stable")
		}
		(&Version{}).Apply(e)
	})
}

// FuzzBatch: decodeBatch never panics and every entry it returns lies
// within the input.
func FuzzBatch(f *testing.F) {
	b := NewBatch()
	b.Set([]byte("k"), []byte("v"))
	b.Delete([]byte("d"))
	b.DeleteRange([]byte("a"), []byte("c"))
	f.Add(bytes.Clone(b.Repr()))
	f.Add(binary.LittleEndian.AppendUint32(make([]byte, 8), 1<<30))
	f.Fuzz(func(t *testing.T, repr []byte) {
		_, ents, err := decodeBatch(repr)
		if err != nil {
			return
		}
		nb := NewBatch()
		for _, e := range ents {
			nb.add(e.kind, e.key, e.value)
		}
		// Varints need not be minimal, so compare entries, not bytes.
		_, ents2, err := decodeBatch(nb.Repr())
		if err != nil || len(ents2) != len(ents) {
			t.Fatalf("re-encoded batch: %d entries, %v", len(ents2), err)
		}
		for i := range ents {
			if ents[i].kind != ents2[i].kind || !bytes.Equal(ents[i].key, ents2[i].key) || !bytes.Equal(ents[i].value, ents2[i].value) {
				t.Fatalf("entry %d changed in re-encoding", i)
			}
		}
	})
}
