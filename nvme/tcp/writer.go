package tcp

import (
	"io"
	"runtime"
	"sync"
)

// Writer lets many goroutines send PDUs on one framer and combines their
// writes (flat combining), so that PDUs ready at the same time leave in one
// system call and a PDU sent alone leaves at once:
//
//   - At most one goroutine writes the connection at a time: the sender. A
//     Do that finds no sender becomes it. It frames its PDUs after whatever
//     is buffered and writes all of it in one write call; then, before it
//     returns, it writes whatever other goroutines framed meanwhile, batch
//     after batch, until nothing is left.
//   - A Do that finds a sender frames its PDUs into the buffer and returns
//     at once: the sender writes them with the next batch. It never waits
//     for another goroutine's system call.
//   - With SetLinger, a Do that becomes the sender while others' commands
//     are in flight first yields its processor once, so that goroutines
//     taking turns on that processor find it sending.
//   - Defer only frames; its caller owns a later Flush (see Defer).
//   - Flush writes what is buffered, or leaves it to the sender if there is
//     one, which writes it before it lets go.
//   - Sync is Flush that also waits for the sender: when it returns,
//     everything framed before it is written, or the write failed. It is for
//     a caller about to close the connection (a TermReq, a teardown).
//
// So PDUs reach the connection in the order they were framed (the order of
// the Do and Defer calls), each exactly once.
//
// Buffers: a PDU's data is copied into the framer's buffer, except that the
// sender's own data of spliceMin bytes or more is written straight from the
// caller's memory (one writev) before its Do returns. Either way the caller
// may reuse its data as soon as Do or Defer returns.
//
// Errors: the first write error is sticky: the call that met it returns it,
// and so does every later call. PDUs that other goroutines framed before it
// and were still buffered are dropped, and those goroutines' calls had
// already returned nil. So whoever owns the connection must treat an error
// from any call as the end of the connection (close it, fail what is in
// flight), as host and target do: the peer then never sees those PDUs,
// and nothing of the stream after the failure.
type Writer struct {
	f     *Framer
	mu    sync.Mutex
	busy  bool   // a sender holds the connection; it writes f.ob before it lets go
	spare outBuf // the buffer the sender swaps in while it writes the other
	err   error  // first error; every later call returns it

	// Batches the sender took from f.ob and finished writing; a Sync
	// waits on synced for written to reach the batch holding its bytes.
	taken, written uint64
	syncing        int // Syncs waiting
	synced         sync.Cond

	linger  func() bool // SetLinger's; nil: never
	lingers backoff     // skips lingers that gathered nothing
}

// NewWriter wraps f. From then on f's write side belongs to the Writer.
func NewWriter(f *Framer) *Writer {
	w := &Writer{f: f}
	w.synced.L = &w.mu
	return w
}

// SetLinger makes a Do that becomes the sender while others reports true
// (commands other than its own are in flight: their PDUs may be about to
// be sent) yield its processor once (runtime.Gosched) before it writes, so
// the goroutines ready to run there (a completion's submitter, a finished
// command's completer) frame their PDUs into the same write. Without
// that, goroutines that take turns on one processor each write alone: the
// sender holds the processor through its system call, so nobody finds it
// writing. A linger that gathered nothing is a miss, and lingers back off
// as a PollReader's spins do (Spinner), so a connection whose PDUs do not
// come in bursts soon stops paying for them. Call it before the first Do.
func (w *Writer) SetLinger(others func() bool) { w.linger = others }

// Do runs fn with the framer under the writer's lock and makes sure what
// it framed is sent: by this goroutine, which then returns once it is
// written, or by the sender already writing, and then it returns at once
// (see the type's comment).
func (w *Writer) Do(fn func(f *Framer) error) error {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return w.err
	}
	if w.busy {
		err := w.frameLocked(fn)
		w.mu.Unlock()
		return err
	}
	// This goroutine will write its own data before it returns: it may
	// splice the data in rather than copy it.
	w.f.spliceData = true
	err := w.frameLocked(fn)
	w.f.spliceData = false
	if err != nil {
		w.mu.Unlock()
		return err
	}
	if w.linger != nil && w.linger() && w.lingers.try() {
		w.busy = true
		framed := w.f.ob.size()
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
		w.lingers.result(w.f.ob.size() > framed)
	}
	return w.sendLocked()
}

// Defer runs fn with the framer under the writer's lock and leaves what it
// framed buffered. The caller owns a later Flush, before it (or anyone
// depending on those PDUs) waits: a target's reader goroutine flushing
// before its next socket read, a host submitting a batch of commands. That
// turns a burst of PDUs into one write. A sender that happens to be
// writing meanwhile may send them earlier.
func (w *Writer) Defer(fn func(f *Framer) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	return w.frameLocked(fn)
}

// Flush writes whatever is buffered, if anything is and no sender is
// writing (one is: it writes it before it lets go).
func (w *Writer) Flush() error {
	w.mu.Lock()
	if w.err != nil || w.busy || w.f.ob.empty() {
		err := w.err
		w.mu.Unlock()
		return err
	}
	return w.sendLocked()
}

