package leed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The on-disk layout. Every multi-byte field is little-endian; docs/LEED.md
// repeats these tables.
//
// The device is split into four regions:
//
//	offset 0          superblock (one 4 KiB block)
//	offset 4096       checkpoint A (one block)
//	offset 8192       checkpoint B (one block)
//	KeyLogOff         key log: KeySlots buckets of BucketSize bytes
//	ValueLogOff       value log: ValueLogSize bytes
//
// Superblock:
//
//	0   [8]byte  magic "LEEDsup2"
//	8   uint32   CRC32C of bytes [12, 4096)
//	12  uint32   bucket size (4096)
//	16  uint32   segments
//	20  uint32   key log slots
//	24  uint64   key log offset (bytes)
//	32  uint64   value log offset (bytes)
//	40  uint64   value log size (bytes)
//	48  uint32   maximum value size (bytes)
//	56  uint64   store identity, random at Format
//
// Checkpoint (the committed tails of both logs; of A and B the valid one
// with the larger sequence number counts):
//
//	0   uint32   magic "LDCP"
//	4   uint32   CRC32C of bytes [8, 64)
//	8   uint64   sequence number
//	16  uint64   key log tail (virtual slot)
//	24  uint64   value log tail (virtual byte offset)
//	32  uint64   key log head (virtual slot) when written: every chain
//	             before it was whole, so recovery's head is at least this
//	40  uint64   value log head (virtual byte offset) likewise
//	48  uint64   applied floor: the sequence number SetApplied recorded;
//	             Applied() after recovery is at least this
//
// Bucket (one key log slot):
//
//	0   uint32   magic "LDBK"
//	4   uint32   CRC32C of bytes [8, BucketSize)
//	8   uint64   chain's virtual slot: the virtual slot of its first bucket
//	16  uint32   segment
//	20  uint8    chain length in buckets (1..63)
//	21  uint8    position in the chain (0..length-1)
//	22  uint8    flags: 1 head (position 0), 2 tail (last), 4 skip marker
//	23  uint8    reserved
//	24  uint16   items in this bucket
//	26  [6]byte  reserved
//	32  uint64   operation sequence number of the write that made the chain
//	40  uint64   value log head (virtual): every value entry before it
//	             was completely written when the chain was written
//	48  uint64   store identity (the superblock's)
//	56  [8]byte  reserved
//	64  items, 25 bytes each:
//	    0  [16]byte key, zero-padded
//	    16 uint8    key length (1..16)
//	    17 uint24   value length
//	    20 uint40   value entry offset within the value log (physical)
//
// Value entry (in the value log; entries never straddle its end):
//
//	0   uint32   CRC32C of bytes [4, 10+length)
//	4   uint48   bits 0-25: segment of its key (3FFFFFFh pads the rest of
//	             the lap); bits 26-47: value length
//	10  value
//
// Ten bytes of header, not twelve: at 256-byte values every byte of
// per-object overhead is 0.35% of the device's usable capacity.
//
// Virtual positions grow forever; the physical one is the virtual modulo
// the log's size. A bucket carries its virtual slot, so a bucket left from
// an earlier lap of the log is told from the current one.

// Geometry constants of the format.
const (
	// BucketSize is the size of a key log bucket: one block of the
	// device (4 KiB, or eight 512-byte sectors).
	BucketSize = 4096
	// MaxKeySize is the longest key, the KV command set's 16 bytes.
	MaxKeySize = 16
	// MaxChain is the longest chain of buckets a segment may have.
	MaxChain = 63

	bucketHdrSize  = 64
	itemSize       = 25
	itemsPerBucket = (BucketSize - bucketHdrSize) / itemSize // 161
	entryHdrSize   = 10
	superOff       = 0
	ckptOff        = BucketSize
	keyLogStart    = 3 * BucketSize
	maxSlots       = 1 << 26        // SegTbl packs a slot in 26 bits
	maxValueLog    = 1 << 40        // item offsets are 40 bits
	maxValueLen    = 1<<22 - 1      // value entries hold lengths in 22 bits
	segBits        = 26             // value entries hold segments in 26 bits
	padSegment     = 1<<segBits - 1 // a value entry that pads to the lap's end; no segment has this number

	flagHead = 1
	flagTail = 2
	flagSkip = 4
)

