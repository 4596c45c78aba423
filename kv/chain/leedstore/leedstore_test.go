package leedstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/nearstore/nearstore/internal/chaintest"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/leed"
	"github.com/nearstore/nearstore/volume"
)

func opts() leed.Options {
	return leed.Options{AvgValueSize: 64, MaxValueSize: 1024, ItemsPerSegment: 100, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// What kv/chain relies on, on a file volume: ordered writes, snapshots
// of exactly what was applied, the applied point kept across a restart
// without a clean close, and a COPY (Reset, Import, SetApplied).
func TestChainContract(t *testing.T) {
	ctx := context.Background()
	spec := "file:" + filepath.Join(t.TempDir(), "leed.img") + "?size=8MiB"
	dev, err := volume.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	s, err := Open(ctx, dev, opts())
	if err != nil {
		t.Fatal(err)
	}
	if s.Applied() != 0 {
		t.Fatalf("fresh store applied %d", s.Applied())
	}
	put := func(seq uint64, k, v string) {
		t.Helper()
		if err := s.Apply(ctx, seq, chain.Op{Key: []byte(k), Value: []byte(v)}); err != nil {
			t.Fatalf("apply %d: %v", seq, err)
		}
	}
	for i := 1; i <= 20; i++ {
		put(uint64(i), fmt.Sprintf("k%d", i%5), fmt.Sprintf("v%d", i))
	}
	for _, seq := range []uint64{20, 22, 0} {
		if err := s.Apply(ctx, seq, chain.Op{Key: []byte("x"), Value: []byte("y")}); err == nil {
			t.Fatalf("write %d after 20 was applied", seq)
		}
	}
	// A delete of a missing key still takes its sequence number.
	if err := s.Apply(ctx, 21, chain.Op{Key: []byte("missing"), Delete: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, 22, chain.Op{Key: []byte("k0"), Delete: true}); err != nil {
		t.Fatal(err)
	}
	// A key LEED cannot hold is refused, and takes no sequence number.
	if err := s.Apply(ctx, 23, chain.Op{Key: []byte("a key of more than sixteen bytes"), Value: []byte("v")}); err == nil {
		t.Fatal("17-byte key applied")
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	put(23, "late", "x")
	var order []string
	got := map[string]string{}
	if err := snap.Range(ctx, func(k, v []byte) error { order = append(order, string(k)); got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	snap.Close()
	want := map[string]string{"k1": "v16", "k2": "v17", "k3": "v18", "k4": "v19"}
	if snap.Seq() != 22 || fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(order) != "[k1 k2 k3 k4]" {
		t.Fatalf("snapshot at %d: %v in order %v; want 22: %v", snap.Seq(), got, order, want)
	}

	// A restart without Close (the node was killed): what was applied is
	// there, and Applied() says up to where.
	s2, err := Open(ctx, dev, opts())
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s2.Get(ctx, []byte("late")); s2.Applied() != 23 || !ok || err != nil || string(v) != "x" {
		t.Fatalf("after restart: applied %d, late=%q %v %v", s2.Applied(), v, ok, err)
	}
	if _, ok, _ := s2.Get(ctx, []byte("k0")); ok {
		t.Fatal("deleted key is back")
	}
	s = s2

	// A COPY replaces everything, and its sequence number survives a
	// restart.
	if err := s.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Applied() != 0 {
		t.Fatalf("after reset applied %d", s.Applied())
	}
	if err := s.Import(ctx, []chain.KV{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetApplied(ctx, 40); err != nil {
		t.Fatal(err)
	}
	put(41, "c", "3")
	s3, err := Open(ctx, dev, opts())
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if s3.Applied() != 41 {
		t.Fatalf("after COPY and restart: applied %d, want 41", s3.Applied())
	}
	for k, want := range map[string]string{"a": "1", "b": "2", "c": "3"} {
		if v, ok, err := s3.Get(ctx, []byte(k)); !ok || err != nil || string(v) != want {
			t.Fatalf("%s after COPY: %q %v %v", k, v, ok, err)
		}
	}
	if _, ok, _ := s3.Get(ctx, []byte("k1")); ok {
		t.Fatal("a key from before the COPY survived it")
	}
	// SetApplied alone (no write after it) survives a restart too.
	if err := s3.SetApplied(ctx, 50); err != nil {
		t.Fatal(err)
	}
	s4, err := Open(ctx, dev, opts())
	if err != nil {
		t.Fatal(err)
	}
	if s4.Applied() != 50 {
		t.Fatalf("applied %d after SetApplied(50) and a restart", s4.Applied())
	}
}

// BenchmarkApply is a chain node's write path on a LEED replica, as
// "node serve --store leed" runs it: ordered 256-byte puts over 5,000
// keys to a store on a 256 MiB device file.
func BenchmarkApply(b *testing.B) {
	ctx := context.Background()
	dev, err := volume.Open("file:" + filepath.Join(b.TempDir(), "leed.img") + "?size=256MiB")
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	s, err := Open(ctx, dev, leed.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := make([]byte, 256)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := chaintest.StartCPU()
	for i := range b.N {
		k := fmt.Appendf(nil, "user%08d", i%5000)
		if err := s.Apply(ctx, uint64(i+1), chain.Op{Key: k, Value: val}); err != nil {
			b.Fatal(err)
		}
	}
	cpu.Report(b)
}
