package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestPollReader checks that polling changes nothing a reader sees: data
// that comes during the spin, data that comes after it, a deadline, the
// peer's close and our own.
func TestPollReader(t *testing.T) {
	cases := []struct {
		name string
		spin time.Duration
		due  func() bool
	}{
		{"off", 0, nil},
		{"spin", 200 * time.Microsecond, nil},
		{"not due", 200 * time.Microsecond, func() bool { return false }},
		{"long spin", time.Second, func() bool { return true }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := tcpPair(t)
			p := NewPollReader(c, tc.spin, tc.due)
			if p.raw == nil {
				t.Fatal("no raw connection to poll")
			}
			buf := make([]byte, 8)
			// Data already there.
			if _, err := s.Write([]byte("abcd")); err != nil {
				t.Fatal(err)
			}
			if n, err := io.ReadFull(p, buf[:4]); err != nil || string(buf[:n]) != "abcd" {
				t.Fatalf("read %q, %v; want abcd", buf[:n], err)
			}
			// Data that comes later than any spin but the long one.
			go func() {
				time.Sleep(5 * time.Millisecond)
				_, _ = s.Write([]byte("efgh"))
			}()
			if n, err := io.ReadFull(p, buf[:4]); err != nil || string(buf[:n]) != "efgh" {
				t.Fatalf("read %q, %v; want efgh", buf[:n], err)
			}
			// A deadline in the past fails the read, spin or not.
			_ = c.SetReadDeadline(time.Now().Add(-time.Second))
			if _, err := p.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read past the deadline: %v, want ErrDeadlineExceeded", err)
			}
			_ = c.SetReadDeadline(time.Time{})
			// The peer's close is EOF.
			s.Close()
			if _, err := p.Read(buf); err != io.EOF {
				t.Fatalf("read after the peer closed: %v, want EOF", err)
			}
			// Our close is net.ErrClosed.
			c.Close()
			if _, err := p.Read(buf); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read after close: %v, want net.ErrClosed", err)
			}
		})
	}
}

// TestPollReaderNotTCP reads a connection without a descriptor as it is.
func TestPollReaderNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	p := NewPollReader(a, time.Millisecond, nil)
	go func() { _, _ = b.Write([]byte("xy")) }()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(p, buf); err != nil || string(buf) != "xy" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// TestRawWriter writes through a full socket buffer (the writer waits in
// the poller until the peer reads), and checks that a deadline, a reset by
// the peer and our own close end a write as they end the connection's own.
func TestRawWriter(t *testing.T) {
	c, s := tcpPair(t)
	w := NewRawWriter(c)
	if w.raw == nil {
		t.Fatal("no raw connection to write")
	}
	want := make([]byte, 8<<20) // more than loopback's socket buffers
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(20 * time.Millisecond) // let the writer fill the buffers
		b := make([]byte, len(want))
		_, _ = io.ReadFull(s, b)
		got <- b
	}()
	if n, err := w.Write(want); err != nil || n != len(want) {
		t.Fatalf("wrote %d, %v; want %d", n, err, len(want))
	}
	if b := <-got; string(b) != string(want) {
		t.Fatal("the peer read other bytes")
	}
	// Nobody reads now: the buffers fill and the deadline ends the write.
	_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	var err error
	for i := 0; i < 64 && err == nil; i++ { // until the buffers, however grown, are full
		_, err = w.Write(want)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the deadline: %v, want ErrDeadlineExceeded", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	c.Close()
	if _, err := w.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v, want net.ErrClosed", err)
	}

	// The peer gone with unread data (a reset): the write fails.
	c2, s2 := tcpPair(t)
	_, _ = c2.Write([]byte("unread"))
	time.Sleep(10 * time.Millisecond)
	s2.(*net.TCPConn).SetLinger(0)
	_, _ = s2.Write([]byte("x"))
	s2.Close()
	w2 := NewRawWriter(c2)
	err = nil
	for range 100 {
		if _, err = w2.Write([]byte("more")); err != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var se *os.SyscallError
	if !errors.As(err, &se) {
		t.Fatalf("write after a reset: %v, want a *os.SyscallError", err)
	}
}

