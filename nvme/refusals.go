package nvme

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Function Load Refusals (vendor log page C0h, docs/PROTOCOL.md): per
// controller, the last RefusalEntries Function Loads the target refused,
// newest first, each in a RefusalEntrySize-byte entry:
//
//	bytes 0–31    function ID
//	bytes 32–39   refusal number, counting from 1 (0: the entry is empty)
//	bytes 40–41   status (SCT << 8 | SC, without DNR)
//	bytes 42–43   reason length R, at most MaxRefusalReason
//	bytes 44–47   reserved
//	bytes 48–511  the reason, R bytes of UTF-8, then zeroes
//
// The Error Information log entry of a refused Function Load has byte 28
// (vendor specific information available) set to LogFunctionRefusals.
const (
	LogFunctionRefusals = 0xC0
	RefusalEntries      = 8
	RefusalEntrySize    = 512
	MaxRefusalReason    = RefusalEntrySize - 48
	// RefusalLogSize is the whole page.
	RefusalLogSize = RefusalEntries * RefusalEntrySize
)

// FunctionRefusal is one entry of the Function Load Refusals log.
type FunctionRefusal struct {
	ID     [32]byte
	Number uint64
	Status Status
	Reason string
}

// CutReason returns reason cut to at most MaxRefusalReason bytes at a
// character boundary.
func CutReason(reason string) string {
	if len(reason) <= MaxRefusalReason {
		return reason
	}
	n := MaxRefusalReason
	for n > 0 && !utf8.RuneStart(reason[n]) {
		n--
	}
	return reason[:n]
}

// Marshal writes f into the RefusalEntrySize bytes of b, its reason cut
// as CutReason does.
func (f *FunctionRefusal) Marshal(b []byte) {
	b = b[:RefusalEntrySize]
	clear(b)
	reason := CutReason(f.Reason)
	copy(b[0:32], f.ID[:])
	binary.LittleEndian.PutUint64(b[32:], f.Number)
	binary.LittleEndian.PutUint16(b[40:], uint16(f.Status&^DNR))
	binary.LittleEndian.PutUint16(b[42:], uint16(len(reason)))
	copy(b[48:], reason)
}

// UnmarshalFunctionRefusals decodes a Function Load Refusals page (a
// whole number of entries), skipping empty entries, in the page's order:
// newest first.
func UnmarshalFunctionRefusals(b []byte) ([]FunctionRefusal, error) {
	if len(b)%RefusalEntrySize != 0 {
		return nil, fmt.Errorf("nvme: function refusals log of %d bytes, not a multiple of %d", len(b), RefusalEntrySize)
	}
	var out []FunctionRefusal
	for off := 0; off < len(b); off += RefusalEntrySize {
		e := b[off : off+RefusalEntrySize]
		var f FunctionRefusal
		if f.Number = binary.LittleEndian.Uint64(e[32:]); f.Number == 0 {
			continue
		}
		copy(f.ID[:], e[0:32])
		f.Status = Status(binary.LittleEndian.Uint16(e[40:])) &^ DNR
		r := int(binary.LittleEndian.Uint16(e[42:]))
		if r > MaxRefusalReason {
			return nil, fmt.Errorf("nvme: function refusal %d: reason of %d bytes (at most %d)", f.Number, r, MaxRefusalReason)
		}
		if !utf8.Valid(e[48 : 48+r]) {
			return nil, fmt.Errorf("nvme: function refusal %d: reason is not UTF-8", f.Number)
		}
		f.Reason = string(e[48 : 48+r])
		out = append(out, f)
	}
	return out, nil
}
