package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/offloadfs/fusefs"
)

// newDevice returns an offloadfs device of size bytes in memory, formatted.
func newDevice(t *testing.T, size int64) offloadfs.Device {
	t.Helper()
	dev := testfs.Device(t, fmt.Sprintf("mem:%d", size))
	testfs.Format(t, dev)
	return dev
}

// serve mounts fsys in a new directory and returns the directory. The
// mount is gone when the test ends, whatever happened; the test skips if
// FUSE cannot be used here.
func serve(t *testing.T, fsys *offloadfs.FS) (string, *fusefs.Server) {
	t.Helper()
	dir := t.TempDir()
	srv, err := fusefs.Mount(dir, fsys, fusefs.Options{Logger: slog.New(slog.DiscardHandler)})
	if errors.Is(err, fusefs.ErrUnavailable) {
		t.Skipf("FUSE is not available here (needs /dev/fuse and root or fusermount3): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			srv.Detach()
		}
	})
	return dir, srv
}

func mountRW(t *testing.T, dev offloadfs.Device) *offloadfs.FS {
	t.Helper()
	fsys, err := offloadfs.Mount(context.Background(), dev, offloadfs.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// mountRO mounts dev read-only until the test ends.
func mountRO(t *testing.T, dev offloadfs.Device) *offloadfs.FS {
	t.Helper()
	ro, err := offloadfs.MountReadOnly(context.Background(), dev, offloadfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	return ro
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestFilesAgree writes files of awkward sizes through the mount, then
// reads them back through offloadfs after unmounting.
func TestFilesAgree(t *testing.T) {
	dev := newDevice(t, 64<<20)
	fsys := mountRW(t, dev)
	dir, srv := serve(t, fsys)

	sizes := []int{0, 1, 4095, 4096, 4097, 1<<20 + 7, 3 << 20}
	want := map[string][]byte{}
	if err := os.MkdirAll(filepath.Join(dir, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		name := fmt.Sprintf("a/b/f%d", n)
		want[name] = randBytes(uint64(i), n)
		if err := os.WriteFile(filepath.Join(dir, name), want[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Through the mount.
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("%s through the mount: %d bytes, want %d (or contents differ)", name, len(got), len(b))
		}
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		ofi, err := fsys.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Size() != int64(len(b)) || st.Ino != ofi.Sys().(*offloadfs.FileInfo).Ino() {
			t.Errorf("%s: size %d ino %d, offloadfs says %d, %d", name, fi.Size(), st.Ino, ofi.Size(), ofi.Sys().(*offloadfs.FileInfo).Ino())
		}
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	ro := mountRO(t, dev)
	for name, b := range want {
		f, err := ro.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("%s after unmount: %d bytes, want %d (or contents differ)", name, len(got), len(b))
		}
	}
	testfs.Fsck(t, ro)
}

// TestNamespace covers the directory operations and their errors.
func TestNamespace(t *testing.T) {
	dev := newDevice(t, 16<<20)
	fsys := mountRW(t, dev)
	defer fsys.Close()
	dir, _ := serve(t, fsys)
	p := func(s string) string { return filepath.Join(dir, s) }

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	wantErr := func(err error, want syscall.Errno) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("got %v, want %v", err, want)
		}
	}
	must(os.Mkdir(p("d"), 0o755))
	must(os.Mkdir(p("e"), 0o755))
	must(os.WriteFile(p("d/x"), []byte("hello"), 0o644))
	wantErr(os.Mkdir(p("d"), 0o755), syscall.EEXIST)
	wantErr(syscall.Rmdir(p("d")), syscall.ENOTEMPTY)
	wantErr(syscall.Unlink(p("d")), syscall.EISDIR)
	wantErr(syscall.Rmdir(p("d/x")), syscall.ENOTDIR)
	_, err := os.Open(p("nope"))
	wantErr(err, syscall.ENOENT)
	wantErr(os.Link(p("d/x"), p("d/y")), syscall.EPERM)
	wantErr(os.Symlink("x", p("d/s")), syscall.EPERM)

	// Renames within and across directories, over a file, and refused
	// with RENAME_NOREPLACE.
	must(os.Rename(p("d/x"), p("d/x2")))
	must(os.Rename(p("d/x2"), p("e/x3")))
	must(os.WriteFile(p("e/y"), []byte("other"), 0o644))
	wantErr(unix.Renameat2(unix.AT_FDCWD, p("e/x3"), unix.AT_FDCWD, p("e/y"), unix.RENAME_NOREPLACE), syscall.EEXIST)
	must(os.Rename(p("e/x3"), p("e/y")))
	got, err := os.ReadFile(p("e/y"))
	must(err)
	if string(got) != "hello" {
		t.Fatalf("e/y = %q after rename over it", got)
	}
	must(os.Rename(p("e"), p("d/e")))
	ents, err := os.ReadDir(p("d"))
	must(err)
	if len(ents) != 1 || ents[0].Name() != "e" || !ents[0].IsDir() {
		t.Fatalf("d lists %v", ents)
	}
	if _, err := fsys.Stat("d/e/y"); err != nil {
		t.Fatalf("offloadfs does not see d/e/y: %v", err)
	}

	// A file removed while open stays usable through its descriptor,
	// and its inode number, once reused, is a different file.
	f, err := os.OpenFile(p("d/e/y"), os.O_RDWR, 0)
	must(err)
	must(os.Remove(p("d/e/y")))
	_, err = f.WriteAt([]byte("HELLO, again"), 0)
	must(err)
	fi, err := f.Stat()
	must(err)
	if fi.Size() != 12 {
		t.Fatalf("removed open file: size %d, want 12", fi.Size())
	}
	buf := make([]byte, 12)
	_, err = f.ReadAt(buf, 0)
	must(err)
	must(f.Close())
	if string(buf) != "HELLO, again" {
		t.Fatalf("removed open file reads %q", buf)
	}
	must(os.WriteFile(p("d/e/new"), []byte("new"), 0o644))
	got, err = os.ReadFile(p("d/e/new"))
	must(err)
	if string(got) != "new" {
		t.Fatalf("new file reads %q", got)
	}

	// Truncation through the path and through a descriptor; chmod and
	// chown to what is shown succeed, to anything else fail with EPERM
	// and change nothing; utimes stores the modification time.
	must(os.Truncate(p("d/e/new"), 10000))
	must(os.Chmod(p("d/e/new"), 0o644))
	must(os.Chmod(p("d"), 0o755|os.ModeDir))
	wantErr(os.Chmod(p("d/e/new"), 0o600), syscall.EPERM)
	wantErr(os.Chmod(p("d"), 0o700), syscall.EPERM)
	must(os.Chown(p("d/e/new"), os.Getuid(), os.Getgid()))
	wantErr(os.Chown(p("d/e/new"), os.Getuid()+1, -1), syscall.EPERM)
	wantErr(os.Chown(p("d/e/new"), -1, os.Getgid()+1), syscall.EPERM)
	old := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	must(os.Chtimes(p("d/e/new"), time.Now(), old))
	fi, err = os.Stat(p("d/e/new"))
	must(err)
	if fi.Size() != 10000 || fi.Mode() != 0o644 || !fi.ModTime().Equal(old) {
		t.Fatalf("after truncate, chmod and utimes: size %d mode %v mtime %v", fi.Size(), fi.Mode(), fi.ModTime())
	}
	if ofi, err := fsys.Stat("d/e/new"); err != nil || !ofi.ModTime().Equal(old) {
		t.Fatalf("offloadfs after utimes: %v, %v; want mtime %v", ofi, err, old)
	}
	got, err = os.ReadFile(p("d/e/new"))
	must(err)
	if !bytes.Equal(got, append([]byte("new"), make([]byte, 9997)...)) {
		t.Fatal("truncated file: the grown part is not zeroes")
	}
	f, err = os.OpenFile(p("d/e/new"), os.O_RDWR|os.O_TRUNC, 0)
	must(err)
	fi, err = f.Stat()
	must(err)
	if fi.Size() != 0 {
		t.Fatalf("O_TRUNC: size %d", fi.Size())
	}
	must(f.Truncate(5))
	must(f.Sync())
	must(f.Close())
	ofi, err := fsys.Stat("d/e/new")
	must(err)
	if ofi.Size() != 5 {
		t.Fatalf("offloadfs: size %d after ftruncate, want 5", ofi.Size())
	}

	// fallocate reserves blocks; with KEEP_SIZE the size stays.
	f, err = os.OpenFile(p("d/e/new"), os.O_RDWR, 0)
	must(err)
	must(unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 1<<20))
	fi, err = f.Stat()
	must(err)
	if fi.Size() != 5 || fi.Sys().(*syscall.Stat_t).Blocks < (1<<20)/512 {
		t.Fatalf("fallocate KEEP_SIZE: size %d blocks %d", fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks)
	}
	must(unix.Fallocate(int(f.Fd()), 0, 0, 8192))
	fi, err = f.Stat()
	must(err)
	if fi.Size() != 8192 {
		t.Fatalf("fallocate: size %d, want 8192", fi.Size())
	}
	wantErr(unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096), syscall.EOPNOTSUPP)
	must(f.Close())

	var st unix.Statfs_t
	must(unix.Statfs(dir, &st))
	u := fsys.Usage()
	if st.Bsize != int64(u.BlockSize) || st.Blocks != u.Blocks || st.Files != u.Inodes || st.Namelen != offloadfs.MaxNameLen {
		t.Fatalf("statfs %+v, usage %+v", st, u)
	}
}

// TestConcurrent writes and reads many files at once through the mount.
func TestConcurrent(t *testing.T) {
	dev := newDevice(t, 64<<20)
	fsys := mountRW(t, dev)
	defer fsys.Close()
	dir, _ := serve(t, fsys)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			name := filepath.Join(dir, fmt.Sprintf("f%02d", i))
			b := randBytes(uint64(i), 200<<10+i)
			if err := os.WriteFile(name, b, 0o644); err != nil {
				errs <- err
				return
			}
			got, err := os.ReadFile(name)
			if err == nil && !bytes.Equal(got, b) {
				err = fmt.Errorf("%s: contents differ", name)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ents, err := fsys.ReadDir("/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != n || !slices.IsSorted(names) {
		t.Fatalf("offloadfs lists %v", names)
	}
}

// TestReadOnly mounts a read-only offloadfs: files read, changes fail.
func TestReadOnly(t *testing.T) {
	dev := newDevice(t, 16<<20)
	fsys := mountRW(t, dev)
	f, err := fsys.Create("kept")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("data"))
	f.Close()
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	ro := mountRO(t, dev)
	dir, _ := serve(t, ro)
	got, err := os.ReadFile(filepath.Join(dir, "kept"))
	if err != nil || string(got) != "data" {
		t.Fatalf("read %q, %v", got, err)
	}
	for _, err := range []error{
		os.WriteFile(filepath.Join(dir, "new"), nil, 0o644),
		os.Mkdir(filepath.Join(dir, "d"), 0o755),
		os.Remove(filepath.Join(dir, "kept")),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("change on a read-only mount: %v, want EROFS", err)
		}
	}
}

// TestUnmountBusy: Unmount refuses while a file is open, and works after.
func TestUnmountBusy(t *testing.T) {
	dev := newDevice(t, 16<<20)
	fsys := mountRW(t, dev)
	defer fsys.Close()
	dir, srv := serve(t, fsys)
	f, err := os.Create(filepath.Join(dir, "open"))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Unmount(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("unmount with a file open: %v, want EBUSY", err)
	}
	f.Close()
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	// Unmounting again (as the cleanup does) is harmless.
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
}

func TestErrno(t *testing.T) {
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{&iofs.PathError{Op: "open", Path: "x", Err: iofs.ErrNotExist}, syscall.ENOENT},
		{&iofs.PathError{Op: "mkdir", Path: "x", Err: iofs.ErrExist}, syscall.EEXIST},
		{fmt.Errorf("wrapped: %w", offloadfs.ErrNotEmpty), syscall.ENOTEMPTY},
		{offloadfs.ErrNoSpace, syscall.ENOSPC},
		{offloadfs.ErrNotDir, syscall.ENOTDIR},
		{offloadfs.ErrIsDir, syscall.EISDIR},
		{offloadfs.ErrNameTooLong, syscall.ENAMETOOLONG},
		{offloadfs.ErrReadOnly, syscall.EROFS},
		{iofs.ErrInvalid, syscall.EINVAL},
		{fmt.Errorf("x: %w", offloadfs.ErrCorrupt), syscall.EUCLEAN},
		{offloadfs.ErrFailed, syscall.EIO},
		{errors.New("device gone"), syscall.EIO},
	} {
		if got := fusefs.Errno(c.err); got != c.want {
			t.Errorf("Errno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
