package pushdown

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
	"unicode/utf8"
)

// Extent maps and grants: what a file system's owner tells a target about
// its files (docs/PROTOCOL.md, "Extent Map Put" and "Grant Put"). The host
// encodes these payloads and the target decodes them, so both live here,
// next to the file-table entry whose layout an extent map reuses.

// Bounds of the Extent Map Put and Grant Put payloads.
const (
	// MapPutHeaderSize is the Extent Map Put header: format (2), number
	// of entries (2), reserved (12).
	MapPutHeaderSize = 16
	// MaxMapsPerPut bounds the entries of one Extent Map Put.
	MaxMapsPerPut = 1024
	// MaxMapExtents bounds one extent map. It is larger than MaxExtents,
	// the bound of a request's file table, because a request may name a
	// held map without sending its extents.
	MaxMapExtents = 16384
	// GrantHeaderSize is the Grant Put data before its extents.
	GrantHeaderSize = 288
	// MaxGrantExtents bounds one grant.
	MaxGrantExtents = 1024
	// MaxLease is the longest lease the wire can carry (milliseconds in 32
	// bits, about 49 days).
	MaxLease = (1<<32 - 1) * time.Millisecond
	// nqnField is the size of the grantee NQN field, as in Connect data.
	nqnField = 256
	// maxNQN is the longest NQN the NVMe spec allows.
	maxNQN = 223
)

// mapFlagRemove is bit 0 of an Extent Map Put entry's flags.
const mapFlagRemove = 1

// MapUpdate is one entry of an Extent Map Put: a new extent map for inode
// File.ID, or, with Remove set, the removal of the inode's map.
//
// Versions only move forward: a target ignores an update whose version is
// not newer than the one it holds for the inode, so a synchronizer may
// resend freely. A removal with a version leaves that version behind, so
// an older map sent late cannot come back; a removal with version 0 drops
// whatever the target holds, version floor included.
type MapUpdate struct {
	File
	Remove bool
}

// EntryError reports which entry of a payload is wrong. Index is the entry
// (0-based) or -1 for the header; it wraps ErrMalformed, or ErrBadExtent
// for a map that does not fit its namespace.
type EntryError struct {
	Index int
	Err   error
}

func (e *EntryError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("header: %v", e.Err)
	}
	return fmt.Sprintf("entry %d: %v", e.Index, e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }

func entryErr(i int, base error, format string, args ...any) error {
	return &EntryError{Index: i, Err: fmt.Errorf("%w: "+format, append([]any{base}, args...)...)}
}

// MarshalMapUpdates encodes an Extent Map Put payload:
//
//	bytes 0-1  format (1)
//	bytes 2-3  number of entries N
//	bytes 4-15 reserved
//
// then N entries in the file-table entry layout — inode (8), version (8),
// size (8), number of extents E (4), flags (4; bit 0: remove) — each
// followed by its E 16-byte extents: LBA (8), blocks (4), reserved (4).
func MarshalMapUpdates(ups []MapUpdate) []byte {
	n := MapPutHeaderSize
	for _, u := range ups {
		n += FileSize + ExtentSize*len(u.Extents)
	}
	b := make([]byte, n)
	le := binary.LittleEndian
	le.PutUint16(b[0:], Format)
	le.PutUint16(b[2:], uint16(len(ups)))
	off := MapPutHeaderSize
	for _, u := range ups {
		le.PutUint64(b[off:], u.ID)
		le.PutUint64(b[off+8:], u.Version)
		le.PutUint64(b[off+16:], u.Size)
		le.PutUint32(b[off+24:], uint32(len(u.Extents)))
		if u.Remove {
			le.PutUint32(b[off+28:], mapFlagRemove)
		}
		off += FileSize
		off += putExtents(b[off:], u.Extents)
	}
	return b
}

// MapUpdatesSize is the encoded size of one update, for callers cutting a
// batch to a transfer size.
func MapUpdatesSize(u MapUpdate) int { return FileSize + ExtentSize*len(u.Extents) }

