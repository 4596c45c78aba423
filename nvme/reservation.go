package nvme

import (
	"encoding/binary"
	"fmt"
)

// Reservations (NVMe Base spec, "Reservations"): hosts register a 64-bit
// key on a namespace and one of them (or, for the all-registrants types,
// all of them) holds a reservation whose type decides which other hosts
// may read or write the namespace's data.

// Reservation command opcodes (NVM command set). Bits 1:0 give the data
// direction as for every opcode: Register, Acquire and Release send a
// small data structure to the controller; Report returns one.
const (
	IOReservationRegister = 0x0D
	IOReservationReport   = 0x0E
	IOReservationAcquire  = 0x11
	IOReservationRelease  = 0x15
)

// StatusReservationConflict (SCT 0h, SC 83h) is the status of a command
// that a reservation on its namespace does not allow, and of a
// reservation command whose key or holder does not match.
const StatusReservationConflict Status = 0x83

// ReservationType is a reservation type (RTYPE).
type ReservationType uint8

// Reservation types. ResvNone is the RTYPE a Reservation Report gives
// when no reservation is held.
const (
	ResvNone                   ReservationType = 0
	ResvWriteExclusive         ReservationType = 1
	ResvExclusiveAccess        ReservationType = 2
	ResvWriteExclusiveRegOnly  ReservationType = 3
	ResvExclusiveAccessRegOnly ReservationType = 4
	ResvWriteExclusiveAllRegs  ReservationType = 5
	ResvExclusiveAccessAllRegs ReservationType = 6
	maxReservationType                         = ResvExclusiveAccessAllRegs
)

// Valid reports whether t is one of the six reservation types.
func (t ReservationType) Valid() bool { return t >= ResvWriteExclusive && t <= maxReservationType }

// AllRegistrants reports whether every registrant holds a reservation of
// this type (types 5 and 6) rather than a single host.
func (t ReservationType) AllRegistrants() bool {
	return t == ResvWriteExclusiveAllRegs || t == ResvExclusiveAccessAllRegs
}

// ExclusiveAccess reports whether the type restricts reads as well as
// writes (types 2, 4 and 6).
func (t ReservationType) ExclusiveAccess() bool {
	return t == ResvExclusiveAccess || t == ResvExclusiveAccessRegOnly || t == ResvExclusiveAccessAllRegs
}

// RegistrantsAllowed reports whether every registrant, holder or not, may
// access the namespace as the holder does (types 3 to 6); for types 1 and
// 2 only the holder may.
func (t ReservationType) RegistrantsAllowed() bool {
	return t >= ResvWriteExclusiveRegOnly && t.Valid()
}

func (t ReservationType) String() string {
	switch t {
	case ResvNone:
		return "none"
	case ResvWriteExclusive:
		return "write exclusive"
	case ResvExclusiveAccess:
		return "exclusive access"
	case ResvWriteExclusiveRegOnly:
		return "write exclusive - registrants only"
	case ResvExclusiveAccessRegOnly:
		return "exclusive access - registrants only"
	case ResvWriteExclusiveAllRegs:
		return "write exclusive - all registrants"
	case ResvExclusiveAccessAllRegs:
		return "exclusive access - all registrants"
	}
	return fmt.Sprintf("reservation type %d", uint8(t))
}

// RESCAP bits (Identify Namespace byte 31): the reservation types a
// namespace supports.
const (
	RescapPTPL                   = 1 << 0 // persist through power loss
	RescapWriteExclusive         = 1 << 1
	RescapExclusiveAccess        = 1 << 2
	RescapWriteExclusiveRegOnly  = 1 << 3
	RescapExclusiveAccessRegOnly = 1 << 4
	RescapWriteExclusiveAllRegs  = 1 << 5
	RescapExclusiveAccessAllRegs = 1 << 6
	RescapIEKEY13                = 1 << 7 // IEKEY as defined by NVMe 1.3 and later
	RescapAllTypes               = 0x7E   // bits 1 to 6
)

// Reservation Register actions (RREGA, CDW10 bits 2:0).
const (
	RegisterActionRegister   = 0
	RegisterActionUnregister = 1
	RegisterActionReplace    = 2
)

// Change Persist Through Power Loss State values (CPTPL, Reservation
// Register CDW10 bits 31:30).
const (
	CPTPLNoChange = 0
	CPTPLClear    = 2 // reservations are released and registrants cleared on power on
	CPTPLPersist  = 3 // reservations and registrants persist across a power loss
)

// Reservation Acquire actions (RACQA, CDW10 bits 2:0).
const (
	AcquireActionAcquire         = 0
	AcquireActionPreempt         = 1
	AcquireActionPreemptAndAbort = 2
)

// Reservation Release actions (RRELA, CDW10 bits 2:0).
const (
	ReleaseActionRelease = 0
	ReleaseActionClear   = 1
)

// ResvIEKEY is the Ignore Existing Key bit (CDW10 bit 3) of the
// reservation commands.
const ResvIEKEY = 1 << 3

// ReportEDS is Reservation Report CDW11 bit 0: return the extended data
// structure, whose entries carry 128-bit host identifiers.
const ReportEDS = 1

// Sizes of the reservation data structures.
const (
	ResvRegisterDataSize = 16 // CRKEY, NRKEY
	ResvAcquireDataSize  = 16 // CRKEY, PRKEY
	ResvReleaseDataSize  = 8  // CRKEY
	// ResvStatusHeaderSize and ResvRegCtrlSize are the header and the
	// per-registrant entry of the Reservation Status data structure;
	// the Ext sizes those of the extended one.
	ResvStatusHeaderSize    = 24
	ResvRegCtrlSize         = 24
	ResvStatusExtHeaderSize = 64
	ResvRegCtrlExtSize      = 64
)

