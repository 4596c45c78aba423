package nvme

import (
	"bytes"
	"errors"
	"testing"
)

func TestCommandRoundTrip(t *testing.T) {
	c := Command{Opcode: IORead, Flags: PSDTSGL, CID: 0xBEEF, NSID: 7, CDW2: 2, CDW3: 3, MPTR: 1 << 40,
		DPTR: SGL{Address: 99, Length: 4096, Type: SGLTransportDataBlock}, CDW13: 13, CDW14: 14, CDW15: 15}
	c.SetLBA(0x1_0000_0005, 65536)
	var b [CommandSize]byte
	c.Marshal(b[:])
	// Spot-check spec offsets: opcode, CID, NSID, SGL type byte, SLBA, NLB.
	if b[0] != IORead || b[2] != 0xEF || b[3] != 0xBE || b[4] != 7 || b[39] != SGLTransportDataBlock || b[40] != 5 || b[44] != 1 || b[48] != 0xff || b[49] != 0xff {
		t.Fatalf("layout: % x", b)
	}
	var d Command
	if err := d.Unmarshal(b[:]); err != nil {
		t.Fatal(err)
	}
	if d != c || d.SLBA() != 0x1_0000_0005 || d.NLB() != 65536 {
		t.Fatalf("round trip %+v", d)
	}
	if err := d.Unmarshal(b[:63]); !errors.Is(err, ErrShort) {
		t.Fatalf("short: %v", err)
	}
}

func TestCompletionStatus(t *testing.T) {
	c := Completion{DW0: 1, DW1: 2, SQHead: 3, SQID: 4, CID: 5, Status: StatusLBAOutOfRange | DNR}
	var b [CompletionSize]byte
	c.Marshal(b[:])
	// Status sits in bits 15:1 of bytes 14-15: SC 0x80 -> 0x100, DNR -> bit 15.
	if b[14] != 0x00 || b[15] != 0x81 {
		t.Fatalf("status bytes % x", b[14:])
	}
	var d Completion
	if err := d.Unmarshal(b[:]); err != nil || d != c {
		t.Fatalf("round trip %+v %v", d, err)
	}
	for _, tc := range []struct {
		s         Status
		sct, sc   uint8
		ok, dnr   bool
		substring string
	}{
		{StatusSuccess, 0, 0, true, false, "success"},
		{StatusInvalidOpcode | DNR, 0, 1, false, true, "invalid command opcode"},
		{StatusConnectInvalidParameters, 1, 0x82, false, false, "connect: invalid parameters"},
		{StatusMediaReadError, 2, 0x81, false, false, "unrecovered read error"},
		{Status(0x7ff), 7, 0xff, false, false, "status"},
	} {
		if tc.s.SCT() != tc.sct || tc.s.SC() != tc.sc || tc.s.OK() != tc.ok || tc.s.DoNotRetry() != tc.dnr {
			t.Errorf("%v: sct %d sc %#x ok %v dnr %v", tc.s, tc.s.SCT(), tc.s.SC(), tc.s.OK(), tc.s.DoNotRetry())
		}
		if !bytes.Contains([]byte(tc.s.String()), []byte(tc.substring)) {
			t.Errorf("%v does not name %q", tc.s, tc.substring)
		}
	}
	err := error(&StatusError{Status: StatusLBAOutOfRange | DNR, Opcode: IOWrite})
	if !errors.Is(err, &StatusError{Status: StatusLBAOutOfRange}) || errors.Is(err, &StatusError{Status: StatusInvalidField}) {
		t.Fatal("StatusError.Is should match on the status code alone")
	}
}

