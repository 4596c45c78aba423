package host

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
)

// fakeTarget is a scripted NVMe/TCP controller for protocol tests: small,
// serial per connection, with hooks to misbehave on demand.
type fakeTarget struct {
	t  testing.TB
	ln net.Listener

	bs     int
	blocks int
	mu     sync.Mutex
	data   []byte

	// Knobs, set before connecting.
	icresp     func(req tcp.ICReq) tcp.ICResp
	mdts       uint8
	ioccsz     uint32
	mqes       int
	r2tChunk   int  // bytes per R2T
	c2hChunk   int  // bytes per C2HData
	c2hSuccess bool // elide CapsuleResp after reads
	// hook sees every command first; returning true means it handled it.
	hook atomic.Pointer[func(fc *fakeConn, cmd *nvme.Command, data []byte) bool]

	cntlid   atomic.Uint32
	connects atomic.Int32 // admin connects
	termReqs chan tcp.TermReq

	cmu   sync.Mutex
	conns map[*fakeConn]struct{}
	wg    sync.WaitGroup
}

type fakeConn struct {
	ft   *fakeTarget
	conn net.Conn
	fr   *tcp.Framer
	wmu  sync.Mutex
	qid  uint16
	cc   uint32

	pending map[uint16]*fakeWrite
}

type fakeWrite struct {
	cmd  nvme.Command
	buf  []byte
	next int // next R2T offset
	got  int // bytes received for the current R2T
	want int // end of the current R2T
}

func newFakeTarget(t testing.TB) *fakeTarget {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ft := &fakeTarget{
		t: t, ln: ln, bs: 512, blocks: 8192,
		mdts: 3, ioccsz: (8192 + 64) / 16, mqes: 127,
		r2tChunk: 16384, c2hChunk: 8192,
		termReqs: make(chan tcp.TermReq, 16),
		conns:    make(map[*fakeConn]struct{}),
	}
	ft.data = make([]byte, ft.bs*ft.blocks)
	for i := range ft.data {
		ft.data[i] = byte(i * 7)
	}
	ft.wg.Add(1)
	go ft.serve()
	t.Cleanup(ft.close)
	return ft
}

func (ft *fakeTarget) addr() string { return ft.ln.Addr().String() }

func (ft *fakeTarget) setHook(h func(fc *fakeConn, cmd *nvme.Command, data []byte) bool) {
	if h == nil {
		ft.hook.Store(nil)
		return
	}
	ft.hook.Store(&h)
}

func (ft *fakeTarget) serve() {
	defer ft.wg.Done()
	for {
		conn, err := ft.ln.Accept()
		if err != nil {
			return
		}
		fc := &fakeConn{ft: ft, conn: conn, fr: tcp.NewFramer(conn, tcp.RoleController, 64<<10), pending: map[uint16]*fakeWrite{}}
		fc.fr.MaxCapsuleData = 1 << 20
		ft.cmu.Lock()
		ft.conns[fc] = struct{}{}
		ft.cmu.Unlock()
		ft.wg.Add(1)
		go func() {
			defer ft.wg.Done()
			fc.serve()
			conn.Close()
			ft.cmu.Lock()
			delete(ft.conns, fc)
			ft.cmu.Unlock()
		}()
	}
}

// killAll drops every connection, as a target crash would.
func (ft *fakeTarget) killAll() {
	ft.cmu.Lock()
	defer ft.cmu.Unlock()
	for fc := range ft.conns {
		fc.conn.Close()
	}
}

func (ft *fakeTarget) close() {
	ft.ln.Close()
	ft.killAll()
	ft.wg.Wait()
}

func (fc *fakeConn) write(fn func(f *tcp.Framer) error) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	if err := fn(fc.fr); err == nil {
		_ = fc.fr.Flush()
	}
}

func (fc *fakeConn) respond(cid uint16, st nvme.Status, dw0 uint32) {
	fc.respond2(cid, st, dw0, 0)
}

func (fc *fakeConn) respond2(cid uint16, st nvme.Status, dw0, dw1 uint32) {
	cqe := nvme.Completion{CID: cid, Status: st, DW0: dw0, DW1: dw1, SQID: fc.qid}
	fc.write(func(f *tcp.Framer) error { return f.WriteCapsuleResp(&cqe) })
}

