package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// CommandSize is the size of a submission queue entry in bytes.
const CommandSize = 64

// CompletionSize is the size of a completion queue entry in bytes.
const CompletionSize = 16

// Command is a 64-byte submission queue entry (NVMe Base spec, "Common
// Command Format").
//
//	byte  0     opcode
//	byte  1     flags: bits 1:0 fused operation, bits 7:6 PSDT (data pointer kind)
//	bytes 2-3   command identifier (CID)
//	bytes 4-7   namespace identifier (NSID); for fabrics commands byte 4 is FCTYPE
//	bytes 8-15  CDW2, CDW3
//	bytes 16-23 metadata pointer
//	bytes 24-39 data pointer: one SGL descriptor on fabrics
//	bytes 40-63 CDW10..CDW15
type Command struct {
	Opcode uint8
	Flags  uint8
	CID    uint16
	NSID   uint32
	CDW2   uint32
	CDW3   uint32
	MPTR   uint64
	DPTR   SGL
	CDW10  uint32
	CDW11  uint32
	CDW12  uint32
	CDW13  uint32
	CDW14  uint32
	CDW15  uint32
}

// PSDTSGL is the PSDT value (flags bits 7:6) saying the data pointer is an
// SGL, as every NVMe over Fabrics command must.
const PSDTSGL = 0x40

// Marshal encodes c into b, which must be at least CommandSize bytes.
func (c *Command) Marshal(b []byte) {
	_ = b[CommandSize-1]
	b[0] = c.Opcode
	b[1] = c.Flags
	binary.LittleEndian.PutUint16(b[2:], c.CID)
	binary.LittleEndian.PutUint32(b[4:], c.NSID)
	binary.LittleEndian.PutUint32(b[8:], c.CDW2)
	binary.LittleEndian.PutUint32(b[12:], c.CDW3)
	binary.LittleEndian.PutUint64(b[16:], c.MPTR)
	c.DPTR.Marshal(b[24:40])
	binary.LittleEndian.PutUint32(b[40:], c.CDW10)
	binary.LittleEndian.PutUint32(b[44:], c.CDW11)
	binary.LittleEndian.PutUint32(b[48:], c.CDW12)
	binary.LittleEndian.PutUint32(b[52:], c.CDW13)
	binary.LittleEndian.PutUint32(b[56:], c.CDW14)
	binary.LittleEndian.PutUint32(b[60:], c.CDW15)
}

// Unmarshal decodes a submission queue entry from b.
func (c *Command) Unmarshal(b []byte) error {
	if len(b) < CommandSize {
		return fmt.Errorf("nvme: command is %d bytes, want %d: %w", len(b), CommandSize, ErrShort)
	}
	c.Opcode = b[0]
	c.Flags = b[1]
	c.CID = binary.LittleEndian.Uint16(b[2:])
	c.NSID = binary.LittleEndian.Uint32(b[4:])
	c.CDW2 = binary.LittleEndian.Uint32(b[8:])
	c.CDW3 = binary.LittleEndian.Uint32(b[12:])
	c.MPTR = binary.LittleEndian.Uint64(b[16:])
	c.DPTR.Unmarshal(b[24:40])
	c.CDW10 = binary.LittleEndian.Uint32(b[40:])
	c.CDW11 = binary.LittleEndian.Uint32(b[44:])
	c.CDW12 = binary.LittleEndian.Uint32(b[48:])
	c.CDW13 = binary.LittleEndian.Uint32(b[52:])
	c.CDW14 = binary.LittleEndian.Uint32(b[56:])
	c.CDW15 = binary.LittleEndian.Uint32(b[60:])
	return nil
}

// FabricsType returns the FCTYPE of a fabrics command (byte 4 of the entry,
// which overlays the low byte of NSID).
func (c *Command) FabricsType() uint8 { return uint8(c.NSID) }

// SLBA returns the starting LBA of an NVM Read/Write/Write Zeroes command
// (CDW10 low, CDW11 high).
func (c *Command) SLBA() uint64 { return uint64(c.CDW10) | uint64(c.CDW11)<<32 }