func TestIdentifyRoundTrip(t *testing.T) {
	id := IdentifyController{VID: 1, Serial: "SN1", Model: "nearstore", Firmware: "0.1", MDTS: 7, CNTLID: 9,
		Version: Version(1, 3, 0), CNTRLTYPE: 1, SQES: 0x66, CQES: 0x44, MAXCMD: 1024, NN: 4, ONCS: ONCSDSM,
		SGLS: 1, SubNQN: "nqn.x", IOCCSZ: 1028, IORCSZ: 1, MSDBD: 1, KAS: 1, VendorString: "v"}
	b := id.Marshal()
	// Offsets from the spec: SN at 4 (space padded), MDTS 77, SUBNQN 768, IOCCSZ 1792.
	if string(b[4:8]) != "SN1 " || b[77] != 7 || string(b[768:773]) != "nqn.x" || b[1792] != 0x04 || b[1793] != 0x04 {
		t.Fatal("identify controller layout")
	}
	var got IdentifyController
	if err := got.Unmarshal(b); err != nil || got != id {
		t.Fatalf("round trip %+v %v", got, err)
	}
	ns := IdentifyNamespace{NSZE: 1 << 30, NCAP: 1 << 30, NUSE: 5, NSFEAT: 5, NMIC: 1, DLFEAT: 9, LBADS: 12, NGUID: [16]byte{1}}
	var gotNS IdentifyNamespace
	if err := gotNS.Unmarshal(ns.Marshal()); err != nil || gotNS != ns || gotNS.BlockSize() != 4096 {
		t.Fatalf("namespace round trip %+v %v", gotNS, err)
	}
	bad := ns.Marshal()
	bad[130] = 40 // a 2^40-byte block
	if err := gotNS.Unmarshal(bad); err == nil {
		t.Fatal("absurd LBA data size accepted")
	}
}

func TestFabricsRoundTrip(t *testing.T) {
	cd := ConnectData{HostID: [16]byte{9}, CNTLID: 0xFFFF, SubNQN: "nqn.sub", HostNQN: "nqn.host"}
	var got ConnectData
	if err := got.Unmarshal(cd.Marshal()); err != nil || got != cd {
		t.Fatalf("connect data %+v %v", got, err)
	}
	var cmd Command
	cc := ConnectCommand{QID: 3, SQSize: 127, CAttr: 4, KATO: 5000}
	cc.ToCommand(&cmd)
	var gotCC ConnectCommand
	gotCC.FromCommand(&cmd)
	if gotCC != cc || cmd.FabricsType() != FabricsConnect || cmd.Opcode != AdminFabrics {
		t.Fatalf("connect command %+v", gotCC)
	}
	entries := []DiscoveryEntry{{TrType: TrTypeTCP, AdrFam: AdrFamIPv4, SubType: SubTypeNVM, PortID: 1, CNTLID: 0xFFFF, TrSvcID: "4420", SubNQN: "nqn.a", TrAddr: "10.0.0.1"}}
	gen, n, es, err := UnmarshalDiscoveryLog(MarshalDiscoveryLog(7, entries))
	if err != nil || gen != 7 || n != 1 || len(es) != 1 || es[0] != entries[0] {
		t.Fatalf("discovery log %d %d %+v %v", gen, n, es, err)
	}
	g := GetLogPageCommand{LID: LogSMART, RAE: true, Length: 512, Offset: 4096}
	g.ToCommand(&cmd)
	var gotG GetLogPageCommand
	gotG.FromCommand(&cmd)
	if gotG != g {
		t.Fatalf("get log page %+v", gotG)
	}
}

// FuzzDecoders runs every decoder of controller- or host-supplied bytes on
// arbitrary input: none may panic, and the decoded structures must survive
// a re-encode.
func FuzzDecoders(f *testing.F) {
	f.Add(make([]byte, 4096))
	f.Add(MarshalDiscoveryLog(1, []DiscoveryEntry{{SubNQN: "x"}}))
	f.Add(MarshalNSDescriptors([]NSDescriptor{{Type: NIDTNGUID, ID: make([]byte, 16)}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Command
		if c.Unmarshal(b) == nil {
			var out [CommandSize]byte
			c.Marshal(out[:])
			want := append([]byte(nil), b[:CommandSize]...)
			want[36], want[37], want[38] = 0, 0, 0 // SGL reserved bytes are written as zero
			if !bytes.Equal(out[:], want) {
				t.Fatalf("command re-encode differs:\n% x\n% x", out, want)
			}
		}
		var cq Completion
		_ = cq.Unmarshal(b)
		var id IdentifyController
		_ = id.Unmarshal(b)
		var ns IdentifyNamespace
		_ = ns.Unmarshal(b)
		var cd ConnectData
		_ = cd.Unmarshal(b)
		_, _ = UnmarshalNSDescriptors(b)
		_, _, es, _ := UnmarshalDiscoveryLog(b)
		if len(es)*DiscoveryLogEntrySize > len(b) {
			t.Fatalf("%d discovery entries from %d bytes", len(es), len(b))
		}
	})
}
