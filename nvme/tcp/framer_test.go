package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/nearstore/nearstore/nvme"
)

func TestCRC32CKnownAnswer(t *testing.T) {
	// The CRC-32C check value from the Castagnoli paper and RFC 3720.
	if got := CRC32C([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("CRC32C(123456789) = %#x, want 0xe3069283", got)
	}
	if got := CRC32C([]byte("1234"), []byte("56789")); got != 0xE3069283 {
		t.Fatalf("CRC32C over two slices = %#x", got)
	}
}

// pipe returns a host framer writing into a buffer and a controller framer
// reading from it, with the same digests.
func pair(hd, dd bool) (*Framer, *Framer, *bytes.Buffer) {
	var buf bytes.Buffer
	h := NewFramer(&buf, RoleHost, 4096)
	c := NewFramer(&buf, RoleController, 4096)
	h.HeaderDigest, h.DataDigest = hd, dd
	c.HeaderDigest, c.DataDigest = hd, dd
	return h, c, &buf
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hd, dd bool
		align  int
	}{
		{"plain", false, false, 4},
		{"header digest", true, false, 4},
		{"data digest", false, true, 4},
		{"both digests", true, true, 4},
		{"aligned 32", true, true, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hf, cf, _ := pair(tc.hd, tc.dd)
			hf.SendAlign = tc.align
			cmd := nvme.Command{Opcode: nvme.IOWrite, Flags: nvme.PSDTSGL, CID: 77, NSID: 1,
				DPTR: nvme.SGL{Length: 5, Type: nvme.SGLDataBlockOffset}}
			cmd.SetLBA(1<<33+5, 8)
			payload := []byte("hello")
			if err := hf.WriteCapsuleCmd(&cmd, payload); err != nil {
				t.Fatal(err)
			}
			big := bytes.Repeat([]byte{0xAB, 0xCD}, 3000)
			if err := hf.WriteH2CData(DataHeader{CCCID: 77, TTag: 9, Offset: 4096}, true, big); err != nil {
				t.Fatal(err)
			}
			if err := hf.Flush(); err != nil {
				t.Fatal(err)
			}
			h, err := cf.ReadHeader()
			if err != nil {
				t.Fatal(err)
			}
			if h.Type != TypeCapsuleCmd || h.DataLen != 5 {
				t.Fatalf("got type %#x datalen %d", h.Type, h.DataLen)
			}
			if got := h.Command(); got != cmd {
				t.Fatalf("command = %+v, want %+v", got, cmd)
			}
			if got := h.Command(); got.SLBA() != 1<<33+5 || got.NLB() != 8 {
				t.Fatalf("slba/nlb = %d/%d", got.SLBA(), got.NLB())
			}
			if int(h.PDO)%tc.align != 0 {
				t.Fatalf("PDO %d not aligned to %d", h.PDO, tc.align)
			}
			data := make([]byte, h.DataLen)
			if err := cf.ReadData(data); err != nil || string(data) != "hello" {
				t.Fatalf("data %q err %v", data, err)
			}
			h, err = cf.ReadHeader()
			if err != nil {
				t.Fatal(err)
			}
			dh := h.Data()
			if h.Type != TypeH2CData || dh.CCCID != 77 || dh.TTag != 9 || dh.Offset != 4096 || int(dh.Length) != len(big) || h.Flags&FlagLastPDU == 0 {
				t.Fatalf("bad H2CData header %+v flags %#x", dh, h.Flags)
			}
			data = make([]byte, h.DataLen)
			if err := cf.ReadData(data); err != nil || !bytes.Equal(data, big) {
				t.Fatalf("H2CData payload mismatch, err %v", err)
			}
		})
	}
}

