package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
)

// Call is one command in flight, as in net/rpc's Client.Go: when the
// command completes (or fails, or its context ends) Completion and Err are
// set and the Call is delivered once: to OnDone if it is set, otherwise on
// Done.
type Call struct {
	Cmd        nvme.Command    // the command as sent (CID and DPTR filled in)
	Out, In    []byte          // data to the controller, data from it
	Completion nvme.Completion // the controller's completion entry
	Err        error           // nil, a wrapped *nvme.StatusError, ctx.Err(), ErrConnectionLost, ErrClosed or ErrQueueFull
	Done       chan *Call      // receives the Call once unless OnDone is set; must be buffered

	// OnDone, when set, receives the Call instead of Done, on the
	// goroutine that finishes it: the queue's reader for the controller's
	// answer (so a completion reaches its caller without waking another
	// goroutine: the point of it), otherwise the goroutine whose
	// submission failed (before Submit or Go returns), whose context
	// ended the call, or that saw the connection fail.
	//
	// On the reader it must not block: the queue reads nothing while it
	// runs. It may submit more commands (an event loop resubmitting): a
	// command submitted to a queue while that queue's reader is delivering
	// to an OnDone stays buffered and leaves with the reader's next write,
	// which it makes before it waits for the controller again, so one
	// burst of completions is answered with one write; and if the queue
	// has no free slot then, the submission fails with ErrQueueFull rather
	// than wait for a slot only the blocked reader could free, as one that
	// would wait for a reconnection fails with ErrConnectionLost, delivered
	// from another goroutine.
	OnDone func(*Call)

	q       *queue
	ns      *nsState      // the namespace handle's state (nil: not sent through one)
	state   atomic.Uint32 // 0 in flight, 1 delivered (by completion or abandonment)
	stopCtx func() bool   // stops the context.AfterFunc that abandons the call
	watch   *ctxWatch     // instead of stopCtx: a Batch's watch, or the queue's (watchLone)
	outR2T  bool          // Out moves in H2CData answering R2Ts
	outLen  int
	inLen   int

	// Touched only by the queue's reader goroutine.
	r2tEnd  int  // end of the last R2T; the next must not start before it
	inEnd   int  // end of the furthest C2HData received
	xferErr bool // a data digest failed: the command fails however it completes

	r2tBusy atomic.Bool // an R2T is being answered (MAXR2T 0 allows one)

	// bufMu guards in and out: the buffers the transport may still touch.
	// Completion and abandonment detach them under bufMu, so once a Call is
	// delivered no goroutine of ours reads or writes the caller's memory.
	bufMu   sync.Mutex
	in, out []byte
}

// errQueueDead reports a submission that did not reach a queue because the
// queue had failed; the caller may retry on a newer association.
var errQueueDead = errors.New("host: queue failed")

// ErrQueueFull fails a submission made while the queue's reader delivers
// to an OnDone and every command slot of the queue is taken: waiting for a
// slot there would wait for the reader, which is running the OnDone.
var ErrQueueFull = errors.New("host: queue full while delivering a completion")

type r2tJob struct {
	c      *Call
	cid    uint16
	ttag   uint16
	offset uint32
	length uint32
}

// queue is one NVMe/TCP connection: the admin queue or one I/O queue.
type queue struct {
	qid    uint16
	conn   net.Conn
	fr     *tcp.Framer
	w      *tcp.Writer
	log    *slog.Logger
	st     *stats
	inline int // in-capsule data limit for host-to-controller data
	maxH2C int // MAXH2CDATA from ICResp
	maxIn  int // largest controller-to-host transfer accepted

	connected atomic.Bool // its Fabrics Connect succeeded

	free  chan uint16 // free CIDs
	mu    sync.Mutex
	calls []*Call // in flight, by CID
	r2t   chan r2tJob

	// delivering is set while the reader runs an OnDone: submissions then
	// leave their capsules buffered, and set deferred, and the reader
	// flushes before its next read (flushingReader).
	delivering atomic.Bool
	deferred   atomic.Bool
	flushing   atomic.Bool // the reader is flushing (flushingReader)

	wmu   sync.Mutex
	watch *ctxWatch // the watch of the last context a lone call came with (watchLone)

	failed atomic.Bool
	dead   chan struct{} // closed when the queue fails
	err    error         // why; written before dead is closed
	onFail func(error)
	wg     *sync.WaitGroup // the association's goroutines

	ctrlDelivering *atomic.Int32 // queueConfig.delivering
	spawn          func(func())  // queueConfig.spawn
}

