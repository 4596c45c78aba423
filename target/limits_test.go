package target

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
	"github.com/nearstore/nearstore/volume"
)

// Regression tests for issue 18's resource findings, against a real
// server over TCP. They assert on the target's own account of the command
// buffers hosts hold (bufPool.inUse and peak), never on timing.

// discoveryQueue brings up an enabled admin queue on the discovery
// controller.
func discoveryQueue(t *testing.T, addr string) *rawHost {
	r := dialRaw(t, addr, 0)
	r.ok(r.connect(nvme.DiscoveryNQN, 0, 31, 0xFFFF, 0))
	r.ok(r.property(true, nvme.PropCC, false, nvme.CCEnable))
	return r
}

// TestGetLogPageAllocationBounded: a Get Log Page whose NUMD asks for
// 16 GiB used to allocate all of it before its SGL trimmed the result.
// Now the lengths must agree and stay within MDTS, and nothing is
// allocated for a command that fails the check; the queue and a
// well-behaved command on it go on working.
func TestGetLogPageAllocationBounded(t *testing.T) {
	s, addr := startServer(t, Config{})
	for _, tc := range []struct {
		name  string
		queue func() *rawHost
		lid   uint8
	}{
		{"discovery", func() *rawHost { return discoveryQueue(t, addr) }, nvme.LogDiscovery},
		{"nvm", func() *rawHost { return adminQueue(t, addr, testNQN) }, nvme.LogSMART},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.queue()
			for _, c := range []struct {
				numdBytes int
				sgl       uint32
				want      nvme.Status
			}{
				{16 << 30, 4096, nvme.StatusInvalidField | nvme.DNR},         // NUMD all ones
				{16 << 30, 1 << 30, nvme.StatusSGLDataLenInvalid | nvme.DNR}, // SGL past MDTS too
				{4096, 8192, nvme.StatusSGLDataLenInvalid | nvme.DNR},        // lengths disagree
				{8192, 4096, nvme.StatusSGLDataLenInvalid | nvme.DNR},
				{1 << 20, 1 << 20, nvme.StatusSGLDataLenInvalid | nvme.DNR}, // both past MDTS
			} {
				var cmd nvme.Command
				(&nvme.GetLogPageCommand{LID: tc.lid, Length: c.numdBytes}).ToCommand(&cmd)
				cmd.DPTR = nvme.SGL{Length: c.sgl, Type: nvme.SGLTransportDataBlock}
				got := r.exec(&cmd, nil, nil, false)
				if got.Status != c.want {
					t.Errorf("NUMD %d bytes, SGL %d: status %v, want %v", c.numdBytes, c.sgl, got.Status, c.want)
				}
			}
			if pk := s.bufs.peak.Load(); pk > 1<<20 {
				t.Fatalf("the target held %d bytes of command buffers at its peak", pk)
			}
			// The queue still works, with lengths that agree.
			in := make([]byte, 512)
			var cmd nvme.Command
			(&nvme.GetLogPageCommand{LID: tc.lid, Length: len(in)}).ToCommand(&cmd)
			r.ok(r.exec(&cmd, nil, in, false))
		})
	}
	if n := s.bufs.inUse.Load(); n != 0 {
		t.Fatalf("%d bytes of command buffers still held", n)
	}
}

// waitClosed reads from r until the target closes the connection.
func (r *rawHost) waitClosed() {
	r.t.Helper()
	for {
		if _, err := r.f.ReadHeader(); err != nil {
			if isReset(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return
			}
			r.t.Fatalf("waiting for the target to close: %v", err)
		}
	}
}

