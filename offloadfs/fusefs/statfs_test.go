package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nearstore/nearstore/offloadfs"
)

// TestStatfsAfterRemove: statfs counts a removed file's blocks as free at
// once, before the commit that makes them reusable.
func TestStatfsAfterRemove(t *testing.T) {
	dev := newDevice(t, 64<<20)
	fsys, err := offloadfs.Mount(context.Background(), dev, offloadfs.Options{CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	dir, _ := serve(t, fsys)
	// Written through offloadfs, not the mount: the kernel closes a file
	// (FUSE RELEASE) after close(2) returns, and an rm before that only
	// orphans the file.
	const size = 8 << 20
	f, err := fsys.Create("big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(randBytes(2, size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var st0, st1 unix.Statfs_t
	if err := unix.Statfs(dir, &st0); err != nil {
		t.Fatal(err)
	}
	seq := fsys.Usage().CommitSeq
	if err := os.Remove(filepath.Join(dir, "big")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(dir, &st1); err != nil {
		t.Fatal(err)
	}
	if s := fsys.Usage().CommitSeq; s != seq {
		t.Fatalf("something committed (%d to %d): the test proves nothing", seq, s)
	}
	freed := uint64(size) / uint64(st1.Bsize)
	if st1.Bfree < st0.Bfree+freed || st1.Bavail < st0.Bavail+freed {
		t.Fatalf("statfs after rm of %d blocks: free %d → %d, available %d → %d", freed, st0.Bfree, st1.Bfree, st0.Bavail, st1.Bavail)
	}
	if free, pinned := fsys.FreeBlocks(); pinned < freed || free+pinned != st1.Bfree {
		t.Fatalf("FreeBlocks = %d free + %d pinned, statfs %d", free, pinned, st1.Bfree)
	}
	// After the commit the blocks are free proper, and the sum is the same.
	if err := fsys.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if free, pinned := fsys.FreeBlocks(); pinned != 0 || free != st1.Bfree {
		t.Fatalf("after the commit: FreeBlocks = %d free + %d pinned, want %d + 0", free, pinned, st1.Bfree)
	}
}
