package nvme

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// IdentifySize is the size of every Identify data structure.
const IdentifySize = 4096

// IdentifyController is the subset of the Identify Controller data structure
// (CNS 01h) that nearstore sets or reads. Fields not listed are zero on the
// wire. Byte offsets are those of the NVMe Base spec figure.
type IdentifyController struct {
	VID          uint16 // 0
	SSVID        uint16 // 2
	Serial       string // 4, 20 bytes, space padded
	Model        string // 24, 40 bytes, space padded
	Firmware     string // 64, 8 bytes, space padded
	RAB          uint8  // 72 recommended arbitration burst
	CMIC         uint8  // 76 multi-path I/O and namespace sharing
	MDTS         uint8  // 77 max data transfer size, 2^n units of CAP.MPSMIN; 0 = no limit
	CNTLID       uint16 // 78
	Version      uint32 // 80
	OAES         uint32 // 92 optional asynchronous events supported
	CTRATT       uint32 // 96
	CNTRLTYPE    uint8  // 111 1 = I/O controller, 2 = discovery controller
	OACS         uint16 // 256 optional admin commands
	ACL          uint8  // 258 abort command limit, zero-based
	AERL         uint8  // 259 async event request limit, zero-based
	FRMW         uint8  // 260
	LPA          uint8  // 261 log page attributes
	ELPE         uint8  // 262 error log page entries, zero-based
	KAS          uint16 // 320 keep alive granularity, 100 ms units
	SQES         uint8  // 512
	CQES         uint8  // 513
	MAXCMD       uint16 // 514
	NN           uint32 // 516 number of namespaces
	ONCS         uint16 // 520 optional NVM commands
	VWC          uint8  // 525 volatile write cache
	SGLS         uint32 // 536 SGL support
	MNAN         uint32 // 540
	SubNQN       string // 768, 256 bytes, NUL padded
	IOCCSZ       uint32 // 1792 I/O queue command capsule size, 16-byte units
	IORCSZ       uint32 // 1796 I/O queue response capsule size, 16-byte units
	ICDOFF       uint16 // 1800 in-capsule data offset, 16-byte units
	FCATT        uint8  // 1802 fabrics controller attributes
	MSDBD        uint8  // 1803 max SGL data block descriptors
	PowerState0  uint16 // 2048 power state 0 max power (centiwatts)
	VendorString string // 3072, vendor specific area: nearstore puts its feature string here
}

// ONCS bits.
const (
	ONCSCompare     = 1 << 0
	ONCSWriteUncorr = 1 << 1
	ONCSDSM         = 1 << 2
	ONCSWriteZeroes = 1 << 3
	// ONCSReservations: the reservation commands (nvme/reservation.go).
	ONCSReservations = 1 << 5
)

// CTRATT bits.
const (
	CTRATTHostID128 = 1 << 0 // 128-bit host identifier
	// CTRATTTrafficBasedKeepAlive (TBKAS): any command counts as a keep
	// alive, not only Keep Alive commands.
	CTRATTTrafficBasedKeepAlive = 1 << 2
)

// Marshal encodes the structure into a fresh IdentifySize buffer.
func (id *IdentifyController) Marshal() []byte {
	b := make([]byte, IdentifySize)
	le := binary.LittleEndian
	le.PutUint16(b[0:], id.VID)
	le.PutUint16(b[2:], id.SSVID)
	putPadded(b[4:24], id.Serial, ' ')
	putPadded(b[24:64], id.Model, ' ')
	putPadded(b[64:72], id.Firmware, ' ')
	b[72] = id.RAB
	b[76] = id.CMIC
	b[77] = id.MDTS
	le.PutUint16(b[78:], id.CNTLID)
	le.PutUint32(b[80:], id.Version)
	le.PutUint32(b[92:], id.OAES)
	le.PutUint32(b[96:], id.CTRATT)
	b[111] = id.CNTRLTYPE
	le.PutUint16(b[256:], id.OACS)
	b[258] = id.ACL
	b[259] = id.AERL
	b[260] = id.FRMW
	b[261] = id.LPA
	b[262] = id.ELPE
	le.PutUint16(b[320:], id.KAS)
	b[512] = id.SQES
	b[513] = id.CQES
	le.PutUint16(b[514:], id.MAXCMD)
	le.PutUint32(b[516:], id.NN)
	le.PutUint16(b[520:], id.ONCS)
	b[525] = id.VWC
	le.PutUint32(b[536:], id.SGLS)
	le.PutUint32(b[540:], id.MNAN)
	putPadded(b[768:1024], id.SubNQN, 0)
	le.PutUint32(b[1792:], id.IOCCSZ)
	le.PutUint32(b[1796:], id.IORCSZ)
	le.PutUint16(b[1800:], id.ICDOFF)
	b[1802] = id.FCATT
	b[1803] = id.MSDBD
	le.PutUint16(b[2048:], id.PowerState0)
	putPadded(b[3072:4096], id.VendorString, 0)
	return b
}

