package lsm

import (
	"context"
	"fmt"
	"testing"

	"github.com/nearstore/nearstore/vfs"
)

// memEnv is a TaskEnv on a memFS directory, as a remote runner would have.
type memEnv struct {
	fs   *memFS
	next uint64
}

func (e *memEnv) OpenTable(fileNum, size uint64) (vfs.File, error) {
	return e.fs.Open(tableFileName(fileNum))
}

func (e *memEnv) CreateTable() (uint64, vfs.File, error) {
	e.next++
	f, err := e.fs.Create(tableFileName(e.next))
	return e.next, f, err
}

// TestWriteOutputsSplitsTombstones cuts outputs inside a range tombstone
// and checks each output holds the part of it within its bounds.
func TestWriteOutputsSplitsTombstones(t *testing.T) {
	fs := newMemFS()
	env := &memEnv{fs: fs, next: 100}
	m := newMemTable(1<<20, 0)
	var ents []batchEntry
	for i := 0; i < 200; i++ {
		ents = append(ents, batchEntry{kind: KindSet, key: []byte(fmt.Sprintf("k%04d", i)), value: make([]byte, 100)})
	}
	m.apply(1, ents)
	m.apply(1000, []batchEntry{{kind: KindRangeDelete, key: []byte("k0050"), value: []byte("k0150")}})
	outs, _, err := writeOutputs(context.Background(), m.newIter(), m.tombstones(),
		outputParams{level: 1, snapshots: []SeqNum{500}, targetSize: 4096, table: TableOptions{BlockSize: 1024}}, env.CreateTable)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) < 3 {
		t.Fatalf("%d outputs, want several", len(outs))
	}
	covered := 0
	for i, o := range outs {
		f, _ := fs.Open(tableFileName(o.FileNum))
		r, err := openTable(f, "x", o.FileNum, int64(o.Size), nil)
		if err != nil {
			t.Fatal(err)
		}
		rng := o.userRange()
		for _, ts := range r.tombs {
			if !rng.contains(ts.start) || (string(ts.end) > string(rng.end)) {
				t.Fatalf("output %d %s holds tombstone [%s,%s) outside its bounds", i, o, ts.start, ts.end)
			}
		}
		for k := 50; k < 150; k++ {
			key := []byte(fmt.Sprintf("k%04d", k))
			if rng.contains(key) {
				if maxCovering(r.tombs, key, MaxSeqNum) != 1000 {
					t.Fatalf("output %d %s: %s not covered; tombstones %v", i, o, key, r.tombs)
				}
				covered++
			}
		}
		if i > 0 && outs[i-1].userRange().overlaps(rng) {
			t.Fatalf("outputs %s and %s overlap", outs[i-1], o)
		}
	}
	if covered != 100 {
		t.Fatalf("%d keys covered, want 100", covered)
	}
}
