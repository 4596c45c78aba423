package target

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
	"github.com/nearstore/nearstore/sandbox"
)

// The connection layer: one conn per TCP connection, one NVMe queue pair.
// It parses PDUs, gathers a command's data (in-capsule, or asked for with
// R2T and placed from H2CData), hands the command to the controller layer
// (session.exec) on the reader or on a goroutine of its own, and sends the
// result back as C2HData and a response capsule. It knows what a command
// moves, never what it means.

// conn is one TCP connection: one NVMe queue pair.
type conn struct {
	srv  *Server
	nc   net.Conn
	in   *tcp.PollReader // nc, polled while the host's next PDU is due
	f    *tcp.Framer
	w    *tcp.Writer
	sess session

	// ctx is what the queue's commands run under: cancelled when the
	// connection fails or closes, or the server's shutdown grace period
	// ends, so that a function or a compile stops with it.
	ctx    context.Context
	cancel context.CancelFunc

	// Set by the reader once Connect has bound the queue, read-only
	// afterwards (goroutines executing commands start later).
	connected  bool
	depth      int
	noSQFlow   bool
	sqhd       atomic.Uint32
	readerDone chan struct{}

	mu   sync.Mutex
	cmds map[uint16]*request // outstanding commands by CID
	// outstanding is len(cmds), for lingering writers to read unlocked.
	outstanding atomic.Int32
	tags        []*request // requests awaiting H2C data, by transfer tag
	freeT       []uint16

	executing tracker
	stopped   atomic.Bool
	closeOnce sync.Once
}

func newConn(s *Server, c net.Conn) *conn {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	q := &conn{
		srv:        s,
		nc:         c,
		cmds:       make(map[uint16]*request),
		readerDone: make(chan struct{}),
	}
	q.ctx, q.cancel = context.WithCancel(s.ctx)
	q.sess = session{srv: s, qp: q, log: s.log.With("remote", c.RemoteAddr().String()), local: c.LocalAddr()}
	// The framer reads through flushingReader, so whatever the reader
	// goroutine left buffered goes out before it can block on the socket,
	// and flushingReader reads through a PollReader.
	q.in = tcp.NewPollReader(c, s.cfg.PollSpin, nil)
	q.f = tcp.NewFramer(tcp.Duplex{R: flushingReader{q}, W: tcp.NewRawWriter(c)}, tcp.RoleController, 64<<10)
	q.f.MaxCapsuleData = adminInCapsuleData
	q.f.MaxData = s.cfg.MaxH2CData
	q.w = tcp.NewWriter(q.f)
	// A completer lingers when other commands are outstanding: they may
	// be about to complete too.
	q.w.SetLinger(func() bool { return q.outstanding.Load() > 0 })
	return q
}

// The queue writes through a tcp.Writer, and the rule that keeps a
// completion from being stranded in its buffer is this: Do writes (or
// leaves its PDUs to the goroutine writing the connection at that moment,
// which writes them before it lets go), so any goroutine may use it. Its
// data (a volume's buffer) is copied when it is framed, or written before
// Do returns, so the request may free it at once. Defer leaves its bytes buffered and
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
type flushingReader struct{ q *conn }

func (r flushingReader) Read(p []byte) (int, error) {
	if err := r.q.w.Flush(); err != nil {
		return 0, fmt.Errorf("send completions: %w", err)
	}
	if r.q.stopped.Load() {
		// stopReading's deadline can be lost to a Connect clearing the
		// idle deadline; the flag cannot, and Shutdown waits for readers.
		return 0, os.ErrDeadlineExceeded
	}
	return r.q.in.Read(p)
}

// serve runs the queue's reader until the connection ends.
func (q *conn) serve() {
	defer q.teardown()
	defer close(q.readerDone)
	_ = q.nc.SetReadDeadline(time.Now().Add(q.srv.cfg.IdleTimeout))
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
			q.sess.log.Warn("host terminated the connection", "fes", tr.FES, "fei", tr.FEI)
			q.cancel()
			return
		default: // a second ICReq
			err = fatal(h, tcp.FESPDUSequenceError, 0, "ICReq after initialization")
		}
		if err != nil {
			q.fail(err)
			return
		}
	}
}