// queueConfig is what newQueue needs beyond the connection.
type queueConfig struct {
	qid    uint16
	cids   int // commands in flight at most
	log    *slog.Logger
	st     *stats
	onFail func(error)
	wg     *sync.WaitGroup
	// pollSpin bounds the reader's polling while commands are in flight
	// (tcp.PollReader); not positive: none.
	pollSpin time.Duration
	// delivering counts the controller's readers running an OnDone (nil:
	// not counted); see Controller.current.
	delivering *atomic.Int32
	// spawn runs a function on a goroutine the association does not wait
	// for (nil: on the caller's): a failing queue delivers its calls to
	// OnDone there, so that an OnDone resubmitting, which waits for the
	// reconnection, never holds up the reconnection, which waits for the
	// association's goroutines.
	spawn func(func())
}

const framerBufSize = 64 << 10

func newQueue(conn net.Conn, cfg queueConfig) *queue {
	q := &queue{
		qid:    cfg.qid,
		conn:   conn,
		log:    cfg.log.With("qid", cfg.qid),
		st:     cfg.st,
		inline: adminInline,
		maxIn:  1 << 20,
		free:   make(chan uint16, cfg.cids),
		calls:  make([]*Call, cfg.cids),
		r2t:    make(chan r2tJob, cfg.cids),
		dead:   make(chan struct{}),
		onFail: cfg.onFail,
		wg:     cfg.wg,

		ctrlDelivering: cfg.delivering,
		spawn:          cfg.spawn,
	}
	if q.ctrlDelivering == nil {
		q.ctrlDelivering = new(atomic.Int32)
	}
	if q.spawn == nil {
		q.spawn = func(fn func()) { fn() }
	}
	// The reader polls after every PDU, not only while a CID is taken: a
	// caller at queue depth 1 submits its next command just after the
	// reader delivered the last. An idle queue's spins miss, and the
	// PollReader backs off.
	in := tcp.NewPollReader(conn, cfg.pollSpin, nil)
	// What the reader writes (the capsules OnDone submitted) never waits
	// for the socket: see the package comment's "One reader".
	out := tcp.NewRawWriter(conn)
	out.SetNoWait(func() bool { return q.delivering.Load() || q.flushing.Load() })
	q.fr = tcp.NewFramer(tcp.Duplex{R: flushingReader{q, in}, W: out}, tcp.RoleHost, framerBufSize)
	q.w = tcp.NewWriter(q.fr)
	// A submitter lingers when other commands are in flight: their
	// submitters, woken by completions the reader just delivered, are
	// likely about to send too.
	q.w.SetLinger(func() bool { return len(q.free) < cap(q.free)-1 })
	for i := range cfg.cids {
		q.free <- uint16(i)
	}
	return q
}

// handshake exchanges ICReq and ICResp and configures the framer with what
// the controller granted.
func (q *queue) handshake(ctx context.Context, hdgst, ddgst bool) (err error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = q.conn.SetDeadline(dl)
	}
	// A cancelled ctx unblocks the exchange by expiring the deadline.
	stop := context.AfterFunc(ctx, func() { _ = q.conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() && err == nil {
			err = ctx.Err()
		}
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		if err == nil {
			_ = q.conn.SetDeadline(time.Time{})
		}
	}()
	var want uint8
	if hdgst {
		want |= tcp.DigestHeader
	}
	if ddgst {
		want |= tcp.DigestData
	}
	if err := q.fr.WriteICReq(tcp.ICReq{PFV: 0, HPDA: 0, Digest: want, MaxR2T: 0}); err != nil {
		return fmt.Errorf("host: send ICReq: %w", err)
	}
	if err := q.fr.Flush(); err != nil {
		return fmt.Errorf("host: send ICReq: %w", err)
	}
	h, err := q.fr.ReadHeader()
	if err != nil {
		return fmt.Errorf("host: read ICResp: %w", err)
	}
	if h.Type != tcp.TypeICResp {
		return fmt.Errorf("host: expected ICResp, got PDU type 0x%02x", h.Type)
	}
	r := h.ICResp()
	switch {
	case r.PFV != 0:
		return fmt.Errorf("host: ICResp PFV %d, want 0", r.PFV)
	case r.Digest&^want != 0:
		return fmt.Errorf("host: ICResp enables digests 0x%x, requested only 0x%x", r.Digest, want)
	case r.Digest&^(tcp.DigestHeader|tcp.DigestData) != 0:
		return fmt.Errorf("host: ICResp DGST 0x%x has unknown bits", r.Digest)
	case r.CPDA > 31:
		return fmt.Errorf("host: ICResp CPDA %d exceeds 31", r.CPDA)
	case r.MaxH2CData < 4096 || r.MaxH2CData%4 != 0:
		return fmt.Errorf("host: ICResp MAXH2CDATA %d invalid (want a multiple of 4, at least 4096)", r.MaxH2CData)
	}
	q.fr.HeaderDigest = r.Digest&tcp.DigestHeader != 0
	q.fr.DataDigest = r.Digest&tcp.DigestData != 0
	q.fr.SendAlign = (int(r.CPDA) + 1) * 4
	q.maxH2C = int(r.MaxH2CData)
	return nil
}

