package target

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
	"github.com/nearstore/nearstore/volume"
)

func TestBringUpAndIdentify(t *testing.T) {
	_, addr := startServer(t, Config{}, "mem:16MiB", "mem:4MiB")
	a := adminQueue(t, addr, testNQN)

	capv := a.ok(a.property(false, nvme.PropCAP, true, 0))
	if got := nvme.CAPMaxQueueEntries(uint64(capv.DW0) | uint64(capv.DW1)<<32); got != 1024 {
		t.Fatalf("CAP.MQES+1 = %d, want 1024", got)
	}
	if vs := a.ok(a.property(false, nvme.PropVS, false, 0)).DW0; vs != nvme.Version(1, 3, 0) {
		t.Fatalf("VS %#x", vs)
	}
	in := make([]byte, nvme.IdentifySize)
	a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminIdentify, CDW10: nvme.CNSController}, nil, in, false))
	var id nvme.IdentifyController
	must(t, id.Unmarshal(in))
	if id.SubNQN != testNQN || id.CNTLID != a.cntlid || id.IOCCSZ != (64+16384)/16 || id.IORCSZ != 1 ||
		id.ICDOFF != 0 || id.SGLS&1 == 0 || id.MDTS != 7 || id.CNTRLTYPE != 1 || id.SQES != 0x66 || id.CQES != 0x44 {
		t.Fatalf("identify controller: %+v", id)
	}

	a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminIdentify, CDW10: nvme.CNSActiveNSList}, nil, in, false))
	if binary.LittleEndian.Uint32(in) != 1 || binary.LittleEndian.Uint32(in[4:]) != 2 || binary.LittleEndian.Uint32(in[8:]) != 0 {
		t.Fatalf("active NS list % x", in[:12])
	}
	a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminIdentify, NSID: 2, CDW10: nvme.CNSNamespace}, nil, in, false))
	var ns nvme.IdentifyNamespace
	must(t, ns.Unmarshal(in))
	if ns.NSZE != 4<<20/512 || ns.BlockSize() != 512 || ns.NGUID == [16]byte{} {
		t.Fatalf("identify namespace: %+v", ns)
	}
	a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminIdentify, NSID: 2, CDW10: nvme.CNSNSDescriptors}, nil, in, false))
	ds, err := nvme.UnmarshalNSDescriptors(in)
	must(t, err)
	if len(ds) != 3 || ds[0].Type != nvme.NIDTNGUID || !bytes.Equal(ds[0].ID, ns.NGUID[:]) || ds[1].Type != nvme.NIDTUUID {
		t.Fatalf("descriptors %+v", ds)
	}

	// Another mem volume of the same spec is another (empty) volume, so
	// it gets other identifiers: a host reconnecting to it must not take
	// it for the one it had.
	_, addr2 := startServer(t, Config{}, "mem:16MiB", "mem:4MiB")
	if nguid(t, addr2, 2) == ns.NGUID {
		t.Fatal("two mem volumes of one spec have the same NGUID")
	}

	// An inactive NSID reads as zeroes; NSID 0 is invalid.
	a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminIdentify, NSID: 9, CDW10: nvme.CNSNamespace}, nil, in, false))
	if !bytes.Equal(in, make([]byte, len(in))) {
		t.Fatal("inactive namespace identify is not zeroes")
	}
	if c := a.exec(&nvme.Command{Opcode: nvme.AdminIdentify, CDW10: nvme.CNSNamespace}, nil, in, false); c.Status.Code() != nvme.StatusInvalidNamespace {
		t.Fatalf("NSID 0: %v", c.Status)
	}

	// Features.
	c := a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: nvme.FeatNumQueues, CDW11: 3 | 3<<16}, nil, nil, false))
	if c.DW0 != 3|3<<16 {
		t.Fatalf("number of queues granted %#x", c.DW0)
	}
	c = a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: nvme.FeatNumQueues, CDW11: 99 | 99<<16}, nil, nil, false))
	if c.DW0 != 15|15<<16 {
		t.Fatalf("number of queues capped to %#x, want 15", c.DW0)
	}
	if c := a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminGetFeatures, CDW10: nvme.FeatVolatileWC}, nil, nil, false)); c.DW0 != 1 {
		t.Fatalf("VWC %d", c.DW0)
	}
	if c := a.exec(&nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: 0x55}, nil, nil, false); c.Status.Code() != nvme.StatusInvalidField {
		t.Fatalf("unknown feature: %v", c.Status)
	}

	// Log pages.
	smart := make([]byte, 512)
	a.ok(a.exec(logPage(nvme.LogSMART, 512), nil, smart, false))
	if smart[3] != 100 {
		t.Fatalf("SMART available spare %d", smart[3])
	}
	if c := a.exec(logPage(0x42, 512), nil, smart, false); c.Status.Code() != nvme.StatusInvalidField {
		t.Fatalf("unknown log page: %v", c.Status)
	}
}

