package vfs_test

import (
	"testing"

	"github.com/nearstore/nearstore/vfs"
	"github.com/nearstore/nearstore/vfs/vfstest"
)

func TestOS(t *testing.T) {
	vfstest.Run(t, func(t *testing.T) vfs.FS { return vfs.OS(t.TempDir()) })
}

// TestOSRoot checks that names cannot leave the root.
func TestOSRoot(t *testing.T) {
	root := t.TempDir()
	v := vfs.OS(root + "/inner")
	if err := v.MkdirAll("/"); err != nil {
		t.Fatal(err)
	}
	f, err := v.Create("../../escape")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := vfs.OS(root).Stat("inner/escape"); err != nil {
		t.Fatalf("a name with .. left the root: %v", err)
	}
}