// sendData sends buf as C2HData in chunks and completes the command.
func (fc *fakeConn) sendData(cid uint16, buf []byte) {
	chunk := fc.ft.c2hChunk
	for off := 0; off < len(buf); off += chunk {
		n := min(chunk, len(buf)-off)
		last := off+n == len(buf)
		fc.write(func(f *tcp.Framer) error {
			return f.WriteC2HData(tcp.DataHeader{CCCID: cid, Offset: uint32(off)}, last, last && fc.ft.c2hSuccess, buf[off:off+n])
		})
	}
	if !fc.ft.c2hSuccess || len(buf) == 0 {
		fc.respond(cid, nvme.StatusSuccess, 0)
	}
}

func (fc *fakeConn) serve() {
	h, err := fc.fr.ReadHeader()
	if err != nil || h.Type != tcp.TypeICReq {
		return
	}
	req := h.ICReq()
	resp := tcp.ICResp{Digest: req.Digest, MaxH2CData: 32768}
	if fc.ft.icresp != nil {
		resp = fc.ft.icresp(req)
	}
	fc.write(func(f *tcp.Framer) error { return f.WriteICResp(resp) })
	fc.fr.HeaderDigest = resp.Digest&tcp.DigestHeader != 0
	fc.fr.DataDigest = resp.Digest&tcp.DigestData != 0
	fc.fr.SendAlign = (int(req.HPDA) + 1) * 4
	for {
		h, err := fc.fr.ReadHeader()
		if err != nil {
			var fe *tcp.FatalError
			if errors.As(err, &fe) {
				fc.write(func(f *tcp.Framer) error { return f.WriteTermReq(tcp.TermReq{FES: fe.FES, FEI: fe.FEI}, fe.Header) })
			}
			return
		}
		switch h.Type {
		case tcp.TypeCapsuleCmd:
			cmd := h.Command()
			var data []byte
			if h.DataLen > 0 {
				data = make([]byte, h.DataLen)
				if err := fc.fr.ReadData(data); err != nil {
					fc.respond(cmd.CID, nvme.StatusTransientTransport, 0)
					continue
				}
			}
			if hp := fc.ft.hook.Load(); hp != nil && (*hp)(fc, &cmd, data) {
				continue
			}
			fc.exec(&cmd, data)
		case tcp.TypeH2CData:
			dh := h.Data()
			w := fc.pending[dh.CCCID]
			if w == nil || int(dh.Offset) != w.got || int(dh.Offset+dh.Length) > w.want {
				fc.ft.t.Errorf("fake: bad H2CData cid %d off %d len %d", dh.CCCID, dh.Offset, dh.Length)
				return
			}
			if err := fc.fr.ReadData(w.buf[dh.Offset : dh.Offset+dh.Length]); err != nil {
				fc.ft.t.Errorf("fake: H2CData: %v", err)
				return
			}
			w.got += int(dh.Length)
			if w.got == w.want {
				if h.Flags&tcp.FlagLastPDU == 0 {
					fc.ft.t.Errorf("fake: last H2CData of R2T without LAST_PDU")
				}
				if w.got == len(w.buf) {
					delete(fc.pending, dh.CCCID)
					fc.execWrite(&w.cmd, w.buf)
				} else {
					fc.r2t(dh.CCCID, w)
				}
			}
		case tcp.TypeH2CTermReq:
			fc.ft.termReqs <- h.TermReq()
			return
		}
	}
}

func (fc *fakeConn) r2t(cid uint16, w *fakeWrite) {
	n := min(fc.ft.r2tChunk, len(w.buf)-w.next)
	w.got, w.want = w.next, w.next+n
	fc.write(func(f *tcp.Framer) error {
		return f.WriteR2T(tcp.DataHeader{CCCID: cid, TTag: cid + 100, Offset: uint32(w.next), Length: uint32(n)})
	})
	w.next += n
}

