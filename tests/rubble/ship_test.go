// Package rubble_test runs RubbleDB's shipping against real targets: a
// primary kv/lsm store that flushes and compacts, and two secondaries,
// each with its own volume served by a real NVMe/TCP target, into whose
// slot pools the primary writes its tables over NVMe/TCP.
package rubble_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/kv/rubble"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/vfs"
	"github.com/nearstore/nearstore/volume"
)

const testNQN = "nqn.2026-11.io.nearstore:rubble"

// secondary starts a target on a fresh volume, makes a pool on it and
// opens a secondary store; it returns the secondary and the primary's
// connection to the target's namespace.
func secondary(t *testing.T, i int, released func(slot int)) (*rubble.Secondary, *host.Namespace) {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	vol, err := volume.Open("mem:96MiB?bs=4096")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	srv := testtarget.Start(t, testtarget.Config{NQN: testNQN, Name: fmt.Sprintf("secondary-%d", i), Volume: vol})
	t.Cleanup(srv.Stop)
	dev := offloadfs.VolumeDevice(vol)
	testfs.Format(t, dev)
	fsys := testfs.Mount(t, dev, offloadfs.Options{Logger: quiet})
	if _, err := rubble.MakePool(ctx, fsys, 48, 1<<20); err != nil {
		t.Fatal(err)
	}
	sec, err := rubble.OpenSecondary(ctx, rubble.SecondaryConfig{
		FS: fsys, Dir: "db", Released: released,
		Options: lsm.Options{MemTableSize: 256 << 10, Logger: quiet},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ns := testhost.Connect(t, srv.Addr(), testNQN, 1, host.Options{
		HostNQN: fmt.Sprintf("nqn.2026-11.io.nearstore:primary-to-%d", i), IOQueues: 2, KeepAlive: -1,
	})
	return sec, ns
}

// TestShipCompactions loads a primary with overwrites and deletes until
// it has flushed and compacted many times, replicating every write to two
// secondaries at the primary's sequence numbers, and checks that every
// replica reads every key as the model has it, that the secondaries
// flushed and compacted nothing, hold the primary's tree table for table
// in their slots, and that their pools pass fsck.
func TestShipCompactions(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	var sh *rubble.Shipper
	var secs []*rubble.Secondary
	var reps []rubble.Replica
	for i := range 2 {
		sec, ns := secondary(t, i, func(slot int) { sh.Release(i, slot) })
		secs = append(secs, sec)
		reps = append(reps, rubble.Replica{
			Dev: ns, Slots: sec.Pool().Slots(), SlotSize: sec.Pool().SlotSize(),
			Send: sec.Install,
		})
	}
	dir := t.TempDir()
	var err error
	sh, err = rubble.NewShipper(rubble.ShipperConfig{FS: vfs.OS(dir), Dir: "db", Replicas: reps})
	if err != nil {
		t.Fatal(err)
	}
	prim, err := lsm.Open(vfs.OS(dir), "db", lsm.Options{
		MemTableSize: 256 << 10, TargetFileSize: 128 << 10, LBaseMaxBytes: 512 << 10,
		L0CompactionThreshold: 2, Logger: quiet, BeforeEdit: sh.BeforeEdit,
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			prim.Close()
		}
		for _, s := range secs {
			s.Close()
		}
	}()

	model := map[string][]byte{}
	rng := rand.New(rand.NewPCG(23, 2))
	const keys, writes = 6000, 30000
	for n := range writes {
		k := fmt.Appendf(nil, "key-%05d", rng.IntN(keys))
		b := lsm.NewBatch()
		if n%10 == 9 {
			b.Delete(k)
			delete(model, string(k))
		} else {
			v := bytes.Repeat(fmt.Appendf(nil, "%d.", n), 8)
			b.Set(k, v)
			model[string(k)] = v
		}
		if err := prim.Apply(ctx, b, nil); err != nil {
			t.Fatal(err)
		}
		for i, s := range secs {
			if err := s.Apply(ctx, b.Repr(), b.Seq()); err != nil {
				t.Fatalf("secondary %d: %v", i, err)
			}
		}
	}
	if err := prim.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := prim.Compact(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pm := prim.Metrics()
	if pm.Compact.Count == 0 || pm.Flush.Count < 5 {
		t.Fatalf("primary flushed %d times and compacted %d: the load is too small to test shipping", pm.Flush.Count, pm.Compact.Count)
	}
	st := sh.Stats()
	t.Logf("primary: %d flushes (%d bytes), %d compactions (read %d, wrote %d bytes); shipped %d edits, %d tables, %d bytes to %d secondaries",
		pm.Flush.Count, pm.Flush.BytesWritten, pm.Compact.Count, pm.Compact.BytesRead, pm.Compact.BytesWritten, st.Edits, st.Tables, st.Bytes, len(secs))

	dbs := []*lsm.DB{prim, secs[0].DB(), secs[1].DB()}
	for r, db := range dbs {
		for k := range keys {
			key := fmt.Appendf(nil, "key-%05d", k)
			want, live := model[string(key)]
			got, err := db.Get(key)
			switch {
			case !live && !errors.Is(err, lsm.ErrNotFound):
				t.Fatalf("replica %d: %s: got %q, %v; want not found", r, key, got, err)
			case live && (err != nil || !bytes.Equal(got, want)):
				t.Fatalf("replica %d: %s: got %q, %v; want %q", r, key, got, err, want)
			}
		}
		if n := scanCount(t, db); n != len(model) {
			t.Fatalf("replica %d: scan sees %d keys, want %d", r, n, len(model))
		}
	}
	for i, s := range secs {
		m := s.DB().Metrics()
		if m.Compact.Count != 0 || m.Flush.Count != 0 {
			t.Errorf("secondary %d flushed %d times and compacted %d; want none", i, m.Flush.Count, m.Compact.Count)
		}
		// The memtables the shipped tables cover are gone, so the reads
		// above came from the slots.
		if m.MemTables > 2 {
			t.Errorf("secondary %d holds %d memtables (%d bytes); the shipped tables cover all but the last", i, m.MemTables, m.MemTableBytes)
		}
		for l := range m.Levels {
			if m.Levels[l].Tables != pm.Levels[l].Tables || m.Levels[l].Size != pm.Levels[l].Size {
				t.Errorf("secondary %d L%d: %d tables, %d bytes; primary %d, %d", i, l, m.Levels[l].Tables, m.Levels[l].Size, pm.Levels[l].Tables, pm.Levels[l].Size)
			}
		}
		if err := s.Pool().Check(ctx); err != nil {
			t.Errorf("secondary %d: %v", i, err)
		}
	}
	// Closing the primary lets its background work end; the slots the
	// secondaries hold are then exactly the primary's live tables.
	closed = true
	if err := prim.Close(); err != nil {
		t.Fatal(err)
	}
	live := 0
	for l := range pm.Levels {
		live += pm.Levels[l].Tables
	}
	for i, s := range secs {
		if n := len(s.Tables()); n != live {
			t.Errorf("secondary %d's file map has %d tables, the primary %d", i, n, live)
		}
	}
}

func scanCount(t *testing.T, db *lsm.DB) int {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}
