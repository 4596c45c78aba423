package target

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
	"github.com/nearstore/nearstore/volume"
)

// These tests cover the reader running reads and writes of in-memory
// backends itself and deferring their completions to one flush when its
// input runs dry. What they assert is that every completion arrives; a
// completion stranded in the buffer shows up as a read timing out.

func TestRunsInline(t *testing.T) {
	open := func(spec string) *namespace {
		v, err := volume.Open(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		return &namespace{backend: v, lbaShift: 9, blocks: uint64(v.Size() >> 9)}
	}
	mem, sim := open("mem:4MiB"), open("sim:nand:4MiB")
	io := ioCommands()
	for _, tc := range []struct {
		ns   *namespace
		op   uint8
		nlb  uint32
		want bool
	}{
		{mem, nvme.IORead, 8, true},
		{mem, nvme.IOWrite, 8, true},
		{mem, nvme.IORead, inlineMaxBytes >> 9, true},
		{mem, nvme.IORead, inlineMaxBytes>>9 + 1, false},
		{mem, nvme.IOFlush, 0, false},
		{mem, nvme.IOWriteZeroes, 8, false},
		{sim, nvme.IORead, 8, false},
		{sim, nvme.IOWrite, 8, false},
		{nil, nvme.IOFlush, 0, false},
	} {
		r := &request{sqe: *rw(tc.op, 1, 0, tc.nlb), ns: tc.ns, spec: io[tc.op]}
		if got := runsInline(r); got != tc.want {
			t.Errorf("op %#x nlb %d on %v: runsInline %v, want %v", tc.op, tc.nlb, tc.ns != nil && tc.ns == mem, got, tc.want)
		}
	}
}

// TestInlineLoneCommand sends one command at a time and waits for its
// completion: nothing else would push a completion left in the buffer out,
// so each exec fails at the deadline if the reader did not flush before it
// went back to waiting for input.
func TestInlineLoneCommand(t *testing.T) {
	_, addr := startServer(t, Config{}, "mem:16MiB", "sim:nand:16MiB?read_lat=0&write_lat=0")
	admin := adminQueue(t, addr, testNQN)
	io := ioQueue(t, addr, admin, 1, 0)
	_ = io.conn.SetDeadline(time.Now().Add(10 * time.Second))
	for _, nsid := range []uint32{1, 2} {
		for _, nlb := range []uint32{1, 8, 128, 1024} { // in-capsule, R2T, and beyond inlineMaxBytes
			t.Run(fmt.Sprintf("ns%d/%dblocks", nsid, nlb), func(t *testing.T) {
				io.t = t
				data := pattern(int(nlb)*512, byte(nlb)+byte(nsid))
				// Writes of up to 16 KiB go in the capsule, larger ones
				// by R2T: the deferred R2T must leave before the reader
				// waits for its data.
				io.ok(io.exec(rw(nvme.IOWrite, nsid, 64, nlb), data, nil, len(data) <= 16<<10))
				got := make([]byte, len(data))
				io.ok(io.exec(rw(nvme.IORead, nsid, 64, nlb), nil, got, false))
				if !bytes.Equal(got, data) {
					t.Fatal("read back differs from what was written")
				}
				// Error completions: one the reader sends while parsing,
				// one from execution (a data length that does not match
				// the blocks, which a mem read finds inline).
				c := io.exec(rw(nvme.IORead, nsid, 1<<40, 1), nil, make([]byte, 512), false)
				if c.Status.Code() != nvme.StatusLBAOutOfRange {
					t.Fatalf("read beyond the end: status %v", c.Status)
				}
				c = io.exec(rw(nvme.IORead, nsid, 0, 1), nil, make([]byte, 1024), false)
				if c.Status.Code() != nvme.StatusSGLDataLenInvalid {
					t.Fatalf("read with the wrong data length: status %v", c.Status)
				}
			})
		}
	}
}

// TestInlineBurstMixed sends a burst of commands in one write, mixing reads
// and writes the reader runs inline (mem) with ones that run on goroutines
// (sim, Flush, and large transfers), and checks that every one completes
// exactly once with the right data.
func TestInlineBurstMixed(t *testing.T) {
	_, addr := startServer(t, Config{}, "mem:16MiB", "sim:nand:16MiB?read_lat=200us&write_lat=300us")
	admin := adminQueue(t, addr, testNQN)
	io := ioQueue(t, addr, admin, 1, 0)
	_ = io.conn.SetDeadline(time.Now().Add(20 * time.Second))

	type op struct {
		cmd  nvme.Command
		data []byte // written, or expected back
	}
	var ops []op
	for i := range 120 {
		nsid := uint32(1 + i%2)
		nlb := uint32(1 + i%8)
		if i%17 == 0 {
			nlb = 512 // 256 KiB: a goroutine even on mem
		}
		c := rw(nvme.IOWrite, nsid, uint64(i)*256, nlb)
		if i%11 == 0 {
			c = &nvme.Command{Opcode: nvme.IOFlush, NSID: nsid}
		}
		c.CID = uint16(i)
		ops = append(ops, op{cmd: *c, data: pattern(int(nlb)*512, byte(i))})
	}
	burst := func(ops []op) map[uint16][]byte {
		t.Helper()
		in := make(map[uint16][]byte)
		for i := range ops {
			o := &ops[i]
			c := o.cmd
			c.Flags |= nvme.PSDTSGL
			var capsule []byte
			switch c.Opcode {
			case nvme.IOWrite:
				if len(o.data) <= 8<<10 {
					capsule = o.data
					c.DPTR = nvme.SGL{Length: uint32(len(o.data)), Type: nvme.SGLDataBlockOffset}
				} else {
					c.DPTR = nvme.SGL{Length: uint32(len(o.data)), Type: nvme.SGLTransportDataBlock}
				}
			case nvme.IORead:
				in[c.CID] = make([]byte, len(o.data))
				c.DPTR = nvme.SGL{Length: uint32(len(o.data)), Type: nvme.SGLTransportDataBlock}
			}
			must(t, io.f.WriteCapsuleCmd(&c, capsule))
		}
		must(t, io.f.Flush()) // the whole burst in as few segments as TCP likes
		seen := make(map[uint16]bool)
		for len(seen) < len(ops) {
			h := io.recv()
			switch h.Type {
			case tcp.TypeCapsuleResp:
				c := h.Completion()
				if seen[c.CID] {
					t.Fatalf("CID %d completed twice", c.CID)
				}
				if !c.Status.OK() {
					t.Fatalf("CID %d: %v", c.CID, c.Status)
				}
				seen[c.CID] = true
			case tcp.TypeC2HData:
				d := h.Data()
				must(t, io.f.ReadData(in[d.CCCID][d.Offset:d.Offset+d.Length]))
			case tcp.TypeR2T:
				d := h.Data()
				data := ops[d.CCCID].data
				for off := d.Offset; off < d.Offset+d.Length; {
					n := min(uint32(io.maxH2C), d.Offset+d.Length-off)
					last := off+n == d.Offset+d.Length
					must(t, io.f.WriteH2CData(tcp.DataHeader{CCCID: d.CCCID, TTag: d.TTag, Offset: off}, last, data[off:off+n]))
					off += n
				}
				must(t, io.f.Flush())
			default:
				t.Fatalf("unexpected PDU type %#x", h.Type)
			}
		}
		return in
	}
	burst(ops)
	// Read everything back, again in one burst.
	for i := range ops {
		if ops[i].cmd.Opcode == nvme.IOWrite {
			ops[i].cmd.Opcode = nvme.IORead
		}
	}
	in := burst(ops)
	for _, o := range ops {
		if o.cmd.Opcode == nvme.IORead && !bytes.Equal(in[o.cmd.CID], o.data) {
			t.Errorf("CID %d (nsid %d lba %d): read back differs", o.cmd.CID, o.cmd.NSID, o.cmd.SLBA())
		}
	}
}

// TestGracefulShutdownInline: completions the reader deferred for the
// input it had already read still go out when Shutdown stops it.
func TestGracefulShutdownInline(t *testing.T) {
	s, addr := startServer(t, Config{})
	admin := adminQueue(t, addr, testNQN)
	io := ioQueue(t, addr, admin, 1, 0)
	_ = io.conn.SetDeadline(time.Now().Add(10 * time.Second))
	const n = 64
	for i := range n {
		c := rw(nvme.IORead, 1, uint64(i), 1)
		c.CID = uint16(i)
		c.Flags |= nvme.PSDTSGL
		c.DPTR = nvme.SGL{Length: 512, Type: nvme.SGLTransportDataBlock}
		must(t, io.f.WriteCapsuleCmd(c, nil))
	}
	must(t, io.f.Flush())
	// Wait for the first completion, so the burst has reached the target,
	// then shut down while the rest may still be in its buffers.
	got := 0
	for got == 0 {
		if h := io.recv(); h.Type == tcp.TypeCapsuleResp {
			got++
		} else {
			must(t, io.f.ReadData(nil))
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(t.Context()) }()
	for got < n {
		h, err := io.f.ReadHeader()
		if err != nil {
			t.Fatalf("after %d of %d completions: %v", got, n, err)
		}
		if h.Type == tcp.TypeCapsuleResp {
			got++
		} else {
			must(t, io.f.ReadData(nil))
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
