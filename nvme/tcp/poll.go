package tcp

import (
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// PollReader reads a connection the way a polled-mode NVMe/TCP queue does
// (SPDK's, or Linux's with busy polling): while an answer is due (see
// NewPollReader), Read first tries non-blocking reads for up to the spin
// before it parks the goroutine in the runtime's poller.
//
// Why: on loopback, and in a virtual machine above all, most of a small
// round trip's time is the wake-up of the thread that parked waiting for
// the answer (an inter-processor interrupt, the scheduler, the runtime's
// poller) rather than the bytes. A reader that keeps its thread running
// while the answer is a few microseconds away takes it without one. The
// spin yields the processor between attempts (runtime.Gosched), so a
// goroutine readied meanwhile runs on the same processor, and it is
// bounded and adaptive (Spinner): after k waits in a row that the spin did
// not end, the next 2^k-1 (at most 63) park at once. So a
// connection that goes idle, or a machine too loaded for the peer to
// answer within the spin, soon costs next to nothing, and one good spin
// restores polling.
//
// A PollReader is for one reading goroutine, as a bufio.Reader is.
//
// Reads are made with raw system calls on the connection's non-blocking
// socket (rawRead), and a read that finds nothing parks in the runtime's
// poller through syscall.RawConn, so deadlines and closing behave as the
// connection's own Read. Any error other than "nothing yet" ends the read
// as the connection's Read would end it: io.EOF, or a *net.OpError.
type PollReader struct {
	conn net.Conn
	raw  syscall.RawConn // nil: the connection has no file descriptor to poll
	spin Spinner
	due  func() bool // whether an answer is expected soon (nil: always)

	// One read's buffer and outcome, and the functions that make it: made
	// once, so a read allocates nothing.
	buf    []byte
	n      int
	errno  syscall.Errno
	readFn func(fd uintptr) bool // one attempt, whatever it finds
	waitFn func(fd uintptr) bool // attempts until something is there
	tryFn  func() bool
}

// DefaultPollSpin is the spin the target and the host use unless told
// otherwise: longer than a loopback or LAN round trip's turnaround at the
// other end (a few to a few tens of microseconds), short enough that a
// miss costs little.
const DefaultPollSpin = 50 * time.Microsecond

// Spinner is the adaptive, bounded spin of polled waits (PollReader's):
// Poll tries for up to Spin, yielding the processor between tries; a wait
// that the spin did not end is a miss, and after k misses in a row the next
// 2^k-1 Polls (at most 63) give up at once. A hit ends the streak. A
// Spinner is for one goroutine.
//
// The yields cost something at queue depth 1: with the other processor
// idle the runtime wakes a thread to look for work (0.2-0.3 futex calls
// per read on each end). Spinning without them saved that and about 5 us
// of p50, but cut queue depth 32's throughput on the loaded machine (a
// median of 25K against 75K IOPS, interleaved), so they stay.
type Spinner struct {
	// Spin bounds one Poll; 0 or less: Poll never tries.
	Spin time.Duration

	backoff backoff
}

// backoff gives up attempts that keep missing: after k misses in a row
// the next 2^k-1 tries (at most 63) give up at once, and a hit ends the
// streak. It is for one goroutine, or used under a lock.
type backoff struct {
	misses uint // attempts in a row that missed
	skip   uint // tries left to give up at once
}

// maxMissShift bounds the backoff: after many misses, one try in 64.
const maxMissShift = 6

// try reports whether to attempt now.
func (b *backoff) try() bool {
	if b.skip > 0 {
		b.skip--
		return false
	}
	return true
}

// result records how an attempt ended.
func (b *backoff) result(hit bool) {
	if hit {
		b.misses = 0
		return
	}
	b.misses++
	b.skip = 1<<min(b.misses, maxMissShift) - 1
}

// Poll calls try until it reports true, for at most s.Spin, and reports
// whether it did; false also when the backoff skips this wait.
func (s *Spinner) Poll(try func() bool) bool {
	if s.Spin <= 0 || !s.backoff.try() {
		return false
	}
	var end time.Time
	for {
		if try() {
			s.backoff.result(true)
			return true
		}
		now := time.Now()
		if end.IsZero() {
			end = now.Add(s.Spin)
		} else if now.After(end) {
			s.backoff.result(false)
			return false
		}
		runtime.Gosched()
	}
}

// NewPollReader reads c, polling for at most spin per wait (0 or less:
// never) when c is a TCP connection (any other connection is read as it
// is), and only while due reports that an answer is expected (nil: always).
func NewPollReader(c net.Conn, spin time.Duration, due func() bool) *PollReader {
	p := &PollReader{conn: c, spin: Spinner{Spin: spin}, due: due}
	p.readFn, p.waitFn, p.tryFn = p.readOnce, p.readReady, p.tryOnce
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			p.raw = raw
		}
	}
	return p
}