// Unmarshal decodes the fields IdentifyController holds.
func (id *IdentifyController) Unmarshal(b []byte) error {
	if len(b) < IdentifySize {
		return fmt.Errorf("nvme: identify controller is %d bytes: %w", len(b), ErrShort)
	}
	le := binary.LittleEndian
	id.VID = le.Uint16(b[0:])
	id.SSVID = le.Uint16(b[2:])
	id.Serial = trimPadded(b[4:24])
	id.Model = trimPadded(b[24:64])
	id.Firmware = trimPadded(b[64:72])
	id.RAB = b[72]
	id.CMIC = b[76]
	id.MDTS = b[77]
	id.CNTLID = le.Uint16(b[78:])
	id.Version = le.Uint32(b[80:])
	id.OAES = le.Uint32(b[92:])
	id.CTRATT = le.Uint32(b[96:])
	id.CNTRLTYPE = b[111]
	id.OACS = le.Uint16(b[256:])
	id.ACL = b[258]
	id.AERL = b[259]
	id.FRMW = b[260]
	id.LPA = b[261]
	id.ELPE = b[262]
	id.KAS = le.Uint16(b[320:])
	id.SQES = b[512]
	id.CQES = b[513]
	id.MAXCMD = le.Uint16(b[514:])
	id.NN = le.Uint32(b[516:])
	id.ONCS = le.Uint16(b[520:])
	id.VWC = b[525]
	id.SGLS = le.Uint32(b[536:])
	id.MNAN = le.Uint32(b[540:])
	id.SubNQN = trimPadded(b[768:1024])
	id.IOCCSZ = le.Uint32(b[1792:])
	id.IORCSZ = le.Uint32(b[1796:])
	id.ICDOFF = le.Uint16(b[1800:])
	id.FCATT = b[1802]
	id.MSDBD = b[1803]
	id.PowerState0 = le.Uint16(b[2048:])
	id.VendorString = trimPadded(b[3072:4096])
	return nil
}

// IdentifyNamespace is the subset of the Identify Namespace structure (CNS
// 00h) nearstore uses. nearstore namespaces have one LBA format and no
// metadata.
type IdentifyNamespace struct {
	NSZE   uint64   // 0 namespace size in blocks
	NCAP   uint64   // 8 capacity in blocks
	NUSE   uint64   // 16 utilization in blocks
	NSFEAT uint8    // 24 bit 0: thin provisioning, bit 2: deallocated blocks read as per DLFEAT
	NLBAF  uint8    // 25 number of LBA formats, zero-based
	FLBAS  uint8    // 26 formatted LBA size: index into LBAF
	NMIC   uint8    // 30 bit 0: namespace may be shared
	RESCAP uint8    // 31 reservation capabilities (Rescap* bits)
	DLFEAT uint8    // 33 bits 2:0 = 001b: deallocated blocks read as zeroes
	NOWS   uint16   // 72 optimal write size, blocks, zero-based
	NGUID  [16]byte // 104
	EUI64  [8]byte  // 120
	LBADS  uint8    // 128+2: LBA format 0 data size as a power of two
}

// BlockSize returns the namespace's logical block size in bytes.
func (ns *IdentifyNamespace) BlockSize() int { return 1 << ns.LBADS }

