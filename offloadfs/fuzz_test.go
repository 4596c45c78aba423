package offloadfs_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// fuzzImage is a small file system with files, directories, an orphan
// and a live journal (it was not unmounted), in 512-byte blocks so every
// structure is a few hundred bytes away from another.
func fuzzImage(f *testing.F) []byte {
	ctx := context.Background()
	dev := newCrashDev(imageOf(make([]byte, 1<<20)), -1)
	if err := offloadfs.Mkfs(ctx, dev, offloadfs.MkfsOptions{BlockSize: 512, Inodes: 64}); err != nil {
		f.Fatal(err)
	}
	fsys, err := offloadfs.Mount(ctx, dev, testfs.Quiet())
	if err != nil {
		f.Fatal(err)
	}
	if err := fsys.MkdirAll("a/b/c"); err != nil {
		f.Fatal(err)
	}
	for i, name := range []string{"a/x", "a/b/y", "z", "a/b/c/long-name-of-a-file"} {
		w, err := fsys.Create(name)
		if err != nil {
			f.Fatal(err)
		}
		// Interleaved writes fragment the files into several extents.
		for k := range 20 {
			if _, err := w.Write(make([]byte, 300+i*100+k)); err != nil {
				f.Fatal(err)
			}
		}
		if i == 2 {
			defer w.Close() // removed below while open: an orphan
		} else {
			w.Close()
		}
	}
	if err := fsys.Remove("z"); err != nil {
		f.Fatal(err)
	}
	if err := fsys.Sync(ctx); err != nil {
		f.Fatal(err)
	}
	return dev.image(crashUnflushed, nil).bytes()
}

// FuzzMount damages a file system image and mounts, checks and reads it:
// whatever the damage, the result is an error, never a panic or a hang.
// The input is a list of (offset, byte) pairs, offsets taken within the
// metadata area.
func FuzzMount(f *testing.F) {
	img := fuzzImage(f)
	meta := binary.LittleEndian.Uint64(img[120:]) * 512 // data area start
	f.Add([]byte{})
	f.Add([]byte{0, 0, 100, 0, 1})
	f.Add([]byte{0, 2, 0, 0, 0xff, 0, 8, 16, 0, 7})
	f.Fuzz(func(t *testing.T, edits []byte) {
		b := append([]byte(nil), img...)
		for ; len(edits) >= 5; edits = edits[5:] {
			off := uint64(binary.LittleEndian.Uint32(edits))
			// Mostly metadata, sometimes directory and extent blocks in
			// the data area.
			if off&1 == 0 {
				off %= meta
			} else {
				off %= uint64(len(b))
			}
			b[off] ^= edits[4]
		}
		fsys, err := offloadfs.Mount(context.Background(), newCrashDev(imageOf(b), -1), testfs.Quiet())
		if err != nil {
			return
		}
		defer fsys.Close()
		if _, err := fsys.Fsck(context.Background()); err != nil {
			t.Fatalf("fsck: %v", err)
		}
		readTree(fsys)
		if w, err := fsys.Create("a/new"); err == nil {
			w.Write(make([]byte, 5000))
			w.Close()
		}
		fsys.Remove("a/x")
		fsys.Sync(context.Background())
	})
}
