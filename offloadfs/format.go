package offloadfs

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"unicode/utf8"
)

// The on-disk format. docs/OFFLOADFS.md is the reference; the layouts
// below are repeated next to the code that reads and writes them. All
// integers are little-endian. Block numbers are in file-system blocks
// (BlockSize bytes) counted from the start of the device.

// FormatVersion is the on-disk format this package writes. It also
// reads version 1, whose superblock has no owner state (see superblock);
// the first read-write mount of such a file system writes version 2.
const FormatVersion = 2

const (
	// superMagic opens the superblock.
	superMagic = "NSOFFLFS"
	// superSize is the checksummed part of the superblock (the rest of
	// block 0 is zero). It is read before the block size is known, so it
	// is small enough for any device.
	superSize = 512
	// inodeSize is the size of an inode record; a block holds
	// BlockSize/inodeSize of them.
	inodeSize = 256
	// hdrSize is the common header of every metadata block except the
	// superblock and inode table blocks: magic (4), CRC32C (4), the
	// block's own number (8).
	hdrSize = 16
	// inlineExtents is how many extents an inode record holds; more go to
	// its chain of extent blocks.
	inlineExtents = 10
	// MaxNameLen is the longest path component, in bytes.
	MaxNameLen = 255
	// maxExtentBlocks bounds one extent so its length fits in 32 bits.
	maxExtentBlocks = 1<<32 - 1
	// maxTotalBlocks bounds the device at 2^48 blocks, far beyond any
	// real device, so block arithmetic cannot overflow.
	maxTotalBlocks = 1 << 48
)

// Reserved inode numbers. Inode 0 is never used, so a zero inode number
// can mean "none".
const (
	rootIno   = 1 // the root directory
	orphanIno = 2 // hidden directory of removed-but-open inodes
	firstIno  = 3 // the first inode number handed to files
)

// Inode types.
const (
	typeFree = 0
	typeFile = 1
	typeDir  = 2
)

// Inode flags.
const (
	// flagPrealloc marks a file whose blocks past its end were reserved
	// by Preallocate; closing it keeps them. Without the flag, blocks past
	// the end are speculative and closing the file trims them.
	flagPrealloc = 1 << 0
	knownFlags   = flagPrealloc
)

// Magic numbers of metadata blocks, as little-endian uint32s of their
// ASCII names.
const (
	magicBitmap  = 0x50414D42 // "BMAP": block bitmap
	magicIBitmap = 0x50414D49 // "IMAP": inode bitmap
	magicDir     = 0x52494444 // "DDIR": directory block
	magicExtent  = 0x54584545 // "EEXT": extent block
	magicJHeader = 0x44484A4A // "JJHD": journal header
	magicJDesc   = 0x53444A4A // "JJDS": journal descriptor
	magicJCommit = 0x4D434A4A // "JJCM": journal commit record
)

// le is the byte order of every on-disk integer.
var le = binary.LittleEndian

// castagnoli is the CRC32C table. It is computed once and only read.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum returns the CRC32C of b with the four bytes at crcOff taken as
// zero, seeded with the file system's UUID: metadata left on the device by
// an earlier file system never verifies, even at the right place.
func checksum(uuid *[16]byte, b []byte, crcOff int) uint32 {
	var zero [4]byte
	c := crc32.Update(0, castagnoli, uuid[:])
	c = crc32.Update(c, castagnoli, b[:crcOff])
	c = crc32.Update(c, castagnoli, zero[:])
	return crc32.Update(c, castagnoli, b[crcOff+4:])
}

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// seal fills in a metadata block's header: magic, block number, CRC.
//
//	bytes 0-3   magic
//	bytes 4-7   CRC32C of the block (UUID-seeded, this field as zero)
//	bytes 8-15  the block's own number, so a misdirected write is caught
func seal(uuid *[16]byte, b []byte, magic uint32, blk uint64) {
	le.PutUint32(b[0:], magic)
	le.PutUint64(b[8:], blk)
	le.PutUint32(b[4:], checksum(uuid, b, 4))
}

