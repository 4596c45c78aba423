package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDefault: zero and negative fields take the default, positive ones
// stay, for each kind of field the Configs have.
func TestDefault(t *testing.T) {
	for _, c := range []struct{ v, want int }{{0, 7}, {-1, 7}, {1, 1}, {9, 9}} {
		v := c.v
		Default(&v, 7)
		if v != c.want {
			t.Errorf("int %d: got %d, want %d", c.v, v, c.want)
		}
	}
	d := -time.Second
	Default(&d, 3*time.Second)
	if d != 3*time.Second {
		t.Errorf("duration -1s: got %v", d)
	}
	f := 0.25
	Default(&f, 0.5)
	if f != 0.25 {
		t.Errorf("float 0.25: got %v", f)
	}
}

// TestWorkDir: a given directory is used and never removed; without one,
// a new temporary directory is made and remove deletes it.
func TestWorkDir(t *testing.T) {
	given := t.TempDir()
	d, remove, err := WorkDir(given, "x-")
	if err != nil || d != given {
		t.Fatalf("WorkDir(%q) = %q, %v", given, d, err)
	}
	remove()
	if _, err := os.Stat(given); err != nil {
		t.Fatalf("remove deleted the caller's directory: %v", err)
	}
	d, remove, err = WorkDir("", "nearstore-workdir-test-")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() || !strings.HasPrefix(filepath.Base(d), "nearstore-workdir-test-") {
		t.Fatalf("temporary directory %q: %v", d, err)
	}
	remove()
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Errorf("remove left %q behind: %v", d, err)
	}
}