// setMaxIn sets the largest controller-to-host transfer; the framer refuses
// bigger data PDUs. Call before start or while no data is in flight.
func (q *queue) setMaxIn(n int) {
	q.maxIn = n
	q.fr.MaxData = max(n, 4096)
}

// start runs the reader and the data sender.
func (q *queue) start() {
	q.wg.Add(2)
	go q.readLoop()
	go q.sendLoop()
}

// tryAcquire takes a free CID if there is one.
func (q *queue) tryAcquire() (uint16, bool) {
	select {
	case cid := <-q.free:
		return cid, true
	default:
		return 0, false
	}
}

// acquire takes a free CID, waiting while the queue is full.
func (q *queue) acquire(ctx context.Context) (uint16, error) {
	if cid, ok := q.tryAcquire(); ok {
		return cid, nil
	}
	select {
	case cid := <-q.free:
		return cid, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-q.dead:
		return 0, errQueueDead
	}
}

// submit sends c on q. It returns an error only if the command was not
// submitted: ctx ended while waiting for a slot, or the queue has failed
// (errQueueDead: retry elsewhere), or the buffers cannot be described.
// Once submitted, the outcome is delivered on c.Done.
func (q *queue) submit(ctx context.Context, c *Call, forceInline bool) error {
	capsule, err := q.prepare(c, forceInline)
	if err != nil {
		return err
	}
	return q.enqueue(ctx, c, capsule, nil)
}

// prepare describes c's buffers in its command and returns the in-capsule
// data. An error concerns c alone.
func (q *queue) prepare(c *Call, forceInline bool) ([]byte, error) {
	outLen, inLen := len(c.Out), len(c.In)
	c.outR2T = false
	var capsule []byte
	switch {
	case outLen > 0 && inLen > 0:
		// nearstore vendor commands: out in the capsule, DPTR for in.
		if outLen > q.inline {
			return nil, fmt.Errorf("%d bytes of outgoing data with incoming data exceed the %d-byte in-capsule limit",
				outLen, q.inline)
		}
		capsule = c.Out
		c.Cmd.DPTR = nvme.SGL{Type: nvme.SGLTransportDataBlock, Length: uint32(inLen)}
	case outLen > 0:
		if outLen <= q.inline || forceInline {
			capsule = c.Out
			c.Cmd.DPTR = nvme.SGL{Type: nvme.SGLDataBlockOffset, Length: uint32(outLen)}
		} else {
			c.outR2T = true
			c.Cmd.DPTR = nvme.SGL{Type: nvme.SGLTransportDataBlock, Length: uint32(outLen)}
		}
	default:
		c.Cmd.DPTR = nvme.SGL{Type: nvme.SGLTransportDataBlock, Length: uint32(inLen)}
	}
	if inLen > q.maxIn || (c.outR2T && outLen > q.maxIn) || uint64(outLen) > 1<<32-1 {
		return nil, fmt.Errorf("transfer of %d bytes exceeds the controller's limit of %d", max(inLen, outLen), q.maxIn)
	}
	c.Cmd.Flags = c.Cmd.Flags&^0xc0 | nvme.PSDTSGL
	c.q, c.outLen, c.inLen = q, outLen, inLen
	c.in = c.In
	c.out = nil
	if c.outR2T {
		c.out = c.Out
	}
	return capsule, nil
}

// enqueue takes a CID for a prepared call and sends its capsule. Its
// errors, ctx's or errQueueDead, would stop any other call on q as well.
//
// With a plug (a Batch being submitted) the capsule is only buffered, and
// the plug must be flushed: enqueue flushes it itself before it waits for a
// free CID, because the CIDs it waits for may belong to the very commands
// still sitting in the buffer.
func (q *queue) enqueue(ctx context.Context, c *Call, capsule []byte, p *plug) error {
	cid, ok := q.tryAcquire()
	if !ok {
		if q.delivering.Load() {
			return ErrQueueFull
		}
		if p != nil {
			p.flush()
		}
		var err error
		if cid, err = q.acquire(ctx); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		q.free <- cid
		return err
	}
	c.Cmd.CID = cid
	// The abandonment watch is set up before the call is visible to the
	// reader, so the reader's completion path sees it without a race.
	switch {
	case p != nil && p.watch != nil:
		if !p.watch.arm(c) {
			q.free <- cid
			return ctx.Err()
		}
		c.watch = p.watch
	case ctx.Done() != nil:
		if !q.watchLone(ctx, c) {
			q.free <- cid
			return ctx.Err()
		}
	}
	q.mu.Lock()
	if q.failed.Load() {
		q.mu.Unlock()
		if !c.unwatch() {
			return nil // the context ended meanwhile; the call is delivered
		}
		return errQueueDead
	}
	q.calls[cid] = c
	q.mu.Unlock()
	q.st.commands.Add(1)

	write := func(f *tcp.Framer) error { return f.WriteCapsuleCmd(&c.Cmd, capsule) }
	var err error
	switch {
	case p != nil:
		err = q.w.Defer(write)
		p.dirty = true
	case q.delivering.Load():
		if err = q.w.Defer(write); err == nil {
			err = q.flushUnlessDelivering()
		}
	default:
		err = q.w.Do(write)
	}
	if err != nil {
		// The stream is broken: fail the queue, and with it this call.
		q.fail(fmt.Errorf("send capsule: %w", err))
		return nil
	}
	q.st.bytesWritten.Add(uint64(len(capsule)))
	return nil
}