// checkHeader verifies a metadata block's header. what names the block in
// errors.
func checkHeader(uuid *[16]byte, b []byte, magic uint32, blk uint64, what string) error {
	if len(b) < hdrSize {
		return corruptf("%s at block %d: short block (%d bytes)", what, blk, len(b))
	}
	if got := le.Uint32(b[0:]); got != magic {
		return corruptf("%s at block %d: bad magic %#08x", what, blk, got)
	}
	if got, want := le.Uint32(b[4:]), checksum(uuid, b, 4); got != want {
		return corruptf("%s at block %d: checksum mismatch (stored %#08x, computed %#08x)", what, blk, got, want)
	}
	if got := le.Uint64(b[8:]); got != blk {
		return corruptf("%s at block %d: block claims to be block %d", what, blk, got)
	}
	return nil
}

// superblock is the file system's geometry, written once by Mkfs and
// never changed, and its owner state: the mount generation and whether a
// read-write mount is active, which only a claimed read-write mount
// changes (at mount and at a clean unmount, see owner.go). Everything
// else that changes lives in journaled blocks. The owner state is
// rewritten with the whole first device block, which a device writes
// atomically, so a crash leaves either the old or the new state.
//
// Layout of the first 512 bytes of block 0 (the rest of the block is
// zero):
//
//	bytes   0-7   magic "NSOFFLFS"
//	bytes   8-11  format version (2; 1 is read too)
//	bytes  12-15  flags (0)
//	bytes  16-19  block size B in bytes (power of two, 512 to 64 KiB)
//	bytes  20-23  device logical block size at Mkfs (divides B)
//	bytes  24-31  total blocks
//	bytes  32-47  UUID (seeds every metadata checksum)
//	bytes  48-55  journal start block
//	bytes  56-63  journal blocks
//	bytes  64-71  block bitmap start
//	bytes  72-79  block bitmap blocks
//	bytes  80-87  inode bitmap start
//	bytes  88-95  inode bitmap blocks
//	bytes  96-103 inode table start
//	bytes 104-111 inode table blocks
//	bytes 112-119 inode count
//	bytes 120-127 first data block
//	bytes 128-135 creation time (Unix nanoseconds)
//	bytes 136-143 mount generation (version 2; 0 in version 1)
//	bytes 144-147 owner state (version 2): 1 clean, no read-write mount
//	              since the last clean unmount; 2 mounted read-write.
//	              0 in version 1, whose owner state is unknown and read
//	              as mounted.
//	bytes 148-507 reserved (0)
//	bytes 508-511 CRC32C of bytes 0-507 (not UUID-seeded)
type superblock struct {
	version       uint32
	blockSize     uint32
	devBlockSize  uint32
	totalBlocks   uint64
	uuid          [16]byte
	journalStart  uint64
	journalBlocks uint64
	bitmapStart   uint64
	bitmapBlocks  uint64
	ibitmapStart  uint64
	ibitmapBlocks uint64
	itableStart   uint64
	itableBlocks  uint64
	inodeCount    uint64
	dataStart     uint64
	created       int64

	// gen is the mount generation: every read-write mount increments it
	// before it writes anything else, so an owner that finds another
	// generation on the device has been taken over (ErrFenced).
	gen uint64
	// clean says no read-write mount is active: the last one unmounted
	// cleanly. Only then may the next mount take the namespace's
	// reservation from the host that holds it (owner.go).
	clean bool
}

// Owner states, bytes 144-147 of a version 2 superblock.
const (
	stateClean   = 1
	stateMounted = 2
)

func (sb *superblock) encode() []byte {
	b := make([]byte, superSize)
	copy(b[0:8], superMagic)
	le.PutUint32(b[8:], sb.version)
	le.PutUint32(b[16:], sb.blockSize)
	le.PutUint32(b[20:], sb.devBlockSize)
	le.PutUint64(b[24:], sb.totalBlocks)
	copy(b[32:48], sb.uuid[:])
	le.PutUint64(b[48:], sb.journalStart)
	le.PutUint64(b[56:], sb.journalBlocks)
	le.PutUint64(b[64:], sb.bitmapStart)
	le.PutUint64(b[72:], sb.bitmapBlocks)
	le.PutUint64(b[80:], sb.ibitmapStart)
	le.PutUint64(b[88:], sb.ibitmapBlocks)
	le.PutUint64(b[96:], sb.itableStart)
	le.PutUint64(b[104:], sb.itableBlocks)
	le.PutUint64(b[112:], sb.inodeCount)
	le.PutUint64(b[120:], sb.dataStart)
	le.PutUint64(b[128:], uint64(sb.created))
	if sb.version >= 2 {
		le.PutUint64(b[136:], sb.gen)
		state := uint32(stateMounted)
		if sb.clean {
			state = stateClean
		}
		le.PutUint32(b[144:], state)
	}
	le.PutUint32(b[508:], crc32.Checksum(b[:508], castagnoli))
	return b
}

