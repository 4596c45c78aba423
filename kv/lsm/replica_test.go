package lsm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// copyTables copies e's new tables from one memFS to another, as a
// primary's shipper puts them where the replica reads them.
func copyTables(from, to *memFS, e *VersionEdit) error {
	for _, nf := range e.NewFiles {
		name := "db/" + tableFileName(nf.Meta.FileNum)
		src, err := from.Open(name)
		if err != nil {
			return err
		}
		b, err := readAll(src)
		src.Close()
		if err != nil {
			return err
		}
		dst, err := to.Create(name)
		if err != nil {
			return err
		}
		_, err = dst.Write(b)
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func replicaOptions() Options {
	o := smallOptions()
	o.DisableFlushes, o.DisableAutomaticCompactions = true, true
	o.MemTableStopWritesThreshold, o.L0StopWritesThreshold, o.L0SlowdownWritesThreshold = 1<<20, 1<<30, 1<<30
	return o
}

// TestReplicaInstallsPrimaryEdits runs a replica beside a primary: every
// write goes to both (the replica at the primary's numbers) and every
// edit the primary's flushes and compactions make is installed on the
// replica, which never flushes or compacts and reads alike.
//
// The replica's memtables are sized unlike the primary's, so they switch
// at other points (the hazard of RubbleDB's Figure 2): an edit covering
// the primary's memtable may cover only part of a replica's, which must
// then be kept.
func TestReplicaInstallsPrimaryEdits(t *testing.T) {
	for _, size := range []int{8 << 10, 32 << 10, 100 << 10} {
		t.Run(fmt.Sprintf("replica memtable %dKiB", size>>10), func(t *testing.T) {
			testReplica(t, size)
		})
	}
}

func testReplica(t *testing.T, memSize int) {
	ctx := context.Background()
	pfs, rfs := newMemFS(), newMemFS()
	ro := replicaOptions()
	ro.MemTableSize = memSize
	rep := mustOpen(t, rfs, ro)
	defer rep.Close()
	po := smallOptions()
	edits := 0
	po.BeforeEdit = func(e *VersionEdit) error {
		if err := copyTables(pfs, rfs, e); err != nil {
			return err
		}
		got, err := DecodeVersionEdit(e.Encode(nil))
		if err != nil {
			return err
		}
		edits++
		return rep.InstallEdit(ctx, got)
	}
	prim := mustOpen(t, pfs, po)
	defer prim.Close()
	model := map[string]string{}
	for n := range 4000 {
		k := fmt.Sprintf("k%04d", n*7%1500)
		b := NewBatch()
		if n%9 == 8 {
			b.Delete([]byte(k))
			delete(model, k)
		} else {
			v := strings.Repeat(fmt.Sprint(n), 6)
			b.Set([]byte(k), []byte(v))
			model[k] = v
		}
		// The replica gets the write first, as down a chain: an edit is
		// installed only once the replica holds what it covers.
		if err := prim.Apply(ctx, b, nil); err != nil {
			t.Fatal(err)
		}
		if err := rep.ApplyAt(ctx, mustBatch(t, b), b.Seq(), nil); err != nil {
			t.Fatal(err)
		}
		if n%100 == 99 { // the replica reads every write so far, always
			for k, v := range model {
				expectGet(t, rep, k, v)
			}
		}
	}
	if err := prim.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pm, rm := prim.Metrics(), rep.Metrics()
	if pm.Compact.Count == 0 || edits == 0 {
		t.Fatalf("primary compacted %d times, %d edits: load too small", pm.Compact.Count, edits)
	}
	if rm.Flush.Count != 0 || rm.Compact.Count != 0 {
		t.Fatalf("replica flushed %d, compacted %d", rm.Flush.Count, rm.Compact.Count)
	}
	if rm.MemTables > 1 { // all but the mutable one are covered by now
		t.Fatalf("replica kept %d memtables: covered ones not dropped", rm.MemTables)
	}
	for l := range pm.Levels {
		if pm.Levels[l].Tables != rm.Levels[l].Tables {
			t.Fatalf("L%d: primary %d tables, replica %d", l, pm.Levels[l].Tables, rm.Levels[l].Tables)
		}
	}
	for n := range 1500 {
		k := fmt.Sprintf("k%04d", n)
		expectGet(t, prim, k, model[k])
		expectGet(t, rep, k, model[k])
	}
}

func mustBatch(t *testing.T, b *Batch) *Batch {
	t.Helper()
	c, err := BatchFromRepr(b.Repr())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReplicaRefuses checks the replica's rules: numbers only go up, and
// an edit whose tables hold writes the replica lacks is refused whole.
func TestReplicaRefuses(t *testing.T) {
	ctx := context.Background()
	pfs, rfs := newMemFS(), newMemFS()
	rep := mustOpen(t, rfs, replicaOptions())
	defer rep.Close()
	var held *VersionEdit
	po := smallOptions()
	po.BeforeEdit = func(e *VersionEdit) error {
		held = e
		return copyTables(pfs, rfs, e)
	}
	prim := mustOpen(t, pfs, po)
	defer prim.Close()

	b := NewBatch()
	b.Set([]byte("a"), []byte("1"))
	if err := prim.Apply(ctx, b, nil); err != nil {
		t.Fatal(err)
	}
	other := mustOpen(t, newMemFS(), replicaOptions())
	defer other.Close()
	for _, tc := range []struct {
		name string
		seq  SeqNum
		ok   bool
	}{
		{"seq 0", 0, false},
		{"first", 5, true}, // a gap is allowed
		{"same seq", 5, false},
		{"below", 3, false},
		{"next", 6, true},
	} {
		err := other.ApplyAt(ctx, mustBatch(t, b), tc.seq, nil)
		if (err == nil) != tc.ok {
			t.Fatalf("%s: ApplyAt(%d) = %v, want ok=%v", tc.name, tc.seq, err, tc.ok)
		}
	}
	if err := rep.ApplyAt(ctx, mustBatch(t, b), b.Seq(), nil); err != nil {
		t.Fatal(err)
	}
	// The primary's next write is flushed before the replica sees it:
	// its edit is refused.
	b2 := NewBatch()
	for i := range 10 {
		b2.Set(fmt.Appendf(nil, "b%d", i), []byte("2"))
	}
	if err := prim.Apply(ctx, b2, nil); err != nil {
		t.Fatal(err)
	}
	if err := prim.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if held == nil {
		t.Fatal("no edit")
	}
	if err := rep.InstallEdit(ctx, held); err == nil || !strings.Contains(err.Error(), "has applied only up to") {
		t.Fatalf("InstallEdit before its writes = %v", err)
	}
	if n := rep.Metrics().Levels[0].Tables; n != 0 {
		t.Fatalf("refused edit left %d tables in L0", n)
	}
	expectGet(t, rep, "a", "1")
	expectGet(t, rep, "b0", "")
	// Once the writes are there, the same edit installs.
	if err := rep.ApplyAt(ctx, mustBatch(t, b2), b2.Seq(), nil); err != nil {
		t.Fatal(err)
	}
	if err := rep.InstallEdit(ctx, held); err != nil {
		t.Fatal(err)
	}
	expectGet(t, rep, "b9", "2")
	if err := rep.Flush(ctx); err == nil || !strings.Contains(err.Error(), "DisableFlushes") {
		t.Fatalf("Flush on a replica = %v", err)
	}
	if _, err := BatchFromRepr([]byte{1, 2, 3}); err == nil {
		t.Fatal("a truncated batch decoded")
	}
}

// TestReplicaRandomDelivery delivers the primary's writes and edits to a
// replica in random interleavings: edits queue up and reach the replica
// late, several at a time, always in order and never before the writes
// they cover (the only order a chain guarantees), while the replica's
// memtables switch at their own points. At random moments every key
// written so far must read at the replica as the model has it.
func TestReplicaRandomDelivery(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 23))
			pfs, rfs := newMemFS(), newMemFS()
			ro := replicaOptions()
			ro.MemTableSize = 8<<10 + rng.IntN(64<<10)
			rep := mustOpen(t, rfs, ro)
			defer rep.Close()
			var mu sync.Mutex
			var queue []*VersionEdit
			po := smallOptions()
			po.BeforeEdit = func(e *VersionEdit) error {
				// Tables go to the replica's disk now (as into slots);
				// the edit goes in the queue.
				if err := copyTables(pfs, rfs, e); err != nil {
					return err
				}
				got, err := DecodeVersionEdit(e.Encode(nil))
				mu.Lock()
				queue = append(queue, got)
				mu.Unlock()
				return err
			}
			prim := mustOpen(t, pfs, po)
			defer prim.Close()
			// deliver installs queued edits, in order, while the replica
			// holds their writes.
			deliver := func(n int) {
				for range n {
					mu.Lock()
					if len(queue) == 0 {
						mu.Unlock()
						return
					}
					e := queue[0]
					var covered SeqNum
					for _, nf := range e.NewFiles {
						covered = max(covered, nf.Meta.LargestSeq)
					}
					if covered > rep.LastSeq() {
						mu.Unlock()
						return
					}
					queue = queue[1:]
					mu.Unlock()
					if err := rep.InstallEdit(ctx, e); err != nil {
						t.Fatal(err)
					}
				}
			}
			model := map[string]string{}
			var pending []*Batch // written at the primary, not yet at the replica
			for n := range 5000 {
				k := fmt.Sprintf("k%04d", rng.IntN(1200))
				b := NewBatch()
				if rng.IntN(8) == 0 {
					b.Delete([]byte(k))
					delete(model, k)
				} else {
					v := strings.Repeat(fmt.Sprint(n), 1+rng.IntN(8))
					b.Set([]byte(k), []byte(v))
					model[k] = v
				}
				if err := prim.Apply(ctx, b, nil); err != nil {
					t.Fatal(err)
				}
				pending = append(pending, b)
				if rng.IntN(4) == 0 { // the chain delivers a run of writes
					for _, p := range pending {
						if err := rep.ApplyAt(ctx, mustBatch(t, p), p.Seq(), nil); err != nil {
							t.Fatal(err)
						}
					}
					pending = pending[:0]
				}
				if rng.IntN(16) == 0 {
					deliver(rng.IntN(4))
				}
				if rng.IntN(500) == 0 && len(pending) == 0 {
					for k, v := range model {
						expectGet(t, rep, k, v)
					}
				}
			}
			for _, p := range pending {
				if err := rep.ApplyAt(ctx, mustBatch(t, p), p.Seq(), nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := prim.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for k, v := range model {
				expectGet(t, rep, k, v)
			}
			deliver(1 << 20)
			mu.Lock()
			left := len(queue)
			mu.Unlock()
			if left != 0 {
				t.Fatalf("%d edits never deliverable", left)
			}
			for k, v := range model {
				expectGet(t, rep, k, v)
			}
			if rm := rep.Metrics(); rm.Flush.Count != 0 || rm.Compact.Count != 0 || rm.MemTables > 1 {
				t.Fatalf("replica: %d flushes, %d compactions, %d memtables", rm.Flush.Count, rm.Compact.Count, rm.MemTables)
			}
		})
	}
}