// The queue writes through a tcp.Writer, which combines writes: a Do that
// finds another goroutine writing the queue leaves its capsule to it and
// returns, and the writer sends everything framed meanwhile before it lets
// go; one that finds nobody writes at once. So under load many capsules
// leave in one system call, and an idle queue never holds one back. A
// capsule is copied when it is framed (or written before Do returns), so
// its buffers are the caller's again at once; if a write fails, the
// goroutine that made it fails the queue, and with it every command whose
// capsule had been framed. Defer only buffers; its caller (a Batch being submitted, through
// its plug) must Flush before it returns or waits, so nothing is ever left
// in the buffer with nobody to send it, unless the reader is delivering
// to an OnDone: then the reader flushes (flushUnlessDelivering).

// flushUnlessDelivering sends what submitters deferred, or leaves it to
// the reader when the reader is delivering to an OnDone. deferred is set
// before delivering is looked at, and the reader clears delivering before
// it looks at deferred, so either this flushes or the reader does.
func (q *queue) flushUnlessDelivering() error {
	q.deferred.Store(true)
	if q.delivering.Load() {
		return nil
	}
	return q.w.Flush()
}

// flushingReader is the connection as the queue's framer reads it: before
// it reads, it sends the capsules submitted from OnDone callbacks, so one
// burst of completions is answered with one write and nothing waits in
// the buffer while the reader waits for the controller.
type flushingReader struct {
	q  *queue
	in io.Reader
}

func (r flushingReader) Read(p []byte) (int, error) {
	if r.q.deferred.Swap(false) {
		r.q.flushing.Store(true)
		err := r.q.w.Flush()
		r.q.flushing.Store(false)
		if err != nil {
			return 0, fmt.Errorf("send capsule: %w", err)
		}
	}
	return r.in.Read(p)
}

// plug is a batch's hold on a queue while it submits: capsules buffered
// and not yet flushed.
type plug struct {
	q     *queue
	watch *ctxWatch // nil when the batch's context cannot end
	dirty bool
}

// flush sends what the plug buffered. A write error fails the queue, and
// with it the buffered commands, whose outcome is then on their Done.
func (p *plug) flush() {
	if !p.dirty {
		return
	}
	p.dirty = false
	if err := p.q.flushUnlessDelivering(); err != nil {
		p.q.fail(fmt.Errorf("send capsule: %w", err))
	}
}

// submitBatch submits calls on q and flushes once. It returns how many of
// calls it dealt with, each either submitted or failed with its own error
// on Done; err, when not nil, stops calls[n:] too: ctx ended, or the queue
// failed (errQueueDead: retry them elsewhere).
func (q *queue) submitBatch(ctx context.Context, calls []*Call, watch *ctxWatch) (n int, err error) {
	p := plug{q: q, watch: watch}
	defer p.flush()
	for i, c := range calls {
		capsule, err := q.prepare(c, false)
		if err != nil {
			c.fail(fmt.Errorf("host: %s: %w", describe(&c.Cmd, q.qid), err), q.st)
			continue
		}
		if err := q.enqueue(ctx, c, capsule, &p); err != nil {
			return i, err
		}
	}
	return len(calls), nil
}

// fail delivers err for a call that was never submitted.
func (c *Call) fail(err error, st *stats) {
	if c.state.CompareAndSwap(0, 1) {
		c.Err = err
		if !c.deliver() {
			st.droppedDone.Add(1)
		}
	}
}

// deliver hands the finished c to OnDone, or sends it on Done without
// blocking (as net/rpc: a full channel drops the Call, and deliver reports
// false).
func (c *Call) deliver() bool {
	if c.OnDone != nil {
		c.OnDone(c)
		return true
	}
	select {
	case c.Done <- c:
		return true
	default:
		return false
	}
}

// unwatch stops watching c's context, before c was submitted or once it is
// finished. It reports false if the context ended first: the call has then
// been (or is being) abandoned and delivered.
func (c *Call) unwatch() bool {
	switch {
	case c.watch != nil:
		return c.watch.drop(c)
	case c.stopCtx != nil:
		return c.stopCtx()
	}
	return true
}

// ctxWatch abandons the calls of one Batch, or the lone calls a queue saw
// with one context (watchLone), when their context ends.
// Registering a context.AfterFunc costs several hundred nanoseconds and two
// allocations; a batch pays that once instead of once per call. A call
// joins the watch where a lone call registers its AfterFunc, and leaves it
// when it is finished; the AfterFunc is stopped when the submitter and
// every call have left.
type ctxWatch struct {
	ctx  context.Context
	stop func() bool

	mu    sync.Mutex
	fired bool
	calls map[*Call]struct{} // armed and not yet finished
	subs  bool               // the submitter still holds the watch
}

