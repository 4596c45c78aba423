package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The NVMe Key Value Command Set (KV Command Set Specification 1.0): a
// namespace of command set identifier CSIKV answers Store, Retrieve,
// Delete, Exist and List instead of the NVM set's reads and writes. Host
// and target share this codec.
//
// Every KV command carries its key in the command itself:
//
//	CDW2-3    key bytes 0-7
//	CDW14-15  key bytes 8-15
//	CDW11     bits 7:0 key length (1-16), bits 15:8 the command's options
//	CDW10     Store: value size; Retrieve and List: host buffer size
//
// A Retrieve's completion DW0 is the value's size (it may exceed what the
// host buffer took). nearstore's target also puts the namespace's device
// credits (LEED's flow control) in completion DW1 of every KV command.

// CSIKV is the Key Value command set's identifier.
const CSIKV = 0x01

// KV command set opcodes.
const (
	KVStore    = 0x01
	KVRetrieve = 0x02
	KVList     = 0x06
	KVDelete   = 0x10
	KVExist    = 0x14
)

// Store options (CDW11 bits 15:8).
const (
	// KVStoreMustExist: store only if the key exists (else Key Does Not
	// Exist).
	KVStoreMustExist = 1 << 0
	// KVStoreMustNotExist: store only if the key does not exist (else Key
	// Exists).
	KVStoreMustNotExist = 1 << 1
)

// KV command set status values (command specific, SCT 1h); Capacity
// Exceeded (81h) is the generic StatusCapacityExceeded.
const (
	StatusKVInvalidValueSize Status = SCTCommandSpecific<<8 | 0x85
	StatusKVInvalidKeySize   Status = SCTCommandSpecific<<8 | 0x86
	StatusKVKeyNotExist      Status = SCTCommandSpecific<<8 | 0x87
	StatusKVUnrecoveredError Status = SCTCommandSpecific<<8 | 0x88
	StatusKVKeyExists        Status = SCTCommandSpecific<<8 | 0x89
)

// KVMaxKey is the longest key the KV command set carries.
const KVMaxKey = 16

// SetKVKey puts key and its length into c (CDW2-3, CDW14-15, CDW11 bits
// 7:0), keeping CDW11's other bits.
func (c *Command) SetKVKey(key []byte) error {
	if len(key) == 0 || len(key) > KVMaxKey {
		return fmt.Errorf("nvme: KV key of %d bytes (want 1 to %d)", len(key), KVMaxKey)
	}
	var k [KVMaxKey]byte
	copy(k[:], key)
	c.CDW2 = binary.LittleEndian.Uint32(k[0:])
	c.CDW3 = binary.LittleEndian.Uint32(k[4:])
	c.CDW14 = binary.LittleEndian.Uint32(k[8:])
	c.CDW15 = binary.LittleEndian.Uint32(k[12:])
	c.CDW11 = c.CDW11&^0xFF | uint32(len(key))
	return nil
}

// KVKey returns the key c carries; ok is false if its key length is 0 or
// above 16 (Invalid Key Size).
func (c *Command) KVKey() (key []byte, ok bool) {
	n := int(c.CDW11 & 0xFF)
	if n == 0 || n > KVMaxKey {
		return nil, false
	}
	var k [KVMaxKey]byte
	binary.LittleEndian.PutUint32(k[0:], c.CDW2)
	binary.LittleEndian.PutUint32(k[4:], c.CDW3)
	binary.LittleEndian.PutUint32(k[8:], c.CDW14)
	binary.LittleEndian.PutUint32(k[12:], c.CDW15)
	return k[:n:n], true
}

// KVOptions is CDW11 bits 15:8.
func (c *Command) KVOptions() uint8 { return uint8(c.CDW11 >> 8) }

// IdentifyNamespaceKV is the KV command set's I/O Command Set specific
// Identify Namespace data structure (CNS 05h with CSI 01h; KV Command Set
// 1.0), with one KV format:
//
//	0   uint64   NSZE: namespace size in bytes
//	16  uint64   NUSE: bytes in use
//	24  uint8    NSFEAT
//	25  uint8    NKVF: number of KV formats, 0's based (0: one)
//	26  uint8    NMIC: bit 0, the namespace may be shared
//	27  uint8    RESCAP: reservation capabilities
//	28  uint8    FPI: format progress indicator
//	32  uint32   NOVG: optimal value granularity in bytes
//	36  uint32   ANAGRPID
//	43  uint8    NSATTR: bit 0, write protected
//	44  uint16   NVMSETID
//	46  uint16   ENDGID
//	48  [16]byte NGUID
//	64  [8]byte  EUI64
//	72  KV format 0, 16 bytes: 0 uint16 KML (max key length), 3 uint8
//	    FOPT, 4 uint32 VML (max value length), 8 uint32 MNK (max number
//	    of keys, 0: not reported); formats 1 to 15 follow, unused
//
// Bytes 8-15 (where the NVM structure has NCAP) are reserved: a KV
// namespace has no capacity in blocks.
type IdentifyNamespaceKV struct {
	NSZE, NUSE           uint64
	NSFEAT, NMIC, RESCAP uint8
	FPI                  uint8
	NOVG, ANAGRPID       uint32
	NSATTR               uint8
	NVMSETID, ENDGID     uint16
	NGUID                [16]byte
	EUI64                [8]byte
	MaxKey               uint16
	MaxValue             uint32
	MaxKeys              uint32
}

