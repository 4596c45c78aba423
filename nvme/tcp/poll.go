package tcp

import (
	"errors"
	"net"
	"runtime"
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
// spin yields the processor between attempts (runtime.Gosched), so the
// goroutine the last answer woke runs meanwhile on the same processor, and
// it is bounded and adaptive (Spinner): after k waits in a row that the
// spin did not end, the next 2^k-1 (at most 63) park at once. So a
// connection that goes idle, or a machine too loaded for the peer to
// answer within the spin, soon costs next to nothing, and one good spin
// restores polling.
//
// A PollReader is for one reading goroutine, as a bufio.Reader is.
//
// Everything else is the connection's own Read: deadlines, closing and
// errors behave as they do without the spin, because any result other than
// data or "nothing yet" is taken again through it.
type PollReader struct {
	conn net.Conn
	raw  syscall.RawConn // nil: the connection has no file descriptor to poll
	spin Spinner
	due  func() bool // whether an answer is expected soon (nil: always)

	// One non-blocking read's buffer and outcome, and the functions that
	// make it: made once, so a poll allocates nothing.
	buf    []byte
	n      int
	errno  error
	readFn func(fd uintptr) bool
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
type Spinner struct {
	// Spin bounds one Poll; 0 or less: Poll never tries.
	Spin time.Duration

	misses uint // Polls in a row that ended without success
	skip   uint // Polls left to give up at once
}

// maxMissShift bounds the backoff: after many misses, one wait in 64 spins.
const maxMissShift = 6

// Poll calls try until it reports true, for at most s.Spin, and reports
// whether it did; false also when the backoff skips this wait.
func (s *Spinner) Poll(try func() bool) bool {
	if s.Spin <= 0 {
		return false
	}
	if s.skip > 0 {
		s.skip--
		return false
	}
	var end time.Time
	for {
		if try() {
			s.misses = 0
			return true
		}
		now := time.Now()
		if end.IsZero() {
			end = now.Add(s.Spin)
		} else if now.After(end) {
			s.misses++
			s.skip = 1<<min(s.misses, maxMissShift) - 1
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
	p.readFn, p.tryFn = p.readOnce, p.tryOnce
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			p.raw = raw
		}
	}
	return p
}

// Read reads into b, polling first as the type's comment says.
func (p *PollReader) Read(b []byte) (int, error) {
	if p.raw == nil || len(b) == 0 || (p.due != nil && !p.due()) {
		return p.conn.Read(b)
	}
	p.buf = b
	polled := p.spin.Poll(p.tryFn)
	n := p.n
	p.buf, p.n, p.errno = nil, 0, nil
	if polled && n > 0 {
		return n, nil
	}
	// Nothing yet, or EOF, an error, a deadline, a closed connection:
	// the connection's Read waits, or says which, as without polling.
	return p.conn.Read(b)
}

// tryOnce makes one non-blocking read into p.buf. It reports false if
// nothing was there yet, and true if the read settled the wait: p.n > 0
// bytes, or (p.n 0) anything for the connection's Read to report.
func (p *PollReader) tryOnce() bool {
	if err := p.raw.Read(p.readFn); err != nil {
		p.n = 0
		return true
	}
	switch {
	case errors.Is(p.errno, syscall.EAGAIN), errors.Is(p.errno, syscall.EINTR):
		return false
	case p.errno != nil || p.n <= 0:
		p.n = 0
	}
	return true
}

// readOnce is readFn: one read of buf, never waiting for the descriptor
// to become readable (the caller decides whether to wait).
func (p *PollReader) readOnce(fd uintptr) bool {
	p.n, p.errno = syscall.Read(int(fd), p.buf)
	return true
}
