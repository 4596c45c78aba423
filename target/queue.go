package target

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
)

// queue is one TCP connection: one NVMe queue pair.
type queue struct {
	srv  *Server
	conn net.Conn
	f    *tcp.Framer
	w    *tcp.Writer
	log  *slog.Logger

	// Set once by Connect, read-only afterwards (the reader goroutine sets
	// them before any command that reads them is dispatched).
	ctrl       *controller
	ss         *subsystem
	qid        uint16
	depth      int
	noSQFlow   bool
	maxXfer    int
	sqhd       atomic.Uint32
	discovery  bool
	readerDone chan struct{}

	mu    sync.Mutex
	cmds  map[uint16]*command // outstanding commands by CID
	tags  []*command          // commands waiting for H2C data, by transfer tag
	freeT []uint16

	executing tracker
	stopped   atomic.Bool
	closeOnce sync.Once
}

// command is one command from capsule to completion.
type command struct {
	sqe    nvme.Command
	ns     *namespace
	data   []byte // host-to-controller data, once gathered
	buf    []byte // pooled buffer behind data, if any
	want   int    // bytes of H2C data expected
	got    int
	ttag   uint16
	status nvme.Status // a failure found while gathering data
	start  time.Time
	op     string
	bidir  bool // data both ways: the request in-capsule, the result by C2HData
	inCap  int  // bidirectional: the result buffer's size
	// inline means the reader goroutine itself executes the command and
	// sends its completion, so the completion may stay buffered: the
	// reader flushes before it next waits for input. Set only by dispatch,
	// on the reader, just before the synchronous execution.
	inline bool
}

func newQueue(s *Server, c net.Conn) *queue {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	q := &queue{
		srv:        s,
		conn:       c,
		log:        s.log.With("remote", c.RemoteAddr().String()),
		cmds:       make(map[uint16]*command),
		readerDone: make(chan struct{}),
	}
	// The framer reads through flushingReader, so whatever the reader
	// goroutine left buffered goes out before it can block on the socket.
	q.f = tcp.NewFramer(struct {
		io.Reader
		io.Writer
	}{flushingReader{q}, c}, tcp.RoleController, 64<<10)
	q.f.MaxCapsuleData = adminInCapsuleData
	q.f.MaxData = s.cfg.MaxH2CData
	q.w = tcp.NewWriter(q.f)
	return q
}

// The queue writes through a tcp.Writer, and the rule that keeps a
// completion from being stranded in its buffer is this: Do flushes (or
// leaves the flush to a Do already queued behind it, which flushes for
// both), so any goroutine may use it. Defer leaves its bytes buffered and
// is for the queue's reader goroutine only, because only the reader is sure
// to flush later: it does so before every read from the connection
// (flushingReader). So everything the reader defers while it works through
// one burst of input leaves in one write when the input runs dry, and
// nothing waits in the buffer while the reader waits for the host.
//
// flushingReader is the connection as the queue's framer reads it: it
// flushes the deferred PDUs before each read, which is the only place the
// reader goroutine can block waiting for the host. bufio calls it only
// when its buffer cannot satisfy the framer, so a burst of commands that
// arrived together is parsed and executed before anything is written.
type flushingReader struct{ q *queue }

func (r flushingReader) Read(p []byte) (int, error) {
	if err := r.q.w.Flush(); err != nil {
		return 0, fmt.Errorf("send completions: %w", err)
	}
	if r.q.stopped.Load() {
		// stopReading's deadline can be lost to a Connect clearing the
		// idle deadline; the flag cannot, and Shutdown waits for readers.
		return 0, os.ErrDeadlineExceeded
	}
	return r.q.conn.Read(p)
}

