package offloadfs

import (
	"bytes"
	"hash/crc32"
	"slices"
	"testing"
)

// FuzzDecoders feeds arbitrary bytes to every metadata decoder. With fix
// set the checksum (and magic and block number) is made valid first, so
// the fuzzer gets past it to the structural checks. Decoders must never
// panic, and what they accept must encode back to the same bytes.
func FuzzDecoders(f *testing.F) {
	uuid := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	const bs = 512
	sb := layout(bs, 4096, 64, 256)
	sb.devBlockSize, sb.uuid = 512, uuid
	sb.version, sb.gen, sb.clean = FormatVersion, 3, true
	f.Add(byte(0), false, sb.encode())
	sb.version = 1
	f.Add(byte(0), false, sb.encode())
	ino := make([]byte, inodeSize)
	encodeInode(&uuid, ino, 5, &inodeRec{typ: typeFile, nlink: 1, nextents: 2, size: 700, version: 3, inline: []extent{{20, 1}, {30, 1}}})
	f.Add(byte(1), false, ino)
	dir := make([]byte, bs)
	encodeDirBlock(&uuid, dir, 7, 1, []dirEntry{{"a", 4, typeFile}, {"dir", 5, typeDir}})
	f.Add(byte(2), false, dir)
	ext := make([]byte, bs)
	encodeExtentBlock(&uuid, ext, 7, 5, 0, []extent{{100, 3}, {200, 9}})
	f.Add(byte(3), false, ext)
	bm := make([]byte, bs)
	encodeBitmap(&uuid, bm, magicBitmap, 7, []uint64{0xff, 1 << 63})
	f.Add(byte(4), false, bm)
	desc := make([]byte, bs)
	encodeJDesc(&uuid, desc, 7, &jDesc{seq: 9, homes: []uint64{40, 41}, more: true})
	f.Add(byte(5), false, desc)
	cm := make([]byte, bs)
	encodeJCommit(&uuid, cm, 7, &jCommit{seq: 9, blocks: 3, sum: 0xdeadbeef, time: 12345})
	f.Add(byte(6), false, cm)
	hd := make([]byte, bs)
	encodeJHeader(&uuid, hd, 7, jHeader{epoch: 77})
	f.Add(byte(7), false, hd)

	f.Fuzz(func(t *testing.T, kind byte, fix bool, data []byte) {
		const blk, lo, hi, inodes = 7, 10, 4096, 64
		block := func(magic uint32) []byte {
			b := make([]byte, bs)
			copy(b, data)
			if fix {
				seal(&uuid, b, magic, blk)
			}
			return b
		}
		switch kind % 8 {
		case 0:
			b := make([]byte, superSize)
			copy(b, data)
			if fix {
				copy(b, superMagic)
				le.PutUint32(b[508:], crc32c(b[:508]))
			}
			if sb, err := decodeSuperblock(b); err == nil && !bytes.Equal(sb.encode(), b) {
				t.Fatal("superblock does not round-trip")
			}
		case 1:
			b := make([]byte, inodeSize)
			copy(b, data)
			if fix {
				le.PutUint64(b[8:], 5)
				le.PutUint32(b[4:], checksum(&uuid, b, 4))
			}
			r, err := decodeInode(&uuid, b, 5, lo, hi)
			if err != nil || isZero(b) {
				return
			}
			out := make([]byte, inodeSize)
			encodeInode(&uuid, out, 5, r)
			if !bytes.Equal(out, b) {
				t.Fatal("inode does not round-trip")
			}
		case 2:
			b := block(magicDir)
			owner, ents, err := decodeDirBlock(&uuid, b, blk, inodes)
			if err != nil {
				return
			}
			out := make([]byte, bs)
			encodeDirBlock(&uuid, out, blk, owner, ents)
			if !bytes.Equal(out, b) {
				t.Fatal("directory block does not round-trip")
			}
		case 3:
			b := block(magicExtent)
			owner, next, xs, err := decodeExtentBlock(&uuid, b, blk, lo, hi)
			if err != nil {
				return
			}
			out := make([]byte, bs)
			encodeExtentBlock(&uuid, out, blk, owner, next, xs)
			// Bytes after the last extent are not checked; compare
			// what was decoded.
			_, next2, xs2, err := decodeExtentBlock(&uuid, out, blk, lo, hi)
			if err != nil || next2 != next || !slices.Equal(xs, xs2) {
				t.Fatal("extent block does not round-trip")
			}
		case 4:
			b := block(magicBitmap)
			words := make([]uint64, (bs-hdrSize)/8)
			if err := decodeBitmap(&uuid, b, magicBitmap, blk, words); err != nil {
				return
			}
			out := make([]byte, bs)
			encodeBitmap(&uuid, out, magicBitmap, blk, words)
			if !bytes.Equal(out, b) {
				t.Fatal("bitmap does not round-trip")
			}
		case 5:
			b := block(magicJDesc)
			d, err := decodeJDesc(&uuid, b, blk)
			if err != nil {
				return
			}
			out := make([]byte, bs)
			encodeJDesc(&uuid, out, blk, d)
			d2, err := decodeJDesc(&uuid, out, blk)
			if err != nil || d2.seq != d.seq || d2.more != d.more || !slices.Equal(d2.homes, d.homes) {
				t.Fatal("descriptor does not round-trip")
			}
		case 6:
			b := block(magicJCommit)
			c, err := decodeJCommit(&uuid, b, blk)
			if err != nil {
				return
			}
			out := make([]byte, bs)
			encodeJCommit(&uuid, out, blk, c)
			if c2, err := decodeJCommit(&uuid, out, blk); err != nil || *c2 != *c {
				t.Fatal("commit record does not round-trip")
			}
		case 7:
			b := block(magicJHeader)
			h, err := decodeJHeader(&uuid, b, blk)
			if err != nil {
				return
			}
			out := make([]byte, bs)
			encodeJHeader(&uuid, out, blk, h)
			if !bytes.Equal(out, b) {
				t.Fatal("journal header does not round-trip")
			}
		}
	})
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
