package lsmstore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/lsm"
)

// The Store contract kv/chain relies on, on a real directory.
func TestStoreContract(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "s")
	s, err := Open(dir, lsm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Applied() != 0 {
		t.Fatalf("fresh store applied %d", s.Applied())
	}
	for i := 1; i <= 10; i++ {
		if err := s.Apply(ctx, uint64(i), chain.Op{Key: fmt.Appendf(nil, "k%d", i%4), Value: fmt.Appendf(nil, "v%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Writes come in sequence order, without gaps or repeats.
	for _, seq := range []uint64{10, 12, 0} {
		if err := s.Apply(ctx, seq, chain.Op{Key: []byte("x")}); err == nil {
			t.Fatalf("applied write %d after 10", seq)
		}
	}
	if err := s.Apply(ctx, 11, chain.Op{Key: []byte("k0"), Delete: true}); err != nil {
		t.Fatal(err)
	}
	// A snapshot holds exactly what was applied when it was taken.
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, 12, chain.Op{Key: []byte("late"), Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if err := snap.Range(ctx, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	snap.Close()
	want := map[string]string{"k1": "v9", "k2": "v10", "k3": "v7"}
	if snap.Seq() != 11 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("snapshot at %d: %v, want 11: %v", snap.Seq(), got, want)
	}
	// The applied point survives a reopen, with the data.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, lsm.Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, ok, err := s.Get(ctx, []byte("late")); s.Applied() != 12 || !ok || err != nil || string(v) != "x" {
		t.Fatalf("after reopen: applied %d, late=%q %v %v", s.Applied(), v, ok, err)
	}
	if _, ok, _ := s.Get(ctx, []byte("k0")); ok {
		t.Fatal("deleted key is back")
	}
	// A COPY: Reset, Import, SetApplied replace everything.
	if err := s.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Import(ctx, []chain.KV{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("m"), Value: []byte("user key named like the meta key")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetApplied(ctx, 40); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, []byte("k1")); ok || s.Applied() != 40 {
		t.Fatalf("after COPY: old key present=%v, applied %d", ok, s.Applied())
	}
	if v, ok, _ := s.Get(ctx, []byte("m")); !ok || string(v) != "user key named like the meta key" {
		t.Fatalf("user key m: %q %v", v, ok)
	}
	if err := s.Apply(ctx, 41, chain.Op{Key: []byte("b"), Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
}
