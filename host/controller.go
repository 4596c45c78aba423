package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme"
)

// Controller is a connection to one NVMe-oF controller of a subsystem. It
// survives connection losses by re-associating in the background. All
// methods are safe for concurrent use.
type Controller struct {
	addr, subnqn string
	opts         Options
	log          *slog.Logger
	discovery    bool
	st           stats
	rr           atomic.Uint32 // round-robin I/O queue choice
	authTID      atomic.Uint32 // the last DH-HMAC-CHAP transaction ID
	id           atomic.Pointer[nvme.IdentifyController]

	mu     sync.Mutex
	assoc  *association  // nil while reconnecting
	xfer   int           // the last association's largest transfer; 0 before the first
	ready  chan struct{} // closed when assoc is set again, or reconnecting is given up
	closed bool
	gone   error           // set when reconnecting was given up (Options.ControllerLossTimeout)
	bg     context.Context // cancelled by Close: ends reconnect attempts
	cancel context.CancelFunc
	wg     sync.WaitGroup // reconnect goroutines, and deliveries of failed calls to OnDone

	delivering atomic.Int32 // queue readers running an OnDone (queueConfig.delivering)

	nsMu     sync.Mutex
	ns       map[uint32]*Namespace // every namespace ever seen, unpinned handles
	activeNS []uint32              // from the latest scan, ascending

	// fnCalls recycles function commands' calls and buffers (*fnCall,
	// functions.go).
	fnCalls sync.Pool
}

// association is one incarnation of the connection: admin queue, I/O
// queues, and the controller ID they are bound to.
type association struct {
	c        *Controller
	cntlid   uint16
	cap      uint64
	vs       uint32
	cc       uint32
	id       nvme.IdentifyController
	maxXfer  int
	ioInline int
	ns       []nsInfo

	admin *queue
	io    []*queue

	mu     sync.Mutex // guards queues against a concurrent fail
	queues []*queue
	failed atomic.Bool
	dead   chan struct{}
	err    error
	wg     sync.WaitGroup // queue goroutines and keep-alive
}

// Connect connects to subsystem subnqn at addr ("host:port"), sets up the
// admin queue and the I/O queues, and enumerates the namespaces. ctx bounds
// the setup only.
func Connect(ctx context.Context, addr, subnqn string, opts Options) (*Controller, error) {
	return connect(ctx, addr, subnqn, opts, false)
}

func connect(ctx context.Context, addr, subnqn string, opts Options, discovery bool) (*Controller, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(subnqn) > 223 || subnqn == "" {
		return nil, fmt.Errorf("host: invalid subsystem NQN %q", subnqn)
	}
	c := &Controller{
		addr:      addr,
		subnqn:    subnqn,
		opts:      opts,
		log:       opts.Logger.With("addr", addr, "subnqn", subnqn),
		discovery: discovery,
		ready:     make(chan struct{}),
		ns:        make(map[uint32]*Namespace),
	}
	c.bg, c.cancel = context.WithCancel(context.Background())
	a, err := c.associate(ctx)
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.publish(a)
	c.log.Debug("host: connected", "cntlid", a.cntlid, "ioqueues", len(a.io))
	return c, nil
}

// dial opens one queue's connection and exchanges ICReq/ICResp.
func (a *association) dial(ctx context.Context, qid uint16, cids int) (*queue, error) {
	c := a.c
	ctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("host: dial %s: %w", c.addr, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // Go's default already, but say it: latency matters more than packets
	}
	q := newQueue(conn, queueConfig{qid: qid, cids: cids, log: c.log, st: &c.st, onFail: a.fail, wg: &a.wg, pollSpin: c.opts.PollSpin,
		delivering: &c.delivering, spawn: c.spawn})
	if err := q.handshake(ctx, c.opts.HeaderDigest, c.opts.DataDigest); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("host: queue %d: %w", qid, err)
	}
	a.mu.Lock()
	a.queues = append(a.queues, q)
	failed := a.failed.Load()
	a.mu.Unlock()
	q.start()
	if failed {
		<-a.dead
		q.fail(a.err)
		return nil, fmt.Errorf("host: queue %d: %w: %w", qid, ErrConnectionLost, a.err)
	}
	return q, nil
}

