package nvme

import (
	"encoding/binary"
	"fmt"
)

// ConnectDataSize is the size of the data a Connect command carries.
const ConnectDataSize = 1024

// Connect command fields live in the SQE's command-specific dwords:
//
//	bytes 40-41 RECFMT (record format, 0)
//	bytes 42-43 QID (0 = admin queue)
//	bytes 44-45 SQSIZE (zero-based)
//	byte  46    CATTR (bit 2: disable SQ flow control)
//	bytes 48-51 KATO (keep alive timeout, ms; admin queue only)
type ConnectCommand struct {
	RecFmt uint16
	QID    uint16
	SQSize uint16 // zero-based
	CAttr  uint8
	KATO   uint32
}

// FromCommand reads the Connect fields out of an SQE.
func (c *ConnectCommand) FromCommand(cmd *Command) {
	c.RecFmt = uint16(cmd.CDW10)
	c.QID = uint16(cmd.CDW10 >> 16)
	c.SQSize = uint16(cmd.CDW11)
	c.CAttr = uint8(cmd.CDW11 >> 16)
	c.KATO = cmd.CDW12
}

// ToCommand writes the Connect fields into an SQE and sets its opcode and
// FCTYPE.
func (c *ConnectCommand) ToCommand(cmd *Command) {
	cmd.Opcode = AdminFabrics
	cmd.NSID = FabricsConnect
	cmd.CDW10 = uint32(c.RecFmt) | uint32(c.QID)<<16
	cmd.CDW11 = uint32(c.SQSize) | uint32(c.CAttr)<<16
	cmd.CDW12 = c.KATO
}

// ConnectData is the 1024-byte data of a Connect command.
//
//	bytes   0-15   HOSTID
//	bytes  16-17   CNTLID (0xFFFF: dynamic controller model, any controller)
//	bytes 256-511  SUBNQN
//	bytes 512-767  HOSTNQN
type ConnectData struct {
	HostID  [16]byte
	CNTLID  uint16
	SubNQN  string
	HostNQN string
}

// Marshal encodes the Connect data.
func (d *ConnectData) Marshal() []byte {
	b := make([]byte, ConnectDataSize)
	copy(b[0:16], d.HostID[:])
	binary.LittleEndian.PutUint16(b[16:], d.CNTLID)
	putPadded(b[256:512], d.SubNQN, 0)
	putPadded(b[512:768], d.HostNQN, 0)
	return b
}

// Unmarshal decodes Connect data.
func (d *ConnectData) Unmarshal(b []byte) error {
	if len(b) < ConnectDataSize {
		return fmt.Errorf("nvme: connect data is %d bytes, want %d: %w", len(b), ConnectDataSize, ErrShort)
	}
	copy(d.HostID[:], b[0:16])
	d.CNTLID = binary.LittleEndian.Uint16(b[16:])
	d.SubNQN = trimPadded(b[256:512])
	d.HostNQN = trimPadded(b[512:768])
	return nil
}

// PropertyCommand is a Property Get or Set:
//
//	byte  40    ATTRIB bits 2:0: 0 = 4-byte property, 1 = 8-byte property
//	bytes 44-47 OFST, the property offset
//	bytes 48-55 VALUE (Property Set only)
type PropertyCommand struct {
	Size8  bool
	Offset uint32
	Value  uint64
}

// FromCommand reads the property fields out of an SQE.
func (p *PropertyCommand) FromCommand(cmd *Command) {
	p.Size8 = cmd.CDW10&7 == 1
	p.Offset = cmd.CDW11
	p.Value = uint64(cmd.CDW12) | uint64(cmd.CDW13)<<32
}

