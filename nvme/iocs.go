package nvme

import (
	"encoding/binary"
	"fmt"
)

// I/O command sets (NVMe Base 2.0): a controller whose CAP.CSS has
// CAPCSSIOCS serves namespaces of more than one command set, each named
// by its Command Set Identifier (CSI) in the namespace identification
// descriptor list (CNS 03h, NIDTCSI). A host enables them all with CC.CSS
// = 110b, learns each namespace's generic facts from the command set
// independent Identify Namespace (CNS 08h), its set's own from CNS 05h
// with the CSI, and which opcodes each set supports from the Commands
// Supported and Effects log of that CSI.

// CSINVM is the NVM command set's identifier.
const CSINVM = 0x00

// NSTATReady is NSTAT bit 0 of the command set independent Identify
// Namespace: the namespace is ready for I/O.
const NSTATReady = 1 << 0

// IdentifyNamespaceIndependent is the I/O Command Set Independent
// Identify Namespace data structure (CNS 08h), for a namespace of any
// command set:
//
//	0   uint8   NSFEAT
//	1   uint8   NMIC: bit 0, the namespace may be shared
//	2   uint8   RESCAP: reservation capabilities (Rescap* bits)
//	3   uint8   FPI: format progress indicator
//	4   uint32  ANAGRPID
//	8   uint8   NSATTR: bit 0, write protected
//	10  uint16  NVMSETID
//	12  uint16  ENDGID
//	14  uint8   NSTAT: NSTATReady
//
// Every other byte is reserved (zero).
type IdentifyNamespaceIndependent struct {
	NSFEAT, NMIC, RESCAP, FPI uint8
	ANAGRPID                  uint32
	NSATTR                    uint8
	NVMSETID, ENDGID          uint16
	NSTAT                     uint8
}

// Marshal encodes the structure into a fresh IdentifySize buffer.
func (id *IdentifyNamespaceIndependent) Marshal() []byte {
	b := make([]byte, IdentifySize)
	le := binary.LittleEndian
	b[0], b[1], b[2], b[3] = id.NSFEAT, id.NMIC, id.RESCAP, id.FPI
	le.PutUint32(b[4:], id.ANAGRPID)
	b[8] = id.NSATTR
	le.PutUint16(b[10:], id.NVMSETID)
	le.PutUint16(b[12:], id.ENDGID)
	b[14] = id.NSTAT
	return b
}

// Unmarshal decodes the structure.
func (id *IdentifyNamespaceIndependent) Unmarshal(b []byte) error {
	if len(b) < IdentifySize {
		return fmt.Errorf("nvme: command set independent identify namespace is %d bytes: %w", len(b), ErrShort)
	}
	le := binary.LittleEndian
	id.NSFEAT, id.NMIC, id.RESCAP, id.FPI = b[0], b[1], b[2], b[3]
	id.ANAGRPID = le.Uint32(b[4:])
	id.NSATTR = b[8]
	id.NVMSETID = le.Uint16(b[10:])
	id.ENDGID = le.Uint16(b[12:])
	id.NSTAT = b[14]
	return nil
}

// IOCSVectorCount is the number of I/O Command Set Vectors in the I/O
// Command Set data structure (CNS 1Ch): 512 of 8 bytes fill it.
const IOCSVectorCount = IdentifySize / 8

// IOCSVector is one command set combination: bit n set means the command
// set of CSI n is in it.
type IOCSVector uint64

// Has reports whether the combination holds the command set csi.
func (v IOCSVector) Has(csi uint8) bool { return csi < 64 && v&(1<<csi) != 0 }

// MarshalIOCSVectors encodes the I/O Command Set data structure (CNS 1Ch):
// vector i at byte 8*i, little endian; its index is the I/O Command Set
// Combination Index (IOCSCI) the I/O Command Set Profile feature selects.
// Vectors past the structure's 512 are dropped; unused ones are zero.
func MarshalIOCSVectors(vs []IOCSVector) []byte {
	b := make([]byte, IdentifySize)
	for i, v := range vs[:min(len(vs), IOCSVectorCount)] {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

// UnmarshalIOCSVectors decodes the I/O Command Set data structure up to
// its last non-zero vector.
func UnmarshalIOCSVectors(b []byte) ([]IOCSVector, error) {
	if len(b) < IdentifySize {
		return nil, fmt.Errorf("nvme: I/O command set data structure is %d bytes: %w", len(b), ErrShort)
	}
	var vs []IOCSVector
	last := -1
	for i := 0; i < IOCSVectorCount; i++ {
		v := IOCSVector(binary.LittleEndian.Uint64(b[8*i:]))
		vs = append(vs, v)
		if v != 0 {
			last = i
		}
	}
	return vs[:last+1], nil
}

// Commands Supported and Effects entry bits.
const (
	// EffectCSUPP: the command is supported.
	EffectCSUPP = 1 << 0
	// EffectLBCC: the command may change the namespace's user data (for
	// the KV command set, a value).
	EffectLBCC = 1 << 1
	// EffectNCC: the command may change namespace capabilities.
	EffectNCC = 1 << 2
	// EffectNIC: the command may change the namespace inventory.
	EffectNIC = 1 << 3
	// EffectCCC: the command may change controller capabilities.
	EffectCCC = 1 << 4
)

// CommandEffectsLogSize is the size of the Commands Supported and Effects
// log page.
const CommandEffectsLogSize = 4096

// CommandEffectsLog is the Commands Supported and Effects log page (LID
// 05h), one per I/O command set (the Get Log Page CSI):
//
//	0     [256]uint32  ACS: admin command n's effects at 4*n
//	1024  [256]uint32  IOCS: I/O command n's effects at 1024 + 4*n, for
//	                   the command set of the page's CSI
//
// Bytes 2048 to 4095 are reserved. An opcode without EffectCSUPP is not
// supported.
type CommandEffectsLog struct {
	ACS, IOCS [256]uint32
}

// Marshal encodes the page.
func (l *CommandEffectsLog) Marshal() []byte {
	b := make([]byte, CommandEffectsLogSize)
	for i := 0; i < 256; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], l.ACS[i])
		binary.LittleEndian.PutUint32(b[1024+4*i:], l.IOCS[i])
	}
	return b
}

// Unmarshal decodes the page.
func (l *CommandEffectsLog) Unmarshal(b []byte) error {
	if len(b) < 2048 {
		return fmt.Errorf("nvme: commands supported and effects log is %d bytes: %w", len(b), ErrShort)
	}
	for i := 0; i < 256; i++ {
		l.ACS[i] = binary.LittleEndian.Uint32(b[4*i:])
		l.IOCS[i] = binary.LittleEndian.Uint32(b[1024+4*i:])
	}
	return nil
}