// watchLone arms the abandonment of c, a call submitted on its own, when
// ctx ends. Calls submitted one by one under one context (an event loop's)
// share one watch, the queue's, rather than register a context.AfterFunc
// each, which costs a lock of the context and two allocations per call;
// the queue lets the watch go when a call comes with another context, or
// when the queue fails. It reports false if ctx has ended.
func (q *queue) watchLone(ctx context.Context, c *Call) bool {
	q.wmu.Lock()
	w := q.watch
	if w != nil && sameContext(w.ctx, ctx) {
		ok := w.arm(c)
		q.wmu.Unlock()
		if ok {
			c.watch = w
		}
		return ok
	}
	if q.failed.Load() {
		// fail has let the watch go, or will not see this one: watch
		// the call alone (enqueue finds the queue failed and unwatches).
		q.wmu.Unlock()
		c.stopCtx = context.AfterFunc(ctx, func() { q.abandon(c, ctx) })
		return true
	}
	nw := newCtxWatch(ctx, 1)
	ok := nw.arm(c)
	q.watch = nw
	q.wmu.Unlock()
	if w != nil {
		w.release()
	}
	if ok {
		c.watch = nw
	}
	return ok
}

// releaseWatch lets the queue's watch go (the queue failed).
func (q *queue) releaseWatch() {
	q.wmu.Lock()
	w := q.watch
	q.watch = nil
	q.wmu.Unlock()
	if w != nil {
		w.release()
	}
}

// sameContext reports whether a and b are the same context, without
// comparing values of a type that cannot be compared (which panics).
func sameContext(a, b context.Context) bool {
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// newCtxWatch watches ctx for a batch of about n calls.
func newCtxWatch(ctx context.Context, n int) *ctxWatch {
	w := &ctxWatch{ctx: ctx, calls: make(map[*Call]struct{}, n), subs: true}
	w.stop = context.AfterFunc(ctx, w.fire)
	return w
}

// fire runs when ctx ends: it abandons every call still in flight.
func (w *ctxWatch) fire() {
	w.mu.Lock()
	w.fired = true
	calls := w.calls
	w.calls = nil
	w.mu.Unlock()
	for c := range calls {
		c.q.abandon(c, w.ctx)
	}
}

// arm adds c to the watch. It reports false if ctx has ended: c must then
// not be submitted.
func (w *ctxWatch) arm(c *Call) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return false
	}
	w.calls[c] = struct{}{}
	return true
}

// drop removes c, finished or not submitted after all. It reports false if
// ctx ended first, in which case fire abandons c.
func (w *ctxWatch) drop(c *Call) bool {
	w.mu.Lock()
	if w.fired {
		w.mu.Unlock()
		return false
	}
	delete(w.calls, c)
	last := len(w.calls) == 0 && !w.subs
	w.mu.Unlock()
	if last {
		w.stop()
	}
	return true
}

// release is the submitter letting go once every call is submitted.
func (w *ctxWatch) release() {
	w.mu.Lock()
	w.subs = false
	last := len(w.calls) == 0 && !w.fired
	w.mu.Unlock()
	if last {
		w.stop()
	}
}

// do submits a command and waits for it.
func (q *queue) do(ctx context.Context, cmd *nvme.Command, out, in []byte, forceInline bool) (nvme.Completion, error) {
	c := &Call{Cmd: *cmd, Out: out, In: in, Done: make(chan *Call, 1)}
	if err := q.submit(ctx, c, forceInline); err != nil {
		if errors.Is(err, errQueueDead) {
			return nvme.Completion{}, q.lostErr(&c.Cmd)
		}
		return nvme.Completion{}, fmt.Errorf("host: %s: %w", describe(&c.Cmd, q.qid), err)
	}
	<-c.Done
	return c.Completion, c.Err
}

// lostErr is the error of a command the queue's failure ended.
func (q *queue) lostErr(cmd *nvme.Command) error {
	<-q.dead
	if errors.Is(q.err, ErrClosed) {
		return fmt.Errorf("host: %s: %w", describe(cmd, q.qid), ErrClosed)
	}
	return fmt.Errorf("host: %s on queue %d: %w: %w", describe(cmd, q.qid), q.qid, ErrConnectionLost, q.err)
}

// abandon completes c with ctx's error when its context ends in flight.
// The CID stays taken until the controller answers.
func (q *queue) abandon(c *Call, ctx context.Context) {
	if !c.state.CompareAndSwap(0, 1) {
		return
	}
	c.bufMu.Lock()
	c.in = nil
	if c.out != nil {
		// The controller may still ask for this data; the caller owns
		// its buffer again as soon as we deliver, so send a copy.
		c.out = bytes.Clone(c.out)
	}
	c.bufMu.Unlock()
	q.st.abandoned.Add(1)
	c.Err = fmt.Errorf("host: %s: %w", describe(&c.Cmd, q.qid), ctx.Err())
	q.send(c, false)
}

