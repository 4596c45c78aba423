package target

import (
	"bytes"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/volume"
)

// These tests drive the controller layer directly, without a socket:
// session.prepare and session.exec are what the connection layer calls,
// and testQP stands in for the connection.

// testQP is a queue pair with no connection behind it.
type testQP struct {
	mu     sync.Mutex
	closed bool
	parked map[uint16]completion // completions of parked commands, by CID
}

func (q *testQP) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

func (q *testQP) completeParked(cid uint16, c completion) {
	q.mu.Lock()
	if q.parked == nil {
		q.parked = make(map[uint16]completion)
	}
	q.parked[cid] = c
	q.mu.Unlock()
}

// newTestSession is a queue as a fresh connection has it: not yet bound
// by Connect.
func newTestSession(srv *Server) *session {
	return &session{srv: srv, qp: &testQP{}, log: slog.New(slog.DiscardHandler), local: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4420}}
}

// run takes a command through the controller layer as the connection
// layer does, with data as its host data (in-capsule, or what H2CData
// brought), and returns its completion and the request.
func run(t *testing.T, s *session, sqe nvme.Command, data []byte) (completion, *request) {
	t.Helper()
	r := newRequest(sqe, &s.srv.bufs)
	if st := s.prepare(r); st != 0 {
		r.free(reqNew)
		return status(st), r
	}
	switch {
	case r.spec != nil && r.spec.dir == dirBoth:
		r.data, r.inCap = data, int(sqe.DPTR.Length)
	case r.want != len(data):
		t.Fatalf("opcode %#x wants %d bytes of data, the test has %d", sqe.Opcode, r.want, len(data))
	default:
		r.data = data
	}
	r.to(reqNew, reqReady)
	r.to(reqReady, reqExecuting)
	c := s.exec(t.Context(), r)
	if c.parked {
		return c, r
	}
	c.data = bytes.Clone(c.data) // freeing r returns the result buffer
	r.to(reqExecuting, reqCompleting)
	r.free(reqCompleting)
	return c, r
}

// cmd is a command with SGL data pointer, as hosts send them; length is
// the data it moves either way (0: none).
func cmd(op uint8, nsid uint32, length int) nvme.Command {
	c := nvme.Command{Opcode: op, NSID: nsid, Flags: nvme.PSDTSGL}
	if length > 0 {
		c.DPTR = nvme.SGL{Length: uint32(length), Type: nvme.SGLTransportDataBlock}
	}
	return c
}

func rwCmd(op uint8, nsid uint32, lba uint64, nlb uint32) nvme.Command {
	c := cmd(op, nsid, int(nlb)*512)
	c.SetLBA(lba, nlb)
	return c
}

// bind connects s as queue qid of controller cntlid (0xFFFF: a new one)
// of subsystem nqn, as host, and for the admin queue enables it.
func bind(t *testing.T, s *session, nqn, host string, qid, cntlid uint16) {
	t.Helper()
	var c nvme.Command
	(&nvme.ConnectCommand{QID: qid, SQSize: 31}).ToCommand(&c)
	c.Flags |= nvme.PSDTSGL
	data := (&nvme.ConnectData{CNTLID: cntlid, SubNQN: nqn, HostNQN: host}).Marshal()
	if got, _ := run(t, s, c, data); !got.status.OK() {
		t.Fatalf("connect queue %d: %v", qid, got.status)
	}
	if qid == 0 {
		(&nvme.PropertyCommand{Offset: nvme.PropCC, Value: nvme.CCEnable | 6<<16 | 4<<20}).ToCommand(&c, true)
		if got, _ := run(t, s, c, nil); !got.status.OK() {
			t.Fatalf("enable: %v", got.status)
		}
	}
}