// Marshal encodes the structure into a fresh IdentifySize buffer.
func (ns *IdentifyNamespace) Marshal() []byte {
	b := make([]byte, IdentifySize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], ns.NSZE)
	le.PutUint64(b[8:], ns.NCAP)
	le.PutUint64(b[16:], ns.NUSE)
	b[24] = ns.NSFEAT
	b[25] = ns.NLBAF
	b[26] = ns.FLBAS
	b[30] = ns.NMIC
	b[31] = ns.RESCAP
	b[33] = ns.DLFEAT
	le.PutUint16(b[72:], ns.NOWS)
	copy(b[104:120], ns.NGUID[:])
	copy(b[120:128], ns.EUI64[:])
	b[128+2] = ns.LBADS
	return b
}

// Unmarshal decodes the fields IdentifyNamespace holds. The block size is
// taken from the LBA format FLBAS selects.
func (ns *IdentifyNamespace) Unmarshal(b []byte) error {
	if len(b) < IdentifySize {
		return fmt.Errorf("nvme: identify namespace is %d bytes: %w", len(b), ErrShort)
	}
	le := binary.LittleEndian
	ns.NSZE = le.Uint64(b[0:])
	ns.NCAP = le.Uint64(b[8:])
	ns.NUSE = le.Uint64(b[16:])
	ns.NSFEAT = b[24]
	ns.NLBAF = b[25]
	ns.FLBAS = b[26]
	ns.NMIC = b[30]
	ns.RESCAP = b[31]
	ns.DLFEAT = b[33]
	ns.NOWS = le.Uint16(b[72:])
	copy(ns.NGUID[:], b[104:120])
	copy(ns.EUI64[:], b[120:128])
	f := int(ns.FLBAS & 0x0f)
	ns.LBADS = b[128+4*f+2]
	if ns.NSZE != 0 && (ns.LBADS < 9 || ns.LBADS > 16) {
		return fmt.Errorf("nvme: namespace LBA data size 2^%d out of range", ns.LBADS)
	}
	return nil
}

// Namespace identification descriptor types (CNS 03h).
const (
	NIDTEUI64 = 0x01
	NIDTNGUID = 0x02
	NIDTUUID  = 0x03
	NIDTCSI   = 0x04
)

// NSDescriptor is one namespace identification descriptor.
type NSDescriptor struct {
	Type uint8
	ID   []byte
}

// MarshalNSDescriptors encodes a descriptor list into an IdentifySize buffer:
// each entry is NIDT (1 byte), NIDL (1 byte), 2 reserved bytes, then NIDL
// bytes of identifier; a zero NIDT ends the list.
func MarshalNSDescriptors(ds []NSDescriptor) []byte {
	b := make([]byte, IdentifySize)
	off := 0
	for _, d := range ds {
		if off+4+len(d.ID) > IdentifySize {
			break
		}
		b[off] = d.Type
		b[off+1] = uint8(len(d.ID))
		copy(b[off+4:], d.ID)
		off += 4 + len(d.ID)
	}
	return b
}

// UnmarshalNSDescriptors decodes a descriptor list.
func UnmarshalNSDescriptors(b []byte) ([]NSDescriptor, error) {
	var ds []NSDescriptor
	for off := 0; off+4 <= len(b); {
		t, n := b[off], int(b[off+1])
		if t == 0 {
			break
		}
		if off+4+n > len(b) {
			return ds, fmt.Errorf("nvme: namespace descriptor at %d overruns the list", off)
		}
		ds = append(ds, NSDescriptor{Type: t, ID: append([]byte(nil), b[off+4:off+4+n]...)})
		off += 4 + n
	}
	return ds, nil
}

func putPadded(dst []byte, s string, pad byte) {
	n := copy(dst, s)
	for i := n; i < len(dst); i++ {
		dst[i] = pad
	}
}

func trimPadded(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimRight(string(b), " ")
}

// Version encodes a major.minor.tertiary NVMe version as in the VS property.
func Version(major, minor, tertiary int) uint32 {
	return uint32(major)<<16 | uint32(minor)<<8 | uint32(tertiary)
}