// NLB returns the number of logical blocks of an NVM Read/Write/Write Zeroes
// command. The field in CDW12 bits 15:0 is zero-based; NLB returns the count.
func (c *Command) NLB() uint32 { return (c.CDW12 & 0xffff) + 1 }

// SetLBA fills SLBA and the zero-based NLB field for an NVM command over
// nlb blocks (1..65536).
func (c *Command) SetLBA(slba uint64, nlb uint32) {
	c.CDW10 = uint32(slba)
	c.CDW11 = uint32(slba >> 32)
	c.CDW12 = c.CDW12&^0xffff | (nlb-1)&0xffff
}

// SGL descriptor kinds used by NVMe/TCP (byte 15 of the descriptor: type in
// bits 7:4, subtype in bits 3:0).
const (
	// SGLDataBlockOffset is a Data Block descriptor whose address is an
	// offset into the in-capsule data (type 0h, subtype 1h).
	SGLDataBlockOffset = 0x01
	// SGLTransportDataBlock is a Transport SGL Data Block descriptor: the
	// data moves in separate transport PDUs (type 5h, subtype Ah).
	SGLTransportDataBlock = 0x5A
)

// SGL is one 16-byte scatter-gather list descriptor.
//
//	bytes 0-7   address (for in-capsule data: offset into the capsule data)
//	bytes 8-11  length
//	bytes 12-14 reserved
//	byte  15    descriptor type (bits 7:4) and subtype (bits 3:0)
type SGL struct {
	Address uint64
	Length  uint32
	Type    uint8
}

// Marshal encodes the descriptor into b[0:16].
func (s *SGL) Marshal(b []byte) {
	_ = b[15]
	binary.LittleEndian.PutUint64(b[0:], s.Address)
	binary.LittleEndian.PutUint32(b[8:], s.Length)
	b[12], b[13], b[14] = 0, 0, 0
	b[15] = s.Type
}

// Unmarshal decodes a descriptor from b[0:16].
func (s *SGL) Unmarshal(b []byte) {
	_ = b[15]
	s.Address = binary.LittleEndian.Uint64(b[0:])
	s.Length = binary.LittleEndian.Uint32(b[8:])
	s.Type = b[15]
}

// Completion is a 16-byte completion queue entry.
//
//	bytes 0-3   DW0, command specific
//	bytes 4-7   DW1, command specific
//	bytes 8-9   submission queue head pointer (SQHD)
//	bytes 10-11 submission queue identifier
//	bytes 12-13 command identifier
//	bytes 14-15 status: bit 0 phase tag, bits 15:1 the Status field
type Completion struct {
	DW0    uint32
	DW1    uint32
	SQHead uint16
	SQID   uint16
	CID    uint16
	Status Status
}

// Marshal encodes the completion into b, which must be at least
// CompletionSize bytes. The phase tag is always zero: fabrics have no
// completion queue memory for it to guard.
func (c *Completion) Marshal(b []byte) {
	_ = b[CompletionSize-1]
	binary.LittleEndian.PutUint32(b[0:], c.DW0)
	binary.LittleEndian.PutUint32(b[4:], c.DW1)
	binary.LittleEndian.PutUint16(b[8:], c.SQHead)
	binary.LittleEndian.PutUint16(b[10:], c.SQID)
	binary.LittleEndian.PutUint16(b[12:], c.CID)
	binary.LittleEndian.PutUint16(b[14:], uint16(c.Status)<<1)
}

// Unmarshal decodes a completion from b.
func (c *Completion) Unmarshal(b []byte) error {
	if len(b) < CompletionSize {
		return fmt.Errorf("nvme: completion is %d bytes, want %d: %w", len(b), CompletionSize, ErrShort)
	}
	c.DW0 = binary.LittleEndian.Uint32(b[0:])
	c.DW1 = binary.LittleEndian.Uint32(b[4:])
	c.SQHead = binary.LittleEndian.Uint16(b[8:])
	c.SQID = binary.LittleEndian.Uint16(b[10:])
	c.CID = binary.LittleEndian.Uint16(b[12:])
	c.Status = Status(binary.LittleEndian.Uint16(b[14:]) >> 1)
	return nil
}

// ErrShort reports a buffer too small for the structure being decoded.
var ErrShort = errors.New("short buffer")