func logPage(lid uint8, n int) *nvme.Command {
	var cmd nvme.Command
	(&nvme.GetLogPageCommand{LID: lid, Length: n}).ToCommand(&cmd)
	return &cmd
}

func TestIO(t *testing.T) {
	for _, tc := range []struct {
		name    string
		digests uint8
	}{{"plain", 0}, {"digests", tcp.DigestHeader | tcp.DigestData}} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := startServer(t, Config{C2HChunk: 32 << 10})
			a := adminQueue(t, addr, testNQN)
			q := ioQueue(t, addr, a, 1, tc.digests)

			small := pattern(4096, 1)
			q.ok(q.exec(rw(nvme.IOWrite, 1, 10, 8), small, nil, true)) // in-capsule
			big := pattern(512<<10, 2)
			q.ok(q.exec(rw(nvme.IOWrite, 1, 100, 1024), big, nil, false)) // R2T, H2C split at MAXH2CDATA
			if got := readBack(t, q, 10, 8); !bytes.Equal(got, small) {
				t.Fatal("in-capsule write did not read back")
			}
			if got := readBack(t, q, 100, 1024); !bytes.Equal(got, big) { // C2H split at 32 KiB
				t.Fatal("R2T write did not read back")
			}

			// Write Zeroes, then Dataset Management deallocate.
			q.ok(q.exec(rw(nvme.IOWriteZeroes, 1, 100, 16), nil, nil, false))
			if got := readBack(t, q, 100, 17); !bytes.Equal(got[:16*512], make([]byte, 16*512)) || !bytes.Equal(got[16*512:], big[16*512:17*512]) {
				t.Fatal("write zeroes touched the wrong blocks")
			}
			rng := make([]byte, 16)
			binary.LittleEndian.PutUint32(rng[4:], 8)
			binary.LittleEndian.PutUint64(rng[8:], 10)
			q.ok(q.exec(&nvme.Command{Opcode: nvme.IODSM, NSID: 1, CDW10: 0, CDW11: 1 << 2}, rng, nil, true))
			if got := readBack(t, q, 10, 8); !bytes.Equal(got, make([]byte, 4096)) {
				t.Fatal("deallocated blocks do not read as zeroes")
			}
			// Linux sends a whole 4 KiB range buffer whatever NR says; only
			// the NR+1 ranges named count (the rest here would be out of range).
			full := make([]byte, 4096)
			copy(full, dsmRange(200, 4))
			for i := 16; i < len(full); i += 16 {
				copy(full[i:], dsmRange(^uint64(0)>>1, 1))
			}
			q.ok(q.exec(rw(nvme.IOWrite, 1, 199, 6), pattern(3072, 6), nil, true))
			q.ok(q.exec(&nvme.Command{Opcode: nvme.IODSM, NSID: 1, CDW10: 0, CDW11: 1 << 2}, full, nil, true))
			got := readBack(t, q, 199, 6)
			if !bytes.Equal(got[512:5*512], make([]byte, 4*512)) || !bytes.Equal(got[:512], pattern(3072, 6)[:512]) || !bytes.Equal(got[5*512:], pattern(3072, 6)[5*512:]) {
				t.Fatal("DSM with a 4 KiB range buffer deallocated the wrong blocks")
			}
			q.ok(q.exec(&nvme.Command{Opcode: nvme.IOFlush, NSID: 1}, nil, nil, false))
		})
	}
}