// fail ends the association: every queue fails (their calls with it) and
// the controller starts reconnecting. Safe to call many times.
func (a *association) fail(err error) {
	if !a.failed.CompareAndSwap(false, true) {
		return
	}
	a.err = err
	close(a.dead)
	a.mu.Lock()
	qs := append([]*queue(nil), a.queues...)
	a.mu.Unlock()
	// I/O queues first, the admin queue (dialled first) last: when the
	// admin connection closes the target tears the controller down and
	// closes the I/O connections itself, and an I/O queue that saw that
	// before we failed it would report the EOF as a connection loss.
	for i := len(qs) - 1; i >= 0; i-- {
		qs[i].fail(err)
	}
	a.c.lost(a)
}

// associate builds a new association: the whole controller bring-up.
func (c *Controller) associate(ctx context.Context) (_ *association, err error) {
	a := &association{c: c, dead: make(chan struct{})}
	defer func() {
		if err != nil {
			a.fail(err)
			a.wg.Wait()
		}
	}()
	if a.admin, err = a.dial(ctx, 0, adminDepth-1); err != nil {
		return nil, err
	}
	kato := c.opts.kato()
	if c.discovery {
		kato = 0 // as Linux: a discovery controller is queried and dropped
	}
	if a.cntlid, err = a.connect(ctx, a.admin, adminDepth-1, kato, 0xffff); err != nil {
		return nil, err
	}
	if a.cap, err = a.propGet(ctx, nvme.PropCAP, true); err != nil {
		return nil, err
	}
	vs, err := a.propGet(ctx, nvme.PropVS, false)
	if err != nil {
		return nil, err
	}
	a.vs = uint32(vs)
	// CSS NVM, MPS 4 KiB, round robin; SQ/CQ entry sizes 2^6 and 2^4.
	// A controller of several I/O command sets (CAP.CSS bit 6) is
	// enabled with all of them (CC.CSS 110b), so its KV namespaces run
	// their commands, as Linux does.
	a.cc = nvme.CCEnable | 6<<16 | 4<<20
	if a.cap&nvme.CAPCSSIOCS != 0 {
		a.cc |= nvme.CCCSSAllIOCS << 4
	}
	if err = a.propSet(ctx, nvme.PropCC, uint64(a.cc)); err != nil {
		return nil, err
	}
	if err = a.waitReady(ctx); err != nil {
		return nil, err
	}
	buf := make([]byte, nvme.IdentifySize)
	if err = a.identify(ctx, nvme.CNSController, 0, buf); err != nil {
		return nil, err
	}
	if err = a.id.Unmarshal(buf); err != nil {
		return nil, err
	}
	a.maxXfer = 1 << 20
	if a.id.MDTS != 0 {
		page := 1 << (12 + (a.cap>>48)&0xf) // CAP.MPSMIN
		a.maxXfer = min(page<<min(a.id.MDTS, 20), 1<<30)
	}
	a.admin.setMaxIn(a.maxXfer)
	if c.discovery {
		return a, nil
	}

	if a.id.ICDOFF != 0 {
		return nil, fmt.Errorf("host: controller uses in-capsule data offset %d; only 0 is supported", a.id.ICDOFF)
	}
	if a.id.IOCCSZ >= 4 {
		a.ioInline = int(a.id.IOCCSZ)*16 - nvme.CommandSize
	}
	// Number of Queues: NSQR in bits 15:0, NCQR in 31:16, both zero-based.
	want := uint32(c.opts.IOQueues - 1)
	dw0, err := a.setFeature(ctx, nvme.FeatNumQueues, want|want<<16)
	if err != nil {
		return nil, err
	}
	nq := int(min(dw0&0xffff, dw0>>16)) + 1
	nq = min(nq, c.opts.IOQueues)
	mqes := int(a.cap & 0xffff) // zero-based entries = commands a queue can hold
	if mqes < 1 {
		return nil, fmt.Errorf("host: CAP.MQES %d too small", mqes)
	}
	depth := min(c.opts.QueueDepth, mqes)
	for i := 1; i <= nq; i++ {
		q, err := a.dial(ctx, uint16(i), depth)
		if err != nil {
			return nil, err
		}
		// SQSIZE depth: depth+1 entries hold depth commands.
		if _, err = a.connect(ctx, q, depth, 0, a.cntlid); err != nil {
			return nil, err
		}
		q.inline = a.ioInline
		q.setMaxIn(a.maxXfer)
		a.io = append(a.io, q)
	}
	if a.ns, err = a.scanNamespaces(ctx); err != nil {
		return nil, err
	}
	if kato != 0 {
		period := time.Duration(kato) * time.Millisecond / 2
		if a.id.CTRATT&nvme.CTRATTTrafficBasedKeepAlive != 0 {
			// As Linux does for such controllers: twice as often, so a
			// Keep Alive still arrives in time after the host has stalled
			// for up to 3/4 KATO. A busy Go process can starve a goroutine
			// for seconds: on a loaded 2-CPU VM the ticker below once woke
			// 5.1 s late while the grep benchmark generated its dataset,
			// past KATO/2 of the default 10 s, and the target tore the
			// controller down.
			period /= 2
		}
		a.wg.Add(1)
		go a.keepAlive(period)
	}
	return a, nil
}

