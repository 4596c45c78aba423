package fusefs_test

import (
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nearstore/nearstore/offloadfs/fusefs"
)

// TestCheckMountPoint: a missing path and a file are refused; a directory
// is fine. (A dead FUSE mount needs a process to die: tests/fuse.)
func TestCheckMountPoint(t *testing.T) {
	dir := t.TempDir()
	if err := fusefs.CheckMountPoint(dir); err != nil {
		t.Fatal(err)
	}
	if err := fusefs.CheckMountPoint(filepath.Join(dir, "nope")); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fusefs.CheckMountPoint(file); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("a file: %v", err)
	}
}