// ToCommand writes a Property Get (set=false) or Set into an SQE.
func (p *PropertyCommand) ToCommand(cmd *Command, set bool) {
	cmd.Opcode = AdminFabrics
	cmd.NSID = FabricsPropertyGet
	if set {
		cmd.NSID = FabricsPropertySet
	}
	cmd.CDW10 = 0
	if p.Size8 {
		cmd.CDW10 = 1
	}
	cmd.CDW11 = p.Offset
	cmd.CDW12 = uint32(p.Value)
	cmd.CDW13 = uint32(p.Value >> 32)
}

// CAP builds the Controller Capabilities property:
// MQES (bits 15:0, zero-based max queue entries), CQR (bit 16, contiguous
// queues required), TO (bits 31:24, ready timeout in 500 ms units), CSS
// (bits 44:37: CAPCSSNVM and CAPCSSIOCS, so a host may enable every I/O
// command set with CC.CSS = 110b), MPSMIN/MPSMAX (bits 51:48, 55:52, 4 KiB
// pages).
func CAP(maxQueueEntries int, timeout500ms uint8) uint64 {
	return uint64(maxQueueEntries-1)&0xffff |
		1<<16 |
		uint64(timeout500ms)<<24 |
		CAPCSSNVM | CAPCSSIOCS
}

// CAP.CSS bits (Command Sets Supported).
const (
	// CAPCSSNVM (CSS bit 0): the NVM command set.
	CAPCSSNVM = 1 << 37
	// CAPCSSIOCS (CSS bit 6): one or more I/O command sets, selected by
	// CC.CSS = CCCSSAllIOCS and reported per namespace (its CSI).
	CAPCSSIOCS = 1 << 43
)

// CC.CSS values (I/O Command Set Selected, CC bits 6:4).
const (
	// CCCSSNVM: only the NVM command set.
	CCCSSNVM = 0b000
	// CCCSSAllIOCS: every I/O command set of the combination the I/O
	// Command Set Profile feature selects (CAPCSSIOCS).
	CCCSSAllIOCS = 0b110
	// CCCSSAdminOnly: no I/O command set.
	CCCSSAdminOnly = 0b111
)

// CCCSS returns the CSS field of a CC value.
func CCCSS(cc uint32) uint8 { return uint8(cc>>4) & 7 }

// CAPMaxQueueEntries returns the queue size (one-based) a CAP value allows.
func CAPMaxQueueEntries(cap uint64) int { return int(cap&0xffff) + 1 }

// Discovery log page structures.
const (
	DiscoveryLogHeaderSize = 1024
	DiscoveryLogEntrySize  = 1024
	TrTypeTCP              = 3
	AdrFamIPv4             = 1
	AdrFamIPv6             = 2
	SubTypeDiscovery       = 1 // referral to another discovery service
	SubTypeNVM             = 2
	SubTypeCurrentDisc     = 3 // the discovery controller answering
	TreqNotRequired        = 2 // secure channel not required
)

// DiscoveryEntry is one Discovery Log Page entry.
//
//	byte    0      TRTYPE
//	byte    1      ADRFAM
//	byte    2      SUBTYPE
//	byte    3      TREQ
//	bytes   4-5    PORTID
//	bytes   6-7    CNTLID
//	bytes   8-9    ASQSZ
//	bytes  32-63   TRSVCID (service id: the TCP port), space padded
//	bytes 256-511  SUBNQN
//	bytes 512-767  TRADDR, space padded
//	bytes 768-1023 TSAS; for TCP byte 768 is SECTYPE (0: none)
type DiscoveryEntry struct {
	TrType  uint8
	AdrFam  uint8
	SubType uint8
	Treq    uint8
	PortID  uint16
	CNTLID  uint16
	ASQSZ   uint16
	TrSvcID string
	SubNQN  string
	TrAddr  string
}

