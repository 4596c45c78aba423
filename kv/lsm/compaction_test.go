package lsm

import (
	"context"
	"fmt"
	"math/rand/v2"
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

// TestCompactionTaskOutsideEngine runs a CompactionTask against a bare
// TaskEnv (no DB), as a storage node would, with a snapshot that keeps an
// old version alive and a deletion that removes keys.
func TestCompactionTaskOutsideEngine(t *testing.T) {
	fs := newMemFS()
	env := &memEnv{fs: fs}
	mk := func(seq SeqNum, ents []batchEntry) *FileMeta {
		m := newMemTable(1<<20, 0)
		m.apply(seq, ents)
		outs, _, err := writeOutputs(context.Background(), m.newIter(), m.tombstones(), outputParams{table: TableOptions{BlockSize: 256}}, env.CreateTable)
		if err != nil {
			t.Fatal(err)
		}
		return outs[0]
	}
	var old, upd []batchEntry
	for i := 0; i < 100; i++ {
		old = append(old, batchEntry{kind: KindSet, key: []byte(fmt.Sprintf("k%03d", i)), value: []byte("old")})
		if i%2 == 0 {
			upd = append(upd, batchEntry{kind: KindSet, key: []byte(fmt.Sprintf("k%03d", i)), value: []byte("new")})
		}
	}
	upd = append(upd, batchEntry{kind: KindRangeDelete, key: []byte("k090"), value: []byte("k100")})
	f1 := mk(1, old)    // seqs 1..100
	f2 := mk(1000, upd) // seqs 1000..
	task := &CompactionTask{
		Inputs:         []CompactionInput{{Level: 0, Files: []*FileMeta{f2, f1}}},
		OutputLevel:    1,
		Snapshots:      []SeqNum{500},
		DropDeletes:    true,
		TargetFileSize: 2048,
		Table:          TableOptions{BlockSize: 256},
	}
	res, err := task.Run(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Edit.DeletedFiles) != 2 || len(res.Edit.NewFiles) != len(res.Outputs) || len(res.Outputs) < 2 {
		t.Fatalf("edit %+v", res.Edit)
	}
	v, err := (&Version{}).Apply(&VersionEdit{NewFiles: []NewFile{{Level: 0, Meta: f1}, {Level: 0, Meta: f2}}})
	if err != nil {
		t.Fatal(err)
	}
	if v, err = v.Apply(res.Edit); err != nil {
		t.Fatal(err)
	}
	// Read the outputs as the engine would, at the snapshot and at the
	// latest seq.
	get := func(key string, snap SeqNum) string {
		var tomb SeqNum
		for _, f := range v.Levels[1] {
			if !f.userRange().contains([]byte(key)) {
				continue
			}
			h, _ := fs.Open(tableFileName(f.FileNum))
			r, err := openTable(h, "x", f.FileNum, int64(f.Size), nil)
			if err != nil {
				t.Fatal(err)
			}
			tomb = max(tomb, maxCovering(r.tombs, []byte(key), snap))
			k, val, ok, err := r.get([]byte(key), snap)
			if err != nil {
				t.Fatal(err)
			}
			if ok && keyKind(k) == KindSet && keySeq(k) > tomb {
				return string(val)
			}
		}
		return ""
	}
	for i := 0; i < 100; i++ {
		key := fmt.Sprintf("k%03d", i)
		latest := "old"
		if i%2 == 0 {
			latest = "new"
		}
		if i >= 90 {
			latest = ""
		}
		if got := get(key, MaxSeqNum); got != latest {
			t.Fatalf("%s latest = %q, want %q", key, got, latest)
		}
		if got := get(key, 500); got != "old" {
			t.Fatalf("%s at snapshot = %q, want old", key, got)
		}
	}
	if res.BytesRead != f1.Size+f2.Size || res.BytesWritten == 0 {
		t.Fatalf("bytes read %d written %d", res.BytesRead, res.BytesWritten)
	}
}

// TestFragmentsMatchBruteForce checks fragment-based coverage against a
// scan of every tombstone, for reads (highest visible seq) and for
// compaction (covered in the same stripe).
func TestFragmentsMatchBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	key := func() []byte { return []byte(fmt.Sprintf("%02d", rng.IntN(40))) }
	for round := 0; round < 200; round++ {
		var ts []tombstone
		for i := 0; i < rng.IntN(12); i++ {
			a, b := key(), key()
			ts = append(ts, tombstone{start: a, end: b, seq: SeqNum(1 + rng.IntN(100))})
		}
		snaps := []SeqNum{SeqNum(rng.IntN(50)), SeqNum(50 + rng.IntN(50))}
		snap := SeqNum(rng.IntN(110))
		ti := newTombstoneIndex(ts, snap)
		frags := fragmentTombstones(ts)
		for k := 0; k < 41; k++ {
			uk := []byte(fmt.Sprintf("%02d", k))
			if got, want := ti.covering(uk), maxCovering(ts, uk, snap); got != want {
				t.Fatalf("round %d: covering(%s) at %d = %d, want %d; tombstones %v", round, uk, snap, got, want, ts)
			}
			for seq := SeqNum(0); seq <= 101; seq += 3 {
				want := false
				for _, tb := range ts {
					if tb.seq > seq && tb.covers(uk) && stripe(snaps, tb.seq) == stripe(snaps, seq) {
						want = true
					}
				}
				if got := covered(frags, snaps, uk, seq); got != want {
					t.Fatalf("round %d: covered(%s#%d) = %v, want %v; tombstones %v snaps %v", round, uk, seq, got, want, ts, snaps)
				}
			}
		}
	}
}
