package auth

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Message types (auth_type) and identifiers (auth_id).
const (
	TypeCommon = 0x00
	TypeDHCHAP = 0x01

	IDNegotiate = 0x00 // of TypeCommon
	IDChallenge = 0x01
	IDReply     = 0x02
	IDSuccess1  = 0x03
	IDSuccess2  = 0x04
	IDFailure2  = 0xF0
	IDFailure1  = 0xF1
)

// DH-HMAC-CHAP's protocol identifier in a Negotiate descriptor, and the
// descriptor's size.
const (
	ProtocolDHCHAP = 0x01
	descriptorSize = 64
	// The descriptor's ID list holds up to 30 hash IDs from its byte 0
	// and up to 30 DH group IDs from its byte 30.
	maxIDs     = 30
	groupsAt   = 30
	idListSize = 60
)

// Failure reason code (1: authentication failure) explanations.
const (
	ReasonFailed             = 0x01
	ReasonNotUsable          = 0x02
	ReasonConcatMismatch     = 0x03
	ReasonHashUnusable       = 0x04
	ReasonDHGroupUnusable    = 0x05
	ReasonIncorrectPayload   = 0x06
	ReasonIncorrectProtocol  = 0x07 // "incorrect protocol message" (Linux: INCORRECT_MESSAGE)
	ReasonCodeAuthentication = 0x01
)

// ReasonText names a reason code explanation.
func ReasonText(r uint8) string {
	switch r {
	case ReasonFailed:
		return "authentication failed"
	case ReasonNotUsable:
		return "authentication protocol not usable"
	case ReasonConcatMismatch:
		return "secure channel concatenation mismatch"
	case ReasonHashUnusable:
		return "hash function not usable"
	case ReasonDHGroupUnusable:
		return "DH group not usable"
	case ReasonIncorrectPayload:
		return "incorrect payload"
	case ReasonIncorrectProtocol:
		return "incorrect protocol message"
	}
	return fmt.Sprintf("reason %#x", r)
}

// Header is what every message starts with.
type Header struct {
	Type, ID uint8
	TID      uint16
}

const headerSize = 6

func (h Header) append(b []byte) []byte {
	b = append(b, h.Type, h.ID, 0, 0)
	return binary.LittleEndian.AppendUint16(b, h.TID)
}

// PeekHeader decodes a message's header, to tell which message it is.
func PeekHeader(b []byte) (Header, error) {
	if len(b) < headerSize {
		return Header{}, fmt.Errorf("%w: %d bytes, no header", ErrMessage, len(b))
	}
	return Header{Type: b[0], ID: b[1], TID: binary.LittleEndian.Uint16(b[4:])}, nil
}

func expect(b []byte, typ, id uint8, min int) (Header, error) {
	h, err := PeekHeader(b)
	if err != nil {
		return h, err
	}
	if h.Type != typ || h.ID != id {
		return h, fmt.Errorf("%w: message %02x/%02x, want %02x/%02x", ErrMessage, h.Type, h.ID, typ, id)
	}
	if len(b) < min {
		return h, fmt.Errorf("%w: %d bytes, at least %d", ErrMessage, len(b), min)
	}
	return h, nil
}

// Negotiate is AUTH_Negotiate with one DH-HMAC-CHAP descriptor: the hash
// functions and DH groups the host offers, in its order of preference.
type Negotiate struct {
	TID    uint16
	SCC    uint8 // secure channel concatenation; 0: none
	Hashes []Hash
	Groups []DHGroup
}

// Marshal encodes n.
func (n *Negotiate) Marshal() ([]byte, error) {
	if len(n.Hashes) > maxIDs || len(n.Groups) > maxIDs {
		return nil, fmt.Errorf("%w: %d hashes and %d groups do not fit a descriptor", ErrMessage, len(n.Hashes), len(n.Groups))
	}
	b := Header{TypeCommon, IDNegotiate, n.TID}.append(make([]byte, 0, headerSize+2+descriptorSize))
	b = append(b, n.SCC, 1, ProtocolDHCHAP, 0, uint8(len(n.Hashes)), uint8(len(n.Groups)))
	var ids [idListSize]byte
	for i, h := range n.Hashes {
		ids[i] = byte(h)
	}
	for i, g := range n.Groups {
		ids[groupsAt+i] = byte(g)
	}
	return append(b, ids[:]...), nil
}