var (
	superMagic  = [8]byte{'L', 'E', 'E', 'D', 's', 'u', 'p', '2'}
	ckptMagic   = uint32(0x5043444c) // "LDCP"
	bucketMagic = uint32(0x4b42444c) // "LDBK"
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
	le          = binary.LittleEndian
)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Errors of the store. Test for them with errors.Is; the errors returned
// wrap them with details.
var (
	// ErrNotFound: the key has no value.
	ErrNotFound = errors.New("leed: key does not exist")
	// ErrExists: a Store that must not overwrite found the key.
	ErrExists = errors.New("leed: key exists")
	// ErrFull: the store has no room for the write; nothing was changed.
	ErrFull = errors.New("leed: capacity exceeded")
	// ErrCorrupt: a checksum or a field on the device does not match what
	// the store expects. The store returns this rather than a value it
	// cannot vouch for.
	ErrCorrupt = errors.New("leed: corrupt data on device")
	// ErrKeySize: a key of no bytes or more than MaxKeySize.
	ErrKeySize = errors.New("leed: invalid key size")
	// ErrValueSize: a value longer than the store's maximum.
	ErrValueSize = errors.New("leed: invalid value size")
	// ErrNotFormatted: the device holds no store (no valid superblock).
	ErrNotFormatted = errors.New("leed: device not formatted")
	// ErrSeqGap: Apply was given an operation whose sequence number is
	// beyond the next one expected.
	ErrSeqGap = errors.New("leed: operation sequence gap")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("leed: closed")
)

// geometry is the superblock's content.
type geometry struct {
	segments     uint32
	slots        uint32
	keyLogOff    int64
	valueLogOff  int64
	valueLogSize int64
	maxValue     uint32
	id           uint64
}

func (g geometry) marshal() []byte {
	b := make([]byte, BucketSize)
	copy(b, superMagic[:])
	le.PutUint32(b[12:], BucketSize)
	le.PutUint32(b[16:], g.segments)
	le.PutUint32(b[20:], g.slots)
	le.PutUint64(b[24:], uint64(g.keyLogOff))
	le.PutUint64(b[32:], uint64(g.valueLogOff))
	le.PutUint64(b[40:], uint64(g.valueLogSize))
	le.PutUint32(b[48:], g.maxValue)
	le.PutUint64(b[56:], g.id)
	le.PutUint32(b[8:], crc(b[12:]))
	return b
}

// unmarshalGeometry decodes and checks a superblock against a device of
// size bytes.
func unmarshalGeometry(b []byte, size int64) (geometry, error) {
	if len(b) < BucketSize || [8]byte(b[:8]) != superMagic {
		return geometry{}, ErrNotFormatted
	}
	if le.Uint32(b[8:]) != crc(b[12:BucketSize]) {
		return geometry{}, fmt.Errorf("%w: superblock checksum mismatch", ErrCorrupt)
	}
	g := geometry{
		segments:     le.Uint32(b[16:]),
		slots:        le.Uint32(b[20:]),
		keyLogOff:    int64(le.Uint64(b[24:])),
		valueLogOff:  int64(le.Uint64(b[32:])),
		valueLogSize: int64(le.Uint64(b[40:])),
		maxValue:     le.Uint32(b[48:]),
		id:           le.Uint64(b[56:]),
	}
	switch {
	case le.Uint32(b[12:]) != BucketSize:
		return g, fmt.Errorf("%w: superblock bucket size %d, want %d", ErrCorrupt, le.Uint32(b[12:]), BucketSize)
	case g.segments == 0 || g.segments >= padSegment || g.slots == 0 || g.slots > maxSlots:
		return g, fmt.Errorf("%w: superblock: %d segments, %d slots", ErrCorrupt, g.segments, g.slots)
	case g.keyLogOff != keyLogStart || g.valueLogOff != g.keyLogOff+int64(g.slots)*BucketSize:
		return g, fmt.Errorf("%w: superblock: log offsets %d, %d", ErrCorrupt, g.keyLogOff, g.valueLogOff)
	case g.valueLogSize <= 0 || g.valueLogSize > maxValueLog || g.valueLogOff+g.valueLogSize > size:
		return g, fmt.Errorf("%w: superblock: value log of %d bytes at %d on a device of %d", ErrCorrupt, g.valueLogSize, g.valueLogOff, size)
	case g.maxValue == 0 || g.maxValue > maxValueLen:
		return g, fmt.Errorf("%w: superblock: maximum value size %d", ErrCorrupt, g.maxValue)
	}
	return g, nil
}