// Marshal encodes the structure into a fresh IdentifySize buffer.
func (id *IdentifyNamespaceKV) Marshal() []byte {
	b := make([]byte, IdentifySize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], id.NSZE)
	le.PutUint64(b[16:], id.NUSE)
	b[24] = id.NSFEAT
	b[25] = 0 // NKVF is 0's based: one format
	b[26] = id.NMIC
	b[27] = id.RESCAP
	b[28] = id.FPI
	le.PutUint32(b[32:], id.NOVG)
	le.PutUint32(b[36:], id.ANAGRPID)
	b[43] = id.NSATTR
	le.PutUint16(b[44:], id.NVMSETID)
	le.PutUint16(b[46:], id.ENDGID)
	copy(b[48:64], id.NGUID[:])
	copy(b[64:72], id.EUI64[:])
	le.PutUint16(b[72:], id.MaxKey)
	le.PutUint32(b[76:], id.MaxValue)
	le.PutUint32(b[80:], id.MaxKeys)
	return b
}

// UnmarshalIdentifyNamespaceKV decodes a KV Identify Namespace structure,
// taking KV format 0 (the one a namespace of this command set formats
// with when it reports a single one).
func UnmarshalIdentifyNamespaceKV(b []byte) (IdentifyNamespaceKV, error) {
	var id IdentifyNamespaceKV
	if len(b) < IdentifySize {
		return id, fmt.Errorf("nvme: KV identify namespace of %d bytes, want %d", len(b), IdentifySize)
	}
	le := binary.LittleEndian
	id.NSZE = le.Uint64(b[0:])
	id.NUSE = le.Uint64(b[16:])
	id.NSFEAT = b[24]
	id.NMIC = b[26]
	id.RESCAP = b[27]
	id.FPI = b[28]
	id.NOVG = le.Uint32(b[32:])
	id.ANAGRPID = le.Uint32(b[36:])
	id.NSATTR = b[43]
	id.NVMSETID = le.Uint16(b[44:])
	id.ENDGID = le.Uint16(b[46:])
	copy(id.NGUID[:], b[48:64])
	copy(id.EUI64[:], b[64:72])
	id.MaxKey = le.Uint16(b[72:])
	id.MaxValue = le.Uint32(b[76:])
	id.MaxKeys = le.Uint32(b[80:])
	if id.NSZE != 0 && (id.MaxKey == 0 || id.MaxKey > KVMaxKey) {
		return id, fmt.Errorf("nvme: KV namespace's maximum key length %d (want 1 to %d)", id.MaxKey, KVMaxKey)
	}
	return id, nil
}

// The List command's data: a count of keys, then each key as its length
// and bytes, padded to four bytes.
//
//	0  uint32  number of keys that follow
//	4  per key: uint16 length, the key's bytes, zeroes to a multiple of 4
//
// MarshalKVList encodes as many of keys as fit in n bytes, and returns
// the buffer and how many it took.
func MarshalKVList(keys [][]byte, n int) ([]byte, int) {
	if n < 4 {
		return make([]byte, n), 0
	}
	b := make([]byte, 4, n)
	taken := 0
	for _, k := range keys {
		size := (2 + len(k) + 3) &^ 3
		if len(b)+size > n {
			break
		}
		var e [2 + KVMaxKey + 2]byte
		binary.LittleEndian.PutUint16(e[:], uint16(len(k)))
		copy(e[2:], k)
		b = append(b, e[:size]...)
		taken++
	}
	binary.LittleEndian.PutUint32(b, uint32(taken))
	return b, taken
}

// ErrKVList is returned for List data that does not decode.
var ErrKVList = errors.New("nvme: malformed KV list data")

// UnmarshalKVList decodes List data.
func UnmarshalKVList(b []byte) ([][]byte, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrKVList, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n)*4 > uint64(len(b)-4) {
		return nil, fmt.Errorf("%w: %d keys cannot fit in %d bytes", ErrKVList, n, len(b))
	}
	keys := make([][]byte, 0, n)
	off := 4
	for i := uint32(0); i < n; i++ {
		if off+2 > len(b) {
			return nil, fmt.Errorf("%w: key %d past the end", ErrKVList, i)
		}
		kl := int(binary.LittleEndian.Uint16(b[off:]))
		size := (2 + kl + 3) &^ 3
		if kl == 0 || kl > KVMaxKey || off+size > len(b) {
			return nil, fmt.Errorf("%w: key %d of length %d at %d", ErrKVList, i, kl, off)
		}
		keys = append(keys, append([]byte(nil), b[off+2:off+2+kl]...))
		off += size
	}
	return keys, nil
}