// cmdCtx bounds one command of the association's own (setup, shutdown):
// a controller that accepts TCP but never answers must not hang Connect.
func (a *association) cmdCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.c.opts.DialTimeout)
}

// connect sends a Fabrics Connect on q and returns the controller ID.
func (a *association) connect(ctx context.Context, q *queue, sqsize int, kato uint32, cntlid uint16) (uint16, error) {
	ctx, cancel := a.cmdCtx(ctx)
	defer cancel()
	var cmd nvme.Command
	cc := nvme.ConnectCommand{QID: q.qid, SQSize: uint16(sqsize), KATO: kato}
	if a.c.opts.DisableSQFlowControl {
		cc.CAttr |= 1 << 2
	}
	cc.ToCommand(&cmd)
	data := (&nvme.ConnectData{HostID: a.c.opts.HostID, CNTLID: cntlid, SubNQN: a.c.subnqn, HostNQN: a.c.opts.HostNQN}).Marshal()
	// Connect data always travels in the capsule, whatever IOCCSZ says.
	cqe, err := q.do(ctx, &cmd, data, nil, true)
	if err != nil {
		return 0, err
	}
	q.connected.Store(true)
	if err := a.authenticate(ctx, q, cqe.DW0); err != nil {
		return 0, err
	}
	return uint16(cqe.DW0), nil
}

func (a *association) propGet(ctx context.Context, off uint32, size8 bool) (uint64, error) {
	ctx, cancel := a.cmdCtx(ctx)
	defer cancel()
	var cmd nvme.Command
	(&nvme.PropertyCommand{Size8: size8, Offset: off}).ToCommand(&cmd, false)
	cqe, err := a.admin.do(ctx, &cmd, nil, nil, false)
	return uint64(cqe.DW0) | uint64(cqe.DW1)<<32, err
}

func (a *association) propSet(ctx context.Context, off uint32, v uint64) error {
	ctx, cancel := a.cmdCtx(ctx)
	defer cancel()
	var cmd nvme.Command
	(&nvme.PropertyCommand{Offset: off, Value: v}).ToCommand(&cmd, true)
	_, err := a.admin.do(ctx, &cmd, nil, nil, false)
	return err
}

// waitReady polls CSTS.RDY for up to CAP.TO.
func (a *association) waitReady(ctx context.Context) error {
	timeout := time.Duration((a.cap>>24)&0xff) * 500 * time.Millisecond
	return a.pollCSTS(ctx, max(timeout, 500*time.Millisecond), "ready", func(csts uint32) bool {
		return csts&nvme.CSTSReady != 0
	})
}