// finish detaches c's buffers and delivers it. c must already be out of
// the CID table. onReader says the queue's reader calls it.
func (q *queue) finish(c *Call, cqe nvme.Completion, err error, onReader bool) {
	c.bufMu.Lock()
	c.in, c.out = nil, nil
	c.bufMu.Unlock()
	c.unwatch()
	if !c.state.CompareAndSwap(0, 1) {
		return // abandoned earlier; the caller has its answer
	}
	c.Completion, c.Err = cqe, err
	q.send(c, onReader)
}

// send delivers a finished c. On the reader, an OnDone runs with
// delivering set, so what it submits is left for the reader to flush.
func (q *queue) send(c *Call, onReader bool) {
	if onReader && c.OnDone != nil {
		q.delivering.Store(true)
		q.ctrlDelivering.Add(1)
		defer func() {
			q.ctrlDelivering.Add(-1)
			q.delivering.Store(false)
		}()
	}
	if !c.deliver() {
		// As net/rpc: never block the reader on a caller's channel.
		q.st.droppedDone.Add(1)
		q.log.Warn("host: Done channel full, dropping call", "cid", c.Cmd.CID)
	}
}

// take removes the call with cid from the table.
func (q *queue) take(cid uint16) *Call {
	q.mu.Lock()
	defer q.mu.Unlock()
	if int(cid) >= len(q.calls) {
		return nil
	}
	c := q.calls[cid]
	q.calls[cid] = nil
	return c
}

func (q *queue) lookup(cid uint16) *Call {
	q.mu.Lock()
	defer q.mu.Unlock()
	if int(cid) >= len(q.calls) {
		return nil
	}
	return q.calls[cid]
}

// fail ends the queue: closes the connection, fails every call in flight,
// and tells the association. Safe to call many times from any goroutine.
func (q *queue) fail(err error) {
	if !q.failed.CompareAndSwap(false, true) {
		return
	}
	q.err = err
	close(q.dead)
	_ = q.conn.Close()
	q.releaseWatch()
	q.mu.Lock()
	var inflight []*Call
	for i, c := range q.calls {
		if c != nil {
			inflight = append(inflight, c)
			q.calls[i] = nil
		}
	}
	q.mu.Unlock()
	switch {
	case errors.Is(err, ErrClosed):
	case !q.connected.Load():
		// Setting up: the caller returns the error, so a warning would
		// say it twice.
		q.log.Debug("host: queue failed while connecting", "err", err)
	default:
		q.log.Warn("host: queue failed", "err", err, "inflight", len(inflight))
	}
	var callbacks []*Call
	for _, c := range inflight {
		if c.OnDone != nil {
			callbacks = append(callbacks, c)
			continue
		}
		q.finish(c, nvme.Completion{}, q.lostErr(&c.Cmd), false)
	}
	if len(callbacks) > 0 {
		q.spawn(func() {
			for _, c := range callbacks {
				q.finish(c, nvme.Completion{}, q.lostErr(&c.Cmd), false)
			}
		})
	}
	if q.onFail != nil {
		q.onFail(err)
	}
}

// protoErr builds the fatal error for a controller protocol violation.
func protoErr(fes uint16, fei uint32, h *tcp.Header, format string, args ...any) *tcp.FatalError {
	hdr := h.Raw()
	if len(hdr) > tcp.MaxTermReqData {
		hdr = hdr[:tcp.MaxTermReqData]
	}
	return &tcp.FatalError{FES: fes, FEI: fei, Header: append([]byte(nil), hdr...), Reason: fmt.Sprintf(format, args...)}
}

// readLoop is the queue's only reader.
func (q *queue) readLoop() {
	defer q.wg.Done()
	for {
		h, err := q.fr.ReadHeader()
		if err == nil {
			switch h.Type {
			case tcp.TypeCapsuleResp:
				err = q.handleResp(h)
			case tcp.TypeC2HData:
				err = q.handleData(h)
			case tcp.TypeR2T:
				err = q.handleR2T(h)
			case tcp.TypeC2HTermReq:
				err = q.handleTermReq(h)
			default:
				err = protoErr(tcp.FESInvalidHeaderField, 0, h, "unexpected PDU type 0x%02x", h.Type)
			}
		}
		if err != nil {
			var fe *tcp.FatalError
			if errors.As(err, &fe) && !q.failed.Load() {
				q.terminate(fe)
			}
			q.fail(err)
			return
		}
	}
}

