// Package stamptest is the block stamp format of the offloadfs tests
// against a real target (offloadfs's own and tests/offloadfs), shared with
// the stamp function in tests/offloadfs/testdata/stamp.c: the first Size
// bytes of every device block of a test file say whose block it is, so a
// pushdown that read a block which is not the file's is caught.
//
// A stamp is, little-endian: bytes 0-7 Magic, 8-15 the file's inode,
// 16-23 its generation (a test-wide counter bumped by every rewrite),
// 24-31 the block's offset in the file. The rest of the block is filler
// that depends on the generation.
package stamptest

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
)

const (
	// Magic opens every stamp ("NSTAMP").
	Magic = 0x504d4154534e
	// Size is the length of a stamp.
	Size = 32
)

// Rec is a decoded stamp.
type Rec struct{ Ino, Gen, Off uint64 }

// Parse decodes the stamp that b starts with; ok is false when b is
// shorter than a stamp or does not start with Magic.
func Parse(b []byte) (r Rec, ok bool) {
	le := binary.LittleEndian
	if len(b) < Size || le.Uint64(b) != Magic {
		return Rec{}, false
	}
	return Rec{le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:])}, true
}

// Blocks returns n bytes of generation gen of file ino starting at file
// offset from, where every bs-byte block is stamped with its offset. A
// final block shorter than a stamp holds filler only.
func Blocks(ino, gen uint64, from, n, bs int) []byte {
	b := make([]byte, n)
	le := binary.LittleEndian
	for off := 0; off < n; off += bs {
		blk := b[off:min(off+bs, n)]
		for i := range blk {
			blk[i] = byte(gen) ^ byte(i)
		}
		if len(blk) >= Size {
			le.PutUint64(blk, Magic)
			le.PutUint64(blk[8:], ino)
			le.PutUint64(blk[16:], gen)
			le.PutUint64(blk[24:], uint64(from+off))
		}
	}
	return b
}

// Scratch is the stamp function's pushdown scratch: read the start
// range's stamp, then (second >= 0) that of byte second of file.
func Scratch(second int64, file uint32) []byte {
	s := make([]byte, 16)
	v := ^uint64(0)
	if second >= 0 {
		v = uint64(second)
	}
	binary.LittleEndian.PutUint64(s, v)
	binary.LittleEndian.PutUint32(s[8:], file)
	return s
}

// Params is the stamp function's compute header for blocks of bs bytes:
// mode 1 returns every block's stamp, mode 2 echoes its data.
func Params(mode uint32, bs int) []byte {
	p := make([]byte, 8)
	binary.LittleEndian.PutUint32(p, mode)
	binary.LittleEndian.PutUint32(p[4:], uint32(bs))
	return p
}

// InoOf returns f's inode number, failing the test on an error.
func InoOf(t testing.TB, f *offloadfs.File) uint64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*offloadfs.FileInfo).Ino()
}

// Create writes a stamped file of n bytes (blocks of bs), generation gen,
// closes it when the test ends, and returns it with its inode.
func Create(t testing.TB, fsys *offloadfs.FS, name string, gen uint64, n, bs int) (*offloadfs.File, uint64) {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ino := InoOf(t, f)
	if _, err := f.WriteAt(Blocks(ino, gen, 0, n, bs), 0); err != nil {
		t.Fatal(err)
	}
	return f, ino
}

// At pushes the stamp function fn down on f at off and returns the stamp
// it saw, failing the test on an error or when it saw none.
func At(t testing.TB, fsys *offloadfs.FS, fn sandbox.ID, f *offloadfs.File, off int64) Rec {
	t.Helper()
	res, err := fsys.Pushdown(context.Background(), fn, []*offloadfs.File{f}, host.Start{Offset: uint64(off), Length: Size}, Scratch(-1, 0))
	if err != nil {
		t.Fatal(err)
	}
	st, ok := Parse(res.Output[64:])
	if !ok {
		t.Fatalf("pushdown at %d returned no stamp: % x", off, res.Output[64:64+Size])
	}
	return st
}

// SyncRemote waits, with a deadline, until the target holds every change
// of fsys, failing the test on an error.
func SyncRemote(t testing.TB, fsys *offloadfs.FS) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fsys.SyncRemote(ctx); err != nil {
		t.Fatal(err)
	}
}
