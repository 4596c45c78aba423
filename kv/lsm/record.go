package lsm

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
)

// The WAL and the MANIFEST are sequences of records (docs/LSM.md,
// "Records"):
//
//	+0 crc    uint32  CRC32C of bytes [4, 8+length)
//	+4 length uint32
//	+8 payload
//
// A record is written with one Write. A reader stops at the first record
// that is short or fails its CRC: after a crash that is the torn tail of
// the last write, which was never acknowledged as synced.

const recordHeaderLen = 8

// crc is CRC32C. crc32.MakeTable returns the package's one Castagnoli
// table (built once, never changed), so this keeps no state of our own.
func crc(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// appendRecord appends payload framed as a record.
func appendRecord(dst, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, payload...)
	binary.LittleEndian.PutUint32(dst[start:], crc(dst[start+4:]))
	return dst
}

// errTornRecord: the rest of the log is not a whole, checksummed record.
var errTornRecord = errors.New("torn or corrupt record")

// recordReader reads records from a log's bytes.
type recordReader struct {
	buf []byte
	off int
}

// next returns the next record's payload (aliasing the buffer), io.EOF at
// a clean end, or errTornRecord where the log stops being valid; off is
// then where the valid prefix ends.
func (r *recordReader) next() ([]byte, error) {
	rest := r.buf[r.off:]
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if len(rest) < recordHeaderLen {
		return nil, errTornRecord
	}
	n := binary.LittleEndian.Uint32(rest[4:])
	if uint64(n) > uint64(len(rest)-recordHeaderLen) {
		return nil, errTornRecord
	}
	if crc(rest[4:recordHeaderLen+int(n)]) != binary.LittleEndian.Uint32(rest) {
		return nil, errTornRecord
	}
	r.off += recordHeaderLen + int(n)
	return rest[recordHeaderLen : recordHeaderLen+int(n)], nil
}