// serve runs the queue's reader until the connection ends.
func (q *queue) serve() {
	defer q.teardown()
	defer close(q.readerDone)
	_ = q.conn.SetReadDeadline(time.Now().Add(q.srv.cfg.IdleTimeout))
	if err := q.initialize(); err != nil {
		q.fail(err)
		return
	}
	for {
		h, err := q.f.ReadHeader()
		if err != nil {
			q.fail(err)
			return
		}
		switch h.Type {
		case tcp.TypeCapsuleCmd:
			err = q.handleCapsule(h)
		case tcp.TypeH2CData:
			err = q.handleH2CData(h)
		case tcp.TypeH2CTermReq:
			tr := h.TermReq()
			q.log.Warn("host terminated the connection", "fes", tr.FES, "fei", tr.FEI)
			return
		default: // a second ICReq
			err = &tcp.FatalError{FES: tcp.FESPDUSequenceError, Header: append([]byte(nil), h.Raw()...), Reason: "ICReq after initialization"}
		}
		if err != nil {
			q.fail(err)
			return
		}
	}
}

// initialize performs the ICReq/ICResp exchange.
func (q *queue) initialize() error {
	h, err := q.f.ReadHeader()
	if err != nil {
		return err
	}
	if h.Type != tcp.TypeICReq {
		return &tcp.FatalError{FES: tcp.FESPDUSequenceError, Header: append([]byte(nil), h.Raw()...), Reason: "first PDU is not an ICReq"}
	}
	req := h.ICReq()
	if req.PFV != 0 {
		return &tcp.FatalError{FES: tcp.FESInvalidHeaderField, FEI: 8, Header: append([]byte(nil), h.Raw()...), Reason: "unsupported PDU format version"}
	}
	if req.HPDA > 31 {
		return &tcp.FatalError{FES: tcp.FESInvalidHeaderField, FEI: 10, Header: append([]byte(nil), h.Raw()...), Reason: "HPDA out of range"}
	}
	resp := tcp.ICResp{CPDA: 0, Digest: req.Digest & (tcp.DigestHeader | tcp.DigestData), MaxH2CData: uint32(q.srv.cfg.MaxH2CData)}
	err = q.w.Do(func(f *tcp.Framer) error { return f.WriteICResp(resp) })
	q.f.HeaderDigest = resp.Digest&tcp.DigestHeader != 0
	q.f.DataDigest = resp.Digest&tcp.DigestData != 0
	q.f.SendAlign = (int(req.HPDA) + 1) * 4
	return err
}

// fail ends the connection after a read error: a fatal transport error is
// reported to the host with a C2HTermReq first.
func (q *queue) fail(err error) {
	var fe *tcp.FatalError
	switch {
	case errors.As(err, &fe):
		q.log.Warn("fatal transport error: terminating connection", "err", err)
		q.srv.metrics.error("transport")
		_ = q.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = q.w.Do(func(f *tcp.Framer) error { return f.WriteTermReq(tcp.TermReq{FES: fe.FES, FEI: fe.FEI}, fe.Header) })
	case q.stopped.Load() && errors.Is(err, os.ErrDeadlineExceeded):
		// Shutdown stopped the reader; completions may still go out.
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		q.log.Debug("connection closed", "qid", q.qid)
	default:
		q.log.Info("connection lost", "qid", q.qid, "err", err)
	}
}

// teardown runs when the reader stops: it waits for commands still
// executing to send their completions, then closes the connection and
// detaches from the controller. Commands still waiting for data are dropped
// unexecuted.
func (q *queue) teardown() {
	<-q.executing.idle()
	// The reader may have stopped with deferred PDUs buffered (a TermReq
	// from the host ends it without another read).
	_ = q.w.Flush()
	q.close()
	if q.ctrl != nil {
		q.ctrl.detach(q.qid, q)
	}
	q.mu.Lock()
	for cid, c := range q.cmds {
		q.srv.bufs.put(c.buf)
		delete(q.cmds, cid)
	}
	q.tags = nil
	q.mu.Unlock()
}

// stopReading makes the reader stop at the next PDU boundary it reaches
// while letting completions out: used by graceful shutdown.
func (q *queue) stopReading() {
	q.stopped.Store(true)
	_ = q.conn.SetReadDeadline(time.Now())
}

func (q *queue) close() {
	q.closeOnce.Do(func() { q.conn.Close() })
}

