package target

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
)

// reqState is where a request is in its life, as SPDK's
// nvmf_tcp_req_state. The connection layer moves a request through
//
//	new ─┬─▶ awaitingData ─┬─▶ ready ─▶ executing ─┬─▶ completing ─▶ free
//	     ├─▶ ready         │                       └─▶ parked ─┬─▶ completing
//	     ├─▶ completing    ├─▶ completing                      └─▶ free
//	     └─▶ free          └─▶ free
//
// and every move is checked (request.to): a move the diagram does not have
// is a bug in the target, and panics rather than let two goroutines own
// one request's buffers.
type reqState uint32

const (
	// reqNew: the capsule is read, with its in-capsule data; the command
	// is not yet checked.
	reqNew reqState = iota
	// reqAwaitingData: an R2T went out; H2CData PDUs fill the request's
	// data buffer.
	reqAwaitingData
	// reqReady: the command checked out and its data is in hand.
	reqReady
	// reqExecuting: the controller layer runs it.
	reqExecuting
	// reqParked: an Asynchronous Event Request waiting for an event; it is
	// completed by whoever raises the event (qpair.completeParked).
	reqParked
	// reqCompleting: its C2HData and response are being sent.
	reqCompleting
	// reqFree: its buffers are back in the pool and its CID is free.
	reqFree
)

func (s reqState) String() string {
	if s > reqFree {
		return fmt.Sprintf("state %d", uint32(s))
	}
	return [...]string{"new", "awaiting data", "ready", "executing", "parked", "completing", "free"}[s]
}

// canMove reports whether the diagram above has the move s → next.
func (s reqState) canMove(next reqState) bool {
	switch s {
	case reqNew:
		return next == reqAwaitingData || next == reqReady || next == reqCompleting || next == reqFree
	case reqAwaitingData:
		return next == reqReady || next == reqCompleting || next == reqFree
	case reqReady:
		return next == reqExecuting
	case reqExecuting:
		return next == reqCompleting || next == reqParked
	case reqParked:
		return next == reqCompleting || next == reqFree
	case reqCompleting:
		return next == reqFree
	}
	return false
}

// request is one command from its capsule to its completion.
//
// Buffers: a request owns every pooled buffer it uses — the in-capsule data
// it arrived with, the buffer H2CData fills, the buffer its result is sent
// from — from the moment it takes one until free, the one place they go
// back to the pool. Whoever moves a request to reqFree owns it last: the
// reader for a request that never executed, the completing goroutine for
// any other.
type request struct {
	sqe   nvme.Command
	start time.Time
	state atomic.Uint32 // a reqState
	pool  *bufPool

	// Filled by the controller layer's checks (session.prepare).
	spec  *cmdSpec   // nil: an opcode no table has
	ns    *namespace // the namespace an NVM command names, once found
	want  int        // bytes of host-to-controller data to gather
	inCap int        // bidirectional commands: the result buffer's size
	op    string     // metrics label, set as the command executes

	// data is the host-to-controller data, once gathered: a slice of
	// capsule or h2c.
	data []byte
	got  int    // H2CData bytes received
	ttag uint16 // transfer tag while awaiting data
	// dataTimer closes the queue if the data an R2T asked for has not all
	// come within the server's DataTimeout.
	dataTimer *time.Timer
	// status is a failure found while gathering data (a data digest
	// error): the command completes with it unexecuted.
	status nvme.Status

	capsule, h2c, result []byte // pooled buffers owned, released by free

	// warm is the task a blocking command runs as on a warm worker
	// (conn.dispatch), held by that worker until the command completes.
	warm blockingCommand
	// fn is a function command's working state (execFunction). Function
	// commands are blocking, and a blocking command's request is never
	// recycled (requestPool), so a pointer into fn that something keeps
	// after the command stays good, as a separate allocation's would.
	fn functionCall
}

// functionCall is what execFunction works on: the decoded function
// request and the module wrapper its code runs through.
type functionCall struct {
	req pushdown.Request
	mod scheduledModule
}

func newRequest(sqe nvme.Command, pool *bufPool) *request {
	return &request{sqe: sqe, start: time.Now(), pool: pool}
}

