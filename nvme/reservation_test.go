package nvme

import (
	"bytes"
	"errors"
	"testing"
)

func TestReservationStatusRoundTrip(t *testing.T) {
	regs := []RegisteredController{
		{CNTLID: 0xFFFF, Holder: true, HostID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, Key: 0xdeadbeef},
		{CNTLID: 7, HostID: [16]byte{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x11, 0x22}, Key: 1},
	}
	for _, ext := range []bool{false, true} {
		in := ReservationStatus{Generation: 42, Type: ResvWriteExclusiveRegOnly, NumRegistrants: 2, Registrants: regs, Extended: ext}
		b := in.Marshal()
		hdr, ent := ResvStatusHeaderSize, ResvRegCtrlSize
		if ext {
			hdr, ent = ResvStatusExtHeaderSize, ResvRegCtrlExtSize
		}
		if len(b) != hdr+2*ent {
			t.Fatalf("extended=%v: %d bytes", ext, len(b))
		}
		var out ReservationStatus
		if err := out.Unmarshal(b, ext); err != nil {
			t.Fatal(err)
		}
		want := in
		if !ext { // the 24-byte entry has room for 8 bytes of host identifier
			want.Registrants = []RegisteredController{regs[0], regs[1]}
			copy(want.Registrants[0].HostID[8:], make([]byte, 8))
		}
		if out.Generation != want.Generation || out.Type != want.Type || out.NumRegistrants != 2 || out.Extended != ext ||
			len(out.Registrants) != 2 || out.Registrants[0] != want.Registrants[0] || out.Registrants[1] != want.Registrants[1] {
			t.Fatalf("extended=%v: got %+v, want %+v", ext, out, want)
		}
		if h, ok := out.Holder(); !ok || h.Key != 0xdeadbeef {
			t.Fatalf("holder %+v %v", h, ok)
		}
		// Cut short: only the whole entries that fit, and REGCTL intact.
		if err := out.Unmarshal(b[:hdr+ent+ent/2], ext); err != nil || len(out.Registrants) != 1 || out.NumRegistrants != 2 {
			t.Fatalf("extended=%v: truncated: %+v %v", ext, out, err)
		}
		if err := out.Unmarshal(b[:hdr-1], ext); !errors.Is(err, ErrShort) {
			t.Fatalf("extended=%v: short header: %v", ext, err)
		}
	}
}

func TestReservationCDW10(t *testing.T) {
	if v := ReservationRegisterCDW10(RegisterActionReplace, true, CPTPLClear); v != 2|1<<3|2<<30 {
		t.Fatalf("register cdw10 %#x", v)
	}
	if v := ReservationAcquireCDW10(AcquireActionPreempt, false, ResvExclusiveAccessAllRegs); v != 1|6<<8 {
		t.Fatalf("acquire cdw10 %#x", v)
	}
	b := make([]byte, 16)
	PutResvKeys(b, 0x0102030405060708, 0x1112131415161718)
	if !bytes.Equal(b, []byte{8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11}) {
		t.Fatalf("keys % x", b)
	}
	for ty := ReservationType(0); ty < 8; ty++ {
		valid := ty >= 1 && ty <= 6
		if ty.Valid() != valid || ty.AllRegistrants() != (ty == 5 || ty == 6) ||
			ty.ExclusiveAccess() != (ty == 2 || ty == 4 || ty == 6) || ty.RegistrantsAllowed() != (ty >= 3 && ty <= 6) {
			t.Errorf("type %d (%v) predicates wrong", ty, ty)
		}
	}
	if s := (StatusReservationConflict | DNR).String(); s != "reservation conflict (sct 0x0 sc 0x83) dnr" {
		t.Fatalf("status string %q", s)
	}
}

// FuzzReservationStatus: a host decodes whatever a controller sends as a
// Reservation Report. Decoding never panics, never yields more entries
// than REGCTL or the bytes allow, and what it decodes encodes back to the
// same bytes (reserved fields aside).
func FuzzReservationStatus(f *testing.F) {
	s := ReservationStatus{Generation: 3, Type: ResvExclusiveAccess, NumRegistrants: 1,
		Registrants: []RegisteredController{{CNTLID: 0xFFFF, Holder: true, Key: 9, HostID: [16]byte{1}}}}
	f.Add(s.Marshal(), false)
	s.Extended = true
	f.Add(s.Marshal(), true)
	f.Add(make([]byte, 23), false)
	f.Fuzz(func(t *testing.T, b []byte, ext bool) {
		var s ReservationStatus
		if err := s.Unmarshal(b, ext); err != nil {
			return
		}
		hdr, ent := ResvStatusHeaderSize, ResvRegCtrlSize
		if ext {
			hdr, ent = ResvStatusExtHeaderSize, ResvRegCtrlExtSize
		}
		if len(s.Registrants) > int(s.NumRegistrants) || hdr+len(s.Registrants)*ent > len(b) {
			t.Fatalf("%d entries from %d bytes, REGCTL %d", len(s.Registrants), len(b), s.NumRegistrants)
		}
		var again ReservationStatus
		if err := again.Unmarshal(s.Marshal(), ext); err != nil {
			t.Fatal(err)
		}
		if again.Generation != s.Generation || again.Type != s.Type || again.PTPLS != s.PTPLS ||
			len(again.Registrants) != len(s.Registrants) {
			t.Fatalf("re-encoded %+v, decoded %+v", again, s)
		}
		for i := range s.Registrants {
			if again.Registrants[i] != s.Registrants[i] {
				t.Fatalf("entry %d: %+v, then %+v", i, s.Registrants[i], again.Registrants[i])
			}
		}
	})
}
