package rubble

import (
	"context"
	"slices"
	"testing"

	"github.com/nearstore/nearstore/kv/lsm"
)

// FuzzInstall feeds a secondary holding one shipped table arbitrary
// edits and file maps, as a faulty or hostile primary might send: each is
// installed or refused, never a panic, and a refused one leaves the file
// map and the data as they were.
func FuzzInstall(f *testing.F) {
	valid := (&lsm.VersionEdit{NewFiles: []lsm.NewFile{{Level: 0, Meta: &lsm.FileMeta{FileNum: 999, Size: 100,
		Smallest: []byte("a\x01\x00\x00\x00\x00\x00\x00\x00"), Largest: []byte("z\x01\x00\x00\x00\x00\x00\x00\x00")}}}}).Encode(nil)
	f.Add(valid, uint64(999), 1)
	f.Add(valid, uint64(999), 0)
	f.Add([]byte{}, uint64(0), 0)
	f.Add([]byte{5, 0, 1, 2, 3}, uint64(1), 3)
	// One pair serves every input: a refused one changes nothing, and an
	// accepted one (a valid edit, e.g. one deleting the table) may change
	// the data, after which only the map is checked.
	p := newPair(f, nil)
	b := set(f, p.prim, "a", "1")
	if err := p.sec.Apply(context.Background(), b.Repr(), b.Seq()); err != nil {
		f.Fatal(err)
	}
	if err := p.prim.Flush(context.Background()); err != nil {
		f.Fatal(err)
	}
	intact := true
	f.Fuzz(func(t *testing.T, edit []byte, table uint64, slot int) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // an edit waiting for writes is refused at once
		before := p.sec.Tables()
		err := p.sec.Install(ctx, edit, []FileSlot{{Table: table, Slot: slot}})
		if err == nil {
			intact = false
			return
		}
		if got := p.sec.Tables(); !slices.Equal(sorted(got), sorted(before)) {
			t.Fatalf("refused install (%v) changed the map: %v, was %v", err, got, before)
		}
		if intact {
			expect(t, p.sec.DB(), "a", "1")
		}
	})
}

func sorted(fs []FileSlot) []FileSlot {
	slices.SortFunc(fs, func(a, b FileSlot) int { return a.Slot - b.Slot })
	return fs
}