// decodeSuperblock parses and validates a superblock: checksum, and a
// geometry in which every region follows the previous one and has the
// size the others imply.
func decodeSuperblock(b []byte) (*superblock, error) {
	if len(b) < superSize {
		return nil, corruptf("superblock: short read (%d bytes)", len(b))
	}
	if string(b[0:8]) != superMagic {
		return nil, fmt.Errorf("%w (no superblock magic)", ErrNotFormatted)
	}
	if got, want := le.Uint32(b[508:]), crc32.Checksum(b[:508], castagnoli); got != want {
		return nil, corruptf("superblock: checksum mismatch (stored %#08x, computed %#08x)", got, want)
	}
	v := le.Uint32(b[8:])
	if v != 1 && v != FormatVersion {
		return nil, corruptf("superblock: format version %d, this build reads 1 and %d", v, FormatVersion)
	}
	if f := le.Uint32(b[12:]); f != 0 {
		return nil, corruptf("superblock: unknown flags %#x", f)
	}
	sb := &superblock{
		version:       v,
		blockSize:     le.Uint32(b[16:]),
		devBlockSize:  le.Uint32(b[20:]),
		totalBlocks:   le.Uint64(b[24:]),
		journalStart:  le.Uint64(b[48:]),
		journalBlocks: le.Uint64(b[56:]),
		bitmapStart:   le.Uint64(b[64:]),
		bitmapBlocks:  le.Uint64(b[72:]),
		ibitmapStart:  le.Uint64(b[80:]),
		ibitmapBlocks: le.Uint64(b[88:]),
		itableStart:   le.Uint64(b[96:]),
		itableBlocks:  le.Uint64(b[104:]),
		inodeCount:    le.Uint64(b[112:]),
		dataStart:     le.Uint64(b[120:]),
		created:       int64(le.Uint64(b[128:])),
	}
	copy(sb.uuid[:], b[32:48])
	reserved := b[148:508]
	switch v {
	case 1:
		reserved = b[136:508]
	default:
		sb.gen = le.Uint64(b[136:])
		switch le.Uint32(b[144:]) {
		case stateClean:
			sb.clean = true
		case stateMounted:
		default:
			return nil, corruptf("superblock: owner state %d", le.Uint32(b[144:]))
		}
	}
	if !isZero(reserved) {
		return nil, corruptf("superblock: reserved bytes set")
	}
	if err := sb.validate(); err != nil {
		return nil, err
	}
	return sb, nil
}

// validate checks that the geometry is the one layout() would compute for
// its block size, block count, inode count and journal size.
func (sb *superblock) validate() error {
	bs := sb.blockSize
	if bs < 512 || bs > 64<<10 || bs&(bs-1) != 0 {
		return corruptf("superblock: block size %d is not a power of two from 512 to 64 KiB", bs)
	}
	d := sb.devBlockSize
	if d < 512 || d > bs || d&(d-1) != 0 {
		return corruptf("superblock: device block size %d does not divide the block size %d", d, bs)
	}
	if sb.totalBlocks == 0 || sb.totalBlocks > maxTotalBlocks {
		return corruptf("superblock: %d blocks", sb.totalBlocks)
	}
	if sb.inodeCount < firstIno+1 || sb.inodeCount > 1<<32 {
		return corruptf("superblock: %d inodes", sb.inodeCount)
	}
	want := layout(bs, sb.totalBlocks, sb.inodeCount, sb.journalBlocks)
	want.devBlockSize, want.uuid, want.created = sb.devBlockSize, sb.uuid, sb.created
	want.version, want.gen, want.clean = sb.version, sb.gen, sb.clean
	if *sb != *want {
		return corruptf("superblock: inconsistent geometry")
	}
	if sb.journalBlocks < minJournalBlocks(sb) {
		return corruptf("superblock: journal of %d blocks, at least %d needed", sb.journalBlocks, minJournalBlocks(sb))
	}
	if sb.dataStart >= sb.totalBlocks {
		return corruptf("superblock: no data blocks (metadata ends at block %d of %d)", sb.dataStart, sb.totalBlocks)
	}
	return nil
}