// handleCapsule decodes a command capsule, gathers its data and runs it.
func (q *queue) handleCapsule(h *tcp.Header) error {
	cmd := &command{sqe: h.Command(), start: time.Now()}
	q.sqhd.Store((q.sqhd.Load() + 1) % uint32(max(q.depth, 1)))
	var icd []byte
	var icdBuf []byte
	if h.DataLen > 0 {
		icdBuf = q.srv.bufs.get(h.DataLen)
		icd = icdBuf[:h.DataLen]
		if err := q.f.ReadData(icd); err != nil {
			if !errors.Is(err, tcp.ErrDataDigest) {
				q.srv.bufs.put(icdBuf)
				return err
			}
			cmd.status = nvme.StatusTransientTransport
		}
	}
	if q.ctrl != nil {
		q.ctrl.touch()
	}
	q.mu.Lock()
	if q.cmds[cmd.sqe.CID] != nil {
		q.mu.Unlock()
		q.srv.bufs.put(icdBuf)
		q.sendStatus(cmd.sqe.CID, nvme.StatusCIDConflict|nvme.DNR, 0)
		return nil
	}
	if len(q.cmds) >= max(q.depth, 1) {
		q.mu.Unlock()
		q.srv.bufs.put(icdBuf)
		return &tcp.FatalError{FES: tcp.FESPDUSequenceError, Header: append([]byte(nil), h.Raw()...), Reason: "submission queue overrun"}
	}
	q.cmds[cmd.sqe.CID] = cmd
	q.mu.Unlock()

	if cmd.status != 0 {
		q.srv.bufs.put(icdBuf)
		q.complete(cmd, cmd.status, 0)
		return nil
	}
	want, st := q.prepare(cmd)
	if st != 0 {
		q.srv.bufs.put(icdBuf)
		q.complete(cmd, st, 0)
		return nil
	}
	if cmd.bidir {
		// nearstore's bidirectional commands: the request is the whole
		// in-capsule data; DPTR describes the result buffer.
		sgl := cmd.sqe.DPTR
		switch {
		case len(icd) == 0:
			q.srv.bufs.put(icdBuf)
			q.complete(cmd, nvme.StatusSGLDataLenInvalid|nvme.DNR, 0)
		case sgl.Type != nvme.SGLTransportDataBlock:
			q.srv.bufs.put(icdBuf)
			q.complete(cmd, nvme.StatusSGLTypeInvalid|nvme.DNR, 0)
		case int(sgl.Length) < 32 || int(sgl.Length) > q.maxXfer:
			q.srv.bufs.put(icdBuf)
			q.complete(cmd, nvme.StatusSGLDataLenInvalid|nvme.DNR, 0)
		default:
			cmd.buf, cmd.data, cmd.inCap = icdBuf, icd, int(sgl.Length)
			q.dispatch(cmd)
		}
		return nil
	}
	if want == 0 {
		q.srv.bufs.put(icdBuf)
		q.dispatch(cmd)
		return nil
	}
	sgl := cmd.sqe.DPTR
	switch sgl.Type {
	case nvme.SGLDataBlockOffset:
		if sgl.Length != uint32(want) {
			q.srv.bufs.put(icdBuf)
			q.complete(cmd, nvme.StatusSGLDataLenInvalid|nvme.DNR, 0)
			return nil
		}
		if sgl.Address > uint64(len(icd)) || uint64(len(icd))-sgl.Address < uint64(want) {
			q.srv.bufs.put(icdBuf)
			q.complete(cmd, nvme.StatusSGLOffsetInvalid|nvme.DNR, 0)
			return nil
		}
		cmd.buf = icdBuf
		cmd.data = icd[sgl.Address : sgl.Address+uint64(want)]
		q.dispatch(cmd)
		return nil
	case nvme.SGLTransportDataBlock:
		q.srv.bufs.put(icdBuf)
		if sgl.Length != uint32(want) {
			q.complete(cmd, nvme.StatusSGLDataLenInvalid|nvme.DNR, 0)
			return nil
		}
		cmd.buf = q.srv.bufs.get(want)
		cmd.data = cmd.buf[:want]
		cmd.want = want
		q.mu.Lock()
		cmd.ttag = q.allocTagLocked(cmd)
		q.mu.Unlock()
		r2t := tcp.DataHeader{CCCID: cmd.sqe.CID, TTag: cmd.ttag, Offset: 0, Length: uint32(want)}
		// Deferred: the reader flushes before it waits for the data this
		// asks for.
		if err := q.w.Defer(func(f *tcp.Framer) error { return f.WriteR2T(r2t) }); err != nil {
			return err
		}
		return nil
	default:
		q.srv.bufs.put(icdBuf)
		q.complete(cmd, nvme.StatusSGLTypeInvalid|nvme.DNR, 0)
		return nil
	}
}

