// Package tcp implements the NVMe/TCP transport binding: the PDUs, their
// header and data digests, and a framer that reads and writes them on a
// byte stream. Both nearstore's target and its host use it, so the two sides
// cannot disagree about a byte.
//
// Every PDU starts with an 8-byte common header:
//
//	byte 0    PDU-Type
//	byte 1    FLAGS   (bit 0 HDGSTF, bit 1 DDGSTF, bit 2 LAST_PDU, bit 3 SUCCESS)
//	byte 2    HLEN    (common + PDU-specific header length, without digest)
//	byte 3    PDO     (PDU data offset from the start of the PDU)
//	bytes 4-7 PLEN    (total PDU length, digests and padding included)
//
// followed by the PDU-specific header, the header digest (CRC32C over the
// HLEN header bytes) when negotiated, padding up to PDO, the data, and the
// data digest (CRC32C over the data) when negotiated.
package tcp

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/nearstore/nearstore/nvme"
)

// PDU types.
const (
	TypeICReq       = 0x00
	TypeICResp      = 0x01
	TypeH2CTermReq  = 0x02
	TypeC2HTermReq  = 0x03
	TypeCapsuleCmd  = 0x04
	TypeCapsuleResp = 0x05
	TypeH2CData     = 0x06
	TypeC2HData     = 0x07
	TypeR2T         = 0x09
)

// Common header flags.
const (
	FlagHDGST   = 0x01
	FlagDDGST   = 0x02
	FlagLastPDU = 0x04 // H2CData, C2HData: last data PDU of the command
	FlagSuccess = 0x08 // C2HData: command succeeded, no CapsuleResp follows
)

// Header lengths (HLEN) of each PDU type.
const (
	CommonHeaderSize = 8
	ICHeaderSize     = 128
	CapsuleCmdHLen   = CommonHeaderSize + nvme.CommandSize    // 72
	CapsuleRespHLen  = CommonHeaderSize + nvme.CompletionSize // 24
	DataHLen         = 24                                     // H2CData, C2HData
	R2THLen          = 24
	TermReqHLen      = 24
	DigestSize       = 4
	// MaxTermReqData is how much of the offending PDU header a TermReq carries.
	MaxTermReqData = 128
)

// Fatal error status values carried by H2CTermReq and C2HTermReq (FES).
const (
	FESInvalidHeaderField  = 0x01
	FESPDUSequenceError    = 0x02
	FESHeaderDigestError   = 0x03
	FESDataOutOfRange      = 0x04
	FESDataLimitExceeded   = 0x05
	FESUnsupportedParamter = 0x06
)

// Digest bits in ICReq/ICResp DGST.
const (
	DigestHeader = 0x01
	DigestData   = 0x02
)

// castagnoli is the CRC32C table. crc32.MakeTable returns the same shared,
// read-only table on every call for this polynomial.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the NVMe/TCP digest of the concatenated slices: CRC32C as
// the spec defines it (reflected, initial value and final XOR all ones),
// which is hash/crc32's Castagnoli checksum. It goes on the wire little-endian.
func CRC32C(bufs ...[]byte) uint32 {
	var c uint32
	for _, b := range bufs {
		c = crc32.Update(c, castagnoli, b)
	}
	return c
}

// carriesHeaderDigest reports whether a PDU type has a header digest when
// header digests are negotiated: all but ICReq, ICResp and the TermReqs.
func carriesHeaderDigest(t uint8) bool {
	switch t {
	case TypeICReq, TypeICResp, TypeH2CTermReq, TypeC2HTermReq:
		return false
	}
	return true
}

// carriesDataDigest reports whether a PDU type's data has a digest when data
// digests are negotiated.
func carriesDataDigest(t uint8) bool {
	switch t {
	case TypeCapsuleCmd, TypeH2CData, TypeC2HData:
		return true
	}
	return false
}

// hlenOf is the only HLEN each PDU type may have.
func hlenOf(t uint8) (int, bool) {
	switch t {
	case TypeICReq, TypeICResp:
		return ICHeaderSize, true
	case TypeCapsuleCmd:
		return CapsuleCmdHLen, true
	case TypeCapsuleResp:
		return CapsuleRespHLen, true
	case TypeH2CData, TypeC2HData:
		return DataHLen, true
	case TypeR2T:
		return R2THLen, true
	case TypeH2CTermReq, TypeC2HTermReq:
		return TermReqHLen, true
	}
	return 0, false
}