// layout computes the regions for a device of total blocks of size bs:
// superblock, journal, block bitmap, inode bitmap, inode table, data.
func layout(bs uint32, total, inodes, journal uint64) *superblock {
	sb := &superblock{blockSize: bs, totalBlocks: total, inodeCount: inodes, journalBlocks: journal}
	bpb := bitsPerBitmap(bs)
	sb.journalStart = 1
	sb.bitmapStart = sb.journalStart + journal
	sb.bitmapBlocks = ceilDiv(total, bpb)
	sb.ibitmapStart = sb.bitmapStart + sb.bitmapBlocks
	sb.ibitmapBlocks = ceilDiv(inodes, bpb)
	sb.itableStart = sb.ibitmapStart + sb.ibitmapBlocks
	sb.itableBlocks = ceilDiv(inodes, uint64(bs/inodeSize))
	sb.dataStart = sb.itableStart + sb.itableBlocks
	return sb
}

// maxOpBlocks bounds the metadata blocks one operation can dirty: any
// number of bitmap blocks (freeing a fragmented file), plus a few inode,
// directory and extent blocks. Transactions are committed before they
// could outgrow the journal by this much.
func maxOpBlocks(sb *superblock) uint64 { return sb.bitmapBlocks + sb.ibitmapBlocks + 64 }

// minJournalBlocks is the smallest journal Mkfs makes: two header slots
// and room for a transaction twice the largest a single operation can
// produce, with its descriptors.
func minJournalBlocks(sb *superblock) uint64 { return max(256, 4*maxOpBlocks(sb)+2) }

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// bitsPerBitmap is how many blocks (or inodes) one bitmap block maps: the
// block after its header, a multiple of 64 for every allowed block size.
func bitsPerBitmap(bs uint32) uint64 { return uint64(bs-hdrSize) * 8 }

// extent is a run of blocks.
type extent struct {
	start uint64 // first block
	n     uint64 // number of blocks, 1 to maxExtentBlocks
}

func (x extent) end() uint64 { return x.start + x.n }

// inodeRec is an inode record as stored. A record of all zeroes is a
// never-used free inode of version 0 (Mkfs zeroes the table rather than
// formatting every record).
//
// Layout (256 bytes, at byte (ino mod B/256)*256 of inode table block
// ino/(B/256)):
//
//	bytes   0     type: 0 free, 1 file, 2 directory
//	bytes   1     flags: bit 0 preallocated (keep blocks past the end)
//	bytes   2-3   reserved (0)
//	bytes   4-7   CRC32C of the record (UUID-seeded, this field as zero)
//	bytes   8-15  inode number (catches misplaced records)
//	bytes  16-19  link count (1 while named; 0 free or orphaned)
//	bytes  20-23  number of extents
//	bytes  24-31  size in bytes
//	bytes  32-39  extent map version
//	bytes  40-47  modification time (Unix nanoseconds)
//	bytes  48-55  parent directory (directories; 0 for files)
//	bytes  56-63  first extent block, if more than 10 extents (else 0)
//	bytes  64-71  journal sequence of the transaction that wrote it
//	bytes  72-95  reserved (0)
//	bytes  96-255 up to 10 extents of 16 bytes: start block (8),
//	              block count (4), reserved (4)
type inodeRec struct {
	typ      uint8
	flags    uint8
	nlink    uint32
	nextents uint32
	size     uint64
	version  uint64
	mtime    int64
	parent   uint64
	extBlock uint64
	seq      uint64
	inline   []extent // min(nextents, 10) extents
}