func (q *queue) allocTagLocked(cmd *command) uint16 {
	if n := len(q.freeT); n > 0 {
		t := q.freeT[n-1]
		q.freeT = q.freeT[:n-1]
		q.tags[t] = cmd
		return t
	}
	q.tags = append(q.tags, cmd)
	return uint16(len(q.tags) - 1)
}

// handleH2CData places data the host sends after an R2T.
func (q *queue) handleH2CData(h *tcp.Header) error {
	dh := h.Data()
	q.mu.Lock()
	var cmd *command
	if int(dh.TTag) < len(q.tags) {
		cmd = q.tags[dh.TTag]
	}
	q.mu.Unlock()
	raw := func(reason string, fes uint16, fei uint32) error {
		return &tcp.FatalError{FES: fes, FEI: fei, Header: append([]byte(nil), h.Raw()...), Reason: reason}
	}
	if cmd == nil {
		return raw("H2CData for an unknown transfer tag", tcp.FESInvalidHeaderField, 10)
	}
	if cmd.sqe.CID != dh.CCCID {
		return raw("H2CData CCCID does not match the transfer tag", tcp.FESInvalidHeaderField, 8)
	}
	if int(dh.Offset) != cmd.got {
		return raw("H2CData out of order", tcp.FESDataOutOfRange, 12)
	}
	if int(dh.Offset)+int(dh.Length) > cmd.want {
		return raw("H2CData beyond the R2T", tcp.FESDataOutOfRange, 16)
	}
	if err := q.f.ReadData(cmd.data[dh.Offset : dh.Offset+dh.Length]); err != nil {
		if !errors.Is(err, tcp.ErrDataDigest) {
			return err
		}
		cmd.status = nvme.StatusTransientTransport
	}
	cmd.got += int(dh.Length)
	last := h.Flags&tcp.FlagLastPDU != 0
	if last != (cmd.got == cmd.want) {
		return raw("LAST_PDU flag does not match the end of the data", tcp.FESPDUSequenceError, 1)
	}
	if !last {
		return nil
	}
	q.mu.Lock()
	q.tags[cmd.ttag] = nil
	q.freeT = append(q.freeT, cmd.ttag)
	q.mu.Unlock()
	if cmd.status != 0 {
		q.complete(cmd, cmd.status, 0)
		return nil
	}
	q.dispatch(cmd)
	return nil
}

// dispatch runs a command whose data is in hand: fabrics and admin
// commands inline, reads and writes of in-memory backends inline too, other
// NVM commands in their own goroutine.
func (q *queue) dispatch(cmd *command) {
	switch {
	case q.ctrl == nil:
		if cmd.sqe.Opcode == nvme.AdminFabrics && cmd.sqe.FabricsType() == nvme.FabricsConnect {
			q.connect(cmd)
			return
		}
		q.complete(cmd, nvme.StatusCommandSequence|nvme.DNR, 0)
	case cmd.sqe.Opcode == nvme.AdminFabrics:
		q.fabrics(cmd)
	case q.qid == 0 && nvme.IsVendorAdmin(cmd.sqe.Opcode):
		q.executing.add()
		q.srv.inflight.add()
		go func() {
			defer q.srv.inflight.done()
			defer q.executing.done()
			q.adminFunction(cmd)
		}()
	case q.qid == 0:
		q.admin(cmd)
	case runsInline(cmd):
		// The backend answers in far less time than a goroutine switch
		// takes, so the reader runs the command itself and its completion
		// joins the others of this burst in one write.
		cmd.inline = true
		q.execIO(cmd)
	default:
		q.executing.add()
		q.srv.inflight.add()
		go func() {
			defer q.srv.inflight.done()
			defer q.executing.done()
			q.execIO(cmd)
		}()
	}
}