// TestBadCommands checks that each bad command gets the status the spec
// names and writes nothing.
func TestBadCommands(t *testing.T) {
	_, addr := startServer(t, Config{})
	a := adminQueue(t, addr, testNQN)
	q := ioQueue(t, addr, a, 1, 0)
	const blocks = 16 << 20 / 512
	sentinel := pattern(512, 9)
	q.ok(q.exec(rw(nvme.IOWrite, 1, blocks-1, 1), sentinel, nil, true))

	for _, tc := range []struct {
		name string
		cmd  *nvme.Command
		out  []byte
		in   []byte
		want nvme.Status
	}{
		{"write past the end", rw(nvme.IOWrite, 1, blocks-1, 2), make([]byte, 1024), nil, nvme.StatusLBAOutOfRange},
		{"read past the end", rw(nvme.IORead, 1, blocks, 1), nil, make([]byte, 512), nvme.StatusLBAOutOfRange},
		{"LBA that would wrap", rw(nvme.IORead, 1, ^uint64(0), 2), nil, make([]byte, 1024), nvme.StatusLBAOutOfRange},
		{"unknown namespace", rw(nvme.IORead, 7, 0, 1), nil, make([]byte, 512), nvme.StatusInvalidNamespace},
		{"unknown opcode", &nvme.Command{Opcode: 0x7E, NSID: 1}, nil, nil, nvme.StatusInvalidOpcode},
		{"vendor opcode", &nvme.Command{Opcode: 0x99, NSID: 1}, nil, nil, nvme.StatusInvalidOpcode},
		{"longer than MDTS", rw(nvme.IORead, 1, 0, 2048), nil, make([]byte, 1<<20), nvme.StatusInvalidField},
		{"SGL shorter than the blocks", &nvme.Command{Opcode: nvme.IOWrite, NSID: 1, CDW12: 1}, make([]byte, 512), nil, nvme.StatusSGLDataLenInvalid},
		{"DSM range past the end", &nvme.Command{Opcode: nvme.IODSM, NSID: 1, CDW11: 1 << 2}, dsmRange(blocks-1, 2), nil, nvme.StatusLBAOutOfRange},
		{"DSM data shorter than its ranges", &nvme.Command{Opcode: nvme.IODSM, NSID: 1, CDW10: 1, CDW11: 1 << 2}, dsmRange(0, 1), nil, nvme.StatusSGLDataLenInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := q.exec(tc.cmd, tc.out, tc.in, tc.out != nil && len(tc.out) <= 4096)
			if c.Status.Code() != tc.want || !c.Status.DoNotRetry() {
				t.Fatalf("status %v, want %v with DNR", c.Status, tc.want)
			}
		})
	}
	if got := readBack(t, q, blocks-1, 1); !bytes.Equal(got, sentinel) {
		t.Fatal("a failed command changed the last block")
	}
	// The error log remembers the failures, newest first.
	elog := make([]byte, 64*64)
	a.ok(a.exec(logPage(nvme.LogError, len(elog)), nil, elog, false))
	if binary.LittleEndian.Uint64(elog) < 9 || binary.LittleEndian.Uint16(elog[8:]) != 1 {
		t.Fatalf("error log head: count %d sqid %d", binary.LittleEndian.Uint64(elog), binary.LittleEndian.Uint16(elog[8:]))
	}

	// A CID already in flight conflicts. Park a write waiting for its R2T
	// data, then reuse its CID.
	held := rw(nvme.IOWrite, 1, 0, 8)
	held.CID = 500
	held.DPTR = nvme.SGL{Length: 4096, Type: nvme.SGLTransportDataBlock}
	q.send(held, nil)
	if h := q.recv(); h.Type != tcp.TypeR2T {
		t.Fatalf("want R2T, got %#x", h.Type)
	}
	dup := rw(nvme.IORead, 1, 0, 1)
	dup.CID = 500
	dup.DPTR = nvme.SGL{Length: 512, Type: nvme.SGLTransportDataBlock}
	q.send(dup, nil)
	if c := q.recv().Completion(); c.CID != 500 || c.Status.Code() != nvme.StatusCIDConflict {
		t.Fatalf("duplicate CID: %v", c.Status)
	}
}

func dsmRange(slba uint64, nlb uint32) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint32(b[4:], nlb)
	binary.LittleEndian.PutUint64(b[8:], slba)
	return b
}

