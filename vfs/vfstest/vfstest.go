// Package vfstest checks that an implementation of vfs.FS behaves as the
// interface promises. Every implementation's tests run it, so stores can
// rely on the same behaviour from the local file system and offloadfs.
package vfstest

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/nearstore/nearstore/vfs"
)

// Run runs the conformance tests; newFS returns an empty file system.
func Run(t *testing.T, newFS func(t *testing.T) vfs.FS) {
	tests := []struct {
		name string
		fn   func(t *testing.T, v vfs.FS)
	}{
		{"WriteReadStat", testWriteReadStat},
		{"Cursor", testCursor},
		{"OpenReadWrite", testOpenReadWrite},
		{"Missing", testMissing},
		{"SparseWrite", testSparseWrite},
		{"Truncate", testTruncate},
		{"Preallocate", testPreallocate},
		{"Rename", testRename},
		{"Dirs", testDirs},
		{"ReadOnlyHandle", testReadOnlyHandle},
		{"ConcurrentReadAt", testConcurrentReadAt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newFS(t)) })
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, v vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := v.Create(name)
	must(t, err)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	must(t, f.Sync())
	must(t, f.Close())
}

func contents(t *testing.T, v vfs.FS, name string) []byte {
	t.Helper()
	f, err := v.Open(name)
	must(t, err)
	defer f.Close()
	b, err := io.ReadAll(f)
	must(t, err)
	return b
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func testWriteReadStat(t *testing.T, v vfs.FS) {
	data := pattern(100000, 1)
	create(t, v, "a", data)
	if got := contents(t, v, "a"); !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, want %d equal ones", len(got), len(data))
	}
	fi, err := v.Stat("a")
	must(t, err)
	if fi.Size() != int64(len(data)) || fi.IsDir() || fi.Name() != "a" {
		t.Fatalf("Stat = %s size %d dir %v", fi.Name(), fi.Size(), fi.IsDir())
	}
	f, err := v.Open("a")
	must(t, err)
	defer f.Close()
	buf := make([]byte, 10)
	n, err := f.ReadAt(buf, int64(len(data)-4))
	if n != 4 || err != io.EOF || !bytes.Equal(buf[:4], data[len(data)-4:]) {
		t.Fatalf("ReadAt at the end = %d, %v", n, err)
	}
	fi, err = f.Stat()
	must(t, err)
	if fi.Size() != int64(len(data)) {
		t.Fatalf("File.Stat size %d", fi.Size())
	}
}

func testCursor(t *testing.T, v vfs.FS) {
	f, err := v.Create("log")
	must(t, err)
	var want []byte
	for i := range 50 {
		rec := pattern(100+i*37, byte(i))
		want = append(want, rec...)
		if n, err := f.Write(rec); n != len(rec) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	must(t, f.Sync())
	must(t, f.Close())
	f, err = v.Open("log")
	must(t, err)
	defer f.Close()
	var got []byte
	buf := make([]byte, 333)
	for {
		n, err := f.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		must(t, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes back, want %d equal ones", len(got), len(want))
	}
}

func testOpenReadWrite(t *testing.T, v vfs.FS) {
	f, err := v.OpenReadWrite("rw")
	must(t, err)
	_, err = f.WriteAt([]byte("hello"), 0)
	must(t, err)
	must(t, f.Close())
	f, err = v.OpenReadWrite("rw")
	must(t, err)
	_, err = f.WriteAt([]byte("J"), 0)
	must(t, err)
	must(t, f.Close())
	if got := contents(t, v, "rw"); string(got) != "Jello" {
		t.Fatalf("got %q, want Jello (OpenReadWrite must not truncate)", got)
	}
	create(t, v, "rw", []byte("x"))
	if got := contents(t, v, "rw"); string(got) != "x" {
		t.Fatalf("got %q after Create, want x", got)
	}
}

func testMissing(t *testing.T, v vfs.FS) {
	if _, err := v.Open("nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open missing: %v", err)
	}
	if _, err := v.Stat("nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat missing: %v", err)
	}
	if err := v.Remove("nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove missing: %v", err)
	}
	if err := v.Rename("nope", "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Rename missing: %v", err)
	}
	if _, err := v.Create("nodir/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Create in a missing directory: %v", err)
	}
	if _, err := v.List("nodir"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List missing: %v", err)
	}
}