// terminate sends an H2CTermReq, bounded in time: a peer that broke the
// protocol may not be reading.
func (q *queue) terminate(fe *tcp.FatalError) {
	q.log.Warn("host: terminating connection", "fes", fe.FES, "fei", fe.FEI, "reason", fe.Reason)
	_ = q.conn.SetWriteDeadline(time.Now().Add(time.Second))
	// Synced, not only sent: the queue's failure closes the connection next,
	// and another goroutine may be the one writing it.
	err := q.w.Defer(func(f *tcp.Framer) error {
		return f.WriteTermReq(tcp.TermReq{FES: fe.FES, FEI: fe.FEI}, fe.Header)
	})
	if err == nil {
		_ = q.w.Sync()
	}
}

// Byte offsets of PDU fields, for a TermReq's FEI.
const (
	feiCCCID = 8
	feiDataO = 12
	feiFlags = 1
	feiCID   = tcp.CommonHeaderSize + 12
)

func (q *queue) handleResp(h *tcp.Header) error {
	cqe := h.Completion()
	c := q.take(cqe.CID)
	if c == nil {
		return protoErr(tcp.FESInvalidHeaderField, feiCID, h, "completion for CID %d, which is not in flight", cqe.CID)
	}
	q.complete(c, cqe)
	return nil
}

// complete finishes c with the controller's completion and frees its CID.
func (q *queue) complete(c *Call, cqe nvme.Completion) {
	q.st.completions.Add(1)
	var err error
	switch {
	case c.xferErr:
		err = &nvme.StatusError{Status: nvme.StatusTransientTransport, Opcode: c.Cmd.Opcode}
	case !cqe.Status.OK():
		err = &nvme.StatusError{Status: cqe.Status, Opcode: c.Cmd.Opcode}
	}
	if err != nil {
		q.st.errors.Add(1)
		err = fmt.Errorf("host: %s: %w", describe(&c.Cmd, q.qid), err)
	}
	// The CID is free before the call is delivered: a caller woken by the
	// delivery that submits at once (a queue-depth-1 loop) finds it,
	// rather than parking in acquire until the reader gets here.
	q.free <- c.Cmd.CID
	q.finish(c, cqe, err, true)
}

func (q *queue) handleData(h *tcp.Header) error {
	dh := h.Data()
	c := q.lookup(dh.CCCID)
	if c == nil {
		return protoErr(tcp.FESInvalidHeaderField, feiCCCID, h, "C2HData for CID %d, which is not in flight", dh.CCCID)
	}
	if c.inLen == 0 {
		return protoErr(tcp.FESInvalidHeaderField, feiCCCID, h, "C2HData for CID %d, which reads no data", dh.CCCID)
	}
	if uint64(dh.Offset)+uint64(dh.Length) > uint64(c.inLen) {
		return protoErr(tcp.FESDataOutOfRange, feiDataO, h, "C2HData [%d, +%d) outside the %d-byte buffer of CID %d",
			dh.Offset, dh.Length, c.inLen, dh.CCCID)
	}
	last := h.Flags&tcp.FlagLastPDU != 0
	success := h.Flags&tcp.FlagSuccess != 0
	if success && !last {
		return protoErr(tcp.FESInvalidHeaderField, feiFlags, h, "C2HData SUCCESS without LAST_PDU")
	}
	c.bufMu.Lock()
	var err error
	if dst := c.in; dst != nil {
		err = q.fr.ReadData(dst[dh.Offset : dh.Offset+dh.Length])
	} else {
		err = q.fr.ReadData(nil) // abandoned: the caller's buffer is theirs again
	}
	c.bufMu.Unlock()
	if errors.Is(err, tcp.ErrDataDigest) {
		// Not fatal: the stream is intact, only this command's data is bad.
		c.xferErr = true
	} else if err != nil {
		return err
	}
	c.inEnd = max(c.inEnd, int(dh.Offset+dh.Length))
	q.st.bytesRead.Add(uint64(dh.Length))
	if success {
		// The controller elided the CapsuleResp: success is implied.
		if q.take(dh.CCCID) != c {
			return nil // failed concurrently; already delivered
		}
		q.complete(c, nvme.Completion{CID: dh.CCCID, SQID: q.qid})
	}
	return nil
}

func (q *queue) handleR2T(h *tcp.Header) error {
	dh := h.Data()
	c := q.lookup(dh.CCCID)
	switch {
	case c == nil:
		return protoErr(tcp.FESInvalidHeaderField, feiCCCID, h, "R2T for CID %d, which is not in flight", dh.CCCID)
	case !c.outR2T:
		return protoErr(tcp.FESInvalidHeaderField, feiCCCID, h, "R2T for CID %d, which has no data to transfer", dh.CCCID)
	case dh.Length == 0 || uint64(dh.Offset)+uint64(dh.Length) > uint64(c.outLen):
		return protoErr(tcp.FESDataOutOfRange, feiDataO, h, "R2T [%d, +%d) outside the %d-byte buffer of CID %d",
			dh.Offset, dh.Length, c.outLen, dh.CCCID)
	case int(dh.Offset) < c.r2tEnd:
		return protoErr(tcp.FESDataOutOfRange, feiDataO, h, "R2T offset %d for CID %d goes back before %d",
			dh.Offset, dh.CCCID, c.r2tEnd)
	case c.r2tBusy.Load():
		return protoErr(tcp.FESPDUSequenceError, 0, h, "R2T for CID %d while another is outstanding (MAXR2T 0)", dh.CCCID)
	}
	c.r2tBusy.Store(true)
	c.r2tEnd = int(dh.Offset + dh.Length)
	select {
	case q.r2t <- r2tJob{c: c, cid: dh.CCCID, ttag: dh.TTag, offset: dh.Offset, length: dh.Length}:
	default:
		// Cannot happen with one R2T per command, but never block the reader.
		return protoErr(tcp.FESPDUSequenceError, 0, h, "too many outstanding R2Ts")
	}
	return nil
}

