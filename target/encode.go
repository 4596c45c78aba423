package target

import "encoding/binary"

func le16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }
func le32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }
func le64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }

// le128 writes a 128-bit little-endian counter from a 64-bit value, as the
// SMART log's 16-byte counters are.
func le128(b []byte, v uint64) {
	binary.LittleEndian.PutUint64(b, v)
	binary.LittleEndian.PutUint64(b[8:], 0)
}