// sendStatus sends a completion for a CID that has no command record (a
// CID conflict must not disturb the command already holding the CID).
// Only the reader sends these, so the completion may wait for its flush.
func (q *queue) sendStatus(cid uint16, st nvme.Status, dw0 uint32) {
	cqe := nvme.Completion{DW0: dw0, SQHead: uint16(q.sqhd.Load()), SQID: q.qid, CID: cid, Status: st}
	if err := q.w.Defer(func(f *tcp.Framer) error { return f.WriteCapsuleResp(&cqe) }); err != nil {
		q.close()
	}
}

// complete releases a command's CID and sends its completion.
func (q *queue) complete(cmd *command, st nvme.Status, dw0 uint32) {
	q.completeWith(cmd, st, dw0, 0, nil)
}

// completeWith sends read data (in C2HData PDUs) and then the completion,
// all under one writer turn so they leave together. A completion the
// reader sends for a command it ran inline is only buffered (see
// flushingReader); any other goes out at once.
func (q *queue) completeWith(cmd *command, st nvme.Status, dw0, dw1 uint32, in []byte) {
	q.mu.Lock()
	if q.cmds[cmd.sqe.CID] == cmd {
		delete(q.cmds, cmd.sqe.CID)
	}
	q.mu.Unlock()
	if !st.OK() && q.ctrl != nil {
		nsid := cmd.sqe.NSID
		var lba uint64
		if cmd.ns != nil {
			lba = cmd.sqe.SLBA()
		}
		q.ctrl.recordError(q.qid, cmd.sqe.CID, st, nsid, lba)
	}
	// Count the command before its completion leaves: a host that has
	// seen the completion and then scrapes the metrics must find it.
	q.srv.metrics.observe(q, cmd, st, len(in))
	cqe := nvme.Completion{DW0: dw0, DW1: dw1, SQHead: uint16(q.sqhd.Load()), SQID: q.qid, CID: cmd.sqe.CID, Status: st}
	chunk := q.srv.cfg.C2HChunk
	send := q.w.Do
	if cmd.inline {
		send = q.w.Defer
	}
	err := send(func(f *tcp.Framer) error {
		if st.OK() {
			for off := 0; off < len(in); off += chunk {
				end := min(off+chunk, len(in))
				last := end == len(in)
				success := last && q.noSQFlow
				dh := tcp.DataHeader{CCCID: cmd.sqe.CID, Offset: uint32(off)}
				if err := f.WriteC2HData(dh, last, success, in[off:end]); err != nil {
					return err
				}
				if success {
					return nil
				}
			}
		}
		return f.WriteCapsuleResp(&cqe)
	})
	q.srv.bufs.put(cmd.buf)
	cmd.buf, cmd.data = nil, nil
	if err != nil {
		q.close()
	}
}

// completeAER completes a held Asynchronous Event Request.
func (q *queue) completeAER(cid uint16, dw0 uint32) {
	q.mu.Lock()
	cmd := q.cmds[cid]
	q.mu.Unlock()
	if cmd != nil {
		q.complete(cmd, nvme.StatusSuccess, dw0)
	}
}

// tracker counts running work and says when there is none.
type tracker struct {
	mu   sync.Mutex
	n    int
	zero chan struct{}
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
	t.mu.Unlock()
}

// idle returns a channel closed once nothing is running.
func (t *tracker) idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	return t.zero
}