func TestConnectErrors(t *testing.T) {
	_, addr := startServer(t, Config{})
	a := adminQueue(t, addr, testNQN)
	for _, tc := range []struct {
		name   string
		nqn    string
		qid    uint16
		sqsize uint16
		cntlid uint16
		want   nvme.Status
	}{
		{"unknown subsystem", "nqn.2026-11.io.nearstore:nope", 0, 31, 0xFFFF, nvme.StatusConnectInvalidParameters},
		{"admin queue naming a controller", testNQN, 0, 31, 5, nvme.StatusConnectInvalidParameters},
		{"queue too deep", testNQN, 0, 4096, 0xFFFF, nvme.StatusConnectInvalidParameters},
		{"I/O queue of an unknown controller", testNQN, 1, 31, 999, nvme.StatusConnectInvalidParameters},
		{"I/O queue beyond those granted", testNQN, 17, 31, 0, nvme.StatusConnectInvalidParameters},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, addr, 0)
			cntlid := tc.cntlid
			if cntlid == 0 {
				cntlid = a.cntlid
			}
			c := r.connect(tc.nqn, tc.qid, tc.sqsize, cntlid, 0)
			if c.Status.Code() != tc.want {
				t.Fatalf("status %v, want %v", c.Status, tc.want)
			}
		})
	}
	t.Run("command before connect", func(t *testing.T) {
		r := dialRaw(t, addr, 0)
		c := r.exec(&nvme.Command{Opcode: nvme.AdminKeepAlive}, nil, nil, false)
		if c.Status.Code() != nvme.StatusCommandSequence {
			t.Fatalf("status %v", c.Status)
		}
	})
	t.Run("admin before enable", func(t *testing.T) {
		r := dialRaw(t, addr, 0)
		r.ok(r.connect(testNQN, 0, 31, 0xFFFF, 0))
		c := r.exec(&nvme.Command{Opcode: nvme.AdminIdentify, CDW10: 1}, nil, make([]byte, 4096), false)
		if c.Status.Code() != nvme.StatusCommandSequence {
			t.Fatalf("status %v", c.Status)
		}
		// And an I/O queue cannot join a controller that is not ready.
		q := dialRaw(t, addr, 0)
		if c := q.connect(testNQN, 1, 31, r.cntlid, 0); c.Status.Code() != nvme.StatusCommandSequence {
			t.Fatalf("I/O connect to disabled controller: %v", c.Status)
		}
	})
	t.Run("queue connected twice", func(t *testing.T) {
		ioQueue(t, addr, a, 2, 0)
		r := dialRaw(t, addr, 0)
		if c := r.connect(testNQN, 2, 31, a.cntlid, 0); c.Status.Code() != nvme.StatusConnectInvalidParameters {
			t.Fatalf("status %v", c.Status)
		}
	})
}

// TestFatalPDUs sends malformed PDUs: each ends its connection with a
// C2HTermReq naming the fault, and a second host keeps working throughout.
func TestFatalPDUs(t *testing.T) {
	_, addr := startServer(t, Config{})
	bystander := adminQueue(t, addr, testNQN)
	bq := ioQueue(t, addr, bystander, 1, 0)
	data := pattern(4096, 5)
	bq.ok(bq.exec(rw(nvme.IOWrite, 1, 0, 8), data, nil, true))

	raw := func(b []byte) func(r *rawHost) {
		return func(r *rawHost) {
			_, err := r.conn.Write(b)
			must(t, err)
		}
	}
	hdr := func(typ, flags, hlen, pdo uint8, plen uint32) []byte {
		b := make([]byte, plen)
		b[0], b[1], b[2], b[3] = typ, flags, hlen, pdo
		binary.LittleEndian.PutUint32(b[4:], plen)
		return b
	}
	for _, tc := range []struct {
		name string
		do   func(r *rawHost)
		fes  uint16
	}{
		{"unknown PDU type", raw(hdr(0x0f, 0, 24, 0, 24)), tcp.FESInvalidHeaderField},
		{"controller-to-host PDU", raw(hdr(tcp.TypeR2T, 0, 24, 0, 24)), tcp.FESInvalidHeaderField},
		{"wrong HLEN", raw(hdr(tcp.TypeCapsuleCmd, 0, 64, 0, 72)), tcp.FESInvalidHeaderField},
		{"second ICReq", raw(hdr(tcp.TypeICReq, 0, 128, 0, 128)), tcp.FESPDUSequenceError},
		{"H2CData for no transfer", raw(hdr(tcp.TypeH2CData, tcp.FlagLastPDU, 24, 24, 24+8)), tcp.FESInvalidHeaderField},
		{"H2CData out of order", func(r *rawHost) {
			w := rw(nvme.IOWrite, 1, 0, 16)
			w.CID = 1
			w.DPTR = nvme.SGL{Length: 8192, Type: nvme.SGLTransportDataBlock}
			r.send(w, nil)
			d := r.recv().Data()
			must(t, r.f.WriteH2CData(tcp.DataHeader{CCCID: 1, TTag: d.TTag, Offset: 4096}, true, make([]byte, 4096)))
			must(t, r.f.Flush())
		}, tcp.FESDataOutOfRange},
		{"H2CData past the R2T", func(r *rawHost) {
			w := rw(nvme.IOWrite, 1, 0, 8)
			w.CID = 1
			w.DPTR = nvme.SGL{Length: 4096, Type: nvme.SGLTransportDataBlock}
			r.send(w, nil)
			d := r.recv().Data()
			must(t, r.f.WriteH2CData(tcp.DataHeader{CCCID: 1, TTag: d.TTag}, true, make([]byte, 8192)))
			must(t, r.f.Flush())
		}, tcp.FESDataOutOfRange},
		{"queue overrun", func(r *rawHost) {
			// Depth 4 (SQSIZE 3): park four writes waiting for data, then a fifth.
			for cid := uint16(1); cid <= 5; cid++ {
				w := rw(nvme.IOWrite, 1, 0, 8)
				w.CID = cid
				w.DPTR = nvme.SGL{Length: 4096, Type: nvme.SGLTransportDataBlock}
				r.send(w, nil)
			}
		}, tcp.FESPDUSequenceError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, addr, 0)
			sq := uint16(127)
			if tc.name == "queue overrun" {
				sq = 3
			}
			r.ok(r.connect(testNQN, 0, 31, 0xFFFF, 0))
			r.ok(r.property(true, nvme.PropCC, false, nvme.CCEnable|6<<16|4<<20))
			q := dialRaw(t, addr, 0)
			q.ok(q.connect(testNQN, 1, sq, r.cntlid, 0))
			tc.do(q)
			q.expectTerm(tc.fes)
			// The bystander still reads what it wrote; no stray write landed.
			if got := readBack(t, bq, 0, 8); !bytes.Equal(got, data) {
				t.Fatal("bystander's data changed")
			}
		})
	}
}