func encodeInode(uuid *[16]byte, b []byte, ino uint64, r *inodeRec) {
	clear(b[:inodeSize])
	b[0] = r.typ
	b[1] = r.flags
	le.PutUint64(b[8:], ino)
	le.PutUint32(b[16:], r.nlink)
	le.PutUint32(b[20:], r.nextents)
	le.PutUint64(b[24:], r.size)
	le.PutUint64(b[32:], r.version)
	le.PutUint64(b[40:], uint64(r.mtime))
	le.PutUint64(b[48:], r.parent)
	le.PutUint64(b[56:], r.extBlock)
	le.PutUint64(b[64:], r.seq)
	for i, x := range r.inline {
		putExtent(b[96+16*i:], x)
	}
	le.PutUint32(b[4:], checksum(uuid, b[:inodeSize], 4))
}

func putExtent(b []byte, x extent) {
	le.PutUint64(b[0:], x.start)
	le.PutUint32(b[8:], uint32(x.n))
	le.PutUint32(b[12:], 0)
}

// getExtent decodes an extent, checking it lies in [lo, hi).
func getExtent(b []byte, lo, hi uint64) (extent, error) {
	x := extent{start: le.Uint64(b[0:]), n: uint64(le.Uint32(b[8:]))}
	if x.n == 0 || x.start < lo || x.start >= hi || x.n > hi-x.start {
		return x, corruptf("extent [%d, +%d) outside the data area [%d, %d)", x.start, x.n, lo, hi)
	}
	if r := le.Uint32(b[12:]); r != 0 {
		return x, corruptf("extent [%d, +%d) has reserved bits %#x", x.start, x.n, r)
	}
	return x, nil
}

// decodeInode parses and validates inode record ino. Extents must lie in
// the data area [lo, hi).
func decodeInode(uuid *[16]byte, b []byte, ino, lo, hi uint64) (*inodeRec, error) {
	if len(b) < inodeSize {
		return nil, corruptf("inode %d: short record", ino)
	}
	b = b[:inodeSize]
	if isZero(b) {
		return &inodeRec{}, nil
	}
	if got, want := le.Uint32(b[4:]), checksum(uuid, b, 4); got != want {
		return nil, corruptf("inode %d: checksum mismatch (stored %#08x, computed %#08x)", ino, got, want)
	}
	if got := le.Uint64(b[8:]); got != ino {
		return nil, corruptf("inode %d: record claims to be inode %d", ino, got)
	}
	r := &inodeRec{
		typ:      b[0],
		flags:    b[1],
		nlink:    le.Uint32(b[16:]),
		nextents: le.Uint32(b[20:]),
		size:     le.Uint64(b[24:]),
		version:  le.Uint64(b[32:]),
		mtime:    int64(le.Uint64(b[40:])),
		parent:   le.Uint64(b[48:]),
		extBlock: le.Uint64(b[56:]),
		seq:      le.Uint64(b[64:]),
	}
	if r.typ > typeDir {
		return nil, corruptf("inode %d: unknown type %d", ino, r.typ)
	}
	if r.flags&^knownFlags != 0 {
		return nil, corruptf("inode %d: unknown flags %#x", ino, r.flags)
	}
	if le.Uint16(b[2:]) != 0 || !isZero(b[72:96]) {
		return nil, corruptf("inode %d: reserved bytes set", ino)
	}
	if r.typ == typeFree && (r.nextents != 0 || r.size != 0 || r.nlink != 0) {
		return nil, corruptf("inode %d: free inode with contents", ino)
	}
	if (r.nextents > inlineExtents) != (r.extBlock != 0) {
		return nil, corruptf("inode %d: %d extents but extent block %d", ino, r.nextents, r.extBlock)
	}
	if r.extBlock != 0 && (r.extBlock < lo || r.extBlock >= hi) {
		return nil, corruptf("inode %d: extent block %d outside the data area", ino, r.extBlock)
	}
	n := min(int(r.nextents), inlineExtents)
	r.inline = make([]extent, n)
	for i := range n {
		x, err := getExtent(b[96+16*i:], lo, hi)
		if err != nil {
			return nil, fmt.Errorf("inode %d: %w", ino, err)
		}
		r.inline[i] = x
	}
	if !isZero(b[96+16*n:]) {
		return nil, corruptf("inode %d: data after its last inline extent", ino)
	}
	return r, nil
}