func (a *association) pollCSTS(ctx context.Context, timeout time.Duration, what string, done func(uint32) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := time.Millisecond
	for {
		v, err := a.propGet(ctx, nvme.PropCSTS, false)
		if err != nil {
			return err
		}
		csts := uint32(v)
		if csts&nvme.CSTSFatal != 0 {
			return fmt.Errorf("host: controller fatal status (CSTS 0x%x) waiting for %s", csts, what)
		}
		if done(csts) {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("host: controller not %s (CSTS 0x%x): %w", what, csts, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

func (a *association) identify(ctx context.Context, cns uint8, nsid uint32, buf []byte) error {
	return a.identifyCSI(ctx, cns, nvme.CSINVM, nsid, buf)
}

// identifyCSI is Identify of a CNS that takes a command set (CDW11 bits
// 31:24), such as the command set specific namespace structure (05h).
func (a *association) identifyCSI(ctx context.Context, cns, csi uint8, nsid uint32, buf []byte) error {
	ctx, cancel := a.cmdCtx(ctx)
	defer cancel()
	cmd := nvme.Command{Opcode: nvme.AdminIdentify, NSID: nsid, CDW10: uint32(cns), CDW11: uint32(csi) << 24}
	_, err := a.admin.do(ctx, &cmd, nil, buf, false)
	return err
}

func (a *association) setFeature(ctx context.Context, fid uint8, cdw11 uint32) (uint32, error) {
	ctx, cancel := a.cmdCtx(ctx)
	defer cancel()
	cmd := nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: uint32(fid), CDW11: cdw11}
	cqe, err := a.admin.do(ctx, &cmd, nil, nil, false)
	return cqe.DW0, err
}

// shutdown asks for a normal shutdown (CC.SHN 01b) and waits for
// CSTS.SHST to report it complete.
func (a *association) shutdown(ctx context.Context) error {
	cc := a.cc&^nvme.CCShnMask | 1<<14
	if err := a.propSet(ctx, nvme.PropCC, uint64(cc)); err != nil {
		return err
	}
	return a.pollCSTS(ctx, 5*time.Second, "shut down", func(csts uint32) bool {
		return csts&nvme.CSTSShstMask == nvme.CSTSShstComplete
	})
}

// keepAlive sends Keep Alive every interval; a failure is a connection loss.
func (a *association) keepAlive(interval time.Duration) {
	defer a.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-a.dead:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		_, err := a.admin.do(ctx, &nvme.Command{Opcode: nvme.AdminKeepAlive}, nil, nil, false)
		cancel()
		if err != nil {
			a.fail(fmt.Errorf("keep alive: %w", err))
			return
		}
	}
}

// publish makes a the association submissions use.
func (c *Controller) publish(a *association) {
	c.id.Store(&a.id)
	if !c.discovery {
		c.updateNamespaces(a.ns)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		a.fail(ErrClosed)
		a.wg.Wait()
		return
	}
	c.assoc = a
	c.xfer = a.maxXfer
	close(c.ready)
	c.mu.Unlock()
	if a.failed.Load() {
		// It failed before it was published, so nobody started a reconnect.
		c.lost(a)
	}
}

// errLostWhileDelivering fails a submission made while the controller
// reconnects and a queue's reader delivers to an OnDone.
var errLostWhileDelivering = fmt.Errorf("reconnecting while a completion is delivered: %w", ErrConnectionLost)

// spawn runs fn on a goroutine Close waits for, or at once once Close has
// begun (a submission then fails with ErrClosed without waiting).
func (c *Controller) spawn(fn func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		fn()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		fn()
	}()
}

// lost starts reconnecting after a's failure, once per association.
func (c *Controller) lost(a *association) {
	c.mu.Lock()
	if c.assoc != a || c.closed {
		c.mu.Unlock()
		return
	}
	c.assoc = nil
	c.ready = make(chan struct{})
	c.wg.Add(1)
	c.mu.Unlock()
	c.st.connLosses.Add(1)
	go c.reconnect(a)
}

func (c *Controller) reconnect(old *association) {
	defer c.wg.Done()
	<-old.dead
	c.log.Warn("host: connection lost, reconnecting", "err", old.err)
	old.wg.Wait()
	ctx := c.bg // cancelled by Close
	if tmo := c.opts.ControllerLossTimeout; tmo > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, tmo)
		defer cancel()
	}
	delay := c.opts.ReconnectDelay
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			c.giveUp(ctx, old.err)
			return
		case <-t.C:
		}
		a, err := c.associate(ctx)
		if err == nil {
			c.st.reconnects.Add(1)
			c.log.Info("host: reconnected", "cntlid", a.cntlid, "attempt", attempt)
			c.publish(a)
			return
		}
		if ctx.Err() != nil {
			c.giveUp(ctx, err)
			return
		}
		c.log.Warn("host: reconnect failed", "attempt", attempt, "err", err)
		delay = min(2*delay, maxReconnectDelay)
	}
}

