// Package pushdown defines nearstore's function requests — the bytes a
// Pushdown Read, λ Read or λ Write command carries (docs/PROTOCOL.md) — and
// the executor that runs them next to the data: read the start range, call
// the function, read what it asks for, call it again, until it is done.
//
// A request names its files by extent maps, so the executor works on raw
// namespaces (one file, one extent) as well as on offloadfs files, and
// every read it makes is checked against those maps: a function can only
// ever see blocks of the files its request names. Each file carries the
// version of its extent map; a target resolves files named by inode
// against the versioned maps their owner pushed (ResolveFiles, with the
// payloads of maps.go), refusing requests planned against stale maps and
// requests that lie about extents.
package pushdown

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nearstore/nearstore/sandbox"
)

// Format is the request format version this package writes and reads.
const Format = 1

// Sizes of the fixed parts of the wire format.
const (
	HeaderSize = 64
	FileSize   = 32 // a file entry before its extents
	ExtentSize = 16
	ResultSize = 32
	// MaxFiles and MaxExtents bound a request's file table.
	MaxFiles   = 16
	MaxExtents = 1024
)

// ErrMalformed reports a request or result that does not decode.
var ErrMalformed = errors.New("pushdown: malformed request")

// Extent maps a run of a file's bytes to Blocks blocks at LBA.
type Extent struct {
	LBA    uint64
	Blocks uint32
}

// File is one entry of a request's file table: a file's extent map, in
// file order, and the version of that map.
type File struct {
	ID      uint64 // inode number, or 0 for a raw namespace
	Version uint64
	Size    uint64 // bytes; reads past it are refused
	Extents []Extent
}

// Request is a decoded function request.
//
// Header (64 bytes):
//
//	bytes  0-31 function ID (SHA-256 of the module)
//	bytes 32-33 format (1)
//	bytes 34-35 number of files
//	bytes 36-39 flags (reserved, 0)
//	bytes 40-43 parameter length P
//	bytes 44-47 data length D (λ Write: the input that follows the parameters)
//	bytes 48-55 start offset, in bytes, within the start file
//	bytes 56-59 start length
//	bytes 60-63 start file (index into the file table)
//
// Then each file: ID (8), version (8), size (8), number of extents (4),
// reserved (4), and that many extents of LBA (8), blocks (4), reserved (4).
// Then P bytes of parameters (pushdown: the initial scratch; λ: a header
// the function's input starts with), then D bytes of data.
//
// Unmarshal decodes the file table into storage the Request owns and
// reuses, so the Files it sets share memory with the Request: a copy of
// the Request shares them, and the next Unmarshal of the same Request
// overwrites them.
type Request struct {
	Function    sandbox.ID
	Files       []File
	StartOffset uint64
	StartLength uint32
	StartFile   uint32
	Params      []byte
	Data        []byte

	table fileTable
}

// Tables of up to inlineFiles files and inlineExtents extents in all
// decode into a Request's arrays (a pushdown's table is one or two files
// of a few extents).
const (
	inlineFiles   = 4
	inlineExtents = 16
)

// fileTable is where a Request's Unmarshal puts the file table: a small
// table in the arrays, held in the Request itself, so that decoding one
// allocates nothing; a larger one in the slices, kept for the next decode.
type fileTable struct {
	files       [inlineFiles]File
	extents     [inlineExtents]Extent
	moreFiles   []File
	moreExtents []Extent
}

// take returns storage for nfiles files and nextents extents, whatever
// it held before.
func (t *fileTable) take(nfiles, nextents int) ([]File, []Extent) {
	files, extents := t.files[:], t.extents[:]
	if nfiles > len(files) {
		if cap(t.moreFiles) < nfiles {
			t.moreFiles = make([]File, nfiles)
		}
		files = t.moreFiles
	}
	if nextents > len(extents) {
		if cap(t.moreExtents) < nextents {
			t.moreExtents = make([]Extent, nextents)
		}
		extents = t.moreExtents
	}
	return files[:nfiles:nfiles], extents[:nextents:nextents]
}

// Marshal encodes the request.
func (r *Request) Marshal() []byte { return r.AppendMarshal(nil) }

// AppendMarshal appends the request's encoding to dst and returns the
// extended slice, for a caller that reuses its buffer.
func (r *Request) AppendMarshal(dst []byte) []byte {
	n := HeaderSize + len(r.Params) + len(r.Data)
	for _, f := range r.Files {
		n += FileSize + ExtentSize*len(f.Extents)
	}
	dst = slices.Grow(dst, n)
	b := dst[len(dst) : len(dst)+n]
	clear(b) // reserved fields are zero
	le := binary.LittleEndian
	copy(b[0:32], r.Function[:])
	le.PutUint16(b[32:], Format)
	le.PutUint16(b[34:], uint16(len(r.Files)))
	le.PutUint32(b[40:], uint32(len(r.Params)))
	le.PutUint32(b[44:], uint32(len(r.Data)))
	le.PutUint64(b[48:], r.StartOffset)
	le.PutUint32(b[56:], r.StartLength)
	le.PutUint32(b[60:], r.StartFile)
	off := HeaderSize
	for _, f := range r.Files {
		le.PutUint64(b[off:], f.ID)
		le.PutUint64(b[off+8:], f.Version)
		le.PutUint64(b[off+16:], f.Size)
		le.PutUint32(b[off+24:], uint32(len(f.Extents)))
		off += FileSize
		for _, e := range f.Extents {
			le.PutUint64(b[off:], e.LBA)
			le.PutUint32(b[off+8:], e.Blocks)
			off += ExtentSize
		}
	}
	off += copy(b[off:], r.Params)
	copy(b[off:], r.Data)
	return dst[:len(dst)+n]
}