// extentsPerBlock is how many extents an extent block holds.
func extentsPerBlock(bs uint32) int { return int(bs-extHdrSize) / 16 }

// extHdrSize is the header of an extent block.
const extHdrSize = 40

// encodeExtentBlock writes an extent block: the continuation of an inode's
// extent map beyond its inline extents.
//
//	bytes  0-15  header (magic "EEXT")
//	bytes 16-23  owning inode
//	bytes 24-31  next extent block (0: last)
//	bytes 32-35  number of extents in this block
//	bytes 36-39  reserved (0)
//	bytes 40-    extents, 16 bytes each as in the inode
func encodeExtentBlock(uuid *[16]byte, b []byte, blk, owner, next uint64, xs []extent) {
	clear(b)
	le.PutUint64(b[16:], owner)
	le.PutUint64(b[24:], next)
	le.PutUint32(b[32:], uint32(len(xs)))
	for i, x := range xs {
		putExtent(b[extHdrSize+16*i:], x)
	}
	seal(uuid, b, magicExtent, blk)
}

// decodeExtentBlock parses extent block blk.
func decodeExtentBlock(uuid *[16]byte, b []byte, blk, lo, hi uint64) (owner, next uint64, xs []extent, err error) {
	if err := checkHeader(uuid, b, magicExtent, blk, "extent block"); err != nil {
		return 0, 0, nil, err
	}
	if len(b) < extHdrSize {
		return 0, 0, nil, corruptf("extent block %d: short", blk)
	}
	owner, next = le.Uint64(b[16:]), le.Uint64(b[24:])
	n := le.Uint32(b[32:])
	if le.Uint32(b[36:]) != 0 {
		return 0, 0, nil, corruptf("extent block %d: reserved bytes set", blk)
	}
	if n == 0 || int(n) > (len(b)-extHdrSize)/16 {
		return 0, 0, nil, corruptf("extent block %d: %d extents", blk, n)
	}
	if next != 0 && (next < lo || next >= hi) {
		return 0, 0, nil, corruptf("extent block %d: next block %d outside the data area", blk, next)
	}
	xs = make([]extent, n)
	for i := range xs {
		if xs[i], err = getExtent(b[extHdrSize+16*i:], lo, hi); err != nil {
			return 0, 0, nil, fmt.Errorf("extent block %d: %w", blk, err)
		}
	}
	return owner, next, xs, nil
}

// Directory blocks.
const (
	dirHdrSize      = 32
	direntFixedSize = 10 // inode (8), type (1), name length (1)
)

// direntSize is the encoded size of an entry named name.
func direntSize(name string) int { return direntFixedSize + len(name) }

// dirEntry is a decoded directory entry.
type dirEntry struct {
	name string
	ino  uint64
	typ  uint8
}

// encodeDirBlock writes a directory block holding entries (which must
// fit).
//
//	bytes  0-15  header (magic "DDIR")
//	bytes 16-23  owning directory's inode
//	bytes 24-27  number of entries
//	bytes 28-31  bytes of entries that follow
//	bytes 32-    entries, packed: inode (8), type (1), name length (1),
//	             name (1 to 255 bytes, no '/' or NUL, not "." or "..")
func encodeDirBlock(uuid *[16]byte, b []byte, blk, owner uint64, entries []dirEntry) {
	clear(b)
	le.PutUint64(b[16:], owner)
	le.PutUint32(b[24:], uint32(len(entries)))
	p := dirHdrSize
	for _, e := range entries {
		le.PutUint64(b[p:], e.ino)
		b[p+8] = e.typ
		b[p+9] = byte(len(e.name))
		copy(b[p+10:], e.name)
		p += direntSize(e.name)
	}
	le.PutUint32(b[28:], uint32(p-dirHdrSize))
	seal(uuid, b, magicDir, blk)
}