// giveUp ends reconnecting once Options.ControllerLossTimeout has passed
// (ctx ended while Close had not run): every submission waiting for a
// connection, and every later one, fails with ErrConnectionLost.
func (c *Controller) giveUp(ctx context.Context, last error) {
	if c.bg.Err() != nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return // closed
	}
	err := fmt.Errorf("%w: gave up reconnecting to %s after %v (Options.ControllerLossTimeout); last error: %w",
		ErrConnectionLost, c.addr, c.opts.ControllerLossTimeout, last)
	c.log.Error("host: controller lost for good", "after", c.opts.ControllerLossTimeout, "err", last)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.assoc != nil {
		return
	}
	c.gone = err
	close(c.ready)
}

// waiter bounds, across retries, how long one submission waits for a
// reconnect.
type waiter struct{ timer *time.Timer }

func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// current returns the live association, waiting while reconnecting.
func (c *Controller) current(ctx context.Context, w *waiter) (*association, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c.mu.Lock()
		closed, a, ready, gone := c.closed, c.assoc, c.ready, c.gone
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if gone != nil {
			return nil, gone
		}
		if a != nil {
			if !a.failed.Load() {
				return a, nil
			}
			c.lost(a) // failing right now: don't spin until it hands over
			continue
		}
		if c.delivering.Load() > 0 {
			// A submission from an OnDone on a queue's reader (or one made
			// while a reader delivers): the reconnection waits for that
			// reader, so waiting for the reconnection could wait for
			// ever. Fail as a lost connection does.
			return nil, errLostWhileDelivering
		}
		if w.timer == nil {
			w.timer = time.NewTimer(c.opts.MaxReconnectWait)
		}
		select {
		case <-ready:
		case <-c.bg.Done():
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.timer.C:
			return nil, fmt.Errorf("no connection to %s within %v: %w", c.addr, c.opts.MaxReconnectWait, ErrConnectionLost)
		}
	}
}

// pick chooses the queue for a submission: the admin queue (pin -2), a
// pinned I/O queue (pin >= 0) or the next I/O queue round-robin (pin -1).
func (c *Controller) pick(a *association, pin int) (*queue, error) {
	switch {
	case pin == -2:
		return a.admin, nil
	case len(a.io) == 0:
		return nil, errors.New("host: controller has no I/O queues")
	case pin >= 0:
		return a.io[pin%len(a.io)], nil
	default:
		return a.io[int(c.rr.Add(1)-1)%len(a.io)], nil
	}
}

// submit sends call on the queue pick chooses, waiting for a reconnect if
// needed. An error means the call was not submitted.
func (c *Controller) submit(ctx context.Context, call *Call, pin int) error {
	var w waiter
	defer w.stop()
	for {
		a, err := c.current(ctx, &w)
		if err != nil {
			return err
		}
		if call.ns != nil {
			// After current: a reconnect has installed its scan by now.
			if err := call.ns.usable(); err != nil {
				return err
			}
		}
		q, err := c.pick(a, pin)
		if err != nil {
			return err
		}
		if err = q.submit(ctx, call, false); !errors.Is(err, errQueueDead) {
			return err
		}
		// The queue's failure is on its way to the association; make sure
		// it got there, so current() does not hand out this one again.
		<-q.dead
		a.fail(q.err)
	}
}