// Unmarshal decodes and checks a request: counts within bounds, lengths
// that add up exactly, a start file that exists.
func (r *Request) Unmarshal(b []byte) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
	if len(b) < HeaderSize {
		return bad("%d bytes, shorter than the %d-byte header", len(b), HeaderSize)
	}
	le := binary.LittleEndian
	copy(r.Function[:], b[0:32])
	if v := le.Uint16(b[32:]); v != Format {
		return bad("format %d, want %d", v, Format)
	}
	nfiles := int(le.Uint16(b[34:]))
	plen, dlen := uint64(le.Uint32(b[40:])), uint64(le.Uint32(b[44:]))
	r.StartOffset = le.Uint64(b[48:])
	r.StartLength = le.Uint32(b[56:])
	r.StartFile = le.Uint32(b[60:])
	if nfiles == 0 || nfiles > MaxFiles {
		return bad("%d files (want 1 to %d)", nfiles, MaxFiles)
	}
	if int(r.StartFile) >= nfiles {
		return bad("start file %d of %d", r.StartFile, nfiles)
	}
	// The first pass checks the layout and counts the extents, so that
	// the second decodes into storage of the right size.
	off, nextents := HeaderSize, 0
	for i := range nfiles {
		if len(b)-off < FileSize {
			return bad("file %d truncated", i)
		}
		ne := int(le.Uint32(b[off+24:]))
		off += FileSize
		if ne > MaxExtents || (len(b)-off)/ExtentSize < ne {
			return bad("file %d: %d extents do not fit", i, ne)
		}
		off += ne * ExtentSize
		nextents += ne
	}
	if uint64(len(b)-off) != plen+dlen {
		return bad("%d bytes after the file table, header says %d + %d", len(b)-off, plen, dlen)
	}
	files, extents := r.table.take(nfiles, nextents)
	off = HeaderSize
	for i := range files {
		f := &files[i]
		f.ID = le.Uint64(b[off:])
		f.Version = le.Uint64(b[off+8:])
		f.Size = le.Uint64(b[off+16:])
		ne := int(le.Uint32(b[off+24:]))
		off += FileSize
		f.Extents = extents[:ne:ne]
		extents = extents[ne:]
		for j := range f.Extents {
			f.Extents[j] = Extent{LBA: le.Uint64(b[off:]), Blocks: le.Uint32(b[off+8:])}
			off += ExtentSize
		}
	}
	r.Files = files
	r.Params = b[off : off+int(plen)]
	r.Data = b[off+int(plen):]
	return nil
}

// Result is what a request returns: a 32-byte header, then the output.
//
//	bytes  0-3  function return code (int32; 0 when it succeeded)
//	bytes  4-7  steps (calls into the function)
//	bytes  8-11 reads issued at the target
//	bytes 12-15 flags (bit 0: done)
//	bytes 16-23 bytes read at the target
//	bytes 24-27 output length
//	bytes 28-31 target time: microseconds the target spent on the request
//
// Bytes 28-31 were reserved (0) before the target time was added, so a
// decoder that does not know the field ignores it, and a result from a
// target that does not fill it reads as 0.
type Result struct {
	Code      int32
	Steps     uint32
	Reads     uint32
	Done      bool
	BytesRead uint64
	// TargetMicros is the wall time, in microseconds rounded up and
	// saturating at 2^32-1, the target spent running the request, from
	// its first read to the result. A target fills it for Pushdown Read
	// and λ Read; it is 0 for a result computed on the host, so it also
	// tells where a result came from. Dispatchers use it to separate the
	// target's compute from the transfer (package lambda's model).
	TargetMicros uint32
	Output       []byte
}

// MicrosOf converts an elapsed time into a TargetMicros value: rounded up,
// so any run at the target reads as at least 1, and saturating.
func MicrosOf(d time.Duration) uint32 {
	if d <= 0 {
		return 1
	}
	us := d / time.Microsecond
	if d%time.Microsecond != 0 {
		us++
	}
	if us > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(us)
}

// Marshal writes the result header and output into b, which must hold
// ResultSize+len(Output) bytes, and returns the bytes used.
func (r *Result) Marshal(b []byte) int {
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(r.Code))
	le.PutUint32(b[4:], r.Steps)
	le.PutUint32(b[8:], r.Reads)
	var flags uint32
	if r.Done {
		flags |= 1
	}
	le.PutUint32(b[12:], flags)
	le.PutUint64(b[16:], r.BytesRead)
	le.PutUint32(b[24:], uint32(len(r.Output)))
	le.PutUint32(b[28:], r.TargetMicros)
	return ResultSize + copy(b[ResultSize:], r.Output)
}

// Unmarshal decodes a result; Output aliases b.
func (r *Result) Unmarshal(b []byte) error {
	if len(b) < ResultSize {
		return fmt.Errorf("%w: result of %d bytes", ErrMalformed, len(b))
	}
	le := binary.LittleEndian
	r.Code = int32(le.Uint32(b[0:]))
	r.Steps = le.Uint32(b[4:])
	r.Reads = le.Uint32(b[8:])
	r.Done = le.Uint32(b[12:])&1 != 0
	r.BytesRead = le.Uint64(b[16:])
	r.TargetMicros = le.Uint32(b[28:])
	n := le.Uint32(b[24:])
	if uint64(n) > uint64(len(b)-ResultSize) {
		return fmt.Errorf("%w: result says %d output bytes, has %d", ErrMalformed, n, len(b)-ResultSize)
	}
	r.Output = b[ResultSize : ResultSize+int(n)]
	return nil
}
