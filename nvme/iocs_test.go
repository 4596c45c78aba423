package nvme

import (
	"encoding/binary"
	"testing"
)

// fieldAt is one field of a wire structure: width bytes at off, little
// endian, holding want.
type fieldAt struct {
	name       string
	off, width int
	want       uint64
}

// checkLayout asserts every field sits at its offset and every other byte
// is zero (reserved), so a field written to the wrong place cannot hide.
func checkLayout(t *testing.T, b []byte, size int, fields []fieldAt) {
	t.Helper()
	if len(b) != size {
		t.Fatalf("%d bytes, want %d", len(b), size)
	}
	owned := make([]bool, len(b))
	for _, f := range fields {
		var v uint64
		for i := f.width - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[f.off+i])
			owned[f.off+i] = true
		}
		if v != f.want {
			t.Errorf("%s at byte %d (%d bytes) = %#x, want %#x", f.name, f.off, f.width, v, f.want)
		}
	}
	for i, o := range owned {
		if !o && b[i] != 0 {
			t.Errorf("reserved byte %d = %#x", i, b[i])
		}
	}
}

func TestIdentifyNamespaceKVLayout(t *testing.T) {
	id := IdentifyNamespaceKV{
		NSZE: 0x0102030405060708, NUSE: 0x1112131415161718, NSFEAT: 0x21, NMIC: 0x01, RESCAP: 0x23, FPI: 0x24,
		NOVG: 0x31323334, ANAGRPID: 0x41424344, NSATTR: 0x01, NVMSETID: 0x5152, ENDGID: 0x6162,
		NGUID: [16]byte{0x70, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0x7f}, EUI64: [8]byte{0x80, 1, 2, 3, 4, 5, 6, 0x87},
		MaxKey: 16, MaxValue: 0x00100000, MaxKeys: 0x91929394,
	}
	b := id.Marshal()
	checkLayout(t, b, IdentifySize, []fieldAt{
		{"NSZE", 0, 8, id.NSZE}, {"NUSE", 16, 8, id.NUSE}, {"NSFEAT", 24, 1, 0x21}, {"NKVF (0's based)", 25, 1, 0},
		{"NMIC", 26, 1, 1}, {"RESCAP", 27, 1, 0x23}, {"FPI", 28, 1, 0x24}, {"NOVG", 32, 4, uint64(id.NOVG)},
		{"ANAGRPID", 36, 4, uint64(id.ANAGRPID)}, {"NSATTR", 43, 1, 1}, {"NVMSETID", 44, 2, 0x5152}, {"ENDGID", 46, 2, 0x6162},
		{"NGUID lo", 48, 8, binary.LittleEndian.Uint64(id.NGUID[:])}, {"NGUID hi", 56, 8, binary.LittleEndian.Uint64(id.NGUID[8:])},
		{"EUI64", 64, 8, binary.LittleEndian.Uint64(id.EUI64[:])},
		{"KVF0.KML", 72, 2, 16}, {"KVF0.VML", 76, 4, 0x00100000}, {"KVF0.MNK", 80, 4, 0x91929394},
	})
	got, err := UnmarshalIdentifyNamespaceKV(b)
	if err != nil || got != id {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"short", b[:100]},
		{"key length 0", (&IdentifyNamespaceKV{NSZE: 1, MaxKey: 0}).Marshal()},
		{"key length 17", (&IdentifyNamespaceKV{NSZE: 1, MaxKey: 17}).Marshal()},
	} {
		if _, err := UnmarshalIdentifyNamespaceKV(tc.b); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	// An inactive NSID's structure is zeroes, and decodes as such.
	if z, err := UnmarshalIdentifyNamespaceKV(make([]byte, IdentifySize)); err != nil || z != (IdentifyNamespaceKV{}) {
		t.Errorf("zeroes: %+v %v", z, err)
	}
}

