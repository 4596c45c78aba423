package offloadfs_test

import (
	"errors"
	"io"
	iofs "io/fs"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"

	"github.com/nearstore/nearstore/vfs"
	"github.com/nearstore/nearstore/vfs/vfstest"
)

func TestVFS(t *testing.T) {
	vfstest.Run(t, func(t *testing.T) vfs.FS { return testfs.New(t, "mem:64MiB").VFS() })
}

// TestSeek covers the cursor API that vfs.File leaves out.
func TestSeek(t *testing.T) {
	fsys := testfs.New(t, "mem:16MiB")
	f := testfs.Create(t, fsys, "/dir-less/../s")
	if f.Name() != "/dir-less/../s" {
		t.Fatalf("Name = %q", f.Name())
	}
	f.Write([]byte("0123456789"))
	for _, tc := range []struct {
		off    int64
		whence int
		want   string
	}{
		{2, io.SeekStart, "234"},
		{1, io.SeekCurrent, "678"},
		{-2, io.SeekEnd, "89"},
	} {
		if _, err := f.Seek(tc.off, tc.whence); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 3)
		n, err := f.Read(b)
		if err != nil || string(b[:n]) != tc.want {
			t.Fatalf("Seek(%d, %d) then Read = %q, %v; want %q", tc.off, tc.whence, b[:n], err, tc.want)
		}
	}
	if _, err := f.Seek(-1, io.SeekStart); !errors.Is(err, iofs.ErrInvalid) {
		t.Fatalf("Seek before the start: %v", err)
	}
	fi, err := fsys.Stat("s")
	if err != nil || fi.Mode().IsDir() || fi.ModTime().IsZero() || fi.Sys().(*offloadfs.FileInfo).AllocatedBlocks() == 0 {
		t.Fatalf("Stat = %v, %v", fi, err)
	}
}