// TestRawWriterNoWait: with the peer not reading, writes made while
// noWait holds return at once however much they write, a write that may
// wait waits until the queue has drained, and the peer reads every byte in
// order; a failed drain fails the writes after it.
func TestRawWriterNoWait(t *testing.T) {
	c, s := tcpPair(t)
	w := NewRawWriter(c)
	var noWait atomic.Bool
	noWait.Store(true)
	w.SetNoWait(noWait.Load)
	chunk := make([]byte, 1<<20)
	var want []byte
	for i := range 16 { // more than loopback's socket buffers
		for j := range chunk {
			chunk[j] = byte(i + j*3)
		}
		start := time.Now()
		if n, err := w.Write(chunk); err != nil || n != len(chunk) {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("write %d waited %v with nobody reading", i, d)
		}
		want = append(want, chunk...)
	}
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		b := make([]byte, len(want)+5)
		_, _ = io.ReadFull(s, b)
		got <- b
	}()
	noWait.Store(false)
	if n, err := w.Write([]byte("tail!")); err != nil || n != 5 {
		t.Fatalf("waiting write: %d, %v", n, err)
	}
	w.mu.Lock()
	queued := w.queued
	w.mu.Unlock()
	if queued != nil {
		t.Fatal("a waiting write returned before the queue drained")
	}
	if b := <-got; string(b) != string(want)+"tail!" {
		t.Fatal("the peer read other bytes, or out of order")
	}

	// The peer resets the connection under a queue: the drain fails, and
	// so does the next write.
	noWait.Store(true)
	s.(*net.TCPConn).SetLinger(0)
	for range 16 {
		if _, err := w.Write(chunk); err != nil {
			break
		}
	}
	s.Close()
	var err error
	for range 100 {
		if _, err = w.Write([]byte("x")); err != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err == nil {
		t.Fatal("writes after a reset kept succeeding")
	}
}

// TestRawWriterNotTCP writes a connection without a descriptor as it is.
func TestRawWriterNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := NewRawWriter(a)
	go func() { _, _ = w.Write([]byte("xy")) }()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "xy" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// BenchmarkPingPong is the round trip PollReader is for: a 72-byte request
// and a 4 KiB + 24-byte reply on loopback, one goroutine each side, with
// and without polling on both ends.
//
//	go test ./nvme/tcp -run '^$' -bench PingPong -benchtime 100000x
func BenchmarkPingPong(b *testing.B) {
	for _, spin := range []time.Duration{0, 50 * time.Microsecond} {
		b.Run(fmt.Sprintf("spin=%v", spin), func(b *testing.B) {
			c, s := tcpPair(b)
			go func() {
				r := NewPollReader(s, spin, nil)
				req, reply := make([]byte, 72), make([]byte, 4096+24)
				for {
					if _, err := io.ReadFull(r, req); err != nil {
						return
					}
					if _, err := s.Write(reply); err != nil {
						return
					}
				}
			}()
			r := NewPollReader(c, spin, nil)
			req, reply := make([]byte, 72), make([]byte, 4096+24)
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(r, reply); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSpinner checks Poll's outcomes and its backoff: after k misses in a
// row the next 2^k-1 Polls give up without trying, and a hit ends the
// streak.
func TestSpinner(t *testing.T) {
	calls := 0
	never := func() bool { calls++; return false }
	always := func() bool { calls++; return true }

	var off Spinner
	if off.Poll(always) || calls != 0 {
		t.Fatalf("a zero Spinner polled (%d calls)", calls)
	}
	s := Spinner{Spin: 10 * time.Microsecond}
	if !s.Poll(always) || calls != 1 {
		t.Fatalf("a ready try: want true after 1 call, got %d calls", calls)
	}
	for k := 1; k <= 8; k++ {
		calls = 0
		if s.Poll(never) || calls == 0 {
			t.Fatalf("miss %d: want false after trying, got %d calls", k, calls)
		}
		skips := 1<<min(k, maxMissShift) - 1
		calls = 0
		for i := range skips {
			if s.Poll(always) || calls != 0 {
				t.Fatalf("miss %d, wait %d: want a skip, got %d calls", k, i, calls)
			}
		}
	}
	if !s.Poll(always) {
		t.Fatal("after the skips: want a try")
	}
	calls = 0
	if s.Poll(never) || calls == 0 {
		t.Fatal("a hit did not end the streak: the next miss was skipped")
	}
	if s.backoff.skip != 1 {
		t.Errorf("first miss after a hit: %d skips, want 1", s.backoff.skip)
	}
}
