package overlay

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nearstore/nearstore/vfs"
	"github.com/nearstore/nearstore/vfs/vfstest"
)

// TestConformance: the overlay behaves as a vfs.FS should.
func TestConformance(t *testing.T) {
	vfstest.Run(t, func(t *testing.T) vfs.FS { return New(vfs.OS(t.TempDir())) })
}

// TestBaseUnchanged: whatever is written, removed or renamed through the
// overlay shows through it, and leaves the file system below as it was.
func TestBaseUnchanged(t *testing.T) {
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "a"), []byte("base a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "d"), []byte("base d"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := New(vfs.OS(base))
	f, err := o.Create("b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("new b")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := o.Rename("a", "c"); err != nil {
		t.Fatal(err)
	}
	if err := o.Remove("b"); err != nil {
		t.Fatal(err)
	}
	// Writing to a base file copies it up; the base keeps its bytes.
	w, err := o.OpenReadWrite("d")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("XX"), 0); err != nil {
		t.Fatal(err)
	}
	if names, err := o.List("."); err != nil || !slices.Equal(names, []string{"c", "d"}) {
		t.Fatalf("overlay lists %v, %v; want [c d]", names, err)
	}
	for name, want := range map[string]string{"c": "base a", "d": "XXse d"} {
		g, err := o.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 6)
		if n, _ := g.ReadAt(b, 0); string(b[:n]) != want {
			t.Fatalf("%s reads %q, want %q", name, b[:n], want)
		}
	}
	if _, err := o.Open("a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open a after rename: %v", err)
	}
	ents, err := os.ReadDir(base)
	if err != nil || len(ents) != 2 || ents[0].Name() != "a" || ents[1].Name() != "d" {
		t.Fatalf("base changed: %v, %v", ents, err)
	}
	if b, err := os.ReadFile(filepath.Join(base, "d")); err != nil || string(b) != "base d" {
		t.Fatalf("base d = %q, %v", b, err)
	}
}

// TestReadOnlyHandle: a handle from Open refuses writes with a clear
// error, and the file keeps its bytes.
func TestReadOnlyHandle(t *testing.T) {
	o := New(vfs.OS(t.TempDir()))
	f, err := o.Create("x")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("abc"))
	r, err := o.Open("x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteAt([]byte("z"), 0); !errors.Is(err, errReadOnlyHandle) {
		t.Fatalf("WriteAt through Open's handle: %v", err)
	}
	if err := r.Truncate(0); !errors.Is(err, errReadOnlyHandle) {
		t.Fatalf("Truncate through Open's handle: %v", err)
	}
	if st, err := o.Stat("x"); err != nil || st.Size() != 3 {
		t.Fatalf("stat x: %v, %v", st, err)
	}
}
