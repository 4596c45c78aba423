package target

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
	"github.com/nearstore/nearstore/volume"
)

const testNQN = "nqn.2026-11.io.nearstore:test"

// startServer serves the given volumes as one subsystem on a loopback port.
func startServer(t testing.TB, cfg Config, specs ...string) (*Server, string) {
	t.Helper()
	if len(specs) == 0 {
		specs = []string{"mem:16MiB"}
	}
	var nss []NamespaceConfig
	for _, sp := range specs {
		v, err := volume.Open(sp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		nss = append(nss, NamespaceConfig{Backend: v, Name: sp})
	}
	if cfg.Subsystems == nil {
		cfg.Subsystems = []SubsystemConfig{{NQN: testNQN, Namespaces: nss}}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return s, ln.Addr().String()
}

// rawHost speaks PDUs directly, so tests can send what a real host never
// would.
type rawHost struct {
	t      *testing.T
	conn   net.Conn
	f      *tcp.Framer
	cid    uint16
	cntlid uint16
	maxH2C int
}

func dialRaw(t *testing.T, addr string, digests uint8) *rawHost {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	r := &rawHost{t: t, conn: c, f: tcp.NewFramer(c, tcp.RoleHost, 64<<10)}
	r.f.MaxData = 1 << 20
	must(t, r.f.WriteICReq(tcp.ICReq{Digest: digests}))
	must(t, r.f.Flush())
	h := r.recv()
	if h.Type != tcp.TypeICResp {
		t.Fatalf("got PDU type %#x, want ICResp", h.Type)
	}
	resp := h.ICResp()
	if resp.Digest != digests {
		t.Fatalf("digests granted %#x, asked %#x", resp.Digest, digests)
	}
	r.f.HeaderDigest = resp.Digest&tcp.DigestHeader != 0
	r.f.DataDigest = resp.Digest&tcp.DigestData != 0
	r.maxH2C = int(resp.MaxH2CData)
	return r
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (r *rawHost) recv() *tcp.Header {
	r.t.Helper()
	h, err := r.f.ReadHeader()
	if err != nil {
		r.t.Fatalf("read PDU: %v", err)
	}
	return h
}

func (r *rawHost) nextCID() uint16 { r.cid++; return r.cid }

// send sends a command; out goes in-capsule.
func (r *rawHost) send(cmd *nvme.Command, out []byte) {
	r.t.Helper()
	cmd.Flags |= nvme.PSDTSGL
	if out != nil && cmd.DPTR.Type == 0 {
		cmd.DPTR = nvme.SGL{Length: uint32(len(out)), Type: nvme.SGLDataBlockOffset}
	}
	must(r.t, r.f.WriteCapsuleCmd(cmd, out))
	must(r.t, r.f.Flush())
}

// exec sends a command and collects its completion, answering R2Ts from out
// (when out is too big for the capsule) and gathering C2H data into in.
func (r *rawHost) exec(cmd *nvme.Command, out []byte, in []byte, inCapsule bool) nvme.Completion {
	r.t.Helper()
	if cmd.CID == 0 {
		cmd.CID = r.nextCID()
	}
	switch {
	case out != nil && inCapsule:
		r.send(cmd, out)
	case out != nil:
		cmd.DPTR = nvme.SGL{Length: uint32(len(out)), Type: nvme.SGLTransportDataBlock}
		r.send(cmd, nil)
	case in != nil:
		cmd.DPTR = nvme.SGL{Length: uint32(len(in)), Type: nvme.SGLTransportDataBlock}
		r.send(cmd, nil)
	default:
		r.send(cmd, nil)
	}
	for {
		h := r.recv()
		switch h.Type {
		case tcp.TypeCapsuleResp:
			c := h.Completion()
			if c.CID != cmd.CID {
				r.t.Fatalf("completion for CID %d, want %d", c.CID, cmd.CID)
			}
			return c
		case tcp.TypeC2HData:
			d := h.Data()
			must(r.t, r.f.ReadData(in[d.Offset:d.Offset+d.Length]))
			if h.Flags&tcp.FlagSuccess != 0 {
				return nvme.Completion{CID: cmd.CID}
			}
		case tcp.TypeR2T:
			d := h.Data()
			for off := d.Offset; off < d.Offset+d.Length; {
				n := min(uint32(r.maxH2C), d.Offset+d.Length-off)
				last := off+n == d.Offset+d.Length
				must(r.t, r.f.WriteH2CData(tcp.DataHeader{CCCID: d.CCCID, TTag: d.TTag, Offset: off}, last, out[off:off+n]))
				off += n
			}
			must(r.t, r.f.Flush())
		default:
			r.t.Fatalf("unexpected PDU type %#x", h.Type)
		}
	}
}

func (r *rawHost) ok(c nvme.Completion) nvme.Completion {
	r.t.Helper()
	if !c.Status.OK() {
		r.t.Fatalf("command failed: %v", c.Status)
	}
	return c
}

func (r *rawHost) connect(nqn string, qid uint16, sqsize uint16, cntlid uint16, kato uint32) nvme.Completion {
	r.t.Helper()
	var cmd nvme.Command
	(&nvme.ConnectCommand{QID: qid, SQSize: sqsize, KATO: kato}).ToCommand(&cmd)
	data := (&nvme.ConnectData{CNTLID: cntlid, SubNQN: nqn, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:raw-test"}).Marshal()
	c := r.exec(&cmd, data, nil, true)
	if c.Status.OK() && qid == 0 {
		r.cntlid = uint16(c.DW0)
	}
	return c
}

func (r *rawHost) property(set bool, off uint32, size8 bool, v uint64) nvme.Completion {
	var cmd nvme.Command
	(&nvme.PropertyCommand{Offset: off, Size8: size8, Value: v}).ToCommand(&cmd, set)
	return r.exec(&cmd, nil, nil, false)
}

// admin brings up an enabled admin queue on nqn.
func adminQueue(t *testing.T, addr, nqn string) *rawHost {
	r := dialRaw(t, addr, 0)
	r.ok(r.connect(nqn, 0, 31, 0xFFFF, 0))
	r.ok(r.property(true, nvme.PropCC, false, nvme.CCEnable|6<<16|4<<20))
	if c := r.ok(r.property(false, nvme.PropCSTS, false, 0)); c.DW0&nvme.CSTSReady == 0 {
		t.Fatalf("CSTS %#x not ready after enable", c.DW0)
	}
	return r
}

// ioQueue connects I/O queue qid to the admin queue's controller.
func ioQueue(t *testing.T, addr string, admin *rawHost, qid uint16, digests uint8) *rawHost {
	r := dialRaw(t, addr, digests)
	r.ok(r.connect(testNQN, qid, 127, admin.cntlid, 0))
	return r
}

func rw(op uint8, nsid uint32, lba uint64, nlb uint32) *nvme.Command {
	c := &nvme.Command{Opcode: op, NSID: nsid}
	c.SetLBA(lba, nlb)
	return c
}

// expectTerm reads until the target's C2HTermReq and the connection's end.
func (r *rawHost) expectTerm(fes uint16) {
	r.t.Helper()
	for {
		h, err := r.f.ReadHeader()
		if err != nil {
			r.t.Fatalf("connection ended (%v) without a C2HTermReq", err)
		}
		if h.Type == tcp.TypeC2HTermReq {
			if got := h.TermReq().FES; got != fes {
				r.t.Fatalf("TermReq FES %d, want %d", got, fes)
			}
			must(r.t, r.f.ReadData(nil))
			break
		}
	}
	if _, err := r.f.ReadHeader(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err) {
		r.t.Fatalf("after TermReq: %v, want the connection closed", err)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// readBack reads nlb blocks at lba on a fresh I/O queue.
func readBack(t *testing.T, io *rawHost, lba uint64, nlb uint32) []byte {
	in := make([]byte, int(nlb)*512)
	io.ok(io.exec(rw(nvme.IORead, 1, lba, nlb), nil, in, false))
	return in
}

var _ = bytes.Equal
var _ = context.Background