func TestControllerToHost(t *testing.T) {
	var buf bytes.Buffer
	c := NewFramer(&buf, RoleController, 4096)
	h := NewFramer(&buf, RoleHost, 4096)
	c.HeaderDigest, h.HeaderDigest = true, true
	c.DataDigest, h.DataDigest = true, true
	cqe := nvme.Completion{DW0: 0x12345678, SQHead: 3, CID: 5, Status: nvme.StatusLBAOutOfRange | nvme.DNR}
	must(t, c.WriteICResp(ICResp{CPDA: 0, Digest: DigestHeader | DigestData, MaxH2CData: 65536}))
	must(t, c.WriteCapsuleResp(&cqe))
	must(t, c.WriteR2T(DataHeader{CCCID: 5, TTag: 1, Offset: 0, Length: 1 << 20}))
	must(t, c.WriteC2HData(DataHeader{CCCID: 5, Offset: 8}, true, true, []byte{1, 2, 3}))
	must(t, c.WriteTermReq(TermReq{FES: FESHeaderDigestError, FEI: 7}, bytes.Repeat([]byte{9}, 200)))
	must(t, c.Flush())

	hd, err := h.ReadHeader()
	must(t, err)
	if p := hd.ICResp(); p.MaxH2CData != 65536 || p.Digest != 3 {
		t.Fatalf("ICResp %+v", p)
	}
	hd, err = h.ReadHeader()
	must(t, err)
	if got := hd.Completion(); got != cqe || !got.Status.DoNotRetry() || got.Status.Code() != nvme.StatusLBAOutOfRange {
		t.Fatalf("completion %+v", got)
	}
	hd, err = h.ReadHeader()
	must(t, err)
	if p := hd.Data(); hd.Type != TypeR2T || p.Length != 1<<20 || p.TTag != 1 {
		t.Fatalf("R2T %+v", p)
	}
	hd, err = h.ReadHeader()
	must(t, err)
	if hd.Type != TypeC2HData || hd.Flags&(FlagLastPDU|FlagSuccess) != FlagLastPDU|FlagSuccess || hd.DataLen != 3 {
		t.Fatalf("C2HData flags %#x len %d", hd.Flags, hd.DataLen)
	}
	d := make([]byte, 3)
	must(t, h.ReadData(d))
	hd, err = h.ReadHeader()
	must(t, err)
	if p := hd.TermReq(); hd.Type != TypeC2HTermReq || p.FES != FESHeaderDigestError || p.FEI != 7 || hd.DataLen != MaxTermReqData {
		t.Fatalf("TermReq %+v datalen %d", p, hd.DataLen)
	}
	must(t, h.ReadData(nil))
	if _, err := h.ReadHeader(); !errors.Is(err, io.EOF) {
		t.Fatalf("after last PDU: %v, want EOF", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// encode produces the wire bytes of one host PDU, for tests to corrupt.
func encode(t *testing.T, hd, dd bool, write func(f *Framer) error) []byte {
	var buf bytes.Buffer
	f := NewFramer(&buf, RoleHost, 4096)
	f.HeaderDigest, f.DataDigest = hd, dd
	must(t, write(f))
	must(t, f.Flush())
	return buf.Bytes()
}

func TestMalformed(t *testing.T) {
	capsule := func(f *Framer) error {
		c := nvme.Command{Opcode: nvme.IOWrite, CID: 1}
		return f.WriteCapsuleCmd(&c, []byte("abcdefgh"))
	}
	h2c := func(f *Framer) error { return f.WriteH2CData(DataHeader{CCCID: 1, Length: 4}, true, []byte("data")) }
	for _, tc := range []struct {
		name    string
		hd, dd  bool
		pdu     func(f *Framer) error
		corrupt func(b []byte)
		fes     uint16 // 0: expect ErrDataDigest (non-fatal)
		fei     uint32
	}{
		{"unknown type", false, false, capsule, func(b []byte) { b[0] = 0x08 }, FESInvalidHeaderField, 0},
		{"controller-to-host type", false, false, capsule, func(b []byte) { b[0] = TypeCapsuleResp }, FESInvalidHeaderField, 0},
		{"wrong hlen", false, false, capsule, func(b []byte) { b[2] = 70 }, FESInvalidHeaderField, 2},
		{"hdgst flag without negotiation", false, false, capsule, func(b []byte) { b[1] |= FlagHDGST }, FESInvalidHeaderField, 1},
		{"plen shorter than header", false, false, capsule, func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 10) }, FESInvalidHeaderField, 4},
		{"pdo inside header", false, false, capsule, func(b []byte) { b[3] = 8 }, FESInvalidHeaderField, 3},
		{"header digest bad", true, false, capsule, func(b []byte) { b[20] ^= 1 }, FESHeaderDigestError, 0},
		{"datal disagrees", false, false, h2c, func(b []byte) { binary.LittleEndian.PutUint32(b[16:], 3) }, FESInvalidHeaderField, 16},
		{"h2c data too large", false, false, func(f *Framer) error {
			return f.WriteH2CData(DataHeader{CCCID: 1}, true, make([]byte, 2<<20))
		}, nil, FESDataLimitExceeded, 16},
		{"capsule data too large", false, false, func(f *Framer) error {
			c := nvme.Command{Opcode: nvme.IOWrite}
			return f.WriteCapsuleCmd(&c, make([]byte, 9000))
		}, nil, FESInvalidHeaderField, 4},
		{"data digest bad", false, true, capsule, func(b []byte) { b[len(b)-6] ^= 0xff }, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := encode(t, tc.hd, tc.dd, tc.pdu)
			if tc.corrupt != nil {
				tc.corrupt(b)
			}
			f := NewFramer(bytes.NewBuffer(b), RoleController, 4096)
			f.HeaderDigest, f.DataDigest = tc.hd, tc.dd
			h, err := f.ReadHeader()
			if tc.fes == 0 {
				must(t, err)
				err = f.ReadData(make([]byte, h.DataLen))
				if !errors.Is(err, ErrDataDigest) {
					t.Fatalf("got %v, want ErrDataDigest", err)
				}
				return
			}
			var fe *FatalError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a FatalError", err)
			}
			if fe.FES != tc.fes || fe.FEI != tc.fei {
				t.Fatalf("FES %d FEI %d, want %d %d (%v)", fe.FES, fe.FEI, tc.fes, tc.fei, fe)
			}
			if len(fe.Header) == 0 {
				t.Fatal("fatal error carries no header for the TermReq")
			}
		})
	}
}