func testSparseWrite(t *testing.T, v vfs.FS) {
	f, err := v.Create("s")
	must(t, err)
	_, err = f.WriteAt([]byte("abc"), 0)
	must(t, err)
	_, err = f.WriteAt([]byte("xyz"), 10000)
	must(t, err)
	must(t, f.Close())
	got := contents(t, v, "s")
	want := make([]byte, 10003)
	copy(want, "abc")
	copy(want[10000:], "xyz")
	if !bytes.Equal(got, want) {
		t.Fatalf("sparse file reads back wrong (%d bytes)", len(got))
	}
}

func testTruncate(t *testing.T, v vfs.FS) {
	data := pattern(20000, 3)
	create(t, v, "t", data)
	f, err := v.OpenReadWrite("t")
	must(t, err)
	must(t, f.Truncate(5000))
	must(t, f.Truncate(9000))
	must(t, f.Close())
	want := append(append([]byte(nil), data[:5000]...), make([]byte, 4000)...)
	if got := contents(t, v, "t"); !bytes.Equal(got, want) {
		t.Fatalf("after shrink and grow: %d bytes, not the expected %d", len(got), len(want))
	}
}

func testPreallocate(t *testing.T, v vfs.FS) {
	f, err := v.Create("p")
	must(t, err)
	must(t, f.Preallocate(0, 1<<20))
	fi, err := f.Stat()
	must(t, err)
	if fi.Size() != 0 {
		t.Fatalf("size %d after Preallocate, want 0", fi.Size())
	}
	_, err = f.Write([]byte("data"))
	must(t, err)
	must(t, f.Close())
	if got := contents(t, v, "p"); string(got) != "data" {
		t.Fatalf("got %q", got)
	}
}

func testRename(t *testing.T, v vfs.FS) {
	create(t, v, "a", []byte("A"))
	create(t, v, "b", []byte("B"))
	must(t, v.Rename("a", "b"))
	if _, err := v.Stat("a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old name still there: %v", err)
	}
	if got := contents(t, v, "b"); string(got) != "A" {
		t.Fatalf("b = %q after rename over it", got)
	}
	must(t, v.MkdirAll("d"))
	must(t, v.Rename("b", "d/c"))
	if got := contents(t, v, "d/c"); string(got) != "A" {
		t.Fatalf("d/c = %q", got)
	}
	must(t, v.SyncDir("d"))
}

func testDirs(t *testing.T, v vfs.FS) {
	must(t, v.MkdirAll("x/y/z"))
	must(t, v.MkdirAll("x/y/z"))
	for _, n := range []string{"c", "a", "b"} {
		create(t, v, v.PathJoin("x", "y", n), []byte(n))
	}
	names, err := v.List("x/y")
	must(t, err)
	if want := []string{"a", "b", "c", "z"}; !slices.Equal(names, want) {
		t.Fatalf("List = %q, want %q", names, want)
	}
	fi, err := v.Stat("x/y/z")
	must(t, err)
	if !fi.IsDir() {
		t.Fatal("directory does not Stat as one")
	}
	if err := v.Remove("x/y"); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("removing a non-empty directory: %v", err)
	}
	must(t, v.Remove("x/y/z"))
	if _, err := v.Create("x/y/a/f"); err == nil {
		t.Fatal("created a file below a file")
	}
	must(t, v.SyncDir("x"))
}

func testReadOnlyHandle(t *testing.T, v vfs.FS) {
	create(t, v, "r", []byte("abc"))
	f, err := v.Open("r")
	must(t, err)
	defer f.Close()
	if _, err := f.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("wrote through a read-only handle")
	}
	if got := contents(t, v, "r"); string(got) != "abc" {
		t.Fatalf("got %q", got)
	}
}

func testConcurrentReadAt(t *testing.T, v vfs.FS) {
	data := pattern(1<<20, 9)
	create(t, v, "c", data)
	f, err := v.Open("c")
	must(t, err)
	defer f.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := range 64 {
				off := int64((g*64+i)*4096) % int64(len(data))
				if _, err := f.ReadAt(buf, off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf, data[off:off+4096]) {
					errs <- errors.New("concurrent ReadAt returned wrong bytes")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
