package lsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// smallOptions make every mechanism (rotation, flush, L0 compaction,
// level compaction, file cutting) happen with little data.
func smallOptions() Options {
	return Options{
		MemTableSize:          32 << 10,
		L0CompactionThreshold: 2,
		LBaseMaxBytes:         64 << 10,
		TargetFileSize:        16 << 10,
		Table:                 TableOptions{BlockSize: 512, BlockRestartInterval: 4},
		BlockCacheSize:        64 << 10,
		TableCacheSize:        16,
		Logger:                quietLogger(),
	}
}

func mustOpen(t *testing.T, fs *memFS, opts Options) *DB {
	t.Helper()
	d, err := Open(fs, "db", opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return d
}

func expectGet(t *testing.T, d interface{ Get([]byte) ([]byte, error) }, key, want string) {
	t.Helper()
	got, err := d.Get([]byte(key))
	if want == "" {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%q) = %q, %v; want not found", key, got, err)
		}
		return
	}
	if err != nil || string(got) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, got, err, want)
	}
}

func TestBasicOps(t *testing.T) {
	fs := newMemFS()
	d := mustOpen(t, fs, smallOptions())
	steps := []struct {
		op         string
		key, value string
	}{
		{"set", "a", "1"}, {"set", "b", "2"}, {"set", "c", "3"},
		{"del", "b", ""}, {"set", "a", "1b"},
		{"rangedel", "c", "d"}, {"set", "cc", "4"},
	}
	for _, s := range steps {
		var err error
		switch s.op {
		case "set":
			err = d.Set([]byte(s.key), []byte(s.value), nil)
		case "del":
			err = d.Delete([]byte(s.key), nil)
		case "rangedel":
			err = d.DeleteRange([]byte(s.key), []byte(s.value), nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	check := func(d *DB) {
		t.Helper()
		for _, kv := range [][2]string{{"a", "1b"}, {"b", ""}, {"c", ""}, {"cc", "4"}, {"zz", ""}} {
			expectGet(t, d, kv[0], kv[1])
		}
	}
	check(d)
	if err := d.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(d)
	if err := d.Compact(context.Background(), []byte("a"), []byte("z")); err != nil {
		t.Fatal(err)
	}
	check(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, fs, smallOptions())
	check(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBatchAtomicAndReopen(t *testing.T) {
	fs := newMemFS()
	d := mustOpen(t, fs, smallOptions())
	b := NewBatch()
	for i := 0; i < 100; i++ {
		b.Set([]byte(fmt.Sprintf("k%03d", i)), []byte(fmt.Sprintf("v%d", i)))
	}
	b.DeleteRange([]byte("k010"), []byte("k020"))
	b.Delete([]byte("k050"))
	if err := d.Apply(context.Background(), b, &WriteOptions{Sync: true}); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, fs, smallOptions())
	defer d.Close()
	for i := 0; i < 100; i++ {
		want := fmt.Sprintf("v%d", i)
		if (i >= 10 && i < 20) || i == 50 {
			want = ""
		}
		expectGet(t, d, fmt.Sprintf("k%03d", i), want)
	}
}

func TestManyWritesFlushCompact(t *testing.T) {
	fs := newMemFS()
	d := mustOpen(t, fs, smallOptions())
	const n = 5000
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("key%06d", (i*7919)%n)
		if err := d.Set([]byte(k), []byte(fmt.Sprintf("val%06d-%0100d", i, i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := d.Metrics()
	if m.Flush.Count == 0 || m.Compact.Count == 0 {
		t.Fatalf("expected flushes and compactions:\n%s", m.String())
	}
	check := func(d *DB) {
		t.Helper()
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("key%06d", (i*7919)%n)
			expectGet(t, d, k, fmt.Sprintf("val%06d-%0100d", i, i))
		}
		it, err := d.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		c := 0
		for ok := it.First(); ok; ok = it.Next() {
			if want := fmt.Sprintf("key%06d", c); string(it.Key()) != want {
				t.Fatalf("iter key %q, want %q", it.Key(), want)
			}
			c++
		}
		if c != n {
			t.Fatalf("iterated %d keys, want %d", c, n)
		}
		c = n
		for ok := it.Last(); ok; ok = it.Prev() {
			c--
			if want := fmt.Sprintf("key%06d", c); string(it.Key()) != want {
				t.Fatalf("reverse iter key %q, want %q", it.Key(), want)
			}
		}
		if c != 0 {
			t.Fatalf("reverse stopped at %d", c)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, fs, smallOptions())
	check(d)
	t.Logf("\n%s", d.Metrics().String())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