// goCall submits and, if submission fails, delivers the failure on Done.
func (c *Controller) goCall(ctx context.Context, call *Call, pin int) *Call {
	if call.Done == nil {
		call.Done = make(chan *Call, 1)
	} else if cap(call.Done) == 0 {
		panic("host: done channel is unbuffered")
	}
	if err := c.submit(ctx, call, pin); err != nil {
		c.failCall(call, err, pin)
	}
	return call
}

// failCall delivers the error of a call that could not be submitted. One
// that failed because a reader is delivering is delivered from another
// goroutine: an OnDone on that reader that resubmits at once would
// otherwise fail and be called again, on and on, while the reconnection
// waits for the reader.
func (c *Controller) failCall(call *Call, err error, pin int) {
	qid := uint16(1)
	if pin == -2 {
		qid = 0
	}
	err = fmt.Errorf("host: %s: %w", describe(&call.Cmd, qid), err)
	if call.OnDone != nil && errors.Is(err, errLostWhileDelivering) {
		c.spawn(func() { call.fail(err, &c.st) })
		return
	}
	call.fail(err, &c.st)
}

// submitBatch submits calls, all on the one I/O queue pick chooses, with
// one flush; see Batch. Calls that cannot be submitted get their error on
// Done.
func (c *Controller) submitBatch(ctx context.Context, calls []*Call, pin int) {
	if len(calls) == 0 {
		return
	}
	var watch *ctxWatch
	if ctx.Done() != nil && len(calls) > 1 {
		// A lone call is cheaper with its own AfterFunc (enqueue's
		// default without a watch).
		watch = newCtxWatch(ctx, len(calls))
		defer watch.release()
	}
	var w waiter
	defer w.stop()
	for len(calls) > 0 {
		a, err := c.current(ctx, &w)
		if err == nil && calls[0].ns != nil {
			err = calls[0].ns.usable() // one namespace per batch
		}
		var q *queue
		if err == nil {
			q, err = c.pick(a, pin)
		}
		if err == nil {
			var n int
			n, err = q.submitBatch(ctx, calls, watch)
			calls = calls[n:]
			if errors.Is(err, errQueueDead) {
				// As in submit: make sure the association knows, then
				// retry the rest on the next one.
				<-q.dead
				a.fail(q.err)
				continue
			}
		}
		if err != nil {
			for _, call := range calls {
				c.failCall(call, err, pin)
			}
			return
		}
	}
}

// Admin runs a raw admin command. out is data to the controller, in data
// from it; either may be nil, and both are allowed for nearstore's vendor
// commands (out must then fit in the capsule). A non-success status is
// returned as a wrapped *nvme.StatusError along with the completion.
func (c *Controller) Admin(ctx context.Context, cmd *nvme.Command, out, in []byte) (nvme.Completion, error) {
	call := c.goCall(ctx, &Call{Cmd: *cmd, Out: out, In: in}, -2)
	<-call.Done
	return call.Completion, call.Err
}

// Identify returns the Identify Controller data of the current (or last)
// association.
func (c *Controller) Identify() nvme.IdentifyController { return *c.id.Load() }

// CNTLID returns the controller ID of the current (or last) association.
func (c *Controller) CNTLID() uint16 { return c.id.Load().CNTLID }

// MaxTransfer returns the largest data transfer of one command, in bytes
// (from MDTS; 1 MiB when the controller sets no limit). While reconnecting
// it returns the last association's limit, so a command split now fits
// the controller it is sent to once the queue is back.
func (c *Controller) MaxTransfer() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.assoc != nil:
		return c.assoc.maxXfer
	case c.xfer != 0:
		return c.xfer
	}
	return 1 << 20
}

// Digests reports whether the current association's admin queue
// negotiated header and data digests (CRC32C) with the controller: what
// the ICResp granted, which may be less than Options asked for. Every
// queue of an association asks the same, so the admin queue speaks for
// all. Both are false while reconnecting.
func (c *Controller) Digests() (header, data bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.assoc == nil || c.assoc.admin == nil {
		return false, false
	}
	return c.assoc.admin.fr.HeaderDigest, c.assoc.admin.fr.DataDigest
}

