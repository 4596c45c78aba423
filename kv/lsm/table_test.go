package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// writeTestTable writes n point entries (user keys "key%05d", two
// versions each) to a table in fs and opens it.
func writeTestTable(t *testing.T, fs *memFS, name string, n int, opts TableOptions) (*tableReader, [][2][]byte) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w := newTableWriter(f, opts)
	var ents [][2][]byte
	for i := 0; i < n; i++ {
		for v := 2; v >= 1; v-- {
			k := makeInternalKey([]byte(fmt.Sprintf("key%05d", i)), SeqNum(i*10+v), KindSet)
			val := bytes.Repeat([]byte{byte(i)}, i%37)
			if err := w.add(k, val); err != nil {
				t.Fatal(err)
			}
			ents = append(ents, [2][]byte{k, val})
		}
	}
	info, err := w.finish()
	if err != nil {
		t.Fatal(err)
	}
	r, err := openTable(f, name, 1, int64(info.Size), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r, ents
}

// TestTableIterAgainstSlice drives table and block iterators with random
// operations and compares each position with a sorted slice.
func TestTableIterAgainstSlice(t *testing.T) {
	for _, opts := range []TableOptions{
		{BlockSize: 64, BlockRestartInterval: 1},
		{BlockSize: 256, BlockRestartInterval: 3},
		{BlockSize: 4096, BlockRestartInterval: 16},
	} {
		t.Run(fmt.Sprintf("block%d-restart%d", opts.BlockSize, opts.BlockRestartInterval), func(t *testing.T) {
			fs := newMemFS()
			r, ents := writeTestTable(t, fs, "t.sst", 300, opts)
			rng := rand.New(rand.NewPCG(1, 2))
			it := r.newIter()
			pos := -1
			var log []string
			for step := 0; step < 5000; step++ {
				var ok bool
				var op string
				target := makeInternalKey([]byte(fmt.Sprintf("key%05d", rng.IntN(320))), SeqNum(rng.IntN(3200)), KindSet)
				search := func(k []byte) int {
					return sort.Search(len(ents), func(i int) bool { return compareInternal(ents[i][0], k) >= 0 })
				}
				switch p := rng.IntN(6); p {
				case 0:
					op, ok, pos = "First", it.First(), 0
				case 1:
					op, ok, pos = "Last", it.Last(), len(ents)-1
				case 2:
					op, ok, pos = "SeekGE "+formatKey(target), it.SeekGE(target), search(target)
				case 3:
					op, ok, pos = "SeekLT "+formatKey(target), it.SeekLT(target), search(target)-1
				case 4:
					if pos < 0 || pos >= len(ents) {
						continue
					}
					op, ok, pos = "Next", it.Next(), pos+1
				case 5:
					if pos < 0 || pos >= len(ents) {
						continue
					}
					op, ok, pos = "Prev", it.Prev(), pos-1
				}
				log = append(log, op)
				want := pos >= 0 && pos < len(ents)
				if ok != want {
					t.Fatalf("step %d %s: valid %v, want %v; ops %v", step, op, ok, want, log[max(0, len(log)-8):])
				}
				if ok && (!bytes.Equal(it.Key(), ents[pos][0]) || !bytes.Equal(it.Value(), ents[pos][1])) {
					t.Fatalf("step %d %s: at %s, want %s; ops %v", step, op, formatKey(it.Key()), formatKey(ents[pos][0]), log[max(0, len(log)-8):])
				}
			}
			if it.Error() != nil {
				t.Fatal(it.Error())
			}
		})
	}
}

func TestTableGetAndProps(t *testing.T) {
	fs := newMemFS()
	r, ents := writeTestTable(t, fs, "t.sst", 500, TableOptions{BlockSize: 512})
	for i := 0; i < 500; i++ {
		uk := []byte(fmt.Sprintf("key%05d", i))
		k, v, ok, err := r.get(uk, MaxSeqNum)
		if err != nil || !ok || keySeq(k) != SeqNum(i*10+2) || !bytes.Equal(v, ents[2*i][1]) {
			t.Fatalf("get %s = %s, %v, %v", uk, formatKey(k), ok, err)
		}
		k, _, ok, _ = r.get(uk, SeqNum(i*10+1))
		if !ok || keySeq(k) != SeqNum(i*10+1) {
			t.Fatalf("get %s at older seq = %s, %v", uk, formatKey(k), ok)
		}
		if _, _, ok, _ = r.get(uk, SeqNum(i*10)); ok {
			t.Fatalf("get %s before its first write found it", uk)
		}
	}
	if _, _, ok, _ := r.get([]byte("nope"), MaxSeqNum); ok {
		t.Fatal("found a missing key")
	}
	if r.props.NumEntries != 1000 || r.props.SmallestSeq != 1 || r.props.LargestSeq != 4992 || int(r.props.NumDataBlocks) != len(r.index) {
		t.Fatalf("props %+v with %d blocks", r.props, len(r.index))
	}
}

