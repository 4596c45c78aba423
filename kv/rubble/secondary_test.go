package rubble

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/vfs"
)

// deviceWriter gives a primary in the same process the secondary's
// device as a SlotWriter, where a real primary has a host.Namespace.
type deviceWriter struct{ offloadfs.Device }

func (d deviceWriter) WriteAtContext(_ context.Context, p []byte, off int64) (int, error) {
	return d.WriteAt(p, off)
}

// pair is a primary store shipping to one secondary on a real volume.
type pair struct {
	prim   *lsm.DB
	primFS vfs.FS // the primary's file system, its store in "db"
	sec    *Secondary
	sh     *Shipper
}

func newPair(t testing.TB, beforeShip func(e *lsm.VersionEdit)) *pair {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fsys, dev := newFS(t)
	if _, err := MakePool(ctx, fsys, 8, 256<<10); err != nil {
		t.Fatal(err)
	}
	p := &pair{}
	// The secondary's memtables are small, so that they switch at other
	// points than the primary's.
	sec, err := OpenSecondary(ctx, SecondaryConfig{FS: fsys, Dir: "db", Options: lsm.Options{Logger: quiet, MemTableSize: 4096},
		Released: func(slot int) { p.sh.Release(0, slot) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sec.Close() })
	dir := t.TempDir()
	sh, err := NewShipper(ShipperConfig{FS: vfs.OS(dir), Dir: "db", Replicas: []Replica{{
		Dev: deviceWriter{dev}, Slots: sec.Pool().Slots(), SlotSize: sec.Pool().SlotSize(), Send: sec.Install,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	prim, err := lsm.Open(vfs.OS(dir), "db", lsm.Options{Logger: quiet, BeforeEdit: func(e *lsm.VersionEdit) error {
		if beforeShip != nil {
			beforeShip(e)
		}
		return sh.BeforeEdit(e)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prim.Close() })
	p.prim, p.primFS, p.sec, p.sh = prim, vfs.OS(dir), sec, sh
	return p
}

func set(t testing.TB, db *lsm.DB, k, v string) *lsm.Batch {
	t.Helper()
	b := lsm.NewBatch()
	b.Set([]byte(k), []byte(v))
	if err := db.Apply(context.Background(), b, nil); err != nil {
		t.Fatal(err)
	}
	return b
}

func expect(t testing.TB, db *lsm.DB, k, want string) {
	t.Helper()
	got, err := db.Get([]byte(k))
	if err != nil || string(got) != want {
		t.Fatalf("Get(%s) = %q, %v; want %q", k, got, err, want)
	}
}

// TestFigure2 is RubbleDB's counter-example (Figure 2): the primary
// switches memtables between two writes W1 and W2, so its flush covers
// W1 only, while the secondary's one memtable holds both. Dropping that
// memtable on the flush's edit would lose W2; the secondary must keep
// it, and drops it only when an edit covers W2 too. Delivered out of
// order (W2 before W1), W1 is refused with an error rather than put
// where a flush edit could drop it; the edit then brings W1 from its
// table.
func TestFigure2(t *testing.T) {
	ctx := context.Background()
	for _, reversed := range []bool{false, true} {
		name := "in order"
		if reversed {
			name = "W2 before W1"
		}
		t.Run(name, func(t *testing.T) {
			var p *pair
			var w1 *lsm.Batch
			first := true
			p = newPair(t, func(e *lsm.VersionEdit) {
				if !first {
					return
				}
				first = false
				// The flush of the memtable holding W1 is under way:
				// W2 lands in the next one on the primary.
				w2 := set(t, p.prim, "k2", "W2")
				if reversed {
					if err := p.sec.Apply(ctx, w2.Repr(), w2.Seq()); err != nil {
						t.Error(err)
					}
					err := p.sec.Apply(ctx, w1.Repr(), w1.Seq())
					if err == nil || !strings.Contains(err.Error(), "the store is at") {
						t.Errorf("W1 after W2: %v, want refused", err)
					}
					return
				}
				// W3 and W4 fill the secondary's memtable, which
				// switches before W4: its immutable one holds W1…W3.
				w3 := set(t, p.prim, "k3", strings.Repeat("3", 3000))
				w4 := set(t, p.prim, "k4", strings.Repeat("4", 3000))
				for _, b := range []*lsm.Batch{w1, w2, w3, w4} {
					if err := p.sec.Apply(ctx, b.Repr(), b.Seq()); err != nil {
						t.Error(err)
					}
				}
				if n := p.sec.DB().Metrics().MemTables; n != 2 {
					t.Errorf("secondary has %d memtables, want W1…W3's and W4's", n)
				}
			})
			w1 = set(t, p.prim, "k1", "W1")
			if err := p.prim.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			db := p.sec.DB()
			if n := db.Metrics().Levels[0].Tables; n != 1 {
				t.Fatalf("secondary L0 has %d tables, want the flush's 1", n)
			}
			expect(t, db, "k1", "W1")
			expect(t, db, "k2", "W2")
			// The second flush covers W2: now the memtable goes.
			if err := p.prim.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			expect(t, db, "k1", "W1")
			expect(t, db, "k2", "W2")
			if m := db.Metrics(); m.Levels[0].Tables != 2 || m.MemTables != 1 {
				t.Fatalf("after the second flush: %d L0 tables, %d memtables", m.Levels[0].Tables, m.MemTables)
			}
		})
	}
}

// TestInstallRefusesBadMaps checks that a bad file-map update is refused
// whole, with a clear error, and loses nothing: a good install after it
// still works and the pool is clean.
func TestInstallRefusesBadMaps(t *testing.T) {
	ctx := context.Background()
	var edit []byte
	var files []FileSlot
	p := newPair(t, nil)
	// Capture a real edit and its map from a flush.
	p.sh.reps[0].Send = func(ctx context.Context, e []byte, f []FileSlot) error {
		edit, files = e, f
		return p.sec.Install(ctx, e, f)
	}
	b := set(t, p.prim, "a", "1")
	if err := p.sec.Apply(ctx, b.Repr(), b.Seq()); err != nil {
		t.Fatal(err)
	}
	if err := p.prim.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("flush shipped %d tables", len(files))
	}
	e, err := lsm.DecodeVersionEdit(edit)
	if err != nil {
		t.Fatal(err)
	}
	next := files[0].Slot + 1
	other := &lsm.VersionEdit{NewFiles: []lsm.NewFile{{Level: 0, Meta: &lsm.FileMeta{FileNum: 999, Size: 100,
		Smallest: e.NewFiles[0].Meta.Smallest, Largest: e.NewFiles[0].Meta.Largest}}}}
	big := &lsm.VersionEdit{NewFiles: []lsm.NewFile{{Level: 0, Meta: &lsm.FileMeta{FileNum: 998, Size: 1 << 30,
		Smallest: e.NewFiles[0].Meta.Smallest, Largest: e.NewFiles[0].Meta.Largest}}}}
	for _, tc := range []struct {
		name  string
		edit  []byte
		files []FileSlot
		want  string
	}{
		{"garbage edit", []byte{0xff, 0xff}, nil, "malformed version edit"},
		{"slot out of range", other.Encode(nil), []FileSlot{{Table: 999, Slot: 8}}, "the pool has 8 slots"},
		{"negative slot", other.Encode(nil), []FileSlot{{Table: 999, Slot: -1}}, "the pool has 8 slots"},
		{"no slot for the table", other.Encode(nil), nil, "0 slots for 1 new tables"},
		{"slot for another table", other.Encode(nil), []FileSlot{{Table: 5, Slot: next}}, "new table 999 has no slot"},
		{"one slot twice", other.Encode(nil), []FileSlot{{Table: 999, Slot: next}, {Table: 999, Slot: next}}, "given to tables"},
		{"slot holding a live table", other.Encode(nil), []FileSlot{{Table: 999, Slot: files[0].Slot}}, "holds a live table"},
		{"table installed already", edit, []FileSlot{{Table: files[0].Table, Slot: next}}, "installed already"},
		{"slot holds no table", other.Encode(nil), []FileSlot{{Table: 999, Slot: next}}, "corrupt"},
		{"table over the slot", big.Encode(nil), []FileSlot{{Table: 998, Slot: next}}, "over the"},
	} {
		err := p.sec.Install(ctx, tc.edit, tc.files)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: Install = %v, want an error saying %q", tc.name, err, tc.want)
		}
		if got := p.sec.Tables(); len(got) != 1 || got[0] != files[0] {
			t.Fatalf("%s: file map is %v after a refused install, want %v", tc.name, got, files)
		}
	}
	// An edit whose writes never arrive waits, then is refused and
	// leaves the map as it was.
	b2 := set(t, p.prim, "b", "2")
	late := &lsm.VersionEdit{NewFiles: []lsm.NewFile{{Level: 0, Meta: &lsm.FileMeta{FileNum: 997, Size: 100,
		Smallest: e.NewFiles[0].Meta.Smallest, Largest: e.NewFiles[0].Meta.Largest, SmallestSeq: b2.Seq(), LargestSeq: b2.Seq()}}}}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.sec.Install(cctx, late.Encode(nil), []FileSlot{{Table: 997, Slot: next}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("install before its writes: %v", err)
	}
	if got := p.sec.Tables(); len(got) != 1 {
		t.Fatalf("file map is %v after a refused install", got)
	}
	expect(t, p.sec.DB(), "a", "1")
	if err := p.sec.Apply(ctx, b2.Repr(), b2.Seq()); err != nil {
		t.Fatal(err)
	}
	if err := p.prim.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, p.sec.DB(), "b", "2")
	if err := p.sec.Pool().Check(ctx); err != nil {
		t.Fatal(err)
	}
}
