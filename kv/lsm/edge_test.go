package lsm

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// TestEdgeCases: an empty key and value, values bigger than a block and
// than a memtable, and a batch bigger than a memtable, through flush,
// compaction and reopen.
func TestEdgeCases(t *testing.T) {
	fs := newMemFS()
	opts := smallOptions() // 32 KiB memtables, 512-byte blocks
	d := mustOpen(t, fs, opts)
	big := bytes.Repeat([]byte("0123456789"), 10_000) // 100 KB
	if err := d.Set(nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Set([]byte("big"), big, nil); err != nil {
		t.Fatal(err)
	}
	b := NewBatch()
	for i := 0; i < 2000; i++ { // ~240 KB in one batch
		b.Set([]byte(fmt.Sprintf("batch%05d", i)), bytes.Repeat([]byte{byte(i)}, 100))
	}
	if err := d.Apply(context.Background(), b, &WriteOptions{Sync: true}); err != nil {
		t.Fatal(err)
	}
	check := func(d *DB) {
		t.Helper()
		if v, err := d.Get(nil); err != nil || len(v) != 0 {
			t.Fatalf("Get(empty) = %q, %v", v, err)
		}
		if v, err := d.Get([]byte("big")); err != nil || !bytes.Equal(v, big) {
			t.Fatalf("Get(big) = %d bytes, %v", len(v), err)
		}
		for i := 0; i < 2000; i += 97 {
			if v, err := d.Get([]byte(fmt.Sprintf("batch%05d", i))); err != nil || !bytes.Equal(v, bytes.Repeat([]byte{byte(i)}, 100)) {
				t.Fatalf("batch key %d: %d bytes, %v", i, len(v), err)
			}
		}
		it, err := d.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil || n != 2002 {
			t.Fatalf("iterated %d keys, %v", n, err)
		}
	}
	check(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, fs, opts) // from the WAL
	check(d)
	if err := d.Compact(context.Background(), nil, []byte("z")); err != nil {
		t.Fatal(err)
	}
	check(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, fs, opts) // from tables
	check(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