// Read reads into b, polling first as the type's comment says.
func (p *PollReader) Read(b []byte) (int, error) {
	if p.raw == nil || len(b) == 0 {
		return p.conn.Read(b)
	}
	p.buf = b
	defer func() { p.buf = nil }()
	if p.due == nil || p.due() {
		if p.spin.Poll(p.tryFn) && p.n > 0 {
			return p.n, nil
		}
	}
	// Nothing yet, or EOF, an error: wait in the poller for data (or a
	// deadline, or the connection closing), then say which.
	if err := p.raw.Read(p.waitFn); err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: p.conn.LocalAddr(), Addr: p.conn.RemoteAddr(), Err: pollErr(err)}
	}
	switch {
	case p.errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: p.conn.LocalAddr(), Addr: p.conn.RemoteAddr(), Err: os.NewSyscallError("read", p.errno)}
	case p.n == 0:
		return 0, io.EOF
	}
	return p.n, nil
}

// tryOnce makes one non-blocking read into p.buf. It reports false if
// nothing was there yet, and true if the read settled the wait: p.n > 0
// bytes, or (p.n 0) anything for Read to wait for and report.
func (p *PollReader) tryOnce() bool {
	if err := p.raw.Read(p.readFn); err != nil {
		p.n = 0
		return true
	}
	switch {
	case p.errno == syscall.EAGAIN || p.errno == syscall.EINTR:
		return false
	case p.errno != 0 || p.n <= 0:
		p.n = 0
	}
	return true
}

// readOnce is readFn: one read of buf, never waiting for the descriptor
// to become readable (the caller decides whether to wait).
func (p *PollReader) readOnce(fd uintptr) bool {
	p.n, p.errno = rawRead(fd, p.buf)
	return true
}

// readReady is waitFn: it reads buf, and has RawConn.Read wait in the
// poller while there is nothing to read.
func (p *PollReader) readReady(fd uintptr) bool {
	for {
		p.n, p.errno = rawRead(fd, p.buf)
		switch p.errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true
	}
}

// RawWriter writes a TCP connection's socket with raw system calls (see
// rawRead), waiting in the runtime's poller while the socket's buffer is
// full, so deadlines and closing behave as the connection's own Write.
// WriteBuffers writes several buffers with one writev(2). A connection
// without a file descriptor is written as it is. Writes are serialized by
// the connection, as its own Write's are; one RawWriter's state is for one
// writer at a time (a Framer's, under its Writer's rules).
//
// With SetNoWait, a write made while the function it was given reports
// true never waits for the socket: what the socket does not take at once
// is copied and queued, in order, and a goroutine of the RawWriter's sends
// it, waiting as a write would; later writes go behind it (those that may
// wait wait for the queue to drain first). A host's queue reader uses this
// to write without ever blocking on the network, since a controller that
// writes its responses on the goroutine that reads commands could
// otherwise wait for it while it waits for the controller.
type RawWriter struct {
	conn    net.Conn
	raw     syscall.RawConn
	bufs    [][]byte // what the write in progress has left to write
	iov     []syscall.Iovec
	one     [1][]byte // Write's vector
	errno   syscall.Errno
	writeFn func(fd uintptr) bool
	tryFn   func(fd uintptr) bool

	noWait  func() bool
	mu      sync.Mutex
	queued  []byte        // not nil while the drainer runs: bytes it has still to send
	drained chan struct{} // closed when the drainer is done
	qerr    error         // the drainer's write error, returned by every later write
}

// NewRawWriter returns a writer of c.
func NewRawWriter(c net.Conn) *RawWriter {
	w := &RawWriter{conn: c}
	w.writeFn, w.tryFn = w.writeReady, w.writeNow
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			w.raw = raw
		}
	}
	return w
}

// SetNoWait makes the writes made while noWait reports true queue what the
// socket does not take at once instead of waiting (see the type's
// comment). Call it before the first Write.
func (w *RawWriter) SetNoWait(noWait func() bool) { w.noWait = noWait }