// TestHostVanishes drops a connection in the middle of a write's data: the
// write must never be executed, and the target must keep serving.
func TestHostVanishes(t *testing.T) {
	_, addr := startServer(t, Config{})
	a := adminQueue(t, addr, testNQN)
	q := ioQueue(t, addr, a, 1, 0)
	before := readBack(t, q, 64, 64)

	r := dialRaw(t, addr, 0)
	r.ok(r.connect(testNQN, 0, 31, 0xFFFF, 0))
	r.ok(r.property(true, nvme.PropCC, false, nvme.CCEnable|6<<16|4<<20))
	w := dialRaw(t, addr, 0)
	w.ok(w.connect(testNQN, 1, 31, r.cntlid, 0))
	cmd := rw(nvme.IOWrite, 1, 64, 64)
	cmd.CID = 1
	cmd.DPTR = nvme.SGL{Length: 64 * 512, Type: nvme.SGLTransportDataBlock}
	w.send(cmd, nil)
	d := w.recv().Data()
	must(t, w.f.WriteH2CData(tcp.DataHeader{CCCID: 1, TTag: d.TTag}, false, pattern(16<<10, 3)))
	must(t, w.f.Flush())
	w.conn.Close()
	r.conn.Close()

	// Another write from a live host goes through and nothing else changed.
	q.ok(q.exec(rw(nvme.IOWrite, 1, 0, 1), pattern(512, 4), nil, true))
	if got := readBack(t, q, 64, 64); !bytes.Equal(got, before) {
		t.Fatal("a half-transferred write reached the volume")
	}
}

func TestDataDigestErrorIsNotFatal(t *testing.T) {
	_, addr := startServer(t, Config{})
	a := adminQueue(t, addr, testNQN)
	q := ioQueue(t, addr, a, 1, tcp.DigestHeader|tcp.DigestData)
	before := readBack(t, q, 0, 8)
	// Frame a capsule with a good digest, then damage one data byte.
	var buf bytes.Buffer
	f := tcp.NewFramer(&buf, tcp.RoleHost, 4096)
	f.HeaderDigest, f.DataDigest = true, true
	cmd := rw(nvme.IOWrite, 1, 0, 8)
	cmd.CID, cmd.Flags = 77, nvme.PSDTSGL
	cmd.DPTR = nvme.SGL{Length: 4096, Type: nvme.SGLDataBlockOffset}
	must(t, f.WriteCapsuleCmd(cmd, pattern(4096, 8)))
	must(t, f.Flush())
	b := buf.Bytes()
	b[len(b)-100] ^= 0xff
	_, err := q.conn.Write(b)
	must(t, err)
	if c := q.recv().Completion(); c.CID != 77 || c.Status.Code() != nvme.StatusTransientTransport {
		t.Fatalf("completion %+v", c)
	}
	if got := readBack(t, q, 0, 8); !bytes.Equal(got, before) {
		t.Fatal("data with a bad digest was written")
	}
}