// UnmarshalNegotiate decodes AUTH_Negotiate, taking its DH-HMAC-CHAP
// descriptor (others are skipped).
func UnmarshalNegotiate(b []byte) (Negotiate, error) {
	h, err := expect(b, TypeCommon, IDNegotiate, headerSize+2)
	if err != nil {
		return Negotiate{}, err
	}
	n := Negotiate{TID: h.TID, SCC: b[6]}
	napd := int(b[7])
	if len(b) < headerSize+2+napd*descriptorSize {
		return Negotiate{}, fmt.Errorf("%w: %d descriptors in %d bytes", ErrMessage, napd, len(b))
	}
	found := false
	for i := range napd {
		d := b[headerSize+2+i*descriptorSize:][:descriptorSize]
		if d[0] != ProtocolDHCHAP {
			continue
		}
		if found {
			return Negotiate{}, fmt.Errorf("%w: two DH-HMAC-CHAP descriptors", ErrMessage)
		}
		found = true
		hl, dl := int(d[2]), int(d[3])
		if hl > maxIDs || dl > maxIDs {
			return Negotiate{}, fmt.Errorf("%w: %d hash and %d group IDs, at most %d each", ErrMessage, hl, dl, maxIDs)
		}
		for _, id := range d[4 : 4+hl] {
			n.Hashes = append(n.Hashes, Hash(id))
		}
		for _, id := range d[4+groupsAt : 4+groupsAt+dl] {
			n.Groups = append(n.Groups, DHGroup(id))
		}
	}
	if !found {
		return Negotiate{}, fmt.Errorf("%w: no DH-HMAC-CHAP descriptor", ErrMessage)
	}
	return n, nil
}

// Challenge is DH-HMAC-CHAP_Challenge: the controller's challenge C1.
type Challenge struct {
	TID     uint16
	Hash    Hash
	Group   DHGroup
	Seq     uint32
	C1      []byte // Hash.Size() bytes
	DHValue []byte
}

// Marshal encodes c.
func (c *Challenge) Marshal() ([]byte, error) {
	if len(c.C1) > 255 || len(c.DHValue) > 0xFFFF {
		return nil, fmt.Errorf("%w: challenge of %d bytes, DH value of %d", ErrMessage, len(c.C1), len(c.DHValue))
	}
	b := Header{TypeDHCHAP, IDChallenge, c.TID}.append(nil)
	b = append(b, uint8(len(c.C1)), 0, uint8(c.Hash), uint8(c.Group))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(c.DHValue)))
	b = binary.LittleEndian.AppendUint32(b, c.Seq)
	b = append(b, c.C1...)
	return append(b, c.DHValue...), nil
}

// UnmarshalChallenge decodes DH-HMAC-CHAP_Challenge.
func UnmarshalChallenge(b []byte) (Challenge, error) {
	h, err := expect(b, TypeDHCHAP, IDChallenge, 16)
	if err != nil {
		return Challenge{}, err
	}
	hl, dhvlen := int(b[6]), int(binary.LittleEndian.Uint16(b[10:]))
	if len(b) < 16+hl+dhvlen {
		return Challenge{}, fmt.Errorf("%w: challenge of %d and DH value of %d bytes in %d", ErrMessage, hl, dhvlen, len(b))
	}
	return Challenge{TID: h.TID, Hash: Hash(b[8]), Group: DHGroup(b[9]), Seq: binary.LittleEndian.Uint32(b[12:]),
		C1: slices.Clone(b[16 : 16+hl]), DHValue: slices.Clone(b[16+hl : 16+hl+dhvlen])}, nil
}

// Reply is DH-HMAC-CHAP_Reply: the host's response, and, for
// bidirectional authentication, its own challenge C2.
type Reply struct {
	TID      uint16
	Seq      uint32 // S2; 0 without a challenge
	Response []byte
	C2       []byte // nil: no challenge (CVALID 0); else len(Response) bytes
	DHValue  []byte
}

// Marshal encodes r.
func (r *Reply) Marshal() ([]byte, error) {
	hl := len(r.Response)
	if hl > 255 || len(r.DHValue) > 0xFFFF || (r.C2 != nil && len(r.C2) != hl) {
		return nil, fmt.Errorf("%w: response of %d bytes, challenge of %d, DH value of %d", ErrMessage, hl, len(r.C2), len(r.DHValue))
	}
	cvalid := uint8(0)
	if r.C2 != nil {
		cvalid = 1
	}
	b := Header{TypeDHCHAP, IDReply, r.TID}.append(nil)
	b = append(b, uint8(hl), 0, cvalid, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.DHValue)))
	b = binary.LittleEndian.AppendUint32(b, r.Seq)
	b = append(b, r.Response...)
	c2 := r.C2
	if c2 == nil {
		c2 = make([]byte, hl)
	}
	b = append(b, c2...)
	return append(b, r.DHValue...), nil
}