func (fc *fakeConn) exec(cmd *nvme.Command, data []byte) {
	ft := fc.ft
	switch {
	case cmd.Opcode == nvme.AdminFabrics:
		switch cmd.FabricsType() {
		case nvme.FabricsConnect:
			var cc nvme.ConnectCommand
			cc.FromCommand(cmd)
			var cd nvme.ConnectData
			if err := cd.Unmarshal(data); err != nil {
				fc.respond(cmd.CID, nvme.StatusConnectInvalidParameters, 0)
				return
			}
			fc.qid = cc.QID
			id := uint32(cd.CNTLID)
			if cc.QID == 0 {
				id = ft.cntlid.Add(1)
				ft.connects.Add(1)
			}
			fc.respond(cmd.CID, nvme.StatusSuccess, id)
		case nvme.FabricsPropertyGet:
			var p nvme.PropertyCommand
			p.FromCommand(cmd)
			var v uint64
			switch p.Offset {
			case nvme.PropCAP:
				v = nvme.CAP(ft.mqes+1, 2)
			case nvme.PropVS:
				v = uint64(nvme.Version(1, 4, 0))
			case nvme.PropCC:
				v = uint64(fc.cc)
			case nvme.PropCSTS:
				if fc.cc&nvme.CCEnable != 0 {
					v |= nvme.CSTSReady
				}
				if fc.cc&nvme.CCShnMask != 0 {
					v |= nvme.CSTSShstComplete
				}
			}
			fc.respond2(cmd.CID, nvme.StatusSuccess, uint32(v), uint32(v>>32))
		case nvme.FabricsPropertySet:
			var p nvme.PropertyCommand
			p.FromCommand(cmd)
			if p.Offset == nvme.PropCC {
				fc.cc = uint32(p.Value)
			}
			fc.respond(cmd.CID, nvme.StatusSuccess, 0)
		default:
			fc.respond(cmd.CID, nvme.StatusInvalidOpcode, 0)
		}
	case fc.qid == 0:
		fc.execAdmin(cmd)
	default:
		fc.execIO(cmd, data)
	}
}