func TestKeepAliveTimeout(t *testing.T) {
	_, addr := startServer(t, Config{})
	r := dialRaw(t, addr, 0)
	// KATO 1 s: Keep Alives every 50 ms stay far inside it however
	// loaded the machine, and the silence after still ends it soon.
	r.ok(r.connect(testNQN, 0, 31, 0xFFFF, 1000))
	r.ok(r.property(true, nvme.PropCC, false, nvme.CCEnable|6<<16|4<<20))
	// Keep Alive keeps it up while sent.
	for i := 0; i < 5; i++ {
		r.ok(r.exec(&nvme.Command{Opcode: nvme.AdminKeepAlive}, nil, nil, false))
		time.Sleep(50 * time.Millisecond)
	}
	// Then silence: the target must drop the controller.
	_ = r.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.f.ReadHeader(); err == nil {
		t.Fatal("connection still up after the keep-alive timeout")
	}
}

// TestTrafficKeepsControllerAlive: with Traffic Based Keep Alive, any
// command on any of the controller's queues counts as keep-alive traffic:
// reads on an I/O queue keep the controller up for well past KATO with no
// Keep Alive command, and the silence after them still ends it.
func TestTrafficKeepsControllerAlive(t *testing.T) {
	_, addr := startServer(t, Config{})
	a := dialRaw(t, addr, 0)
	// KATO 1 s, a read every 50 ms: far inside it however loaded the
	// machine, and 40 reads span twice KATO.
	a.ok(a.connect(testNQN, 0, 31, 0xFFFF, 1000))
	a.ok(a.property(true, nvme.PropCC, false, nvme.CCEnable|6<<16|4<<20))
	q := ioQueue(t, addr, a, 1, 0)
	for i := 0; i < 40; i++ {
		q.ok(q.exec(rw(nvme.IORead, 1, 0, 1), nil, make([]byte, 512), false))
		time.Sleep(50 * time.Millisecond)
	}
	// The admin queue, silent all along, is still up.
	a.ok(a.property(false, nvme.PropCSTS, false, 0))
	// Then silence: the target must drop the controller, and with it the
	// I/O queue.
	_ = a.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.f.ReadHeader(); err == nil {
		t.Fatal("admin queue still up after the keep-alive timeout")
	}
	_ = q.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := q.f.ReadHeader(); err == nil {
		t.Fatal("I/O queue still up after the keep-alive timeout")
	}
}

func TestAsyncEventNamespaceAdded(t *testing.T) {
	s, addr := startServer(t, Config{})
	a := adminQueue(t, addr, testNQN)
	a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: nvme.FeatAsyncEventConfig, CDW11: aenNamespaceAttr}, nil, nil, false))
	aer := &nvme.Command{Opcode: nvme.AdminAsyncEvent, CID: 900}
	a.send(aer, nil)
	v, err := volume.Open("mem:1MiB")
	must(t, err)
	nsid, err := s.AddNamespace(testNQN, NamespaceConfig{Backend: v, Name: "added"})
	must(t, err)
	c := a.recv().Completion()
	if c.CID != 900 || c.DW0 != aenNoticeNSChanged {
		t.Fatalf("AER completion %+v", c)
	}
	page := make([]byte, 4096)
	a.ok(a.exec(logPage(nvme.LogChangedNS, 4096), nil, page, false))
	if binary.LittleEndian.Uint32(page) != nsid {
		t.Fatalf("changed NS list starts with %d, want %d", binary.LittleEndian.Uint32(page), nsid)
	}
}