// UnmarshalMapUpdates decodes and checks an Extent Map Put payload: the
// lengths add up exactly, every inode and every map's version is non-zero,
// every extent has blocks, a removal carries no map. Whether the extents
// fit the namespace is CheckMap's business. Errors are *EntryError.
func UnmarshalMapUpdates(b []byte) ([]MapUpdate, error) {
	le := binary.LittleEndian
	if len(b) < MapPutHeaderSize {
		return nil, entryErr(-1, ErrMalformed, "%d bytes, shorter than the %d-byte header", len(b), MapPutHeaderSize)
	}
	if v := le.Uint16(b[0:]); v != Format {
		return nil, entryErr(-1, ErrMalformed, "format %d, want %d", v, Format)
	}
	n := int(le.Uint16(b[2:]))
	if n == 0 || n > MaxMapsPerPut {
		return nil, entryErr(-1, ErrMalformed, "%d entries (want 1 to %d)", n, MaxMapsPerPut)
	}
	if !allZero(b[4:MapPutHeaderSize]) {
		return nil, entryErr(-1, ErrMalformed, "reserved bytes set")
	}
	ups := make([]MapUpdate, n)
	off := MapPutHeaderSize
	for i := range ups {
		if len(b)-off < FileSize {
			return nil, entryErr(i, ErrMalformed, "truncated")
		}
		u := &ups[i]
		u.ID = le.Uint64(b[off:])
		u.Version = le.Uint64(b[off+8:])
		u.Size = le.Uint64(b[off+16:])
		ne := int(le.Uint32(b[off+24:]))
		flags := le.Uint32(b[off+28:])
		off += FileSize
		switch {
		case flags&^mapFlagRemove != 0:
			return nil, entryErr(i, ErrMalformed, "unknown flags %#x", flags)
		case u.ID == 0:
			return nil, entryErr(i, ErrMalformed, "inode 0 (a raw namespace needs no map)")
		case ne > MaxMapExtents || (len(b)-off)/ExtentSize < ne:
			return nil, entryErr(i, ErrMalformed, "%d extents do not fit (at most %d)", ne, MaxMapExtents)
		}
		u.Remove = flags&mapFlagRemove != 0
		if u.Remove {
			if ne != 0 || u.Size != 0 {
				return nil, entryErr(i, ErrMalformed, "a removal with %d extents and size %d", ne, u.Size)
			}
			continue
		}
		if u.Version == 0 {
			return nil, entryErr(i, ErrMalformed, "version 0 (0 means no map)")
		}
		var err error
		if u.Extents, off, _, err = getExtents(b, off, ne); err != nil {
			return nil, &EntryError{Index: i, Err: err}
		}
	}
	if off != len(b) {
		return nil, entryErr(-1, ErrMalformed, "%d bytes after the last entry", len(b)-off)
	}
	return ups, nil
}

// CheckMap checks a map against a device of the given size: every extent
// inside it and the extents together covering the file's size. It wraps
// ErrBadExtent.
func CheckMap(f *File, blocks uint64, blockSize int) error {
	bs := uint64(blockSize)
	var total uint64
	for j, x := range f.Extents {
		if x.LBA > blocks || uint64(x.Blocks) > blocks-x.LBA {
			return fmt.Errorf("%w: extent %d at LBA %d (+%d) of %d blocks", ErrBadExtent, j, x.LBA, x.Blocks, blocks)
		}
		// Saturating: extents may repeat, and a wrapped total would let a
		// file claim bytes its extents do not have.
		if hi, lo := bits.Mul64(uint64(x.Blocks), bs); hi != 0 {
			total = math.MaxUint64
		} else if sum, carry := bits.Add64(total, lo, 0); carry != 0 {
			total = math.MaxUint64
		} else {
			total = sum
		}
	}
	if total < f.Size {
		return fmt.Errorf("%w: maps %d bytes of its %d", ErrBadExtent, total, f.Size)
	}
	return nil
}

