package lsm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/nearstore/nearstore/vfs"
)

// readCountFS counts the reads of the files it opens.
type readCountFS struct {
	vfs.FS
	reads atomic.Int64
}

type readCountFile struct {
	vfs.File
	reads *atomic.Int64
}

func (f readCountFile) ReadAt(p []byte, off int64) (int, error) {
	f.reads.Add(1)
	return f.File.ReadAt(p, off)
}

func (c *readCountFS) Open(name string) (vfs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return readCountFile{f, &c.reads}, nil
}

func (d *DB) reads() int64 { return d.fs.(*readCountFS).reads.Load() }

// splitDB builds a store with tables in L0 and below: keys k0000..k1999
// written in rounds (each round overwriting some, deleting some), flushed
// into several tables, the older rounds compacted down.
func splitDB(t *testing.T) (*DB, map[string]string) {
	t.Helper()
	opts := smallOptions()
	opts.DisableAutomaticCompactions = true
	d, err := Open(&readCountFS{FS: newMemFS()}, "db", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()
	model := map[string]string{}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 4 {
		for i := range 2000 {
			if round > 0 && rng.IntN(3) != 0 {
				continue
			}
			k := fmt.Sprintf("k%04d", i)
			if round > 0 && rng.IntN(10) == 0 {
				if err := d.Delete([]byte(k), nil); err != nil {
					t.Fatal(err)
				}
				delete(model, k)
				continue
			}
			v := fmt.Sprintf("v%d-%d", round, i)
			if err := d.Set([]byte(k), []byte(v), nil); err != nil {
				t.Fatal(err)
			}
			model[k] = v
		}
		if round == 2 {
			if err := d.DeleteRange([]byte("k0100"), []byte("k0200"), nil); err != nil {
				t.Fatal(err)
			}
			for i := 100; i < 200; i++ {
				delete(model, fmt.Sprintf("k%04d", i))
			}
		}
		if err := d.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			if err := d.Compact(ctx, []byte("k"), []byte("l")); err != nil {
				t.Fatal(err)
			}
		}
	}
	return d, model
}

func (d *DB) splitNow(t *testing.T, key string) splitResult {
	t.Helper()
	rs, err := d.loadReadState()
	if err != nil {
		t.Fatal(err)
	}
	defer d.releaseReadState(rs)
	return d.split(rs, []byte(key), d.visibleSeq.Load())
}

// TestSplitPlanAnswersLikeGet checks that the in-memory part plus the plan
// (run with ordinary reads) answers every key as Get and the model do,
// and the shape of plans: newest first, each with the data block the
// table's index names.
func TestSplitPlanAnswersLikeGet(t *testing.T) {
	d, model := splitDB(t)
	m := d.Metrics()
	below := 0
	for _, l := range m.Levels[1:] {
		below += l.Tables
	}
	if m.Levels[0].Tables < 2 || below == 0 {
		t.Fatalf("want tables in L0 and below, have %+v", m.Levels)
	}
	snap := d.visibleSeq.Load()
	planned := 0
	for i := range 2100 {
		k := fmt.Sprintf("k%04d", i)
		s := d.splitNow(t, k)
		var got []byte
		var err error
		if s.done {
			if len(s.plan) != 0 {
				t.Fatalf("%s: done with a plan of %d tables", k, len(s.plan))
			}
			got, err = s.value, s.err
		} else {
			planned++
			rs, _ := d.loadReadState()
			order := map[uint64]int{}
			for j, f := range candidates(nil, rs.v, []byte(k)) {
				order[f.FileNum] = j
			}
			d.releaseReadState(rs)
			for j, p := range s.plan {
				r := p.h.reader()
				if want := r.index[r.blockIndex(searchKey([]byte(k), snap))].h; p.data != want {
					t.Fatalf("%s: plan table %d: data block %+v, index says %+v", k, j, p.data, want)
				}
				if j > 0 && order[p.meta.FileNum] <= order[s.plan[j-1].meta.FileNum] {
					t.Fatalf("%s: plan not newest first", k)
				}
				if p.top != r.top || p.top.length == 0 {
					t.Fatalf("%s: top-level index %+v", k, p.top)
				}
			}
			got, err = runPlainly(s.plan, []byte(k), snap)
			s.release()
		}
		want, ok := model[k]
		switch {
		case !ok && !errors.Is(err, ErrNotFound):
			t.Fatalf("%s: got %q, %v; want not found", k, got, err)
		case ok && (err != nil || string(got) != want):
			t.Fatalf("%s: got %q, %v; want %q", k, got, err, want)
		}
	}
	if planned < 100 {
		t.Fatalf("only %d of 2100 keys needed a plan", planned)
	}
}

// TestSplitInMemory checks that what memory can answer needs no I/O: keys
// in the memtable, keys whose data blocks are cached, keys no table can
// hold.
func TestSplitInMemory(t *testing.T) {
	d, model := splitDB(t)
	if err := d.Set([]byte("k0005"), []byte("fresh"), nil); err != nil {
		t.Fatal(err)
	}
	// Open every table first: opening reads a table's meta blocks once.
	for i := 0; i < 2000; i += 7 {
		s := d.splitNow(t, fmt.Sprintf("k%04d", i))
		s.release()
	}
	reads := d.reads()
	if s := d.splitNow(t, "k0005"); !s.done || string(s.value) != "fresh" || s.probed != 0 {
		t.Fatalf("memtable key: %+v", s)
	}
	if s := d.splitNow(t, "zzz"); !s.done || !errors.Is(s.err, ErrNotFound) || s.probed != 0 {
		t.Fatalf("key beyond every table: %+v", s)
	}
	if s := d.splitNow(t, "k0150"); s.done {
		s.release()
	}
	if d.reads() != reads {
		t.Fatalf("split read blocks: reads %d -> %d", reads, d.reads())
	}
	// Warm the cache with ordinary reads of one key, then split it again.
	for _, k := range []string{"k0777", "k1500", "k0150"} {
		s := d.splitNow(t, k)
		if s.done {
			t.Fatalf("%s: settled with a cold cache", k)
		}
		if _, err := runPlainly(s.plan, []byte(k), d.visibleSeq.Load()); err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		s.release()
		reads = d.reads()
		s = d.splitNow(t, k)
		if !s.done || s.cached == 0 {
			t.Fatalf("%s: not settled from the cache after a plain read: %+v", k, s)
		}
		want, ok := model[k]
		if ok != (s.err == nil) || string(s.value) != want {
			t.Fatalf("%s: from the cache %q, %v; want %q", k, s.value, s.err, want)
		}
		if d.reads() != reads {
			t.Fatalf("%s: cached split read a block", k)
		}
	}
}

// TestPinnedBytes checks the in-memory table metadata count: none for an
// empty store; for tables, more than their filters (10 bits a key) and
// less than the tables themselves.
func TestPinnedBytes(t *testing.T) {
	empty, err := Open(newMemFS(), "db", smallOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if n, err := empty.PinnedBytes(); err != nil || n != 0 {
		t.Fatalf("empty store: %d, %v", n, err)
	}
	d, model := splitDB(t)
	n, err := d.PinnedBytes()
	if err != nil {
		t.Fatal(err)
	}
	var size uint64
	for _, l := range d.Metrics().Levels {
		size += l.Size
	}
	if n < uint64(len(model))*10/8 || n >= size {
		t.Fatalf("pinned %d bytes for %d keys in %d bytes of tables", n, len(model), size)
	}
}
