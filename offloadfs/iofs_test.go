package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// tree makes a small tree: files of several sizes (empty, one block, many
// blocks), nested and empty directories.
func tree(t *testing.T, fsys *offloadfs.FS) map[string][]byte {
	t.Helper()
	files := map[string][]byte{
		"/a":           []byte("a file\n"),
		"/empty":       nil,
		"/d/b":         bytes.Repeat([]byte("b"), 5000),
		"/d/e/c":       bytes.Repeat([]byte{0xc3}, 70000),
		"/d/e/f/g.txt": []byte("deep\n"),
	}
	for _, dir := range []string{"/d/e/f", "/emptydir"} {
		if err := fsys.MkdirAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range files {
		if _, err := fsys.PutFile(context.Background(), name, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// TestIOFS: the io/fs view passes testing/fstest's checks (Open, Stat,
// ReadDir, ReadFile, Read, ReadAt, Seek, directory listings, invalid
// names) and holds exactly the tree's files with their bytes.
func TestIOFS(t *testing.T) {
	fsys := testfs.New(t, "mem:16MiB")
	files := tree(t, fsys)
	ifs := fsys.IOFS()
	var want []string
	for name := range files {
		want = append(want, strings.TrimPrefix(name, "/"))
	}
	if err := fstest.TestFS(ifs, want...); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		got, err := iofs.ReadFile(ifs, strings.TrimPrefix(name, "/"))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("ReadFile %s: %d bytes, %v; want %d", name, len(got), err, len(b))
		}
	}
	var walked []string
	if err := iofs.WalkDir(ifs, ".", func(p string, d iofs.DirEntry, err error) error {
		walked = append(walked, p)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(walked, " "); got != ". a d d/b d/e d/e/c d/e/f d/e/f/g.txt empty emptydir" {
		t.Fatalf("WalkDir: %s", got)
	}
	for _, bad := range []string{"/a", "d/../a", "", "d/"} {
		if _, err := ifs.Open(bad); !errors.Is(err, iofs.ErrInvalid) {
			t.Errorf("Open(%q): %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := ifs.Open("nope"); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("Open(nope): %v", err)
	}
}

// TestPutFile: PutFile replaces a file only when its source ends with the
// context live; a cancelled or failing put leaves the old file and no
// temporary behind.
func TestPutFile(t *testing.T) {
	fsys := testfs.New(t, "mem:16MiB")
	old := []byte("old contents\n")
	if _, err := fsys.PutFile(context.Background(), "/f", bytes.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fsys.PutFile(ctx, "/f", bytes.NewReader(bytes.Repeat([]byte("x"), 3<<20))); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled put: %v", err)
	}
	// A source that ends cleanly while the context is being cancelled:
	// cancelled at its end, as a killed pipe writer looks.
	ctx, cancel = context.WithCancel(context.Background())
	src := &endThenCancel{r: bytes.NewReader(bytes.Repeat([]byte("y"), 3<<20)), cancel: cancel}
	if _, err := fsys.PutFile(ctx, "/f", src); !errors.Is(err, context.Canceled) {
		t.Fatalf("put whose source ended as it was cancelled: %v", err)
	}
	if _, err := fsys.PutFile(context.Background(), "/nodir/f", bytes.NewReader(old)); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("put into a missing directory: %v", err)
	}
	got, err := iofs.ReadFile(fsys.IOFS(), "f")
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("/f after failed puts: %q, %v", got, err)
	}
	des, err := fsys.ReadDir("/")
	if err != nil || len(des) != 1 {
		t.Fatalf("root after failed puts: %v, %v (a temporary left behind?)", des, err)
	}
	n, err := fsys.PutFile(context.Background(), "/f", bytes.NewReader([]byte("new")))
	if got, _ := iofs.ReadFile(fsys.IOFS(), "f"); err != nil || n != 3 || string(got) != "new" {
		t.Fatalf("a complete put: %d, %v, %q", n, err, got)
	}
}

// endThenCancel reads r, and cancels as it reports the end.
type endThenCancel struct {
	r      *bytes.Reader
	cancel context.CancelFunc
}

func (e *endThenCancel) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.cancel()
	}
	return n, err
}

// TestRemoveAll removes a tree, and a missing name is no error.
func TestRemoveAll(t *testing.T) {
	fsys := testfs.New(t, "mem:16MiB")
	tree(t, fsys)
	if err := fsys.RemoveAll("/d"); err != nil {
		t.Fatal(err)
	}
	if err := fsys.RemoveAll("/d"); err != nil {
		t.Fatalf("removing it again: %v", err)
	}
	des, err := fsys.ReadDir("/")
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	if err != nil || strings.Join(names, " ") != "a empty emptydir" {
		t.Fatalf("root after RemoveAll(/d): %v, %v", names, err)
	}
	r, err := fsys.Fsck(context.Background())
	if err != nil || r.Err() != nil {
		t.Fatalf("fsck: %v, %v", err, r.Err())
	}
}

// TestReadFile checks FS.ReadFile: a file's whole contents, an empty file
// as no bytes, and a missing file as fs.ErrNotExist.
func TestReadFile(t *testing.T) {
	fsys := testfs.New(t, "mem:16MiB")
	want := bytes.Repeat([]byte("0123456789"), 1000)
	for name, data := range map[string][]byte{"/full": want, "/empty": nil} {
		f, err := fsys.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := fsys.ReadFile(name)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes, %v; want %d", name, len(got), err, len(data))
		}
	}
	if _, err := fsys.ReadFile("/missing"); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}