// fatal is a fatal transport error about the PDU with header h.
func fatal(h *tcp.Header, fes uint16, fei uint32, reason string) error {
	return &tcp.FatalError{FES: fes, FEI: fei, Header: append([]byte(nil), h.Raw()...), Reason: reason}
}

// initialize performs the ICReq/ICResp exchange.
func (q *conn) initialize() error {
	h, err := q.f.ReadHeader()
	if err != nil {
		return err
	}
	if h.Type != tcp.TypeICReq {
		return fatal(h, tcp.FESPDUSequenceError, 0, "first PDU is not an ICReq")
	}
	req := h.ICReq()
	if req.PFV != 0 {
		return fatal(h, tcp.FESInvalidHeaderField, 8, "unsupported PDU format version")
	}
	if req.HPDA > 31 {
		return fatal(h, tcp.FESInvalidHeaderField, 10, "HPDA out of range")
	}
	resp := tcp.ICResp{CPDA: 0, Digest: req.Digest & (tcp.DigestHeader | tcp.DigestData), MaxH2CData: uint32(q.srv.cfg.MaxH2CData)}
	err = q.w.Do(func(f *tcp.Framer) error { return f.WriteICResp(resp) })
	q.f.HeaderDigest = resp.Digest&tcp.DigestHeader != 0
	q.f.DataDigest = resp.Digest&tcp.DigestData != 0
	q.f.SendAlign = (int(req.HPDA) + 1) * 4
	return err
}

// fail ends the connection after a read error: a fatal transport error is
// reported to the host with a C2HTermReq first. Unless Shutdown stopped
// the reader, the queue's commands are cancelled: nobody is left to take
// their completions.
func (q *conn) fail(err error) {
	var fe *tcp.FatalError
	log := q.sess.log
	switch {
	case errors.As(err, &fe):
		log.Warn("fatal transport error: terminating connection", "err", err)
		q.srv.metrics.error("transport")
		_ = q.nc.SetWriteDeadline(time.Now().Add(time.Second))
		// Synced: the teardown that follows closes the connection.
		if q.w.Defer(func(f *tcp.Framer) error { return f.WriteTermReq(tcp.TermReq{FES: fe.FES, FEI: fe.FEI}, fe.Header) }) == nil {
			_ = q.w.Sync()
		}
	case q.stopped.Load() && errors.Is(err, os.ErrDeadlineExceeded):
		// Shutdown stopped the reader; completions may still go out.
		return
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		log.Debug("connection closed", "qid", q.sess.qid)
	default:
		log.Info("connection lost", "qid", q.sess.qid, "err", err)
	}
	q.cancel()
}