// MarshalDiscoveryLog encodes a whole discovery log page: a 1024-byte header
// (GENCTR at 0, NUMREC at 8, RECFMT at 16) and one 1024-byte entry each.
func MarshalDiscoveryLog(genctr uint64, entries []DiscoveryEntry) []byte {
	b := make([]byte, DiscoveryLogHeaderSize+len(entries)*DiscoveryLogEntrySize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], genctr)
	le.PutUint64(b[8:], uint64(len(entries)))
	for i, e := range entries {
		p := b[DiscoveryLogHeaderSize+i*DiscoveryLogEntrySize:]
		p[0], p[1], p[2], p[3] = e.TrType, e.AdrFam, e.SubType, e.Treq
		le.PutUint16(p[4:], e.PortID)
		le.PutUint16(p[6:], e.CNTLID)
		le.PutUint16(p[8:], e.ASQSZ)
		putPadded(p[32:64], e.TrSvcID, ' ')
		putPadded(p[256:512], e.SubNQN, 0)
		putPadded(p[512:768], e.TrAddr, ' ')
	}
	return b
}

// UnmarshalDiscoveryLog decodes a discovery log page. It decodes as many
// entries as b holds, up to NUMREC, so a caller can read the header first to
// learn the size.
func UnmarshalDiscoveryLog(b []byte) (genctr, numrec uint64, entries []DiscoveryEntry, err error) {
	if len(b) < DiscoveryLogHeaderSize {
		return 0, 0, nil, fmt.Errorf("nvme: discovery log is %d bytes: %w", len(b), ErrShort)
	}
	le := binary.LittleEndian
	genctr = le.Uint64(b[0:])
	numrec = le.Uint64(b[8:])
	for i := uint64(0); i < numrec; i++ {
		off := DiscoveryLogHeaderSize + int(i)*DiscoveryLogEntrySize
		if off+DiscoveryLogEntrySize > len(b) {
			break
		}
		p := b[off:]
		entries = append(entries, DiscoveryEntry{
			TrType: p[0], AdrFam: p[1], SubType: p[2], Treq: p[3],
			PortID:  le.Uint16(p[4:]),
			CNTLID:  le.Uint16(p[6:]),
			ASQSZ:   le.Uint16(p[8:]),
			TrSvcID: trimPadded(p[32:64]),
			SubNQN:  trimPadded(p[256:512]),
			TrAddr:  trimPadded(p[512:768]),
		})
	}
	return genctr, numrec, entries, nil
}

// GetLogPageCommand holds the fields of a Get Log Page command:
//
//	CDW10 bits 7:0 LID, bit 15 RAE, bits 31:16 NUMDL
//	CDW11 bits 15:0 NUMDU
//	CDW12/13 log page offset (bytes)
type GetLogPageCommand struct {
	LID    uint8
	RAE    bool
	Length int // bytes; NUMD is zero-based dwords
	Offset uint64
	// CSI (CDW14 bits 31:24) names the I/O command set of a log page
	// that has one per set, such as Commands Supported and Effects.
	CSI uint8
}

// FromCommand reads Get Log Page fields from an SQE.
func (g *GetLogPageCommand) FromCommand(cmd *Command) {
	g.LID = uint8(cmd.CDW10)
	g.RAE = cmd.CDW10&(1<<15) != 0
	numd := (cmd.CDW10 >> 16) | (cmd.CDW11&0xffff)<<16
	g.Length = (int(numd) + 1) * 4
	g.Offset = uint64(cmd.CDW12) | uint64(cmd.CDW13)<<32
	g.CSI = uint8(cmd.CDW14 >> 24)
}

// ToCommand writes Get Log Page fields into an SQE.
func (g *GetLogPageCommand) ToCommand(cmd *Command) {
	numd := uint32(g.Length/4 - 1)
	cmd.Opcode = AdminGetLogPage
	cmd.CDW10 = uint32(g.LID) | numd<<16
	if g.RAE {
		cmd.CDW10 |= 1 << 15
	}
	cmd.CDW11 = numd >> 16
	cmd.CDW12 = uint32(g.Offset)
	cmd.CDW13 = uint32(g.Offset >> 32)
	cmd.CDW14 = cmd.CDW14&^(0xff<<24) | uint32(g.CSI)<<24
}