// requestPool recycles requests so that the hot path allocates none per
// command. A request goes back only when no goroutine but the queue's
// reader ever held it: executed inline and completed by the reader, never
// parked, never waiting for data with a timer armed (see conn.complete).
// Any other request is left to the garbage collector, because something
// may still hold a pointer to it (a timer's closure, an event completing
// a parked command).
type requestPool struct {
	bufs *bufPool
	p    sync.Pool
}

// get returns a request in reqNew for sqe.
func (rp *requestPool) get(sqe nvme.Command) *request {
	r, ok := rp.p.Get().(*request)
	if !ok {
		return newRequest(sqe, rp.bufs)
	}
	r.sqe, r.start = sqe, time.Now()
	return r
}

// put takes back a freed request that nothing else holds.
func (rp *requestPool) put(r *request) {
	if r.current() != reqFree {
		panic(fmt.Sprintf("target: request CID %d recycled in state %v", r.sqe.CID, r.current()))
	}
	*r = request{pool: rp.bufs}
	rp.p.Put(r)
}

func (r *request) current() reqState { return reqState(r.state.Load()) }

// to moves r from one state to the next, panicking if r is not in from or
// the diagram has no such move.
func (r *request) to(from, next reqState) {
	if !r.tryTo(from, next) {
		panic(fmt.Sprintf("target: request CID %d: move %v → %v from state %v", r.sqe.CID, from, next, r.current()))
	}
}

// tryTo is to for a move another goroutine may have beaten this one to (a
// parked request is completed by an event or freed by teardown, once).
func (r *request) tryTo(from, next reqState) bool {
	if !from.canMove(next) {
		panic(fmt.Sprintf("target: request CID %d: no move %v → %v", r.sqe.CID, from, next))
	}
	return r.state.CompareAndSwap(uint32(from), uint32(next))
}

// takeCapsule gives r an n-byte buffer for its in-capsule data.
func (r *request) takeCapsule(n int) []byte {
	r.capsule = r.pool.get(n)
	return r.capsule[:n]
}

// growH2C makes r's buffer for the data an R2T asked for (r.want bytes)
// hold at least n, keeping the r.got bytes already received. The buffer
// grows as data arrives, never on the R2T's promise alone: a host that
// asks to write and sends nothing holds nothing. It grows fourfold at a
// time, so a transfer of k H2CData PDUs is copied at most log4(k) times.
func (r *request) growH2C(n int) []byte {
	if cap(r.h2c) < n {
		b := r.pool.get(min(r.want, max(n, 4*cap(r.h2c))))
		copy(b, r.h2c[:r.got])
		r.pool.put(r.h2c)
		r.h2c = b
	}
	return r.h2c[:cap(r.h2c)]
}

// resultBuf gives r an n-byte buffer for controller-to-host data, sent
// from before r is freed. A request has one.
func (r *request) resultBuf(n int) []byte {
	if r.result != nil {
		panic("target: a request's second result buffer")
	}
	r.result = r.pool.get(n)
	return r.result[:n]
}

// free moves r to reqFree from the state it is in and gives its buffers
// back.
func (r *request) free(from reqState) {
	r.to(from, reqFree)
	r.release()
}

// tryFree is free for a request another goroutine may have taken first
// (tryTo).
func (r *request) tryFree(from reqState) bool {
	if !r.tryTo(from, reqFree) {
		return false
	}
	r.release()
	return true
}

// release gives r's buffers back to the pool: the only place they go
// back, once r is in reqFree and nothing can use them any more.
func (r *request) release() {
	r.pool.put(r.capsule)
	r.pool.put(r.h2c)
	r.pool.put(r.result)
	r.capsule, r.h2c, r.result, r.data = nil, nil, nil, nil
}

// completion is what executing a command produced: the completion queue
// entry's status and result dwords, and the data for the host.
type completion struct {
	status   nvme.Status
	dw0, dw1 uint32
	// data goes to the host in C2HData PDUs before the response, if the
	// command succeeded. It may be r.resultBuf's buffer.
	data []byte
	// parked: no completion now (an Asynchronous Event Request); one comes
	// later through qpair.completeParked.
	parked bool
	// refused: a Function Load the Function Load Refusals log explains.
	refused bool
}

// status is a completion with only a status.
func status(st nvme.Status) completion { return completion{status: st} }

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