// GrantMode is what a grant lets its grantee do with the granted blocks.
type GrantMode uint8

// Grant modes: bit 0 read, bit 1 write. Write-only is not a mode.
const (
	GrantRead      GrantMode = 1
	GrantReadWrite GrantMode = 3
)

func (m GrantMode) String() string {
	switch m {
	case GrantRead:
		return "read"
	case GrantReadWrite:
		return "read-write"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Grant gives the host Host access to Extents of a namespace for Lease
// (docs/PROTOCOL.md, "Grant Put"). ID is the granting host's name for it.
type Grant struct {
	ID      uint64
	Host    string // the grantee's host NQN
	Mode    GrantMode
	Lease   time.Duration // millisecond resolution; 1 ms to MaxLease
	Extents []Extent
}

// Marshal encodes the Grant Put payload:
//
//	bytes   0-7   grant ID
//	bytes   8-11  lease in milliseconds
//	byte    12    mode (1 read, 3 read-write)
//	bytes  13-15  reserved
//	bytes  16-19  number of extents E
//	bytes  20-31  reserved
//	bytes  32-287 grantee host NQN, UTF-8, NUL padded
//
// then E extents of LBA (8), blocks (4), reserved (4).
func (g *Grant) Marshal() []byte {
	b := make([]byte, GrantHeaderSize+ExtentSize*len(g.Extents))
	le := binary.LittleEndian
	le.PutUint64(b[0:], g.ID)
	le.PutUint32(b[8:], uint32(min(g.Lease, MaxLease)/time.Millisecond))
	b[12] = byte(g.Mode)
	le.PutUint32(b[16:], uint32(len(g.Extents)))
	copy(b[32:32+nqnField-1], g.Host)
	putExtents(b[GrantHeaderSize:], g.Extents)
	return b
}

// Unmarshal decodes and checks a Grant Put payload: a non-zero ID, a lease,
// a known mode, a grantee NQN of 1 to 223 bytes of UTF-8, 1 to
// MaxGrantExtents extents with blocks, and lengths that add up exactly.
// Errors are *EntryError: index -1 for the header, i for extent i.
func (g *Grant) Unmarshal(b []byte) error {
	le := binary.LittleEndian
	if len(b) < GrantHeaderSize {
		return entryErr(-1, ErrMalformed, "%d bytes, shorter than the %d-byte header", len(b), GrantHeaderSize)
	}
	g.ID = le.Uint64(b[0:])
	g.Lease = time.Duration(le.Uint32(b[8:])) * time.Millisecond
	g.Mode = GrantMode(b[12])
	ne := int(le.Uint32(b[16:]))
	nqn := b[32 : 32+nqnField]
	if i := bytes.IndexByte(nqn, 0); i >= 0 {
		if !allZero(nqn[i:]) {
			return entryErr(-1, ErrMalformed, "bytes after the grantee NQN's terminator")
		}
		nqn = nqn[:i]
	}
	switch {
	case g.ID == 0:
		return entryErr(-1, ErrMalformed, "grant ID 0")
	case g.Lease == 0:
		return entryErr(-1, ErrMalformed, "lease of 0 ms")
	case g.Mode != GrantRead && g.Mode != GrantReadWrite:
		return entryErr(-1, ErrMalformed, "mode %d (want 1 read or 3 read-write)", b[12])
	case !allZero(b[13:16]) || !allZero(b[20:32]):
		return entryErr(-1, ErrMalformed, "reserved bytes set")
	case len(nqn) == 0 || len(nqn) > maxNQN || !utf8.Valid(nqn):
		return entryErr(-1, ErrMalformed, "grantee NQN of %d bytes (want 1 to %d of UTF-8)", len(nqn), maxNQN)
	case ne == 0 || ne > MaxGrantExtents:
		return entryErr(-1, ErrMalformed, "%d extents (want 1 to %d)", ne, MaxGrantExtents)
	case len(b) != GrantHeaderSize+ExtentSize*ne:
		return entryErr(-1, ErrMalformed, "%d bytes for %d extents, want %d", len(b), ne, GrantHeaderSize+ExtentSize*ne)
	}
	g.Host = string(nqn)
	xs, _, j, err := getExtents(b, GrantHeaderSize, ne)
	if err != nil {
		return &EntryError{Index: j, Err: err}
	}
	g.Extents = xs
	return nil
}

// putExtents encodes extents at the start of b and returns the bytes used.
func putExtents(b []byte, xs []Extent) int {
	le := binary.LittleEndian
	off := 0
	for _, x := range xs {
		le.PutUint64(b[off:], x.LBA)
		le.PutUint32(b[off+8:], x.Blocks)
		le.PutUint32(b[off+12:], 0)
		off += ExtentSize
	}
	return off
}

// getExtents decodes n extents at b[off:], which the caller has checked
// holds them, refusing empty extents and set reserved bytes. It returns
// the offset after them, or the index of the bad extent and why.
func getExtents(b []byte, off, n int) ([]Extent, int, int, error) {
	le := binary.LittleEndian
	xs := make([]Extent, n)
	for j := range xs {
		xs[j] = Extent{LBA: le.Uint64(b[off:]), Blocks: le.Uint32(b[off+8:])}
		switch {
		case xs[j].Blocks == 0:
			return nil, 0, j, fmt.Errorf("%w: extent %d has no blocks", ErrMalformed, j)
		case le.Uint32(b[off+12:]) != 0:
			return nil, 0, j, fmt.Errorf("%w: extent %d: reserved bytes set", ErrMalformed, j)
		}
		off += ExtentSize
	}
	return xs, off, 0, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// ResolveFiles checks a request's file table against the extent maps a
// target holds and returns the table the request must run with. held
// returns the map the target holds for an inode (ok false if none, or if
// the inode's map was removed).
//
// The rules (docs/PROTOCOL.md, "Requests"):
//   - a file with ID 0 is raw namespace space: its extents are the
//     request's own, and no map is consulted;
//   - any other file must name exactly the version the target holds for
//     the inode, or the request is stale (ErrStale);
//   - a file with no extents runs on the held map (and the held size; the
//     request's size must be 0 or the same), so a host need not send maps
//     the target already has;
//   - a file with extents must send exactly the held map and size, or the
//     request names blocks that are not the file's (ErrOutsideFile).
//
// So whatever a request says, it never reads or writes outside the held
// map of a file it names by inode. files is not modified; the result
// shares the held maps' extents, which the caller must not modify.
func ResolveFiles(files []File, held func(ino uint64) (File, bool)) ([]File, error) {
	out := make([]File, len(files))
	for i, f := range files {
		if f.ID == 0 {
			out[i] = f
			continue
		}
		h, ok := held(f.ID)
		if !ok || h.Version != f.Version {
			var hv uint64
			if ok {
				hv = h.Version
			}
			return nil, fmt.Errorf("%w: file %d: inode %d version %d, the target holds version %d", ErrStale, i, f.ID, f.Version, hv)
		}
		if len(f.Extents) == 0 {
			if f.Size != 0 && f.Size != h.Size {
				return nil, fmt.Errorf("%w: file %d: inode %d version %d is %d bytes, not %d", ErrOutsideFile, i, f.ID, f.Version, h.Size, f.Size)
			}
		} else if f.Size != h.Size || !slices.Equal(f.Extents, h.Extents) {
			return nil, fmt.Errorf("%w: file %d: the extents sent for inode %d version %d are not its map", ErrOutsideFile, i, f.ID, f.Version)
		}
		out[i] = File{ID: f.ID, Version: h.Version, Size: h.Size, Extents: h.Extents}
	}
	return out, nil
}