// checkpoint is the committed tails of the logs.
type checkpoint struct {
	seq          uint64
	ktail, vtail uint64
	khead, vhead uint64
	applied      uint64
}

func (c checkpoint) marshal() []byte {
	b := make([]byte, BucketSize)
	le.PutUint32(b[0:], ckptMagic)
	le.PutUint64(b[8:], c.seq)
	le.PutUint64(b[16:], c.ktail)
	le.PutUint64(b[24:], c.vtail)
	le.PutUint64(b[32:], c.khead)
	le.PutUint64(b[40:], c.vhead)
	le.PutUint64(b[48:], c.applied)
	le.PutUint32(b[4:], crc(b[8:64]))
	return b
}

func unmarshalCheckpoint(b []byte) (checkpoint, bool) {
	if len(b) < 64 || le.Uint32(b) != ckptMagic || le.Uint32(b[4:]) != crc(b[8:64]) {
		return checkpoint{}, false
	}
	c := checkpoint{seq: le.Uint64(b[8:]), ktail: le.Uint64(b[16:]), vtail: le.Uint64(b[24:]), khead: le.Uint64(b[32:]), vhead: le.Uint64(b[40:]), applied: le.Uint64(b[48:])}
	if c.khead < c.ktail || c.vhead < c.vtail {
		return c, false
	}
	return c, true
}

// item is one key item of a bucket: where a key's value is.
type item struct {
	key  [MaxKeySize]byte
	klen uint8
	vlen uint32 // < 2^24
	voff int64  // physical offset in the value log, < 2^40
}

func (it *item) keyBytes() []byte { return it.key[:it.klen] }

// bucketHdr is a bucket's header fields.
type bucketHdr struct {
	chainVirt uint64
	segment   uint32
	chainLen  uint8
	pos       uint8
	flags     uint8
	nitems    uint16
	opSeq     uint64
	vhead     uint64
	storeID   uint64
}

// encodeBucket writes h and items into b (BucketSize bytes) with its
// checksum.
func encodeBucket(b []byte, h bucketHdr, items []item) {
	clear(b[:BucketSize])
	le.PutUint32(b[0:], bucketMagic)
	le.PutUint64(b[8:], h.chainVirt)
	le.PutUint32(b[16:], h.segment)
	b[20] = h.chainLen
	b[21] = h.pos
	b[22] = h.flags
	le.PutUint16(b[24:], uint16(len(items)))
	le.PutUint64(b[32:], h.opSeq)
	le.PutUint64(b[40:], h.vhead)
	le.PutUint64(b[48:], h.storeID)
	for i := range items {
		p := b[bucketHdrSize+i*itemSize:]
		it := &items[i]
		copy(p[:MaxKeySize], it.key[:])
		p[16] = it.klen
		p[17], p[18], p[19] = byte(it.vlen), byte(it.vlen>>8), byte(it.vlen>>16)
		v := uint64(it.voff)
		for j := 0; j < 5; j++ {
			p[20+j] = byte(v >> (8 * j))
		}
	}
	le.PutUint32(b[4:], crc(b[8:BucketSize]))
}

