package lsm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/vfs"
)

// liveImage is the file system as a process reading it now sees it: the
// current names with every byte written, synced or not, taken atomically.
func (m *memFS) liveImage() *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := newMemFS()
	maps.Copy(n.dirs, m.dirs)
	for name, nd := range m.names {
		c := &memNode{data: slices.Clone(nd.data), synced: slices.Clone(nd.data)}
		n.names[name] = c
		n.durable[name] = c
	}
	return n
}

// contents is every file's name and bytes.
func (m *memFS) contents() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for name, nd := range m.names {
		out[name] = string(nd.data)
	}
	return out
}

func roKey(i int) []byte   { return []byte(fmt.Sprintf("k%06d", i)) }
func roValue(i int) string { return fmt.Sprintf("v%d-%0100d", i, i) }

// TestReadOnlyLiveSnapshot opens, read-only, images of a store taken
// while a writer is committing (with flushes and compactions under way):
// every write synced before the image is there with its value, any later
// one there is whole, the iterator agrees with Get, writes, flushes and
// compactions are refused with ErrReadOnly, and not one byte of the image
// changes.
func TestReadOnlyLiveSnapshot(t *testing.T) {
	opts := smallOptions()
	mfs := newMemFS()
	w := mustOpen(t, mfs, opts)
	defer w.Close()

	var synced atomic.Int64 // highest i whose synced write returned
	synced.Store(-1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			sync := i%7 == 0
			if err := w.Set(roKey(i), []byte(roValue(i)), &WriteOptions{Sync: sync}); err != nil {
				t.Error(err)
				return
			}
			if sync {
				synced.Store(int64(i))
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	for snap := 0; snap < 4; snap++ {
		// Let the writer get ahead (several memtables, so flushes and
		// compactions have happened).
		for synced.Load() < int64(1500*(snap+1)) {
			if t.Failed() {
				return
			}
			time.Sleep(time.Millisecond)
		}
		acked := int(synced.Load())
		img := mfs.liveImage()
		before := img.contents()
		ro := openReadOnlyChecked(t, img, opts, acked)
		if after := img.contents(); !maps.Equal(before, after) {
			t.Fatalf("snapshot %d: the read-only open changed the files: %d names before, %d after", snap, len(before), len(after))
		}
		ro.Close()
		if after := img.contents(); !maps.Equal(before, after) {
			t.Fatalf("snapshot %d: closing the read-only store changed the files", snap)
		}
	}
}

// openReadOnlyChecked opens img read-only and checks it holds every key up
// to acked, each later key whole, and refuses writes.
func openReadOnlyChecked(t *testing.T, img vfs.FS, opts Options, acked int) *DB {
	t.Helper()
	opts.ReadOnly = true
	ro, err := Open(img, "db", opts)
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	for i := 0; i <= acked; i++ {
		v, err := ro.Get(roKey(i))
		if err != nil || string(v) != roValue(i) {
			t.Fatalf("key %d of %d acknowledged: %.20q, %v", i, acked, v, err)
		}
	}
	it, err := ro.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if want := roKey(n); string(it.Key()) != string(want) || string(it.Value()) != roValue(n) {
			t.Fatalf("iterator entry %d: %q = %.20q; want %q", n, it.Key(), it.Value(), want)
		}
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n <= acked {
		t.Fatalf("iterator saw %d keys; %d were acknowledged", n, acked+1)
	}
	for what, err := range map[string]error{
		"Set":         ro.Set([]byte("x"), []byte("y"), nil),
		"Delete":      ro.Delete(roKey(0), &WriteOptions{Sync: true}),
		"DeleteRange": ro.DeleteRange(roKey(0), roKey(5), nil),
		"Apply":       ro.Apply(context.Background(), NewBatch(), nil),
		"Flush":       ro.Flush(context.Background()),
		"Compact":     ro.Compact(context.Background(), []byte("a"), []byte("z")),
	} {
		if !errors.Is(err, ErrReadOnly) {
			t.Fatalf("%s on a read-only store: %v; want ErrReadOnly", what, err)
		}
	}
	if v, err := ro.Get(roKey(0)); err != nil || string(v) != roValue(0) {
		t.Fatalf("after refused writes, key 0: %.20q, %v", v, err)
	}
	return ro
}

// TestReadOnlyLocalDir opens, read-only, the local directory of a writer
// that is still open (idle): the open replays its unflushed WAL, reads
// what it wrote, and leaves every file as it was; a directory with no
// store is refused, and not created.
func TestReadOnlyLocalDir(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "db")
	opts := smallOptions()
	w, err := Open(vfs.OS(root), "db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const n = 3000
	for i := 0; i < n; i++ {
		if err := w.Set(roKey(i), []byte(roValue(i)), &WriteOptions{Sync: i == n-1}); err != nil {
			t.Fatal(err)
		}
	}
	// Idle: no flush or compaction is changing the directory under us.
	for i := 0; i < 3; {
		if m := w.Metrics(); m.Compact.InProgress == 0 && !m.Flush.InProgress {
			i++
		} else {
			i = 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := dirContents(t, dir)
	ro := openReadOnlyChecked(t, vfs.OS(root), opts, n-1)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if after := dirContents(t, dir); !maps.Equal(before, after) {
		t.Fatalf("read-only open changed %s", dir)
	}

	missing := filepath.Join(t.TempDir(), "none")
	opts.ReadOnly = true
	if _, err := Open(vfs.OS(""), missing, opts); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only open of no store: %v; want not exist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only open created %s: %v", missing, err)
	}
}

func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}