// decodeDirBlock parses directory block blk. Inode numbers are checked
// against inodes (the inode count); names against checkName.
func decodeDirBlock(uuid *[16]byte, b []byte, blk, inodes uint64) (owner uint64, entries []dirEntry, err error) {
	if err := checkHeader(uuid, b, magicDir, blk, "directory block"); err != nil {
		return 0, nil, err
	}
	if len(b) < dirHdrSize {
		return 0, nil, corruptf("directory block %d: short", blk)
	}
	owner = le.Uint64(b[16:])
	n, used := int(le.Uint32(b[24:])), int(le.Uint32(b[28:]))
	if used > len(b)-dirHdrSize || n > used/(direntFixedSize+1) {
		return 0, nil, corruptf("directory block %d: %d entries in %d bytes", blk, n, used)
	}
	p, end := dirHdrSize, dirHdrSize+used
	entries = make([]dirEntry, 0, n)
	for range n {
		if end-p < direntFixedSize+1 {
			return 0, nil, corruptf("directory block %d: entry overruns the block", blk)
		}
		e := dirEntry{ino: le.Uint64(b[p:]), typ: b[p+8]}
		l := int(b[p+9])
		if l == 0 || p+direntFixedSize+l > end {
			return 0, nil, corruptf("directory block %d: entry overruns the block", blk)
		}
		e.name = string(b[p+10 : p+10+l])
		if err := checkName(e.name); err != nil {
			return 0, nil, corruptf("directory block %d: entry %q: %v", blk, e.name, err)
		}
		if e.ino < firstIno || e.ino >= inodes || (e.typ != typeFile && e.typ != typeDir) {
			return 0, nil, corruptf("directory block %d: entry %q: inode %d type %d", blk, e.name, e.ino, e.typ)
		}
		entries = append(entries, e)
		p += direntFixedSize + l
	}
	if p != end {
		return 0, nil, corruptf("directory block %d: %d stray bytes after the entries", blk, end-p)
	}
	if !isZero(b[end:]) {
		return 0, nil, corruptf("directory block %d: data after the entries", blk)
	}
	return owner, entries, nil
}

// checkName validates one path component.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty name")
	case len(name) > MaxNameLen:
		return ErrNameTooLong
	case name == "." || name == "..":
		return fmt.Errorf("reserved name %q", name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("name contains '/' or NUL")
	case !utf8.ValidString(name):
		// Names are bytes on disk, but tools print them; refuse what
		// cannot be printed faithfully.
		return fmt.Errorf("name is not valid UTF-8")
	}
	return nil
}

// encodeBitmap writes bitmap block blk holding words (bitsPerBitmap/64 of
// them; bit i of word w is block or inode idx*bitsPerBitmap + 64w + i, set
// when in use).
//
//	bytes  0-15  header (magic "BMAP" for blocks, "IMAP" for inodes)
//	bytes 16-    the bits, as little-endian 64-bit words
func encodeBitmap(uuid *[16]byte, b []byte, magic uint32, blk uint64, words []uint64) {
	for i, w := range words {
		le.PutUint64(b[hdrSize+8*i:], w)
	}
	seal(uuid, b, magic, blk)
}

// decodeBitmap parses bitmap block blk into words.
func decodeBitmap(uuid *[16]byte, b []byte, magic uint32, blk uint64, words []uint64) error {
	what := "block bitmap"
	if magic == magicIBitmap {
		what = "inode bitmap"
	}
	if err := checkHeader(uuid, b, magic, blk, what); err != nil {
		return err
	}
	if len(b) < hdrSize+8*len(words) {
		return corruptf("%s block %d: short", what, blk)
	}
	for i := range words {
		words[i] = le.Uint64(b[hdrSize+8*i:])
	}
	return nil
}

// Journal blocks. The journal is a header pair followed by a circular log
// of transactions; see journal.go.

// jHeader is the journal header, kept in two slots (the first two journal
// blocks) written alternately, so a torn header write leaves the other.
//
//	bytes  0-15  header (magic "JJHD")
//	bytes 16-23  epoch: the sequence number of the first transaction of
//	             the log, which starts at log block 0
//	bytes 24-    reserved (0)
type jHeader struct{ epoch uint64 }

func encodeJHeader(uuid *[16]byte, b []byte, blk uint64, h jHeader) {
	clear(b)
	le.PutUint64(b[16:], h.epoch)
	seal(uuid, b, magicJHeader, blk)
}