// ReservationRegisterCDW10 builds Reservation Register's CDW10.
func ReservationRegisterCDW10(action uint8, iekey bool, cptpl uint8) uint32 {
	v := uint32(action&7) | uint32(cptpl&3)<<30
	if iekey {
		v |= ResvIEKEY
	}
	return v
}

// ReservationAcquireCDW10 builds Reservation Acquire's CDW10 (and, with a
// release action, Reservation Release's: the layout is the same).
func ReservationAcquireCDW10(action uint8, iekey bool, t ReservationType) uint32 {
	v := uint32(action&7) | uint32(t)<<8
	if iekey {
		v |= ResvIEKEY
	}
	return v
}

// PutResvKeys encodes the two keys of a Register or Acquire data
// structure (or, with len(b) == 8, Release's one key).
func PutResvKeys(b []byte, k1, k2 uint64) {
	binary.LittleEndian.PutUint64(b, k1)
	if len(b) >= 16 {
		binary.LittleEndian.PutUint64(b[8:], k2)
	}
}

// RegisteredController is one registrant in a Reservation Status data
// structure.
type RegisteredController struct {
	// CNTLID is the controller the host registered through, or FFFFh
	// when the registration belongs to the host rather than to one
	// controller (the dynamic controller model).
	CNTLID uint16
	// Holder is RCSTS bit 0: the host holds the reservation.
	Holder bool
	// HostID is the host identifier. In the 24-byte entry only the first
	// 8 bytes exist.
	HostID [16]byte
	Key    uint64
}

// ReservationStatus is the Reservation Status data structure a
// Reservation Report returns.
type ReservationStatus struct {
	// Generation counts the registrations, unregistrations, key
	// replacements, preemptions and clears the namespace has seen.
	Generation uint32
	Type       ReservationType
	// NumRegistrants is REGCTL: how many registrants there are, which may
	// be more than the report had room for in Registrants.
	NumRegistrants uint16
	// PTPLS is the Persist Through Power Loss State.
	PTPLS       bool
	Registrants []RegisteredController
	// Extended says the structure had 64-byte entries with 128-bit host
	// identifiers (EDS).
	Extended bool
}

// Marshal encodes the structure, extended or not as s.Extended says, with
// an entry for every element of Registrants.
func (s *ReservationStatus) Marshal() []byte {
	hdr, ent := ResvStatusHeaderSize, ResvRegCtrlSize
	if s.Extended {
		hdr, ent = ResvStatusExtHeaderSize, ResvRegCtrlExtSize
	}
	b := make([]byte, hdr+ent*len(s.Registrants))
	le := binary.LittleEndian
	le.PutUint32(b[0:], s.Generation)
	b[4] = uint8(s.Type)
	le.PutUint16(b[5:], s.NumRegistrants)
	if s.PTPLS {
		b[9] = 1
	}
	for i, r := range s.Registrants {
		e := b[hdr+i*ent : hdr+(i+1)*ent]
		le.PutUint16(e[0:], r.CNTLID)
		if r.Holder {
			e[2] = 1
		}
		if s.Extended {
			le.PutUint64(e[8:], r.Key)
			copy(e[16:32], r.HostID[:])
		} else {
			copy(e[8:16], r.HostID[:8])
			le.PutUint64(e[16:], r.Key)
		}
	}
	return b
}

// Unmarshal decodes a Reservation Status data structure, extended if
// extended is set. b may be cut short, as a report is when the host's
// buffer is smaller than the structure: Registrants then holds the
// entries b has whole, and NumRegistrants still says how many exist. It
// fails only when b does not hold the header.
func (s *ReservationStatus) Unmarshal(b []byte, extended bool) error {
	hdr, ent := ResvStatusHeaderSize, ResvRegCtrlSize
	if extended {
		hdr, ent = ResvStatusExtHeaderSize, ResvRegCtrlExtSize
	}
	if len(b) < hdr {
		return fmt.Errorf("nvme: reservation status is %d bytes, header needs %d: %w", len(b), hdr, ErrShort)
	}
	le := binary.LittleEndian
	*s = ReservationStatus{
		Generation:     le.Uint32(b[0:]),
		Type:           ReservationType(b[4]),
		NumRegistrants: le.Uint16(b[5:]),
		PTPLS:          b[9]&1 != 0,
		Extended:       extended,
	}
	n := min(int(s.NumRegistrants), (len(b)-hdr)/ent)
	if n > 0 {
		s.Registrants = make([]RegisteredController, n)
	}
	for i := range n {
		e := b[hdr+i*ent : hdr+(i+1)*ent]
		r := &s.Registrants[i]
		r.CNTLID = le.Uint16(e[0:])
		r.Holder = e[2]&1 != 0
		if extended {
			r.Key = le.Uint64(e[8:])
			copy(r.HostID[:], e[16:32])
		} else {
			copy(r.HostID[:8], e[8:16])
			r.Key = le.Uint64(e[16:])
		}
	}
	return nil
}

// Holder returns the registrant that holds the reservation, if exactly
// one entry is marked as holding it.
func (s *ReservationStatus) Holder() (RegisteredController, bool) {
	var h RegisteredController
	n := 0
	for _, r := range s.Registrants {
		if r.Holder {
			h = r
			n++
		}
	}
	return h, n == 1
}