var fakeNGUID = [16]byte{0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
var fakeUUID = [16]byte{0xbb, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

func (fc *fakeConn) execAdmin(cmd *nvme.Command) {
	ft := fc.ft
	switch cmd.Opcode {
	case nvme.AdminIdentify:
		var b []byte
		switch uint8(cmd.CDW10) {
		case nvme.CNSController:
			id := nvme.IdentifyController{Model: "fake", Serial: "f1", MDTS: ft.mdts, NN: 1, IOCCSZ: ft.ioccsz, IORCSZ: 1,
				CNTLID: uint16(ft.cntlid.Load()), ONCS: nvme.ONCSDSM | nvme.ONCSWriteZeroes, SubNQN: "nqn.fake"}
			b = id.Marshal()
		case nvme.CNSActiveNSList:
			b = make([]byte, nvme.IdentifySize)
			if cmd.NSID < 1 {
				binary.LittleEndian.PutUint32(b, 1)
			}
		case nvme.CNSNamespace:
			if cmd.NSID != 1 {
				fc.respond(cmd.CID, nvme.StatusInvalidNamespace, 0)
				return
			}
			ns := nvme.IdentifyNamespace{NSZE: uint64(ft.blocks), NCAP: uint64(ft.blocks), LBADS: 9, NGUID: fakeNGUID}
			b = ns.Marshal()
		case nvme.CNSNSDescriptors:
			b = nvme.MarshalNSDescriptors([]nvme.NSDescriptor{{Type: nvme.NIDTNGUID, ID: fakeNGUID[:]}, {Type: nvme.NIDTUUID, ID: fakeUUID[:]}})
		default:
			fc.respond(cmd.CID, nvme.StatusInvalidField, 0)
			return
		}
		fc.sendData(cmd.CID, b[:min(len(b), int(cmd.DPTR.Length))])
	case nvme.AdminSetFeatures:
		switch uint8(cmd.CDW10) {
		case nvme.FeatNumQueues:
			fc.respond(cmd.CID, nvme.StatusSuccess, cmd.CDW11)
		default:
			fc.respond(cmd.CID, nvme.StatusSuccess, 0)
		}
	case nvme.AdminGetFeatures:
		fc.respond(cmd.CID, nvme.StatusSuccess, 0x1234)
	case nvme.AdminKeepAlive:
		fc.respond(cmd.CID, nvme.StatusSuccess, 0)
	case nvme.AdminGetLogPage:
		var g nvme.GetLogPageCommand
		g.FromCommand(cmd)
		if g.LID != nvme.LogDiscovery {
			fc.respond(cmd.CID, nvme.StatusInvalidLogPage, 0)
			return
		}
		log := nvme.MarshalDiscoveryLog(7, []nvme.DiscoveryEntry{
			{TrType: nvme.TrTypeTCP, AdrFam: nvme.AdrFamIPv4, SubType: nvme.SubTypeNVM, TrSvcID: "4420", SubNQN: "nqn.fake", TrAddr: "127.0.0.1"},
			{TrType: nvme.TrTypeTCP, AdrFam: nvme.AdrFamIPv4, SubType: nvme.SubTypeCurrentDisc, TrSvcID: "4420", SubNQN: nvme.DiscoveryNQN, TrAddr: "127.0.0.1"},
		})
		out := make([]byte, g.Length)
		if int(g.Offset) < len(log) {
			copy(out, log[g.Offset:])
		}
		fc.sendData(cmd.CID, out)
	default:
		fc.respond(cmd.CID, nvme.StatusInvalidOpcode, 0)
	}
}

func (fc *fakeConn) execIO(cmd *nvme.Command, data []byte) {
	ft := fc.ft
	if cmd.NSID != 1 {
		fc.respond(cmd.CID, nvme.StatusInvalidNamespace, 0)
		return
	}
	lba, nlb := int(cmd.SLBA()), int(cmd.NLB())
	inRange := lba+nlb <= ft.blocks
	switch cmd.Opcode {
	case nvme.IORead:
		if !inRange {
			fc.respond(cmd.CID, nvme.StatusLBAOutOfRange, 0)
			return
		}
		ft.mu.Lock()
		buf := append([]byte(nil), ft.data[lba*ft.bs:(lba+nlb)*ft.bs]...)
		ft.mu.Unlock()
		fc.sendData(cmd.CID, buf)
	case nvme.IOWrite:
		if cmd.DPTR.Type == nvme.SGLDataBlockOffset {
			fc.execWrite(cmd, data)
			return
		}
		w := &fakeWrite{cmd: *cmd, buf: make([]byte, cmd.DPTR.Length)}
		fc.pending[cmd.CID] = w
		fc.r2t(cmd.CID, w)
	case nvme.IOFlush:
		fc.respond(cmd.CID, nvme.StatusSuccess, 0)
	case nvme.IOWriteZeroes:
		if !inRange {
			fc.respond(cmd.CID, nvme.StatusLBAOutOfRange, 0)
			return
		}
		ft.mu.Lock()
		clear(ft.data[lba*ft.bs : (lba+nlb)*ft.bs])
		ft.mu.Unlock()
		fc.respond(cmd.CID, nvme.StatusSuccess, 0)
	case nvme.IODSM:
		nr := int(cmd.CDW10&0xff) + 1
		if cmd.DPTR.Type == nvme.SGLTransportDataBlock {
			w := &fakeWrite{cmd: *cmd, buf: make([]byte, cmd.DPTR.Length)}
			fc.pending[cmd.CID] = w
			fc.r2t(cmd.CID, w)
			return
		}
		if len(data) != 16*nr {
			fc.respond(cmd.CID, nvme.StatusInvalidField, 0)
			return
		}
		fc.execWrite(cmd, data)
	default:
		fc.respond(cmd.CID, nvme.StatusInvalidOpcode, 0)
	}
}

// execWrite applies a write or DSM whose data has arrived.
func (fc *fakeConn) execWrite(cmd *nvme.Command, data []byte) {
	ft := fc.ft
	if cmd.Opcode == nvme.IODSM {
		ft.mu.Lock()
		for off := 0; off+16 <= len(data); off += 16 {
			n := int(binary.LittleEndian.Uint32(data[off+4:]))
			s := int(binary.LittleEndian.Uint64(data[off+8:]))
			if s+n <= ft.blocks {
				clear(ft.data[s*ft.bs : (s+n)*ft.bs])
			}
		}
		ft.mu.Unlock()
		fc.respond(cmd.CID, nvme.StatusSuccess, 0)
		return
	}
	lba, nlb := int(cmd.SLBA()), int(cmd.NLB())
	if lba+nlb > ft.blocks || len(data) != nlb*ft.bs {
		fc.respond(cmd.CID, nvme.StatusLBAOutOfRange, 0)
		return
	}
	ft.mu.Lock()
	copy(ft.data[lba*ft.bs:], data)
	ft.mu.Unlock()
	fc.respond(cmd.CID, nvme.StatusSuccess, 0)
}

func (ft *fakeTarget) snapshot(off, n int) []byte {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return append([]byte(nil), ft.data[off:off+n]...)
}

// drain discards what a peer sends until it closes.
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }

// waitFor polls cond for up to d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