// Write writes all of b (or queues what the socket does not take, see
// SetNoWait) or returns why not.
func (w *RawWriter) Write(b []byte) (int, error) {
	if w.raw == nil {
		return w.conn.Write(b)
	}
	w.one[0] = b
	err := w.WriteBuffers(w.one[:])
	w.one[0] = nil
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// WriteBuffers writes all of v, in order, with as few writev(2) calls as
// the socket allows (or queues what the socket does not take, see
// SetNoWait), or returns why not. It changes v's elements.
func (w *RawWriter) WriteBuffers(v [][]byte) error {
	switch {
	case w.raw == nil:
		return writeEach(w.conn, v)
	case w.noWait == nil:
		_, err := w.write(v, w.writeFn)
		return err
	}
	for {
		w.mu.Lock()
		if err := w.qerr; err != nil {
			w.mu.Unlock()
			return err
		}
		if w.queued == nil {
			w.mu.Unlock()
			break
		}
		if w.noWait() {
			for _, b := range v {
				w.queued = append(w.queued, b...)
			}
			w.mu.Unlock()
			return nil
		}
		drained := w.drained
		w.mu.Unlock()
		<-drained
	}
	if !w.noWait() {
		_, err := w.write(v, w.writeFn)
		return err
	}
	rest, err := w.write(v, w.tryFn)
	if err != nil || len(rest) == 0 {
		return err
	}
	var q []byte
	for _, b := range rest {
		q = append(q, b...)
	}
	w.mu.Lock()
	w.queued = q
	w.drained = make(chan struct{})
	w.mu.Unlock()
	go w.drain()
	return nil
}

// writeEach writes v with one Write call per buffer.
func writeEach(c io.Writer, v [][]byte) error {
	for _, b := range v {
		if _, err := c.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// write writes v with fn (writeReady: all of it, waiting; writeNow: what
// the socket takes now) and returns what is left of v.
func (w *RawWriter) write(v [][]byte, fn func(fd uintptr) bool) ([][]byte, error) {
	w.bufs, w.errno = v, 0
	err := w.raw.Write(fn)
	rest := w.bufs
	w.bufs = nil
	if err == nil && w.errno != 0 {
		err = os.NewSyscallError("writev", w.errno)
	}
	if err != nil {
		return rest, &net.OpError{Op: "write", Net: "tcp", Source: w.conn.LocalAddr(), Addr: w.conn.RemoteAddr(), Err: pollErr(err)}
	}
	return rest, nil
}

// drain sends the queued bytes, waiting for the socket as a write does,
// until none are left or a write fails.
func (w *RawWriter) drain() {
	for {
		w.mu.Lock()
		chunk := w.queued
		if len(chunk) == 0 {
			w.queued = nil
			close(w.drained)
			w.mu.Unlock()
			return
		}
		w.queued = []byte{}
		w.mu.Unlock()
		if _, err := w.write([][]byte{chunk}, w.writeFn); err != nil {
			w.mu.Lock()
			w.qerr, w.queued = err, nil
			close(w.drained)
			w.mu.Unlock()
			return
		}
	}
}

// pollErr is the cause of a RawConn's error (a deadline, the connection
// closed), without the "raw-read" or "raw-write" *net.OpError around it.
func pollErr(err error) error {
	if oe, ok := err.(*net.OpError); ok {
		return oe.Err
	}
	return err
}

// writeReady is writeFn: it writes what is left of bufs, and has
// RawConn.Write wait in the poller while the socket's buffer is full.
func (w *RawWriter) writeReady(fd uintptr) bool { return w.writeSome(fd) }

// writeNow is tryFn: it writes what the socket takes now, never waiting.
func (w *RawWriter) writeNow(fd uintptr) bool {
	w.writeSome(fd)
	return true
}

// writeSome writes what is left of bufs until it is all written (true), an
// error (true, in errno) or a full socket buffer (false).
func (w *RawWriter) writeSome(fd uintptr) bool {
	for len(w.bufs) > 0 {
		if len(w.bufs[0]) == 0 {
			w.bufs = w.bufs[1:]
			continue
		}
		n, errno := rawWritev(fd, w.bufs, &w.iov)
		switch errno {
		case 0:
			w.bufs = consume(w.bufs, n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			w.errno = errno
			return true
		}
	}
	return true
}

// maxIovecs is the most buffers one writev(2) takes (Linux's UIO_MAXIOV).
const maxIovecs = 1024

// consume drops the first n bytes of v.
func consume(v [][]byte, n int) [][]byte {
	for n > 0 && len(v) > 0 {
		if n < len(v[0]) {
			v[0] = v[0][n:]
			return v
		}
		n -= len(v[0])
		v = v[1:]
	}
	return v
}
