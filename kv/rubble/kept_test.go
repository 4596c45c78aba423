package rubble

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/nearstore/nearstore/kv/lsm"
)

// TestKeptTables: the tables a replica keeps in its slots across a
// Reset (keptOf) are the shipped tables of its tree, identified by the
// primary's number, size and sequence bounds; a resync maps the
// primary's tables that are among them to their slots (reuseKept) and
// writes the rest, and the replica takes a kept slot only for the very
// table kept in it (checkKeptLocked).
func TestKeptTables(t *testing.T) {
	ctx := context.Background()
	p := newPair(t, nil)
	for i := range 3 {
		for j := range 20 {
			b := set(t, p.prim, fmt.Sprintf("k%d-%02d", i, j), "v")
			if err := p.sec.Apply(ctx, b.Repr(), b.Seq()); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.prim.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	kept := keptOf(p.sec)
	if len(kept) != 3 {
		t.Fatalf("kept %+v, want the 3 shipped tables", kept)
	}
	slots := map[uint64]int{}
	for _, f := range p.sec.Tables() {
		slots[f.Table] = f.Slot
	}
	for _, k := range kept {
		if s, ok := slots[k.table]; !ok || s != k.slot {
			t.Fatalf("kept table %d in slot %d; the map has %v", k.table, k.slot, slots)
		}
	}
	base, err := p.prim.VersionAfter(&lsm.VersionEdit{})
	if err != nil {
		t.Fatal(err)
	}
	// The primary's tree: the three kept tables, and one more that has a
	// kept table's number but another size (a table of another lineage).
	m0 := base.NewFiles[0].Meta
	other := &lsm.FileMeta{FileNum: m0.FileNum, Size: m0.Size + 1, Smallest: m0.Smallest, Largest: m0.Largest,
		SmallestSeq: m0.SmallestSeq, LargestSeq: m0.LargestSeq}
	files := append(base.NewFiles, lsm.NewFile{Level: 6, Meta: other})
	tables, _, err := readTables(p.primFS, "db", base.NewFiles)
	if err != nil {
		t.Fatal(err)
	}
	tables = append(tables, []byte("another table"))
	n := &note{kept: kept}
	rc := &record{}
	ship, shipTables, reused := reuseKept(n, files, tables, rc)
	if len(reused) != 3 || len(ship) != 1 || ship[0].Meta != other || len(shipTables) != 1 || string(shipTables[0]) != "another table" || len(rc.sums) != 3 {
		t.Fatalf("reused %v, ship %v, sums %v: want the 3 kept tables reused, summed, and the other written", reused, ship, rc.sums)
	}
	if s, _, r := reuseKept(&note{}, files, tables, &record{}); len(s) != len(files) || r != nil {
		t.Fatalf("nothing kept: ship %d of %d, reused %v", len(s), len(files), r)
	}

	st := &Store{kept: kept}
	st.sec.Store(p.sec)
	withBase := &lsm.VersionEdit{NewFiles: base.NewFiles}
	badSum := maps.Clone(rc.sums)
	badSum[kept[1].table]++
	for _, tc := range []struct {
		name  string
		base  *lsm.VersionEdit
		files []FileSlot
		sums  map[uint64]uint32
		want  int // -1: refused
	}{
		{"the kept tables in their slots", withBase, reused, rc.sums, 3},
		{"a written table in a free slot", withBase, []FileSlot{{Table: 99, Slot: 7}}, nil, 0},
		{"another table in a kept slot", withBase, []FileSlot{{Table: 99, Slot: kept[0].slot}}, rc.sums, -1},
		{"a kept table's number, another table", &lsm.VersionEdit{NewFiles: []lsm.NewFile{{Level: 6, Meta: other}}},
			[]FileSlot{{Table: other.FileNum, Slot: slots[other.FileNum]}}, rc.sums, -1},
		{"a kept slot whose bytes are not the primary's table", withBase, reused, badSum, -1},
		{"a kept slot without a checksum", withBase, reused, nil, -1},
	} {
		got, err := st.checkKeptLocked(tc.base, tc.files, tc.sums)
		if tc.want < 0 && err == nil || tc.want >= 0 && (err != nil || got != tc.want) {
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}

	// A replica that let its kept tables go (keptFor passed, which
	// applyRecordLocked checks on the very record that resyncs it) still
	// gets a record the primary made from its older note: tables mapped
	// to slots the primary did not write, with their checksums. It must
	// check those slots' bytes all the same, and the bytes of a table
	// another replica kept but the primary wrote here match its sum.
	gone := &Store{}
	gone.sec.Store(p.sec)
	if _, err := gone.checkKeptLocked(withBase, reused, badSum); err == nil {
		t.Errorf("kept tables let go: a slot whose bytes are not the primary's table taken")
	}
	if _, err := gone.checkKeptLocked(withBase, reused, rc.sums); err != nil {
		t.Errorf("kept tables let go: the slots holding the primary's tables refused: %v", err)
	}
}