func decodeJHeader(uuid *[16]byte, b []byte, blk uint64) (jHeader, error) {
	if err := checkHeader(uuid, b, magicJHeader, blk, "journal header"); err != nil {
		return jHeader{}, err
	}
	h := jHeader{epoch: le.Uint64(b[16:])}
	if h.epoch == 0 || !isZero(b[24:]) {
		return jHeader{}, corruptf("journal header at block %d: epoch %d", blk, h.epoch)
	}
	return h, nil
}

// jDesc is a descriptor block: it lists the home blocks of the block
// images that follow it in the log.
//
//	bytes  0-15  header (magic "JJDS"; block number is its place on disk)
//	bytes 16-23  transaction sequence number
//	bytes 24-27  number of block images that follow (N)
//	bytes 28-31  flags: bit 0 another descriptor follows the N images
//	bytes 32-    N home block numbers (8 bytes each)
type jDesc struct {
	seq   uint64
	homes []uint64
	more  bool
}

const jDescHdrSize = 32

// descCapacity is how many images one descriptor lists.
func descCapacity(bs uint32) int { return int(bs-jDescHdrSize) / 8 }

func encodeJDesc(uuid *[16]byte, b []byte, blk uint64, d *jDesc) {
	clear(b)
	le.PutUint64(b[16:], d.seq)
	le.PutUint32(b[24:], uint32(len(d.homes)))
	if d.more {
		le.PutUint32(b[28:], 1)
	}
	for i, h := range d.homes {
		le.PutUint64(b[jDescHdrSize+8*i:], h)
	}
	seal(uuid, b, magicJDesc, blk)
}

func decodeJDesc(uuid *[16]byte, b []byte, blk uint64) (*jDesc, error) {
	if err := checkHeader(uuid, b, magicJDesc, blk, "journal descriptor"); err != nil {
		return nil, err
	}
	if len(b) < jDescHdrSize {
		return nil, corruptf("journal descriptor at block %d: short", blk)
	}
	d := &jDesc{seq: le.Uint64(b[16:])}
	n, flags := le.Uint32(b[24:]), le.Uint32(b[28:])
	if n == 0 || int(n) > (len(b)-jDescHdrSize)/8 || flags&^1 != 0 {
		return nil, corruptf("journal descriptor at block %d: %d images, flags %#x", blk, n, flags)
	}
	d.more = flags&1 != 0
	d.homes = make([]uint64, n)
	for i := range d.homes {
		d.homes[i] = le.Uint64(b[jDescHdrSize+8*i:])
	}
	return d, nil
}

// jCommit is a transaction's commit record, the last block written.
//
//	bytes  0-15  header (magic "JJCM")
//	bytes 16-23  transaction sequence number
//	bytes 24-27  blocks of the transaction before this one (descriptors
//	             and images)
//	bytes 28-31  CRC32C (UUID-seeded) of those blocks, in log order
//	bytes 32-39  commit time (Unix nanoseconds)
type jCommit struct {
	seq    uint64
	blocks uint32
	sum    uint32
	time   int64
}

func encodeJCommit(uuid *[16]byte, b []byte, blk uint64, c *jCommit) {
	clear(b)
	le.PutUint64(b[16:], c.seq)
	le.PutUint32(b[24:], c.blocks)
	le.PutUint32(b[28:], c.sum)
	le.PutUint64(b[32:], uint64(c.time))
	seal(uuid, b, magicJCommit, blk)
}

func decodeJCommit(uuid *[16]byte, b []byte, blk uint64) (*jCommit, error) {
	if err := checkHeader(uuid, b, magicJCommit, blk, "journal commit record"); err != nil {
		return nil, err
	}
	if len(b) < 40 {
		return nil, corruptf("journal commit record at block %d: short", blk)
	}
	return &jCommit{
		seq:    le.Uint64(b[16:]),
		blocks: le.Uint32(b[24:]),
		sum:    le.Uint32(b[28:]),
		time:   int64(le.Uint64(b[32:])),
	}, nil
}

// txSum is the commit record's checksum over a transaction's blocks.
func txSum(uuid *[16]byte, blocks []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, uuid[:]), castagnoli, blocks)
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
