package offloadfs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	iofs "io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// geometry reads the superblock fields tests need, at their documented
// offsets (docs/OFFLOADFS.md).
type geometry struct {
	bs, journalStart, bitmapStart, itableStart int64
}

func readGeometry(img []byte) geometry {
	le := binary.LittleEndian
	return geometry{
		bs:           int64(le.Uint32(img[16:])),
		journalStart: int64(le.Uint64(img[48:])),
		bitmapStart:  int64(le.Uint64(img[64:])),
		itableStart:  int64(le.Uint64(img[96:])),
	}
}

// inodeOff is the byte offset of inode ino's record.
func (g geometry) inodeOff(ino uint64) int64 {
	return g.itableStart*g.bs + int64(ino)*256
}

// populated returns an image with a few files and directories, cleanly
// unmounted, and the inode of "d/file".
func populated(t *testing.T) ([]byte, uint64) {
	t.Helper()
	ctx := context.Background()
	dev := newCrashDev(formatted(t, 16<<20), -1)
	fsys, err := offloadfs.Mount(ctx, dev, testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.MkdirAll("d/e"); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Create("d/file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte("data"), 10000)); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	f.Close()
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	return dev.cur.bytes(), fi.Sys().(*offloadfs.FileInfo).Ino()
}

func mountImage(img []byte) (*offloadfs.FS, error) {
	return offloadfs.Mount(context.Background(), newCrashDev(imageOf(img), -1), testfs.Quiet())
}

func TestCorruptMetadata(t *testing.T) {
	img, fileIno := populated(t)
	g := readGeometry(img)
	rootRec := g.inodeOff(1)
	rootDirBlock := int64(binary.LittleEndian.Uint64(img[rootRec+96:])) * g.bs
	flip := func(off int64) func([]byte) {
		return func(b []byte) { b[off] ^= 0x40 }
	}
	for _, tc := range []struct {
		name    string
		corrupt func([]byte)
		// Where the damage shows: at mount, or only when the damaged
		// object is used (then fsck must report it).
		atMount bool
		want    string
	}{
		{"superblock checksum", flip(100), true, "superblock: checksum"},
		{"superblock magic", flip(0), true, "no file system"},
		{"superblock geometry", func(b []byte) {
			binary.LittleEndian.PutUint64(b[64:], 99) // bitmap start, with a fixed CRC
			fixSuperCRC(b)
		}, true, "inconsistent geometry"},
		{"both journal headers", func(b []byte) {
			b[g.journalStart*g.bs+20] ^= 1
			b[(g.journalStart+1)*g.bs+20] ^= 1
		}, true, "journal header"},
		{"block bitmap", flip(g.bitmapStart*g.bs + 100), true, "block bitmap"},
		{"root inode", flip(rootRec + 30), true, "inode 1: checksum"},
		{"file inode", flip(g.inodeOff(fileIno) + 30), false, "checksum mismatch"},
		{"file inode extent", func(b []byte) {
			off := g.inodeOff(fileIno) + 96
			binary.LittleEndian.PutUint64(b[off:], 1) // extent over the superblock
			fixInodeCRC(b, off-96, g)
		}, false, "outside the data area"},
		{"root directory block", flip(rootDirBlock + 40), false, "directory block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), img...)
			tc.corrupt(b)
			fsys, err := mountImage(b)
			if tc.atMount {
				if err == nil {
					fsys.Close()
					t.Fatal("mount succeeded")
				}
				if !errors.Is(err, offloadfs.ErrCorrupt) && !errors.Is(err, offloadfs.ErrNotFormatted) {
					t.Fatalf("mount error %v does not wrap ErrCorrupt", err)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("mount error %q does not mention %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("mount: %v", err)
			}
			defer fsys.Close()
			if _, err := readTree(fsys); !errors.Is(err, offloadfs.ErrCorrupt) {
				t.Fatalf("reading the tree gave %v, want ErrCorrupt", err)
			}
			rep, err := fsys.Fsck(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || !strings.Contains(rep.Err().Error(), tc.want) {
				t.Fatalf("fsck report %v does not mention %q", rep.Err(), tc.want)
			}
		})
	}
}

// fixSuperCRC recomputes the superblock checksum (bytes 508-511, CRC32C
// of bytes 0-507).
func fixSuperCRC(b []byte) {
	binary.LittleEndian.PutUint32(b[508:], crc32c(b[:508]))
}

// fixInodeCRC recomputes an inode record's checksum: CRC32C of the UUID
// and the record with its checksum field zero.
func fixInodeCRC(b []byte, off int64, g geometry) {
	rec := b[off : off+256]
	binary.LittleEndian.PutUint32(rec[4:], 0)
	binary.LittleEndian.PutUint32(rec[4:], crc32c(append(append([]byte(nil), b[32:48]...), rec...)))
}

func TestCorruptJournal(t *testing.T) {
	ctx := context.Background()
	dev := newCrashDev(formatted(t, 16<<20), -1)
	fsys, err := offloadfs.Mount(ctx, dev, testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		f, err := fsys.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(name))
		f.Close()
		if err := fsys.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Crash (no Close): the log holds the four transactions.
	img := dev.image(crashUnflushed, nil).bytes()
	g := readGeometry(img)
	firstTxn := (g.journalStart + 2) * g.bs

	t.Run("damaged transaction followed by others", func(t *testing.T) {
		b := append([]byte(nil), img...)
		b[firstTxn+40] ^= 1
		if fsys, err := mountImage(b); err == nil {
			fsys.Close()
			t.Fatal("mount succeeded")
		} else if !errors.Is(err, offloadfs.ErrCorrupt) || !strings.Contains(err.Error(), "journal") {
			t.Fatalf("mount: %v", err)
		}
	})
	t.Run("intact", func(t *testing.T) {
		fsys, err := mountImage(img)
		if err != nil {
			t.Fatal(err)
		}
		defer fsys.Close()
		checkFsck(t, fsys, "intact journal")
		if ents, _ := fsys.ReadDir("/"); len(ents) != 4 {
			t.Fatalf("%d entries after replay, want 4", len(ents))
		}
	})
}

func TestNoSpace(t *testing.T) {
	ctx := context.Background()
	dev := newCrashDev(formatted(t, 4<<20), -1)
	fsys, err := offloadfs.Mount(ctx, dev, testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	keep := bytes.Repeat([]byte("keep"), 100000)
	k, err := fsys.Create("keep")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Write(keep); err != nil {
		t.Fatal(err)
	}
	k.Close()
	if err := fsys.MkdirAll("dir"); err != nil {
		t.Fatal(err)
	}

	f, err := fsys.Create("fill")
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{7}, 64<<10)
	var written int64
	for {
		_, err := f.Write(chunk)
		if err != nil {
			if !errors.Is(err, offloadfs.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("full device: %v, want ErrNoSpace", err)
			}
			break
		}
		written += int64(len(chunk))
		if written > 8<<20 {
			t.Fatal("wrote more than the device holds")
		}
	}
	if fi, _ := f.Stat(); fi.Size() != written {
		t.Fatalf("size %d after the failed write, want %d", fi.Size(), written)
	}
	// Fill the last blocks too, block by block.
	for {
		if _, err := f.Write(chunk[:4096]); err != nil {
			break
		}
		written += 4096
	}
	// Metadata that needs a block fails cleanly too: the root's one
	// block has room, so fill a new directory's instead.
	var mkErr error
	for i := 0; mkErr == nil; i++ {
		mkErr = fsys.Mkdir("dir/" + strings.Repeat("n", 200) + string(rune('A'+i%26)) + string(rune('A'+i/26)))
	}
	if !errors.Is(mkErr, offloadfs.ErrNoSpace) {
		t.Fatalf("mkdir on a full device: %v", mkErr)
	}
	checkFsck(t, fsys, "full device")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// Removing a file makes room at once (its blocks are freed by a
	// commit the allocation forces).
	if err := fsys.Remove("keep"); err != nil {
		t.Fatal(err)
	}
	g, err := fsys.Create("after")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(make([]byte, 200000)); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	g.Close()
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	fsys, err = mountImage(dev.cur.bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	checkFsck(t, fsys, "after remount")
	r, err := fsys.Open("fill")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, written)
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{7}, int(written))) {
		t.Fatalf("fill file after remount: %v", err)
	}
	r.Close()
}

func TestNoInodes(t *testing.T) {
	fsys := testfs.FreshWith(t, testfs.Device(t, "mem:16MiB"), offloadfs.MkfsOptions{Inodes: 16})
	n := 0
	for ; ; n++ {
		f, err := fsys.Create(strings.Repeat("f", n+1))
		if err != nil {
			if !errors.Is(err, offloadfs.ErrNoSpace) {
				t.Fatalf("create %d: %v", n, err)
			}
			break
		}
		f.Close()
	}
	if n != 16-3 {
		t.Fatalf("created %d files with 16 inodes, want 13", n)
	}
	checkFsck(t, fsys, "inodes exhausted")
}

func TestBadPaths(t *testing.T) {
	fsys := testfs.New(t, "mem:16MiB")
	f, err := fsys.Create("file")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := fsys.MkdirAll("dir/sub"); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", offloadfs.MaxNameLen+1)
	ok := strings.Repeat("y", offloadfs.MaxNameLen)
	for _, tc := range []struct {
		name string
		err  error
		do   func() error
	}{
		{"name too long", offloadfs.ErrNameTooLong, func() error { _, err := fsys.Create(long); return err }},
		{"name too long (errno)", syscall.ENAMETOOLONG, func() error { return fsys.Mkdir("dir/" + long) }},
		{"longest name", nil, func() error { _, err := fsys.Create(ok); return err }},
		{"NUL", iofs.ErrInvalid, func() error { _, err := fsys.Create("a\x00b"); return err }},
		{"through a file", offloadfs.ErrNotDir, func() error { _, err := fsys.Create("file/x"); return err }},
		{"mkdir through a file", offloadfs.ErrNotDir, func() error { return fsys.Mkdir("file/x") }},
		{"stat through a file", offloadfs.ErrNotDir, func() error { _, err := fsys.Stat("file/x/y"); return err }},
		{"readdir of a file", offloadfs.ErrNotDir, func() error { _, err := fsys.ReadDir("file"); return err }},
		{"mkdirall over a file", offloadfs.ErrNotDir, func() error { return fsys.MkdirAll("file/a/b") }},
		{"remove non-empty", offloadfs.ErrNotEmpty, func() error { return fsys.Remove("dir") }},
		{"remove non-empty (errno)", syscall.ENOTEMPTY, func() error { return fsys.Remove("dir") }},
		{"remove root", iofs.ErrInvalid, func() error { return fsys.Remove("/") }},
		{"rename into itself", iofs.ErrInvalid, func() error { return fsys.Rename("dir", "dir/sub/x") }},
		{"rename dir over file", offloadfs.ErrNotDir, func() error { return fsys.Rename("dir/sub", "file") }},
		{"rename file over dir", offloadfs.ErrIsDir, func() error { return fsys.Rename("file", "dir") }},
		{"rename over non-empty", offloadfs.ErrNotEmpty, func() error { return fsys.Rename("dir/sub", "dir") }},
		{"open dir for writing", offloadfs.ErrIsDir, func() error { _, err := fsys.OpenFile("dir", os.O_RDWR); return err }},
		{"create existing exclusively", iofs.ErrExist, func() error {
			_, err := fsys.OpenFile("file", os.O_RDWR|os.O_CREATE|os.O_EXCL)
			return err
		}},
		{"mkdir existing", iofs.ErrExist, func() error { return fsys.Mkdir("dir") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
		})
	}
	checkFsck(t, fsys, "after bad paths")
}

func TestReadOnlyMount(t *testing.T) {
	img, _ := populated(t)
	dev := newCrashDev(imageOf(img), -1)
	fsys, err := offloadfs.MountReadOnly(context.Background(), dev, testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	if _, err := fsys.Create("new"); !errors.Is(err, offloadfs.ErrReadOnly) || !errors.Is(err, syscall.EROFS) {
		t.Fatalf("create on a read-only mount: %v", err)
	}
	if err := fsys.Remove("d/file"); !errors.Is(err, offloadfs.ErrReadOnly) {
		t.Fatalf("remove on a read-only mount: %v", err)
	}
	f, err := fsys.Open("d/file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("write on a read-only mount")
	}
	b := make([]byte, 4)
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "data" {
		t.Fatalf("read %q, %v", b, err)
	}
	if dev.writes != 0 {
		t.Fatalf("a read-only mount wrote %d times", dev.writes)
	}
}

func TestClosedFS(t *testing.T) {
	fsys := testfs.New(t, "mem:16MiB")
	f, _ := fsys.Create("x")
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Create("y"); !errors.Is(err, iofs.ErrClosed) {
		t.Fatalf("create after close: %v", err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, iofs.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if err := fsys.Close(); !errors.Is(err, iofs.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
}

func TestMkfsTooSmall(t *testing.T) {
	dev := testfs.Device(t, "mem:64KiB")
	if err := offloadfs.Mkfs(context.Background(), dev, offloadfs.MkfsOptions{}); err == nil {
		t.Fatal("mkfs on a 64 KiB device succeeded")
	}
	if _, err := offloadfs.Mount(context.Background(), dev, testfs.Quiet()); !errors.Is(err, offloadfs.ErrNotFormatted) {
		t.Fatalf("mount of an unformatted device: %v", err)
	}
}