// waitFor polls cond until it holds; the test's own timeout bounds it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 20000 {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestR2TDataNeverArrives: Function Loads and writes whose data never
// comes hold no buffer (buffers grow as data arrives), and a queue whose
// host stops sending half-way through is closed when DataTimeout passes,
// freeing what it had received. Another host's I/O goes on.
func TestR2TDataNeverArrives(t *testing.T) {
	s, addr := startServer(t, Config{DataTimeout: 50 * time.Millisecond, MaxFunctionSize: 1 << 20})
	a := adminQueue(t, addr, testNQN)
	// As many Function Loads as the admin queue takes, none of whose data
	// comes: each gets its R2T, and nothing is allocated for them.
	for i := 0; i < 8; i++ {
		cmd := nvme.Command{Opcode: nvme.AdminFunctionLoad, CID: a.nextCID(), CDW11: 1 << 20}
		cmd.DPTR = nvme.SGL{Length: 1 << 20, Type: nvme.SGLTransportDataBlock}
		a.send(&cmd, nil)
		if h := a.recv(); h.Type != tcp.TypeR2T {
			t.Fatalf("PDU type %#x, want R2T", h.Type)
		}
	}
	if n := s.bufs.inUse.Load(); n != 0 {
		t.Fatalf("%d bytes held for data that has not come", n)
	}
	// Past the limit: refused before any R2T.
	too := nvme.Command{Opcode: nvme.AdminFunctionLoad, CDW11: 1<<20 + 1}
	if c := a.exec(&too, make([]byte, 1<<20+1), nil, false); c.Status != nvme.StatusInvalidField|nvme.DNR {
		t.Fatalf("Function Load past MaxFunctionSize: %v", c.Status)
	}
	a.waitClosed() // DataTimeout: the Loads' data never came

	// A write whose host sends a part and stops.
	a2 := adminQueue(t, addr, testNQN)
	q := ioQueue(t, addr, a2, 1, 0)
	w := rw(nvme.IOWrite, 1, 0, 256) // 128 KiB: an R2T
	w.CID = q.nextCID()
	w.DPTR = nvme.SGL{Length: 128 << 10, Type: nvme.SGLTransportDataBlock}
	q.send(w, nil)
	h := q.recv()
	if h.Type != tcp.TypeR2T {
		t.Fatalf("PDU type %#x, want R2T", h.Type)
	}
	d := h.Data()
	must(t, q.f.WriteH2CData(tcp.DataHeader{CCCID: d.CCCID, TTag: d.TTag}, false, make([]byte, 8192)))
	must(t, q.f.Flush())
	q.waitClosed()
	waitFor(t, "the buffers to come back", func() bool { return s.bufs.inUse.Load() == 0 })
	if pk := s.bufs.peak.Load(); pk > 64<<10 {
		t.Fatalf("peak %d bytes held for 8 KiB received", pk)
	}

	// A well-behaved host is unaffected.
	b := adminQueue(t, addr, testNQN)
	bq := ioQueue(t, addr, b, 1, 0)
	data := pattern(64<<10, 3)
	bq.ok(bq.exec(rw(nvme.IOWrite, 1, 8, 128), data, nil, false))
	if got := readBack(t, bq, 8, 128); !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
}

// TestAdminQueueDepth: an admin queue is at most 32 deep, as in nvmet.
func TestAdminQueueDepth(t *testing.T) {
	_, addr := startServer(t, Config{})
	r := dialRaw(t, addr, 0)
	c := r.connect(testNQN, 0, 32, 0xFFFF, 0) // SQSIZE 32: 33 entries
	if c.Status != nvme.StatusConnectInvalidParameters|nvme.DNR || c.DW0 != connectInvalid(false, 44) {
		t.Fatalf("admin Connect of depth 33: %v dw0 %#x", c.Status, c.DW0)
	}
}

// TestNoKeepAliveStillIdles: a host that asks for no keep-alive (KATO 0)
// and then sends nothing loses its controller after MaxIdle, on the
// discovery controller as on an NVM subsystem, and its connection goes.
// MaxIdle is long enough that setting a queue up under a loaded race run
// (tens of milliseconds) cannot outlast it: the test checks the idle
// teardown, not how quickly a connection is set up.
func TestNoKeepAliveStillIdles(t *testing.T) {
	s, addr := startServer(t, Config{MaxIdle: time.Second})
	discoveryQueue(t, addr).waitClosed()
	adminQueue(t, addr, testNQN).waitClosed()
	waitFor(t, "the controllers to go", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 0
	})
}

// TestConnectionLimits: connections past the per-address limit are closed
// at once, and those already open keep working.
func TestConnectionLimits(t *testing.T) {
	_, addr := startServer(t, Config{MaxConnectionsPerAddr: 3})
	a := adminQueue(t, addr, testNQN)
	q := ioQueue(t, addr, a, 1, 0)
	extra := dialRaw(t, addr, 0)
	over, err := net.Dial("tcp", addr)
	must(t, err)
	defer over.Close()
	_ = over.SetDeadline(time.Now().Add(20 * time.Second))
	if n, err := over.Read(make([]byte, 1)); err == nil {
		t.Fatalf("connection past the limit read %d bytes", n)
	}
	extra.conn.Close()
	q.ok(q.exec(rw(nvme.IOWrite, 1, 0, 8), pattern(4096, 1), nil, false))
}

// flakyListener fails its first accepts as a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptBacksOffOnEMFILE: running out of file descriptors used to end
// Serve; now it backs off and keeps serving.
func TestAcceptBacksOffOnEMFILE(t *testing.T) {
	v, err := volume.Open("mem:1MiB")
	must(t, err)
	defer v.Close()
	s, err := New(Config{Subsystems: []SubsystemConfig{{NQN: testNQN, Namespaces: []NamespaceConfig{{Backend: v, Name: "mem"}}}}})
	must(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(&flakyListener{Listener: ln, fails: 3}) }()
	a := adminQueue(t, ln.Addr().String(), testNQN)
	a.ok(a.property(false, nvme.PropCSTS, false, 0))
	must(t, s.Close())
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
}