// IOQueues returns the number of I/O queues of the current association, or
// 0 while reconnecting.
func (c *Controller) IOQueues() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.assoc != nil {
		return len(c.assoc.io)
	}
	return 0
}

// Stats returns the controller's counters.
func (c *Controller) Stats() Stats { return c.st.snapshot() }

// GetLogPage reads len(buf) bytes (a multiple of 4) of log page lid from
// byte offset, splitting at the maximum transfer size.
func (c *Controller) GetLogPage(ctx context.Context, lid uint8, nsid uint32, buf []byte, offset uint64) error {
	if len(buf) == 0 || len(buf)%4 != 0 {
		return fmt.Errorf("host: get log page 0x%02x: length %d is not a positive multiple of 4", lid, len(buf))
	}
	chunk := c.MaxTransfer() &^ 3
	for done := 0; done < len(buf); {
		n := min(chunk, len(buf)-done)
		var cmd nvme.Command
		(&nvme.GetLogPageCommand{LID: lid, Length: n, Offset: offset + uint64(done)}).ToCommand(&cmd)
		cmd.NSID = nsid
		if _, err := c.Admin(ctx, &cmd, nil, buf[done:done+n]); err != nil {
			return err
		}
		done += n
	}
	return nil
}

// GetFeature runs Get Features for fid (current value) and returns DW0.
func (c *Controller) GetFeature(ctx context.Context, fid uint8, cdw11 uint32) (uint32, error) {
	cqe, err := c.Admin(ctx, &nvme.Command{Opcode: nvme.AdminGetFeatures, CDW10: uint32(fid), CDW11: cdw11}, nil, nil)
	return cqe.DW0, err
}

// SetFeature runs Set Features for fid with cdw11 and returns DW0.
func (c *Controller) SetFeature(ctx context.Context, fid uint8, cdw11 uint32) (uint32, error) {
	cqe, err := c.Admin(ctx, &nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: uint32(fid), CDW11: cdw11}, nil, nil)
	return cqe.DW0, err
}

// Close shuts the controller down (CC.SHN normal shutdown, waiting for
// CSTS.SHST), closes every connection and waits for every goroutine the
// Controller started. Commands in flight fail with ErrClosed. Later calls
// return nil.
func (c *Controller) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.wg.Wait()
		return nil
	}
	c.closed = true
	a := c.assoc
	c.assoc = nil
	c.cancel()
	c.mu.Unlock()
	var err error
	if a != nil {
		if !a.failed.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err = a.shutdown(ctx); err != nil {
				err = fmt.Errorf("host: shutdown: %w", err)
			}
			cancel()
		}
		a.fail(ErrClosed)
		a.wg.Wait()
	}
	c.wg.Wait()
	c.log.Debug("host: closed")
	return err
}

// Discover connects to the discovery controller at addr, reads the whole
// discovery log page (header first, for its size; again if the generation
// counter moved meanwhile) and disconnects.
func Discover(ctx context.Context, addr string, opts Options) ([]nvme.DiscoveryEntry, error) {
	c, err := connect(ctx, addr, nvme.DiscoveryNQN, opts, true)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	hdr := make([]byte, nvme.DiscoveryLogHeaderSize)
	for range 10 {
		if err := c.GetLogPage(ctx, nvme.LogDiscovery, 0, hdr, 0); err != nil {
			return nil, err
		}
		gen := binary.LittleEndian.Uint64(hdr[0:])
		numrec := binary.LittleEndian.Uint64(hdr[8:])
		if numrec > 1<<16 {
			return nil, fmt.Errorf("host: discovery log claims %d records", numrec)
		}
		full := make([]byte, nvme.DiscoveryLogHeaderSize+int(numrec)*nvme.DiscoveryLogEntrySize)
		if err := c.GetLogPage(ctx, nvme.LogDiscovery, 0, full, 0); err != nil {
			return nil, err
		}
		gen2, _, entries, err := nvme.UnmarshalDiscoveryLog(full)
		if err != nil {
			return nil, err
		}
		if gen2 == gen {
			return entries, nil
		}
	}
	return nil, errors.New("host: discovery log keeps changing")
}
