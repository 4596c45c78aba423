package tcp

import (
	"errors"
	"net"
	"runtime"
	"syscall"
	"time"
)

// PollReader reads a connection the way a polled-mode NVMe/TCP queue does
// (SPDK's, or Linux's with busy polling): while Due reports that the peer
// owes an answer, Read first tries non-blocking reads for up to Spin before
// it parks the goroutine in the runtime's poller.
//
// Why: on loopback, and in a virtual machine above all, most of a small
// round trip's time is the wake-up of the thread that parked waiting for
// the answer (an inter-processor interrupt, the scheduler, the runtime's
// poller) rather than the bytes. A reader that keeps its thread running
// while the answer is a few microseconds away takes it without one. The
// spin yields the processor between attempts (runtime.Gosched), so the
// goroutine the last answer woke runs meanwhile on the same processor, and
// it is bounded and adaptive: a wait that the spin did not end counts as a
// miss, and after k misses in a row the next 2^k-1 waits (at most 63) park
// at once. So a connection that goes idle, or a machine too loaded for the
// peer to answer within Spin, soon costs next to nothing, and one good
// spin restores polling.
//
// A PollReader is for one reading goroutine, as a bufio.Reader is.
//
// Everything else is the connection's own Read: deadlines, closing and
// errors behave as they do without the spin, because any result other than
// data or "nothing yet" is taken again through it.
type PollReader struct {
	conn net.Conn
	raw  syscall.RawConn // nil: the connection has no file descriptor to poll
	// Spin bounds one wait's polling; 0 turns polling off.
	Spin time.Duration
	// Due reports whether an answer is expected soon (nil: always).
	Due func() bool

	misses uint // spins in a row that ended without data
	skip   uint // waits left to park without spinning

	// One non-blocking read's buffer and outcome, and the function the
	// raw connection calls to make it: made once, so a try allocates
	// nothing.
	buf    []byte
	n      int
	errno  error
	readFn func(fd uintptr) bool
}

// DefaultPollSpin is the spin the target and the host use unless told
// otherwise: longer than a loopback or LAN round trip's turnaround at the
// other end (a few to a few tens of microseconds), short enough that a
// miss costs little.
const DefaultPollSpin = 50 * time.Microsecond

// maxMissShift bounds the backoff: after many misses, one wait in 64 spins.
const maxMissShift = 6

// NewPollReader reads c, polling for at most spin per wait when c is a
// TCP connection (any other connection is read as it is).
func NewPollReader(c net.Conn, spin time.Duration, due func() bool) *PollReader {
	p := &PollReader{conn: c, Spin: spin, Due: due}
	p.readFn = p.readOnce
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			p.raw = raw
		}
	}
	return p
}

// Read reads into b, polling first as the type's comment says.
func (p *PollReader) Read(b []byte) (int, error) {
	if p.raw == nil || p.Spin <= 0 || len(b) == 0 || (p.Due != nil && !p.Due()) {
		return p.conn.Read(b)
	}
	if p.skip > 0 {
		p.skip--
		return p.conn.Read(b)
	}
	var end time.Time
	for {
		n, again := p.try(b)
		if !again {
			if end.IsZero() || n > 0 {
				p.misses = 0 // data was there, or came during the spin
			}
			if n > 0 {
				return n, nil
			}
			// EOF, an error, a deadline, a closed connection: the
			// connection's Read says which, as it would without polling.
			return p.conn.Read(b)
		}
		now := time.Now()
		if end.IsZero() {
			end = now.Add(p.Spin)
		} else if now.After(end) {
			p.misses++
			p.skip = 1<<min(p.misses, maxMissShift) - 1
			return p.conn.Read(b)
		}
		runtime.Gosched()
	}
}

// try makes one non-blocking read. again reports that nothing was there
// yet; n > 0 is data; anything else is for the connection's Read to
// report.
func (p *PollReader) try(b []byte) (n int, again bool) {
	p.buf = b
	err := p.raw.Read(p.readFn)
	n, errno := p.n, p.errno
	p.buf, p.errno = nil, nil
	switch {
	case err != nil:
		return 0, false
	case errors.Is(errno, syscall.EAGAIN), errors.Is(errno, syscall.EINTR):
		return 0, true
	case errno != nil || n <= 0:
		return 0, false
	}
	return n, false
}

// readOnce is readFn: one read of buf, never waiting for the descriptor
// to become readable (the caller decides whether to wait).
func (p *PollReader) readOnce(fd uintptr) bool {
	p.n, p.errno = syscall.Read(int(fd), p.buf)
	return true
}