func TestTruncatedStream(t *testing.T) {
	b := encode(t, true, true, func(f *Framer) error {
		c := nvme.Command{Opcode: nvme.IOWrite}
		return f.WriteCapsuleCmd(&c, make([]byte, 100))
	})
	for cut := 1; cut < len(b); cut++ {
		f := NewFramer(bytes.NewBuffer(b[:cut]), RoleController, 4096)
		f.HeaderDigest, f.DataDigest = true, true
		h, err := f.ReadHeader()
		if err == nil {
			err = f.ReadData(make([]byte, h.DataLen))
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.Fatalf("cut at %d: got %v, want unexpected EOF", cut, err)
		}
	}
}

// FuzzReadPDU feeds arbitrary bytes to both roles' decoders: they must never
// panic, and whatever they accept must respect the limits they advertise.
func FuzzReadPDU(f *testing.F) {
	f.Add(encodeSeed(func(fr *Framer) error { return fr.WriteICReq(ICReq{MaxR2T: 1}) }, false), false, false)
	f.Add(encodeSeed(func(fr *Framer) error {
		c := nvme.Command{Opcode: 1}
		return fr.WriteCapsuleCmd(&c, []byte("xyz"))
	}, true), true, true)
	f.Add(encodeSeed(func(fr *Framer) error { return fr.WriteH2CData(DataHeader{}, true, []byte{1}) }, false), false, false)
	f.Fuzz(func(t *testing.T, b []byte, hd, dd bool) {
		for _, role := range []Role{RoleController, RoleHost} {
			fr := NewFramer(bytes.NewBuffer(b), role, 4096)
			fr.HeaderDigest, fr.DataDigest = hd, dd
			for i := 0; i < 8; i++ {
				h, err := fr.ReadHeader()
				if err != nil {
					break
				}
				if h.DataLen < 0 || h.DataLen > max(fr.MaxData, fr.MaxCapsuleData, MaxTermReqData+24) {
					t.Fatalf("accepted data length %d", h.DataLen)
				}
				if err := fr.ReadData(make([]byte, h.DataLen)); err != nil && !errors.Is(err, ErrDataDigest) {
					break
				}
			}
		}
	})
}

func encodeSeed(write func(f *Framer) error, digests bool) []byte {
	var buf bytes.Buffer
	f := NewFramer(&buf, RoleHost, 4096)
	f.HeaderDigest, f.DataDigest = digests, digests
	_ = write(f)
	_ = f.Flush()
	return buf.Bytes()
}