func (q *queue) handleTermReq(h *tcp.Header) error {
	tr := h.TermReq()
	_ = q.fr.ReadData(nil)
	return fmt.Errorf("host: controller terminated the connection (C2HTermReq FES %d FEI %d)", tr.FES, tr.FEI)
}

// sendLoop answers R2Ts off the reader goroutine, so that reading never
// waits for the socket to drain.
func (q *queue) sendLoop() {
	defer q.wg.Done()
	for {
		select {
		case <-q.dead:
			return
		case j := <-q.r2t:
			if err := q.sendData(j); err != nil {
				q.fail(err)
				return
			}
		}
	}
}

func (q *queue) sendData(j r2tJob) error {
	c := j.c
	for sent := uint32(0); sent < j.length; {
		n := min(uint32(q.maxH2C), j.length-sent)
		last := sent+n == j.length
		off := j.offset + sent
		c.bufMu.Lock()
		out := c.out
		if out == nil {
			// Completed (or the queue failed) before we were done.
			c.bufMu.Unlock()
			return nil
		}
		err := q.w.Do(func(f *tcp.Framer) error {
			if last {
				// Cleared before the PDU can reach the controller, so its
				// next R2T never finds the flag still set.
				c.r2tBusy.Store(false)
			}
			return f.WriteH2CData(tcp.DataHeader{CCCID: j.cid, TTag: j.ttag, Offset: off}, last, out[off:off+n])
		})
		c.bufMu.Unlock()
		if err != nil {
			return fmt.Errorf("send H2CData: %w", err)
		}
		q.st.bytesWritten.Add(uint64(n))
		sent += n
	}
	return nil
}

// describe names a command for error messages.
func describe(cmd *nvme.Command, qid uint16) string {
	if qid == 0 {
		switch cmd.Opcode {
		case nvme.AdminFabrics:
			switch cmd.FabricsType() {
			case nvme.FabricsConnect:
				return "fabrics connect"
			case nvme.FabricsPropertyGet:
				return fmt.Sprintf("property get 0x%x", cmd.CDW11)
			case nvme.FabricsPropertySet:
				return fmt.Sprintf("property set 0x%x", cmd.CDW11)
			}
			return fmt.Sprintf("fabrics command 0x%02x", cmd.FabricsType())
		case nvme.AdminIdentify:
			return fmt.Sprintf("identify cns 0x%02x nsid %d", uint8(cmd.CDW10), cmd.NSID)
		case nvme.AdminGetLogPage:
			return fmt.Sprintf("get log page 0x%02x", uint8(cmd.CDW10))
		case nvme.AdminSetFeatures:
			return fmt.Sprintf("set features 0x%02x", uint8(cmd.CDW10))
		case nvme.AdminGetFeatures:
			return fmt.Sprintf("get features 0x%02x", uint8(cmd.CDW10))
		case nvme.AdminKeepAlive:
			return "keep alive"
		}
		return fmt.Sprintf("admin opcode 0x%02x", cmd.Opcode)
	}
	switch cmd.Opcode {
	case nvme.AdminFabrics:
		if cmd.FabricsType() == nvme.FabricsConnect {
			return fmt.Sprintf("fabrics connect qid %d", qid)
		}
	case nvme.IORead:
		return fmt.Sprintf("read nsid %d lba %d blocks %d", cmd.NSID, cmd.SLBA(), cmd.NLB())
	case nvme.IOWrite:
		return fmt.Sprintf("write nsid %d lba %d blocks %d", cmd.NSID, cmd.SLBA(), cmd.NLB())
	case nvme.IOWriteZeroes:
		return fmt.Sprintf("write zeroes nsid %d lba %d blocks %d", cmd.NSID, cmd.SLBA(), cmd.NLB())
	case nvme.IOFlush:
		return fmt.Sprintf("flush nsid %d", cmd.NSID)
	case nvme.IODSM:
		return fmt.Sprintf("dataset management nsid %d", cmd.NSID)
	}
	return fmt.Sprintf("I/O opcode 0x%02x nsid %d", cmd.Opcode, cmd.NSID)
}