// decodeBucket checks b's magic, checksum and fields, and returns its
// header and items appended to items. It never panics on any input: it
// is the decoder of the one untrusted thing the store reads, its device.
func decodeBucket(b []byte, items []item) (bucketHdr, []item, error) {
	var h bucketHdr
	if len(b) < BucketSize {
		return h, items, fmt.Errorf("%w: bucket of %d bytes", ErrCorrupt, len(b))
	}
	if le.Uint32(b) != bucketMagic {
		return h, items, fmt.Errorf("%w: bucket magic %#x", ErrCorrupt, le.Uint32(b))
	}
	if got, want := crc(b[8:BucketSize]), le.Uint32(b[4:]); got != want {
		return h, items, fmt.Errorf("%w: bucket checksum %#x, want %#x", ErrCorrupt, got, want)
	}
	h = bucketHdr{
		chainVirt: le.Uint64(b[8:]),
		segment:   le.Uint32(b[16:]),
		chainLen:  b[20],
		pos:       b[21],
		flags:     b[22],
		nitems:    le.Uint16(b[24:]),
		opSeq:     le.Uint64(b[32:]),
		vhead:     le.Uint64(b[40:]),
		storeID:   le.Uint64(b[48:]),
	}
	if h.flags&flagSkip != 0 {
		if h.chainLen == 0 || h.pos != 0 || h.nitems != 0 {
			return h, items, fmt.Errorf("%w: skip marker with length %d position %d items %d", ErrCorrupt, h.chainLen, h.pos, h.nitems)
		}
		return h, items, nil
	}
	var wantFlags uint8
	if h.pos == 0 {
		wantFlags |= flagHead
	}
	if h.pos == h.chainLen-1 {
		wantFlags |= flagTail
	}
	switch {
	case h.chainLen == 0 || h.chainLen > MaxChain || h.pos >= h.chainLen:
		return h, items, fmt.Errorf("%w: bucket position %d of chain length %d", ErrCorrupt, h.pos, h.chainLen)
	case h.flags != wantFlags:
		return h, items, fmt.Errorf("%w: bucket flags %#x at position %d of %d", ErrCorrupt, h.flags, h.pos, h.chainLen)
	case int(h.nitems) > itemsPerBucket:
		return h, items, fmt.Errorf("%w: bucket holds %d items, at most %d fit", ErrCorrupt, h.nitems, itemsPerBucket)
	}
	for i := 0; i < int(h.nitems); i++ {
		p := b[bucketHdrSize+i*itemSize:]
		var it item
		copy(it.key[:], p[:MaxKeySize])
		it.klen = p[16]
		it.vlen = uint32(p[17]) | uint32(p[18])<<8 | uint32(p[19])<<16
		var v uint64
		for j := 0; j < 5; j++ {
			v |= uint64(p[20+j]) << (8 * j)
		}
		it.voff = int64(v)
		if it.klen == 0 || it.klen > MaxKeySize {
			return h, items, fmt.Errorf("%w: item %d has key length %d", ErrCorrupt, i, it.klen)
		}
		for _, c := range it.key[it.klen:] {
			if c != 0 {
				return h, items, fmt.Errorf("%w: item %d has bytes past its key length", ErrCorrupt, i)
			}
		}
		items = append(items, it)
	}
	return h, items, nil
}

// valueEntry is a decoded value log entry header.
type valueEntry struct {
	segment uint32
	vlen    uint32
}

// entrySize is the bytes a value of n bytes takes in the value log.
func entrySize(n int) int64 { return entryHdrSize + int64(n) }

// encodeEntry writes a value entry for value into b (entrySize bytes).
// segment is below 2^26 and value shorter than 2^22 bytes (the store
// checks both when it is formatted).
func encodeEntry(b []byte, segment uint32, value []byte) {
	putEntryHdr(b, segment, uint32(len(value)))
	copy(b[entryHdrSize:], value)
	le.PutUint32(b[0:], crc(b[4:entryHdrSize+len(value)]))
}

// putEntryHdr writes bytes 4..9 of an entry header.
func putEntryHdr(b []byte, segment, vlen uint32) {
	v := uint64(segment) | uint64(vlen)<<segBits
	le.PutUint32(b[4:], uint32(v))
	le.PutUint16(b[8:], uint16(v>>32))
}

// decodeEntryHdr reads an entry's header; the whole entry is checked by
// checkEntry once its bytes are in hand.
func decodeEntryHdr(b []byte) valueEntry {
	v := uint64(le.Uint32(b[4:])) | uint64(le.Uint16(b[8:]))<<32
	return valueEntry{segment: uint32(v & (1<<segBits - 1)), vlen: uint32(v >> segBits)}
}

// checkEntry checks a whole entry's checksum.
func checkEntry(b []byte) bool {
	return len(b) >= entryHdrSize && le.Uint32(b) == crc(b[4:])
}