// ICReq is the host's Initialize Connection Request.
//
//	bytes 8-9   PFV (0)
//	byte  10    HPDA: host PDU data alignment, zero-based dwords
//	byte  11    DGST: bit 0 header digest, bit 1 data digest
//	bytes 12-15 MAXR2T: zero-based outstanding R2Ts per command
type ICReq struct {
	PFV    uint16
	HPDA   uint8
	Digest uint8
	MaxR2T uint32
}

func (p *ICReq) marshal(b []byte) { putIC(b, p.PFV, p.HPDA, p.Digest, p.MaxR2T) }

func (p *ICReq) unmarshal(b []byte) { p.PFV, p.HPDA, p.Digest, p.MaxR2T = getIC(b) }

// ICResp is the controller's Initialize Connection Response.
//
//	bytes 8-9   PFV (0)
//	byte  10    CPDA: controller PDU data alignment, zero-based dwords
//	byte  11    DGST: digests enabled for the connection
//	bytes 12-15 MAXH2CDATA: largest H2CData data the controller accepts
type ICResp struct {
	PFV        uint16
	CPDA       uint8
	Digest     uint8
	MaxH2CData uint32
}

func (p *ICResp) marshal(b []byte) { putIC(b, p.PFV, p.CPDA, p.Digest, p.MaxH2CData) }

func (p *ICResp) unmarshal(b []byte) { p.PFV, p.CPDA, p.Digest, p.MaxH2CData = getIC(b) }

// ICReq and ICResp share one layout from byte 8: PFV, the sender's PDU
// data alignment, DGST, and a 32-bit limit (MAXR2T, MAXH2CDATA). putIC
// and getIC are its one encoder and decoder; the rest of the header
// (bytes 16 to 127) is reserved.
func putIC(b []byte, pfv uint16, pda, digest uint8, limit uint32) {
	binary.LittleEndian.PutUint16(b[8:], pfv)
	b[10] = pda
	b[11] = digest
	binary.LittleEndian.PutUint32(b[12:], limit)
}

func getIC(b []byte) (pfv uint16, pda, digest uint8, limit uint32) {
	return binary.LittleEndian.Uint16(b[8:]), b[10], b[11], binary.LittleEndian.Uint32(b[12:])
}

// DataHeader is the PDU-specific header of H2CData, C2HData and R2T, which
// share a layout:
//
//	bytes 8-9   CCCID: the command's CID
//	bytes 10-11 TTAG: transfer tag (H2CData, R2T; reserved in C2HData)
//	bytes 12-15 DATAO / R2TO: offset of this data in the command's buffer
//	bytes 16-19 DATAL / R2TL: length
type DataHeader struct {
	CCCID  uint16
	TTag   uint16
	Offset uint32
	Length uint32
}

func (p *DataHeader) marshal(b []byte) {
	binary.LittleEndian.PutUint16(b[8:], p.CCCID)
	binary.LittleEndian.PutUint16(b[10:], p.TTag)
	binary.LittleEndian.PutUint32(b[12:], p.Offset)
	binary.LittleEndian.PutUint32(b[16:], p.Length)
	clear(b[20:24])
}

func (p *DataHeader) unmarshal(b []byte) {
	p.CCCID = binary.LittleEndian.Uint16(b[8:])
	p.TTag = binary.LittleEndian.Uint16(b[10:])
	p.Offset = binary.LittleEndian.Uint32(b[12:])
	p.Length = binary.LittleEndian.Uint32(b[16:])
}

// TermReq is the header of an H2CTermReq or C2HTermReq.
//
//	bytes 8-9   FES: fatal error status
//	bytes 10-13 FEI: fatal error information (e.g. the offset of the bad field)
//
// Its data is the header of the PDU that caused the error.
type TermReq struct {
	FES uint16
	FEI uint32
}

func (p *TermReq) marshal(b []byte) {
	binary.LittleEndian.PutUint16(b[8:], p.FES)
	binary.LittleEndian.PutUint32(b[10:], p.FEI)
	clear(b[14:24])
}

func (p *TermReq) unmarshal(b []byte) {
	p.FES = binary.LittleEndian.Uint16(b[8:])
	p.FEI = binary.LittleEndian.Uint32(b[10:])
}