// Sync writes whatever is buffered and waits until it is written, by this
// goroutine or by the sender already writing: when it returns nil, every
// PDU framed before the call has been handed to the connection. It returns
// the write error otherwise.
func (w *Writer) Sync() error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	if !w.busy {
		if w.f.ob.empty() {
			w.mu.Unlock()
			return nil
		}
		return w.sendLocked()
	}
	// The sender is writing batch taken; what is buffered becomes the
	// next, which it takes before it lets go.
	want := w.taken
	if !w.f.ob.empty() {
		want++
	}
	w.syncing++
	for w.err == nil && w.written < want {
		w.synced.Wait()
	}
	w.syncing--
	err := w.err
	if w.written >= want {
		err = nil
	}
	w.mu.Unlock()
	return err
}

// frameLocked runs fn. An error leaves a partly framed PDU behind, which
// breaks the stream: it is sticky, and the buffer is dropped.
func (w *Writer) frameLocked(fn func(f *Framer) error) error {
	if err := fn(w.f); err != nil {
		w.failLocked(err)
		return err
	}
	return nil
}

func (w *Writer) failLocked(err error) {
	w.err = err
	w.f.ob.reset()
}

// sendLocked makes the calling goroutine the sender: with w.mu held and no
// sender, it writes the buffer, batch after batch, until it is empty or a
// write fails, and returns with w.mu released. The lock is not held while
// writing: other goroutines frame into the other buffer meanwhile.
func (w *Writer) sendLocked() error {
	w.busy = true
	for w.err == nil && !w.f.ob.empty() {
		batch := w.f.ob
		w.f.ob, w.spare = w.spare, outBuf{}
		w.taken++
		w.mu.Unlock()
		err := batch.writeTo(w.f.out)
		batch.reset()
		w.mu.Lock()
		w.spare = batch
		if err != nil {
			w.failLocked(err)
		} else {
			w.written++
		}
		if w.syncing > 0 {
			w.synced.Broadcast()
		}
	}
	w.busy = false
	err := w.err
	w.mu.Unlock()
	return err
}

// spliceMin is the smallest data a sender's own PDU carries by reference
// instead of by copy: below it, copying costs less than another iovec.
const spliceMin = 2048

// maxKeptBuffer bounds the capacity an outBuf keeps between batches: a
// rare large batch (copied data of a large transfer) is let go rather than
// held for the connection's life. It is sized for the batches a deep
// queue of small reads makes in the steady state: while the sender is in
// its write call, every other completion copies its data in, up to a
// queue's depth of them (256 4 KiB reads, 1 MiB with their headers). A
// buffer let go at every batch is grown again from nothing at the next,
// doubling, by the completers: with 64 4 KiB reads in flight per queue
// the regrowth and the garbage collection it caused took 27% of a
// target's CPU samples, and keeping the buffer halved its CPU per read
// (docs/BENCHMARKS.md).
const maxKeptBuffer = 1<<20 + 64<<10

// outBuf is PDUs framed and not yet written: bytes copied into b, with
// spliced data (a caller's memory, by reference) between them.
type outBuf struct {
	b       []byte
	splices []splice
	vec     [][]byte // writeTo's vector, kept to reuse
}

// splice is data written between b[:at] and b[at:].
type splice struct {
	at   int
	data []byte
}

func (o *outBuf) add(p []byte)    { o.b = append(o.b, p...) }
func (o *outBuf) splice(p []byte) { o.splices = append(o.splices, splice{at: len(o.b), data: p}) }
func (o *outBuf) empty() bool     { return len(o.b) == 0 && len(o.splices) == 0 }
func (o *outBuf) size() int       { return len(o.b) + len(o.splices) }

// reset empties o and drops its references to callers' memory.
func (o *outBuf) reset() {
	clear(o.splices)
	o.splices = o.splices[:0]
	clear(o.vec)
	o.vec = o.vec[:0]
	if cap(o.b) > maxKeptBuffer {
		o.b = nil
	} else {
		o.b = o.b[:0]
	}
}

// writeTo writes o to w in order: in one WriteBuffers call if w has it.
func (o *outBuf) writeTo(w io.Writer) error {
	v := o.vec[:0]
	prev := 0
	for _, s := range o.splices {
		if s.at > prev {
			v = append(v, o.b[prev:s.at])
		}
		v = append(v, s.data)
		prev = s.at
	}
	if len(o.b) > prev {
		v = append(v, o.b[prev:])
	}
	o.vec = v
	return writeBuffers(w, v)
}

// BuffersWriter is a connection that writes several buffers in one call
// (RawWriter: writev(2)). WriteBuffers writes every byte of v, in order, or
// returns why not; it may change v's elements (not the bytes they hold).
type BuffersWriter interface {
	WriteBuffers(v [][]byte) error
}

// writeBuffers writes v to w: with w's WriteBuffers if it has one.
func writeBuffers(w io.Writer, v [][]byte) error {
	if bw, ok := w.(BuffersWriter); ok {
		return bw.WriteBuffers(v)
	}
	return writeEach(w, v)
}

// Duplex is a connection's two directions as separate values (say, a
// reader that flushes first, and a RawWriter), for NewFramer. Its writes
// are W's, in one WriteBuffers call when W has it.
type Duplex struct {
	R io.Reader
	W io.Writer
}

// Read reads R.
func (d Duplex) Read(p []byte) (int, error) { return d.R.Read(p) }

// Write writes W.
func (d Duplex) Write(p []byte) (int, error) { return d.W.Write(p) }

// WriteBuffers writes v to W, in one call if W is a BuffersWriter.
func (d Duplex) WriteBuffers(v [][]byte) error { return writeBuffers(d.W, v) }