// UnmarshalReply decodes DH-HMAC-CHAP_Reply.
func UnmarshalReply(b []byte) (Reply, error) {
	h, err := expect(b, TypeDHCHAP, IDReply, 16)
	if err != nil {
		return Reply{}, err
	}
	hl, dhvlen := int(b[6]), int(binary.LittleEndian.Uint16(b[10:]))
	if len(b) < 16+2*hl+dhvlen {
		return Reply{}, fmt.Errorf("%w: response and challenge of %d and DH value of %d bytes in %d", ErrMessage, hl, dhvlen, len(b))
	}
	r := Reply{TID: h.TID, Seq: binary.LittleEndian.Uint32(b[12:]), Response: slices.Clone(b[16 : 16+hl]),
		DHValue: slices.Clone(b[16+2*hl : 16+2*hl+dhvlen])}
	if b[8]&1 != 0 {
		r.C2 = slices.Clone(b[16+hl : 16+2*hl])
	}
	return r, nil
}

// Success1 is DH-HMAC-CHAP_Success1: the controller's response to C2, if
// the host sent one.
type Success1 struct {
	TID      uint16
	HL       uint8  // the hash length in use
	Response []byte // nil: none (RVALID 0); else HL bytes
}

// Marshal encodes s.
func (s *Success1) Marshal() ([]byte, error) {
	if s.Response != nil && len(s.Response) != int(s.HL) {
		return nil, fmt.Errorf("%w: response of %d bytes, hash length %d", ErrMessage, len(s.Response), s.HL)
	}
	rvalid := uint8(0)
	if s.Response != nil {
		rvalid = 1
	}
	b := Header{TypeDHCHAP, IDSuccess1, s.TID}.append(nil)
	b = append(b, s.HL, 0, rvalid, 0, 0, 0, 0, 0, 0, 0)
	if s.Response != nil {
		b = append(b, s.Response...)
	}
	return b, nil
}

// UnmarshalSuccess1 decodes DH-HMAC-CHAP_Success1.
func UnmarshalSuccess1(b []byte) (Success1, error) {
	h, err := expect(b, TypeDHCHAP, IDSuccess1, 16)
	if err != nil {
		return Success1{}, err
	}
	s := Success1{TID: h.TID, HL: b[6]}
	if b[8]&1 != 0 {
		if len(b) < 16+int(s.HL) {
			return Success1{}, fmt.Errorf("%w: response of %d bytes in %d", ErrMessage, s.HL, len(b))
		}
		s.Response = slices.Clone(b[16 : 16+int(s.HL)])
	}
	return s, nil
}

// MarshalSuccess2 encodes DH-HMAC-CHAP_Success2.
func MarshalSuccess2(tid uint16) []byte {
	return append(Header{TypeDHCHAP, IDSuccess2, tid}.append(nil), make([]byte, 10)...)
}

// UnmarshalSuccess2 decodes DH-HMAC-CHAP_Success2 and returns its T_ID.
func UnmarshalSuccess2(b []byte) (uint16, error) {
	h, err := expect(b, TypeDHCHAP, IDSuccess2, 16)
	return h.TID, err
}

// Failure is AUTH_Failure1 (controller to host) or AUTH_Failure2 (host
// to controller). Both are common messages (auth_type 00h), as Linux
// sends and expects them.
type Failure struct {
	ID           uint8 // IDFailure1 or IDFailure2
	TID          uint16
	Code, Reason uint8
}

// Marshal encodes f.
func (f *Failure) Marshal() []byte {
	return append(Header{TypeCommon, f.ID, f.TID}.append(nil), f.Code, f.Reason)
}

// UnmarshalFailure decodes either failure message.
func UnmarshalFailure(b []byte) (Failure, error) {
	h, err := PeekHeader(b)
	if err != nil {
		return Failure{}, err
	}
	if h.Type != TypeCommon || (h.ID != IDFailure1 && h.ID != IDFailure2) || len(b) < 8 {
		return Failure{}, fmt.Errorf("%w: not a failure message (%02x/%02x, %d bytes)", ErrMessage, h.Type, h.ID, len(b))
	}
	return Failure{ID: h.ID, TID: h.TID, Code: b[6], Reason: b[7]}, nil
}