func TestDiscovery(t *testing.T) {
	_, addr := startServer(t, Config{})
	r := dialRaw(t, addr, 0)
	r.ok(r.connect(nvme.DiscoveryNQN, 0, 31, 0xFFFF, 0))
	r.ok(r.property(true, nvme.PropCC, false, nvme.CCEnable))
	in := make([]byte, 4096)
	r.ok(r.exec(&nvme.Command{Opcode: nvme.AdminIdentify, CDW10: nvme.CNSController}, nil, in, false))
	var id nvme.IdentifyController
	must(t, id.Unmarshal(in))
	if id.CNTRLTYPE != 2 || id.SubNQN != nvme.DiscoveryNQN {
		t.Fatalf("discovery identify: type %d nqn %s", id.CNTRLTYPE, id.SubNQN)
	}
	log := make([]byte, 2048)
	r.ok(r.exec(logPage(nvme.LogDiscovery, len(log)), nil, log, false))
	_, n, entries, err := nvme.UnmarshalDiscoveryLog(log)
	must(t, err)
	_, port, _ := net.SplitHostPort(addr)
	if n != 1 || len(entries) != 1 || entries[0].SubNQN != testNQN || entries[0].TrSvcID != port || entries[0].TrType != nvme.TrTypeTCP {
		t.Fatalf("discovery log: %d %+v", n, entries)
	}
	// I/O commands are not for a discovery controller.
	if c := r.exec(&nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: nvme.FeatNumQueues}, nil, nil, false); c.Status.OK() {
		t.Fatal("discovery controller granted I/O queues")
	}
}

// TestGracefulShutdown: completed writes are flushed, Shutdown returns, and
// a write still waiting for its data is dropped.
func TestGracefulShutdown(t *testing.T) {
	s, addr := startServer(t, Config{})
	a := adminQueue(t, addr, testNQN)
	q := ioQueue(t, addr, a, 1, 0)
	q.ok(q.exec(rw(nvme.IOWrite, 1, 0, 8), pattern(4096, 1), nil, true))
	parked := rw(nvme.IOWrite, 1, 8, 8)
	parked.CID = 999
	parked.DPTR = nvme.SGL{Length: 4096, Type: nvme.SGLTransportDataBlock}
	q.send(parked, nil)
	if h := q.recv(); h.Type != tcp.TypeR2T {
		t.Fatalf("want R2T, got %#x", h.Type)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, s.Shutdown(ctx))
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
	if _, err := q.f.ReadHeader(); err == nil {
		t.Fatal("connection open after Shutdown")
	}
	if err := s.Serve(nil); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
}

// nguid returns namespace nsid's NGUID as the target at addr reports it.
func nguid(t *testing.T, addr string, nsid uint32) [16]byte {
	t.Helper()
	a := adminQueue(t, addr, testNQN)
	in := make([]byte, nvme.IdentifySize)
	a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminIdentify, NSID: nsid, CDW10: nvme.CNSNamespace}, nil, in, false))
	var ns nvme.IdentifyNamespace
	must(t, ns.Unmarshal(in))
	return ns.NGUID
}

// TestStableIdentifiers: a namespace's identifiers come back whenever the
// same volume is served under the same name again (a file volume by its
// spec; a RAM volume only as the same object, since its bytes die with
// it), and differ for another volume.
func TestStableIdentifiers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vol.img")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := func(v volume.Volume, name string) string {
		_, addr := startServer(t, Config{Subsystems: []SubsystemConfig{{NQN: testNQN, Namespaces: []NamespaceConfig{{Backend: v, Name: name}}}}})
		return addr
	}
	open := func(spec string) volume.Volume {
		v, err := volume.Open(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		return v
	}
	fileSpec := "file:" + path
	mem := open("mem:4MiB")
	for _, tc := range []struct {
		name string
		a, b func() string // two servings
		same bool
	}{
		{"file, served twice", func() string { return serve(open(fileSpec), fileSpec) }, func() string { return serve(open(fileSpec), fileSpec) }, true},
		{"mem, the same object served twice", func() string { return serve(mem, "mem:4MiB") }, func() string { return serve(mem, "mem:4MiB") }, true},
		{"mem, two objects of one spec", func() string { return serve(open("mem:4MiB"), "mem:4MiB") }, func() string { return serve(open("mem:4MiB"), "mem:4MiB") }, false},
		{"file, another name", func() string { return serve(open(fileSpec), fileSpec) }, func() string { return serve(open(fileSpec), fileSpec+"?bs=512") }, false},
	} {
		a, b := nguid(t, tc.a(), 1), nguid(t, tc.b(), 1)
		if (a == b) != tc.same {
			t.Errorf("%s: NGUIDs %x and %x, want same=%v", tc.name, a, b, tc.same)
		}
	}
}