// TestTableCorruption flips one byte in every block of a table and checks
// that reading it reports ErrCorrupt with the file and the block's offset,
// never wrong data.
func TestTableCorruption(t *testing.T) {
	fs := newMemFS()
	r, _ := writeTestTable(t, fs, "t.sst", 200, TableOptions{BlockSize: 256})
	var offsets []uint64
	for _, e := range r.index {
		offsets = append(offsets, e.h.offset)
	}
	nd := fs.names["/t.sst"]
	orig := slices.Clone(nd.data)
	for _, off := range offsets[:10] {
		nd.data = slices.Clone(orig)
		nd.data[off+5] ^= 0x40
		r2, err := openTable(&memFile{fs: fs, nd: nd, name: "t.sst"}, "t.sst", 2, int64(len(orig)), nil)
		if err != nil {
			t.Fatal(err) // data blocks are not read at open
		}
		it := r2.newIter()
		for ok := it.First(); ok; ok = it.Next() {
		}
		var ce *CorruptionError
		if !errors.Is(it.Error(), ErrCorrupt) || !errors.As(it.Error(), &ce) || ce.File != "t.sst" || ce.Offset != int64(off) {
			t.Fatalf("corrupt block at %d: iterator error %v", off, it.Error())
		}
	}
	// Meta blocks and the footer are checked at open.
	for _, off := range []int{len(orig) - 1, len(orig) - footerLen + 3, len(orig) - footerLen - 10} {
		nd.data = slices.Clone(orig)
		nd.data[off] ^= 1
		_, err := openTable(&memFile{fs: fs, nd: nd, name: "t.sst"}, "t.sst", 3, int64(len(orig)), nil)
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.File != "t.sst" {
			t.Fatalf("corrupt byte at %d: open error %v", off, err)
		}
	}
}

// TestBlockIndexWindows checks blockIndex, which compares key windows
// before keys, against a plain binary search of the keys: on indexes of
// keys that share long prefixes, differ in length, are prefixes of one
// another or hold zero bytes, for search keys inside, between and outside
// them.
func TestBlockIndexWindows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []byte{0, 1, 'a', 'b', 0xff}
	randKey := func(pre []byte) []byte {
		k := slices.Clone(pre)
		for range rng.IntN(14) {
			k = append(k, alphabet[rng.IntN(len(alphabet))])
		}
		return k
	}
	for trial := range 300 {
		pre := bytes.Repeat([]byte{'p'}, rng.IntN(12))
		var ikeys [][]byte
		for range 1 + rng.IntN(40) {
			ikeys = append(ikeys, makeInternalKey(randKey(pre), SeqNum(rng.IntN(5)), KindSet))
		}
		slices.SortFunc(ikeys, compareInternal)
		ikeys = slices.CompactFunc(ikeys, func(a, b []byte) bool { return compareInternal(a, b) == 0 })
		r := &tableReader{}
		for _, k := range ikeys {
			r.index = append(r.index, indexEntry{lastKey: k})
		}
		r.indexWindows()
		queries := slices.Clone(ikeys)
		for range 60 {
			q := randKey(pre[:rng.IntN(len(pre)+1)])
			if rng.IntN(4) == 0 && len(q) > 0 {
				q[rng.IntN(len(q))]++ // off the prefix
			}
			queries = append(queries, makeInternalKey(q, SeqNum(rng.IntN(6)), KindSet))
		}
		for _, k := range ikeys {
			queries = append(queries, searchKey(userKey(k), MaxSeqNum), searchKey(userKey(k), 0))
		}
		for _, q := range queries {
			want := sort.Search(len(r.index), func(i int) bool { return compareInternal(r.index[i].lastKey, q) >= 0 })
			if got := r.blockIndex(q); got != want {
				t.Fatalf("trial %d: blockIndex(%q) = %d, want %d (index %q)", trial, q, got, want, ikeys)
			}
		}
	}
}