// teardown runs when the reader stops. Unless the queue's context has
// ended, it waits for the commands still executing to send their
// completions (graceful shutdown); then it closes the connection, detaches
// from the controller and frees the requests the reader owns: those still
// waiting for data, dropped unexecuted, and parked ones. A command still
// executing frees itself when it completes, into a closed connection: a
// backend call cannot be interrupted, and nothing waits for it.
func (q *conn) teardown() {
	select {
	case <-q.executing.idle():
	case <-q.ctx.Done():
	}
	// The reader may have stopped with deferred PDUs buffered (a TermReq
	// from the host ends it without another read), and another goroutine
	// may be writing: all of it goes out before the connection closes.
	_ = q.w.Sync()
	q.close()
	if q.sess.ctrl != nil {
		q.sess.ctrl.detach(q.sess.qid, q)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for cid, r := range q.cmds {
		switch r.current() {
		case reqAwaitingData:
			r.dataTimer.Stop()
			r.free(reqAwaitingData)
			delete(q.cmds, cid)
		case reqParked:
			// An event may be completing it right now; whoever moves
			// it first owns it.
			if r.tryFree(reqParked) {
				delete(q.cmds, cid)
			}
		}
	}
	q.tags, q.freeT = nil, nil
}

// stopReading makes the reader stop at the next PDU boundary it reaches
// while letting completions out: used by graceful shutdown.
func (q *conn) stopReading() {
	q.stopped.Store(true)
	_ = q.nc.SetReadDeadline(time.Now())
}

// close closes the connection and cancels its commands.
func (q *conn) close() {
	q.closeOnce.Do(func() {
		q.cancel()
		q.nc.Close()
	})
}

// handleCapsule takes a command capsule: it reads the in-capsule data into
// a buffer the new request owns, registers the CID, has the controller
// layer check the command, and then either asks for its data with an R2T
// or runs it.
func (q *conn) handleCapsule(h *tcp.Header) error {
	r := q.srv.reqs.get(h.Command())
	q.sqhd.Store((q.sqhd.Load() + 1) % uint32(max(q.depth, 1)))
	var icd []byte
	if h.DataLen > 0 {
		icd = r.takeCapsule(h.DataLen)
		if err := q.f.ReadData(icd); err != nil {
			if !errors.Is(err, tcp.ErrDataDigest) {
				r.free(reqNew)
				return err
			}
			r.status = nvme.StatusTransientTransport
		}
	}
	q.sess.touch(r.start)
	cid := r.sqe.CID
	q.mu.Lock()
	if q.cmds[cid] != nil {
		q.mu.Unlock()
		r.free(reqNew)
		q.sendStatus(cid, nvme.StatusCIDConflict|nvme.DNR)
		return nil
	}
	if len(q.cmds) >= max(q.depth, 1) {
		q.mu.Unlock()
		r.free(reqNew)
		return fatal(h, tcp.FESPDUSequenceError, 0, "submission queue overrun")
	}
	q.cmds[cid] = r
	q.outstanding.Store(int32(len(q.cmds)))
	q.mu.Unlock()

	st := r.status
	if st == 0 {
		st = q.sess.prepare(r)
	}
	r2t := false
	if st == 0 {
		r2t, st = q.place(r, icd)
	}
	switch {
	case st != 0:
		q.finish(r, reqNew, status(st), true)
		return nil
	case r2t:
		q.mu.Lock()
		r.ttag = q.allocTagLocked(r)
		r.to(reqNew, reqAwaitingData)
		q.mu.Unlock()
		r.dataTimer = time.AfterFunc(q.srv.cfg.DataTimeout, func() { q.dataTimedOut(r) })
		t := tcp.DataHeader{CCCID: cid, TTag: r.ttag, Offset: 0, Length: uint32(r.want)}
		// Deferred: the reader flushes before it waits for the data this
		// asks for.
		return q.w.Defer(func(f *tcp.Framer) error { return f.WriteR2T(t) })
	}
	r.to(reqNew, reqReady)
	q.dispatch(r)
	return nil
}

// place finds the data a checked command needs in its in-capsule data, or
// says it must be asked for with an R2T.
func (q *conn) place(r *request, icd []byte) (r2t bool, st nvme.Status) {
	sgl := r.sqe.DPTR
	switch {
	case r.spec != nil && r.spec.dir == dirBoth:
		// The request is the whole in-capsule data; DPTR describes the
		// result buffer.
		switch {
		case len(icd) == 0:
			return false, nvme.StatusSGLDataLenInvalid | nvme.DNR
		case sgl.Type != nvme.SGLTransportDataBlock:
			return false, nvme.StatusSGLTypeInvalid | nvme.DNR
		case int(sgl.Length) < 32 || int(sgl.Length) > q.sess.maxXfer:
			return false, nvme.StatusSGLDataLenInvalid | nvme.DNR
		}
		r.data, r.inCap = icd, int(sgl.Length)
		return false, 0
	case r.want == 0:
		return false, 0
	case sgl.Type == nvme.SGLDataBlockOffset:
		if sgl.Length != uint32(r.want) {
			return false, nvme.StatusSGLDataLenInvalid | nvme.DNR
		}
		if sgl.Address > uint64(len(icd)) || uint64(len(icd))-sgl.Address < uint64(r.want) {
			return false, nvme.StatusSGLOffsetInvalid | nvme.DNR
		}
		r.data = icd[sgl.Address : sgl.Address+uint64(r.want)]
		return false, 0
	case sgl.Type == nvme.SGLTransportDataBlock:
		if sgl.Length != uint32(r.want) {
			return false, nvme.StatusSGLDataLenInvalid | nvme.DNR
		}
		return true, 0
	}
	return false, nvme.StatusSGLTypeInvalid | nvme.DNR
}

func (q *conn) allocTagLocked(r *request) uint16 {
	if n := len(q.freeT); n > 0 {
		t := q.freeT[n-1]
		q.freeT = q.freeT[:n-1]
		q.tags[t] = r
		return t
	}
	q.tags = append(q.tags, r)
	return uint16(len(q.tags) - 1)
}

// handleH2CData places data the host sends after an R2T.
func (q *conn) handleH2CData(h *tcp.Header) error {
	dh := h.Data()
	q.mu.Lock()
	var r *request
	if int(dh.TTag) < len(q.tags) {
		r = q.tags[dh.TTag]
	}
	q.mu.Unlock()
	switch {
	case r == nil:
		return fatal(h, tcp.FESInvalidHeaderField, 10, "H2CData for an unknown transfer tag")
	case r.sqe.CID != dh.CCCID:
		return fatal(h, tcp.FESInvalidHeaderField, 8, "H2CData CCCID does not match the transfer tag")
	case int(dh.Offset) != r.got:
		return fatal(h, tcp.FESDataOutOfRange, 12, "H2CData out of order")
	case int(dh.Offset)+int(dh.Length) > r.want:
		return fatal(h, tcp.FESDataOutOfRange, 16, "H2CData beyond the R2T")
	}
	buf := r.growH2C(int(dh.Offset + dh.Length))
	if err := q.f.ReadData(buf[dh.Offset : dh.Offset+dh.Length]); err != nil {
		if !errors.Is(err, tcp.ErrDataDigest) {
			return err
		}
		r.status = nvme.StatusTransientTransport
	}
	r.got += int(dh.Length)
	last := h.Flags&tcp.FlagLastPDU != 0
	if last != (r.got == r.want) {
		return fatal(h, tcp.FESPDUSequenceError, 1, "LAST_PDU flag does not match the end of the data")
	}
	if !last {
		return nil
	}
	r.dataTimer.Stop()
	r.data = buf[:r.want]
	q.mu.Lock()
	q.tags[r.ttag] = nil
	q.freeT = append(q.freeT, r.ttag)
	q.mu.Unlock()
	if r.status != 0 {
		q.finish(r, reqAwaitingData, status(r.status), true)
		return nil
	}
	r.to(reqAwaitingData, reqReady)
	q.dispatch(r)
	return nil
}

// dataTimedOut closes the queue if r still awaits the data its R2T asked
// for: the host is not sending it, and the transfer tag and buffer must
// not be held for ever. Teardown frees r.
func (q *conn) dataTimedOut(r *request) {
	if r.current() != reqAwaitingData {
		return
	}
	q.sess.log.Warn("data for an R2T never came: closing the queue", "cid", r.sqe.CID, "want", r.want, "timeout", q.srv.cfg.DataTimeout)
	q.srv.metrics.error("data_timeout")
	q.close()
}

// dispatch runs a ready command: on a goroutine of its own (a warm
// worker, warmstacks.go) if its table entry says it may block, unless it
// is a small read or write of an in-memory backend, which the reader runs
// itself because the backend answers in far less time than a goroutine
// switch takes and its completion joins the others of this burst in one
// write.
func (q *conn) dispatch(r *request) {
	if r.spec == nil || !r.spec.blocking || runsInline(r) {
		q.execute(r, true)
		return
	}
	q.executing.add()
	q.srv.inflight.add()
	r.warm = blockingCommand{q: q, r: r}
	q.srv.warm.start(&r.warm)
}

// blockingCommand is a command that may block, run on a warm worker. It
// lives in its request (request.warm), so dispatching allocates nothing:
// the worker holds it from dispatch until runWarm returns. The request is
// freed while runWarm runs, but never recycled (only requests no goroutine
// but the reader held go back to the pool, conn.complete), so the worker's
// pointer stays good; runWarm still reads it only before executing.
type blockingCommand struct {
	q *conn
	r *request
}

func (c *blockingCommand) runWarm() {
	q, r := c.q, c.r
	defer q.srv.inflight.done()
	defer q.executing.done()
	q.execute(r, false)
}

// execute has the controller layer execute r and sends its completion.
// onReader says the reader goroutine runs it, so the completion may stay
// buffered until the reader's next flush.
func (q *conn) execute(r *request, onReader bool) {
	r.to(reqReady, reqExecuting)
	c := q.sess.exec(q.ctx, r)
	if onReader && !q.connected && q.sess.ctrl != nil {
		q.bound()
	}
	if c.parked {
		return // the handler moved r to reqParked; an event completes it
	}
	q.finish(r, reqExecuting, c, onReader)
}

// bound applies to the transport what Connect set up: the queue's depth
// and flow control, I/O queues' larger in-capsule data, and no more idle
// deadline. Connect runs on the reader, so nothing else reads these yet.
func (q *conn) bound() {
	q.connected = true
	q.depth, q.noSQFlow = q.sess.depth, q.sess.noSQFlow
	q.sess.tenantBase = q.ctx
	q.sess.tenantCtx = sandbox.WithTenant(q.ctx, q.sess.ctrl.hostNQN)
	if q.sess.qid != 0 {
		q.f.MaxCapsuleData = q.srv.cfg.InCapsuleData
	}
	_ = q.nc.SetReadDeadline(time.Time{})
}

// sendStatus sends a completion for a CID that has no request (a CID
// conflict must not disturb the command already holding the CID). Only
// the reader sends these, so the completion may wait for its flush.
func (q *conn) sendStatus(cid uint16, st nvme.Status) {
	cqe := nvme.Completion{SQHead: uint16(q.sqhd.Load()), SQID: q.sess.qid, CID: cid, Status: st}
	if err := q.w.Defer(func(f *tcp.Framer) error { return f.WriteCapsuleResp(&cqe) }); err != nil {
		q.close()
	}
}

// completeParked completes a parked command (an Asynchronous Event
// Request), unless teardown freed it first. Any goroutine may call it.
func (q *conn) completeParked(cid uint16, c completion) {
	q.mu.Lock()
	r := q.cmds[cid]
	q.mu.Unlock()
	if r != nil && r.tryTo(reqParked, reqCompleting) {
		q.complete(r, c, false)
	}
}

// finish completes r, which is in state from.
func (q *conn) finish(r *request, from reqState, c completion, onReader bool) {
	r.to(from, reqCompleting)
	q.complete(r, c, onReader)
}

// complete sends a completing request's data (in C2HData PDUs) and then
// its response, all under one writer turn so they leave together, and
// frees it. A completion the reader sends is only buffered (see
// flushingReader); any other goes out at once.
func (q *conn) complete(r *request, c completion, onReader bool) {
	cid := r.sqe.CID
	q.mu.Lock()
	if q.cmds[cid] == r {
		delete(q.cmds, cid)
		q.outstanding.Store(int32(len(q.cmds)))
	}
	q.mu.Unlock()
	q.sess.record(r, c)
	cqe := nvme.Completion{DW0: c.dw0, DW1: c.dw1, SQHead: uint16(q.sqhd.Load()), SQID: q.sess.qid, CID: cid, Status: c.status}
	chunk := q.srv.cfg.C2HChunk
	in := c.data
	if !c.status.OK() {
		in = nil
	}
	write := func(f *tcp.Framer) error {
		for off := 0; off < len(in); off += chunk {
			end := min(off+chunk, len(in))
			last := end == len(in)
			success := last && q.noSQFlow
			dh := tcp.DataHeader{CCCID: cid, Offset: uint32(off)}
			if err := f.WriteC2HData(dh, last, success, in[off:end]); err != nil {
				return err
			}
			if success {
				return nil
			}
		}
		return f.WriteCapsuleResp(&cqe)
	}
	// Called directly rather than through a method value, so that write
	// and cqe stay on the stack: no allocation per completion.
	var err error
	if onReader {
		err = q.w.Defer(write)
	} else {
		err = q.w.Do(write)
	}
	r.free(reqCompleting)
	if onReader && r.dataTimer == nil {
		q.srv.reqs.put(r) // only the reader ever held it
	}
	if err != nil {
		q.close()
	}
}