func TestIdentifyNamespaceIndependentLayout(t *testing.T) {
	id := IdentifyNamespaceIndependent{NSFEAT: 0x11, NMIC: 1, RESCAP: 0x33, FPI: 0x44, ANAGRPID: 0x51525354,
		NSATTR: 1, NVMSETID: 0x6162, ENDGID: 0x7172, NSTAT: NSTATReady}
	b := id.Marshal()
	checkLayout(t, b, IdentifySize, []fieldAt{
		{"NSFEAT", 0, 1, 0x11}, {"NMIC", 1, 1, 1}, {"RESCAP", 2, 1, 0x33}, {"FPI", 3, 1, 0x44},
		{"ANAGRPID", 4, 4, 0x51525354}, {"NSATTR", 8, 1, 1}, {"NVMSETID", 10, 2, 0x6162}, {"ENDGID", 12, 2, 0x7172},
		{"NSTAT", 14, 1, 1},
	})
	var got IdentifyNamespaceIndependent
	if err := got.Unmarshal(b); err != nil || got != id {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if err := got.Unmarshal(b[:14]); err == nil {
		t.Error("short structure accepted")
	}
}

func TestIOCSVectorsLayout(t *testing.T) {
	nvmKV := IOCSVector(1<<CSINVM | 1<<CSIKV)
	b := MarshalIOCSVectors([]IOCSVector{nvmKV, 0, 1 << 2})
	checkLayout(t, b, IdentifySize, []fieldAt{{"vector 0", 0, 8, 3}, {"vector 1", 8, 8, 0}, {"vector 2", 16, 8, 4}})
	vs, err := UnmarshalIOCSVectors(b)
	if err != nil || len(vs) != 3 || vs[0] != nvmKV || !vs[0].Has(CSIKV) || !vs[0].Has(CSINVM) || vs[0].Has(2) || !vs[2].Has(2) || vs[0].Has(200) {
		t.Fatalf("decoded %v %v", vs, err)
	}
	if got := MarshalIOCSVectors(make([]IOCSVector, 600)); len(got) != IdentifySize {
		t.Fatalf("600 vectors: %d bytes", len(got))
	}
	if _, err := UnmarshalIOCSVectors(b[:8]); err == nil {
		t.Error("short structure accepted")
	}
}

func TestCommandEffectsLogLayout(t *testing.T) {
	var l CommandEffectsLog
	l.ACS[AdminIdentify] = EffectCSUPP
	l.ACS[0xff] = EffectCSUPP | EffectCCC
	l.IOCS[KVStore] = EffectCSUPP | EffectLBCC
	l.IOCS[KVExist] = EffectCSUPP
	b := l.Marshal()
	checkLayout(t, b, CommandEffectsLogSize, []fieldAt{
		{"ACS[06h] Identify", 4 * AdminIdentify, 4, EffectCSUPP}, {"ACS[FFh]", 4 * 0xff, 4, EffectCSUPP | EffectCCC},
		{"IOCS[01h] Store", 1024 + 4*KVStore, 4, EffectCSUPP | EffectLBCC}, {"IOCS[14h] Exist", 1024 + 4*KVExist, 4, EffectCSUPP},
	})
	var got CommandEffectsLog
	if err := got.Unmarshal(b); err != nil || got != l {
		t.Fatalf("round trip: %v", err)
	}
	if err := got.Unmarshal(b[:2047]); err == nil {
		t.Error("short page accepted")
	}
}

func TestCAPAndCC(t *testing.T) {
	c := CAP(1024, 15)
	for _, tc := range []struct {
		name      string
		bit       uint
		wantIsSet bool
	}{
		{"CQR", 16, true}, {"CSS bit 0 NVM", 37, true}, {"CSS bit 6 I/O command sets", 43, true}, {"CSS bit 7 admin only", 44, false},
	} {
		if got := c&(1<<tc.bit) != 0; got != tc.wantIsSet {
			t.Errorf("CAP %s (bit %d) = %v", tc.name, tc.bit, got)
		}
	}
	if CCCSS(CCEnable|CCCSSAllIOCS<<4|6<<16) != CCCSSAllIOCS || CCCSS(CCEnable) != CCCSSNVM {
		t.Error("CCCSS")
	}
}

func TestGetLogPageCSI(t *testing.T) {
	g := GetLogPageCommand{LID: LogCmdEffects, Length: 4096, CSI: CSIKV}
	var c Command
	c.CDW14 = 0x00abcdef // other bits of CDW14 stay
	g.ToCommand(&c)
	if c.CDW14 != 0x01abcdef {
		t.Fatalf("CDW14 %#x", c.CDW14)
	}
	var d GetLogPageCommand
	d.FromCommand(&c)
	if d != g {
		t.Fatalf("%+v", d)
	}
}

// The decoders of what a controller returns, fuzzed: whatever they accept
// encodes back to bytes that decode the same.
func FuzzUnmarshalIdentifyNamespaceKV(f *testing.F) {
	f.Add((&IdentifyNamespaceKV{NSZE: 1 << 20, MaxKey: 16, MaxValue: 4096}).Marshal())
	f.Add(make([]byte, IdentifySize))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := UnmarshalIdentifyNamespaceKV(b)
		if err != nil {
			return
		}
		again, err := UnmarshalIdentifyNamespaceKV(id.Marshal())
		if err != nil || again != id {
			t.Fatalf("re-decoded %+v, %v; want %+v", again, err, id)
		}
	})
}

func FuzzIdentifyNamespaceIndependent(f *testing.F) {
	f.Add((&IdentifyNamespaceIndependent{NMIC: 1, NSTAT: 1}).Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var id, again IdentifyNamespaceIndependent
		if id.Unmarshal(b) != nil {
			return
		}
		if err := again.Unmarshal(id.Marshal()); err != nil || again != id {
			t.Fatalf("re-decoded %+v, %v; want %+v", again, err, id)
		}
	})
}

func FuzzUnmarshalIOCSVectors(f *testing.F) {
	f.Add(MarshalIOCSVectors([]IOCSVector{3}))
	f.Add(make([]byte, 7))
	f.Fuzz(func(t *testing.T, b []byte) {
		vs, err := UnmarshalIOCSVectors(b)
		if err != nil {
			return
		}
		again, err := UnmarshalIOCSVectors(MarshalIOCSVectors(vs))
		if err != nil || len(again) != len(vs) {
			t.Fatalf("re-decoded %d vectors, %v; want %d", len(again), err, len(vs))
		}
		for i := range vs {
			if again[i] != vs[i] {
				t.Fatalf("vector %d: %#x, want %#x", i, again[i], vs[i])
			}
		}
	})
}

func FuzzCommandEffectsLog(f *testing.F) {
	var l CommandEffectsLog
	l.IOCS[KVStore] = EffectCSUPP | EffectLBCC
	f.Add(l.Marshal())
	f.Add(make([]byte, 2047))
	f.Fuzz(func(t *testing.T, b []byte) {
		var l, again CommandEffectsLog
		if l.Unmarshal(b) != nil {
			return
		}
		if err := again.Unmarshal(l.Marshal()); err != nil || again != l {
			t.Fatalf("re-decoded differs: %v", err)
		}
	})
}