// ctrlrServer is a server with one 1 MiB namespace, never listening.
func ctrlrServer(t *testing.T) *Server {
	t.Helper()
	v, err := volume.Open("mem:1MiB")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	srv, err := New(Config{Subsystems: []SubsystemConfig{{NQN: testNQN, Namespaces: []NamespaceConfig{{Backend: v, Name: "ctrlr"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// TestControllerLayer runs commands of every set straight through the
// controller layer: the set-wide rules, each table's checks, and the
// handlers' results.
func TestControllerLayer(t *testing.T) {
	srv := ctrlrServer(t)
	fresh := newTestSession(srv)
	admin := newTestSession(srv)
	bind(t, admin, testNQN, "nqn.test:host", 0, 0xFFFF)
	io := newTestSession(srv)
	bind(t, io, testNQN, "nqn.test:host", 1, admin.ctrl.id)
	disc := newTestSession(srv)
	bind(t, disc, nvme.DiscoveryNQN, "nqn.test:host", 0, 0xFFFF)
	unready := newTestSession(srv)
	{
		var c nvme.Command
		(&nvme.ConnectCommand{SQSize: 31}).ToCommand(&c)
		c.Flags |= nvme.PSDTSGL
		data := (&nvme.ConnectData{CNTLID: 0xFFFF, SubNQN: testNQN, HostNQN: "nqn.test:other"}).Marshal()
		if got, _ := run(t, unready, c, data); !got.status.OK() {
			t.Fatal(got.status)
		}
	}

	pattern := bytes.Repeat([]byte("0123456789abcdef"), 4096/16)
	fabrics := func(typ uint8) nvme.Command {
		return nvme.Command{Opcode: nvme.AdminFabrics, Flags: nvme.PSDTSGL, NSID: uint32(typ)}
	}
	identify := func(cns uint32) nvme.Command {
		c := cmd(nvme.AdminIdentify, 0, nvme.IdentifySize)
		c.CDW10 = cns
		return c
	}
	withCDW10 := func(c nvme.Command, v uint32) nvme.Command { c.CDW10 = v; return c }
	prp := func(c nvme.Command) nvme.Command { c.Flags &^= 0xC0; return c }
	dsm := cmd(nvme.IODSM, 1, 8)
	for _, tc := range []struct {
		name  string
		s     *session
		sqe   nvme.Command
		data  []byte
		want  nvme.Status
		label string
		check func(t *testing.T, c completion)
	}{
		{name: "before connect", s: fresh, sqe: identify(nvme.CNSController), want: nvme.StatusCommandSequence | nvme.DNR},
		{name: "connect twice", s: admin, sqe: func() nvme.Command {
			var c nvme.Command
			(&nvme.ConnectCommand{SQSize: 31}).ToCommand(&c)
			c.Flags |= nvme.PSDTSGL
			return c
		}(), data: make([]byte, nvme.ConnectDataSize), want: nvme.StatusCommandSequence | nvme.DNR},
		{name: "unknown fabrics command", s: admin, sqe: fabrics(0x7E), want: nvme.StatusInvalidOpcode | nvme.DNR},
		{name: "property get CAP", s: admin, sqe: func() nvme.Command {
			var c nvme.Command
			(&nvme.PropertyCommand{Offset: nvme.PropCAP, Size8: true}).ToCommand(&c, false)
			return c
		}(), check: func(t *testing.T, c completion) {
			if got := nvme.CAPMaxQueueEntries(uint64(c.dw0) | uint64(c.dw1)<<32); got != 1024 {
				t.Errorf("CAP.MQES+1 = %d", got)
			}
		}},

		{name: "admin before CC.EN", s: unready, sqe: identify(nvme.CNSController), want: nvme.StatusCommandSequence | nvme.DNR},
		{name: "identify controller", s: admin, sqe: identify(nvme.CNSController), label: "", check: func(t *testing.T, c completion) {
			var id nvme.IdentifyController
			must(t, id.Unmarshal(c.data))
			if id.SubNQN != testNQN || id.CNTLID != admin.ctrl.id || id.CNTRLTYPE != 1 {
				t.Errorf("identify controller: %+v", id)
			}
		}},
		{name: "identify, SGL not a transport data block", s: admin, sqe: func() nvme.Command {
			c := identify(nvme.CNSController)
			c.DPTR.Type = nvme.SGLDataBlockOffset
			return c
		}(), want: nvme.StatusSGLTypeInvalid | nvme.DNR},
		{name: "keep alive without KATO", s: admin, sqe: cmd(nvme.AdminKeepAlive, 0, 0), want: nvme.StatusKATimeoutInvalid},
		{name: "abort", s: admin, sqe: cmd(nvme.AdminAbort, 0, 0), check: func(t *testing.T, c completion) {
			if c.dw0 != 1 {
				t.Errorf("abort DW0 %d, want 1 (not aborted)", c.dw0)
			}
		}},
		{name: "unknown admin opcode with host data", s: admin, sqe: cmd(0x7D, 0, 512), want: nvme.StatusInvalidOpcode | nvme.DNR},
		{name: "unknown admin opcode", s: admin, sqe: cmd(0x7C, 0, 0), want: nvme.StatusInvalidOpcode | nvme.DNR},
		{name: "set features timestamp without SGL", s: admin, sqe: prp(withCDW10(cmd(nvme.AdminSetFeatures, 0, 8), uint32(nvme.FeatTimestamp))), want: nvme.StatusInvalidField | nvme.DNR},

		{name: "function load without runtimes", s: admin, sqe: func() nvme.Command {
			c := cmd(nvme.AdminFunctionLoad, 0, 16)
			c.CDW11 = 16
			return c
		}(), data: make([]byte, 16), want: nvme.StatusFunctionRejected | nvme.DNR},
		{name: "function load, size disagrees with SGL", s: admin, sqe: func() nvme.Command {
			c := cmd(nvme.AdminFunctionLoad, 0, 16)
			c.CDW11 = 17
			return c
		}(), want: nvme.StatusInvalidField | nvme.DNR},
		{name: "extent map put on no namespace", s: admin, sqe: cmd(nvme.AdminExtentMapPut, 9, 16), data: make([]byte, 16), label: "extent_map_put", want: nvme.StatusInvalidNamespace | nvme.DNR},
		{name: "extent map put, short payload", s: admin, sqe: cmd(nvme.AdminExtentMapPut, 1, 8), want: nvme.StatusSGLDataLenInvalid | nvme.DNR},
		{name: "grant release of nothing", s: admin, sqe: cmd(nvme.AdminGrantRelease, 1, 0), label: "grant_release", check: func(t *testing.T, c completion) {
			if c.dw0 != 0 {
				t.Errorf("DW0 %d, want 0: no grant was held", c.dw0)
			}
		}},
		{name: "extent map query", s: admin, sqe: cmd(nvme.AdminExtentMapQuery, 1, 64), data: make([]byte, 16), label: "extent_map_query", check: func(t *testing.T, c completion) {
			if c.dw0 != 2 || len(c.data) != queryResultHeader+2*queryEntrySize {
				t.Errorf("query of 2 inodes: DW0 %d, %d bytes", c.dw0, len(c.data))
			}
		}},

		{name: "discovery: log page", s: disc, sqe: func() nvme.Command {
			var c nvme.Command
			(&nvme.GetLogPageCommand{LID: nvme.LogDiscovery, Length: 2048}).ToCommand(&c)
			c.Flags |= nvme.PSDTSGL
			c.DPTR = nvme.SGL{Length: 2048, Type: nvme.SGLTransportDataBlock}
			return c
		}(), check: func(t *testing.T, c completion) {
			if len(c.data) != 2048 || !bytes.Contains(c.data, []byte(testNQN)) {
				t.Errorf("discovery log of %d bytes does not list %s", len(c.data), testNQN)
			}
		}},
		{name: "discovery: abort", s: disc, sqe: cmd(nvme.AdminAbort, 0, 0), want: nvme.StatusInvalidOpcode | nvme.DNR},
		{name: "discovery: vendor command", s: disc, sqe: cmd(nvme.AdminFunctionList, 0, 64), want: nvme.StatusInvalidOpcode | nvme.DNR},
		{name: "discovery: extent map put", s: disc, sqe: cmd(nvme.AdminExtentMapPut, 1, 16), want: nvme.StatusInvalidOpcode | nvme.DNR},

		{name: "write", s: io, sqe: rwCmd(nvme.IOWrite, 1, 8, 8), data: pattern, label: "write"},
		{name: "read back", s: io, sqe: rwCmd(nvme.IORead, 1, 8, 8), label: "read", check: func(t *testing.T, c completion) {
			if !bytes.Equal(c.data, pattern) {
				t.Error("read back differs from what was written")
			}
		}},
		{name: "write without SGL", s: io, sqe: prp(rwCmd(nvme.IOWrite, 1, 8, 8)), want: nvme.StatusInvalidField | nvme.DNR},
		{name: "read past the end", s: io, sqe: rwCmd(nvme.IORead, 1, 2047, 2), want: nvme.StatusLBAOutOfRange | nvme.DNR},
		{name: "read longer than MDTS", s: io, sqe: rwCmd(nvme.IORead, 1, 0, 1025), want: nvme.StatusInvalidField | nvme.DNR},
		{name: "read of no namespace", s: io, sqe: rwCmd(nvme.IORead, 9, 0, 1), want: nvme.StatusInvalidNamespace | nvme.DNR},
		{name: "unknown I/O opcode", s: io, sqe: cmd(0x7E, 1, 0), want: nvme.StatusInvalidOpcode | nvme.DNR},
		{name: "flush every namespace", s: io, sqe: cmd(nvme.IOFlush, 0xFFFFFFFF, 0), label: "flush"},
		{name: "write zeroes past the end", s: io, sqe: rwCmd(nvme.IOWriteZeroes, 1, 2040, 16), label: "write_zeroes", want: nvme.StatusLBAOutOfRange | nvme.DNR},
		{name: "dataset management, too little data", s: io, sqe: withCDW10(dsm, 1), want: nvme.StatusSGLDataLenInvalid | nvme.DNR},
		{name: "pushdown, bad request", s: io, sqe: cmd(nvme.IOPushdownRead, 1, 64), data: make([]byte, 64), label: "pushdown", want: nvme.StatusBadFunctionRequest | nvme.DNR},
		{name: "reservation report", s: io, sqe: func() nvme.Command {
			c := cmd(nvme.IOReservationReport, 1, 64)
			c.CDW10, c.CDW11 = 64/4-1, nvme.ReportEDS
			return c
		}(), label: "resv_report", check: func(t *testing.T, c completion) {
			if len(c.data) != 64 {
				t.Errorf("report of %d bytes, want 64", len(c.data))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, r := run(t, tc.s, tc.sqe, tc.data)
			if c.status != tc.want {
				t.Fatalf("status %v, want %v", c.status, tc.want)
			}
			if tc.want == 0 && r.op != tc.label || tc.label != "" && r.op != tc.label {
				t.Errorf("metrics label %q, want %q", r.op, tc.label)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

// TestControllerAccessClasses: the reservation and grant checks an entry's
// access class calls for run before its handler, for every command of the
// class, and no others.
func TestControllerAccessClasses(t *testing.T) {
	srv := ctrlrServer(t)
	admin := newTestSession(srv)
	bind(t, admin, testNQN, "nqn.test:reader", 0, 0xFFFF)
	io := newTestSession(srv)
	bind(t, io, testNQN, "nqn.test:reader", 1, admin.ctrl.id)
	// Another host holds a Write Exclusive reservation: reads are allowed,
	// writes conflict.
	resv := &srv.subsys[testNQN].namespace(1).resv
	if st := resv.register("nqn.test:owner", [16]byte{}, 0, 0, 1); !st.OK() {
		t.Fatal(st)
	}
	if st := resv.acquire("nqn.test:owner", nvme.ReservationAcquireCDW10(nvme.AcquireActionAcquire, false, nvme.ResvWriteExclusive), 1, 0); !st.OK() {
		t.Fatal(st)
	}
	conflict := nvme.StatusReservationConflict | nvme.DNR
	dealloc := cmd(nvme.IODSM, 1, 16)
	dealloc.CDW11 = 1 << 2
	for _, tc := range []struct {
		name string
		sqe  nvme.Command
		data []byte
		want nvme.Status
	}{
		{"read", rwCmd(nvme.IORead, 1, 0, 1), nil, 0},
		{"write", rwCmd(nvme.IOWrite, 1, 0, 1), make([]byte, 512), conflict},
		{"write zeroes", rwCmd(nvme.IOWriteZeroes, 1, 0, 1), nil, conflict},
		{"flush", cmd(nvme.IOFlush, 1, 0), nil, conflict},
		{"flush of every namespace", cmd(nvme.IOFlush, 0xFFFFFFFF, 0), nil, 0},
		{"dataset management", dealloc, make([]byte, 16), conflict},
		{"λ write", cmd(nvme.IOLambdaWrite, 1, 64), make([]byte, 64), conflict},
		{"pushdown", cmd(nvme.IOPushdownRead, 1, 64), make([]byte, 64), nvme.StatusBadFunctionRequest | nvme.DNR},
		{"reservation report", func() nvme.Command {
			c := cmd(nvme.IOReservationReport, 1, 64)
			c.CDW10, c.CDW11 = 64/4-1, nvme.ReportEDS
			return c
		}(), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, _ := run(t, io, tc.sqe, tc.data); c.status != tc.want {
				t.Fatalf("status %v, want %v", c.status, tc.want)
			}
		})
	}
}

// TestCommandTables: every entry has a handler, and an entry marked fast
// (run on the reader for in-memory backends) is a plain read or write.
func TestCommandTables(t *testing.T) {
	cs := newCommandSets()
	for set, tbl := range map[string]*cmdTable{"fabrics": cs.fabrics, "admin": cs.admin, "io": cs.io} {
		for opc, spec := range tbl {
			op := uint8(opc)
			if spec == nil {
				continue
			}
			if spec.exec == nil {
				t.Errorf("%s %#x: no handler", set, op)
			}
			if spec.fast && (set != "io" || op != nvme.IORead && op != nvme.IOWrite) {
				t.Errorf("%s %#x: fast, but not a read or write", set, op)
			}
			if spec.dir == dirIn && spec.check == nil {
				t.Errorf("%s %#x: takes host data but nothing says how much", set, op)
			}
		}
	}
	for opc, spec := range cs.admin {
		if op := uint8(opc); spec != nil && nvme.IsVendorAdmin(op) && (!spec.blocking || spec.discovery) {
			t.Errorf("admin %#x: a vendor command must run off the reader and not on the discovery controller", op)
		}
	}
}

// TestRequestLifecycle: moves outside the diagram panic, and a parked
// request is freed by exactly one of the event and the teardown.
func TestRequestLifecycle(t *testing.T) {
	var pool bufPool
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	r := newRequest(nvme.Command{CID: 7}, &pool)
	r.takeCapsule(100)
	mustPanic("skip executing", func() { r.to(reqNew, reqParked) })
	r.to(reqNew, reqReady)
	mustPanic("from a state it is not in", func() { r.to(reqNew, reqReady) })
	r.to(reqReady, reqExecuting)
	r.resultBuf(10)
	mustPanic("a second result buffer", func() { r.resultBuf(10) })
	r.to(reqExecuting, reqParked)
	if !r.tryTo(reqParked, reqCompleting) {
		t.Fatal("the event could not take the parked request")
	}
	if r.tryFree(reqParked) {
		t.Fatal("teardown freed a request the event had taken")
	}
	r.free(reqCompleting)
	if r.capsule != nil || r.result != nil || r.current() != reqFree {
		t.Fatalf("after free: state %v, buffers %v %v", r.current(), r.capsule != nil, r.result != nil)
	}
	mustPanic("free twice", func() { r.free(reqCompleting) })
}

// TestAsyncEventParks: an AER parks until an event, which completes it
// through the queue pair.
func TestAsyncEventParks(t *testing.T) {
	srv := ctrlrServer(t)
	admin := newTestSession(srv)
	bind(t, admin, testNQN, "nqn.test:host", 0, 0xFFFF)
	aer := cmd(nvme.AdminAsyncEvent, 0, 0)
	aer.CID = 42
	c, r := run(t, admin, aer, nil)
	if !c.parked || r.current() != reqParked {
		t.Fatalf("AER: %+v in state %v, want parked", c, r.current())
	}
	if _, err := srv.AddNamespace(testNQN, NamespaceConfig{Backend: srv.subsys[testNQN].namespace(1).backend, Name: "again"}); err != nil {
		t.Fatal(err)
	}
	qp := admin.qp.(*testQP)
	qp.mu.Lock()
	got, ok := qp.parked[42]
	qp.mu.Unlock()
	if !ok || got.dw0 != aenNoticeNSChanged {
		t.Fatalf("parked AER completed %v with %+v", ok, got)
	}
}
