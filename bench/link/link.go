// Package link emulates the network between a benchmark's host side and
// its target: plain loopback, or a rate-limited link where the target runs
// in its own network namespace behind a veth pair shaped with tc's token
// bucket filter. It also measures a link's throughput.
package link

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Link is the network path between this process (the host side of a
// benchmark) and the benchmark's target: either plain loopback, or an
// emulated link of a given rate, where the target lives in its own network
// namespace behind a veth pair and both ends of the pair are shaped with
// tc's token bucket filter (tbf). The kernel here has no netem, so the link
// has a rate but no added delay.
type Link struct {
	rate     string // normalized rate asked for; "" for loopback
	bits     uint64 // rate in bits per second; 0 for loopback
	fallback string
	log      *slog.Logger

	// Set only on a shaped link.
	netns    string // the target's namespace
	hostDev  string // the veth end in the root namespace
	hostIP   string
	targetIP string
	burst    uint64 // tbf burst, bytes
	sys      linkSys

	closeOnce sync.Once
	closeErr  error
}

// LoopbackIP is where a target listens when the link is loopback.
const LoopbackIP = "127.0.0.1"

// Open prepares the network path between this process and a benchmark's
// target. rate "" (or "loopback") gives loopback. Otherwise (a rate as tc
// writes it: "10gbit", "25gbit", "1gbit", "500mbit", "100mbps" — bytes per
// second —, ...) it makes a fresh network namespace with a veth pair, each
// end shaped by tc tbf to rate, so both directions are limited. Where that
// cannot be done (not root, no ip or tc, no network namespaces) it falls
// back to loopback, logs why at warn level, and Shaped is false and
// Fallback says why; the error is only for a malformed rate.
func Open(ctx context.Context, rate string, log *slog.Logger) (*Link, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if r := strings.TrimSpace(rate); r == "" || strings.EqualFold(r, "loopback") {
		return &Link{log: log}, nil
	}
	bits, norm, err := ParseRate(rate)
	if err != nil {
		return nil, err
	}
	l := &Link{rate: norm, bits: bits, log: log}
	if err := l.setup(ctx); err != nil {
		l.fallback = err.Error()
		log.Warn("bench: emulated link unavailable; using loopback", "rate", norm, "reason", l.fallback)
		return l, nil
	}
	log.Info("bench: emulated link up", "link", l.String(), "host", l.hostIP, "target", l.targetIP, "burst", l.burst)
	return l, nil
}

// Shaped reports whether the link is the emulated, rate-limited one.
func (l *Link) Shaped() bool { return l.netns != "" }

// Rate returns the link's rate, normalized ("10gbit"), or "" on loopback
// (also when a rate was asked for and could not be had: see Fallback).
func (l *Link) Rate() string {
	if !l.Shaped() {
		return ""
	}
	return l.rate
}

// BitsPerSecond returns the link's rate in bits per second, 0 on loopback.
func (l *Link) BitsPerSecond() uint64 {
	if !l.Shaped() {
		return 0
	}
	return l.bits
}

// Fallback says why a shaped link was asked for and not made; "" otherwise.
func (l *Link) Fallback() string { return l.fallback }

// TargetIP returns the address the target listens on and hosts dial: the
// namespace end of the veth pair, or 127.0.0.1 on loopback.
func (l *Link) TargetIP() string {
	if !l.Shaped() {
		return LoopbackIP
	}
	return l.targetIP
}

// HostIP returns this side's address on the link (127.0.0.1 on loopback).
func (l *Link) HostIP() string {
	if !l.Shaped() {
		return LoopbackIP
	}
	return l.hostIP
}

// Netns returns the target's network namespace, "" on loopback.
func (l *Link) Netns() string { return l.netns }

// HostDev returns the name of the veth end in this process's namespace, ""
// on loopback; tc shows its shaping (tc -s qdisc show dev HostDev).
func (l *Link) HostDev() string { return l.hostDev }

// Listen returns a TCP listener on TargetIP:port (port 0: any free port)
// for a target running in this process. On a shaped link the listener's
// socket is made inside the target's namespace; sockets stay in the
// namespace they were made in, so the target's connections cross the
// shaped veth pair whichever goroutine later serves them.
func (l *Link) Listen(ctx context.Context, port int) (net.Listener, error) {
	addr := net.JoinHostPort(l.TargetIP(), strconv.Itoa(port))
	if !l.Shaped() {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("bench: link listen: %w", err)
		}
		return ln, nil
	}
	return l.listenNetns(ctx, addr)
}

// String describes the link for reports.
func (l *Link) String() string {
	switch {
	case l.Shaped():
		return fmt.Sprintf("%s (tc tbf on a veth pair; target in netns %s)", l.rate, l.netns)
	case l.fallback != "":
		return fmt.Sprintf("loopback (asked for %s: %s)", l.rate, l.fallback)
	default:
		return "loopback"
	}
}

// Close removes the namespace and the veth pair; on loopback it does
// nothing. It is safe to call more than once.
func (l *Link) Close() error {
	if !l.Shaped() {
		return nil
	}
	l.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l.closeErr = l.teardown(ctx)
	})
	return l.closeErr
}

// rateUnits are tc's rate units (tc(8), "RATES"), matched without regard
// to case as tc does, with their value in bits per second. A bare number,
// which tc reads as bits per second but people often mean as bytes, and
// shorthands such as "10g" or "10gb" are refused as ambiguous.
var rateUnits = []struct {
	suffix string
	bits   float64
}{
	{"tibit", 1 << 40}, {"gibit", 1 << 30}, {"mibit", 1 << 20}, {"kibit", 1 << 10},
	{"tibps", 8 << 40}, {"gibps", 8 << 30}, {"mibps", 8 << 20}, {"kibps", 8 << 10},
	{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3},
	{"tbps", 8e12}, {"gbps", 8e9}, {"mbps", 8e6}, {"kbps", 8e3},
	{"bit", 1}, {"bps", 8},
}

// maxRate bounds the rates ParseRate accepts: tc's 64-bit byte rate goes
// further, but nothing above 1 Tbit/s is a link this benchmark can emulate.
const maxRate = 1e12

// ParseRate reads a rate as tc writes it: a number and one of tc's units,
// "bit", "kbit", "mbit", "gbit", "tbit" (powers of 1000), "kibit" ...
// "tibit" (powers of 1024), or the same with "bps" for bytes per second
// ("100mbps" is 800 Mbit/s). It returns the rate in bits per second and
// normalized in tc's syntax with the largest unit that keeps it whole
// ("10gbit", "800mbit", "1073741824bit").
func ParseRate(s string) (bitsPerSec uint64, normalized string, err error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, u := range rateUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		v, perr := strconv.ParseFloat(num, 64)
		if perr != nil || num == "" || strings.ContainsAny(num, "eEnNiIxXpP_+") {
			return 0, "", fmt.Errorf("bench: rate %q: %q is not a plain decimal number", s, num)
		}
		b := math.Round(v * u.bits)
		switch {
		case b < 8:
			return 0, "", fmt.Errorf("bench: rate %q: must be at least 8bit (1 byte per second)", s)
		case b > maxRate:
			return 0, "", fmt.Errorf("bench: rate %q: above 1tbit", s)
		}
		bits := uint64(b)
		return bits, formatRate(bits), nil
	}
	return 0, "", fmt.Errorf("bench: rate %q: want a number and a tc unit: bit, kbit, mbit, gbit, tbit (or kibit ...), or bps, kbps, mbps, gbps for bytes per second (e.g. 10gbit, 500mbit)", s)
}

// formatRate writes bits per second with the largest decimal tc unit that
// keeps the number whole.
func formatRate(bits uint64) string {
	for _, u := range []struct {
		suffix string
		div    uint64
	}{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if bits%u.div == 0 {
			return strconv.FormatUint(bits/u.div, 10) + u.suffix
		}
	}
	return strconv.FormatUint(bits, 10) + "bit"
}

// Direction is which way a throughput measurement sends data.
type Direction int

// The directions Measure measures.
const (
	HostToTarget Direction = iota // this process sends, the target's side receives
	TargetToHost                  // the target's side sends, this process receives
)

// String returns "host→target" or "target→host", as reports print it.
func (d Direction) String() string {
	if d == TargetToHost {
		return "target→host"
	}
	return "host→target"
}

// Throughput is one throughput measurement over a Link.
type Throughput struct {
	Direction string  `json:"direction"`
	Streams   int     `json:"streams"`
	Bytes     int64   `json:"bytes"`   // received
	Seconds   float64 `json:"seconds"` // from the first byte received to the last
	Gbps      float64 `json:"gbps"`    // Bytes*8 / Seconds / 1e9
}

// linkChunk is the size of each write and read of a measurement.
const linkChunk = 256 << 10

// Measure measures TCP throughput over l in one direction: a listener
// from l.Listen (inside the target's namespace on a shaped link) and
// streams connections dialed to it from this process; the sending side
// writes for d, then closes. Throughput is what the receiving side counted,
// from its first byte to the end of the last stream, so start-up and
// queued data are included honestly rather than assumed away.
func Measure(ctx context.Context, l *Link, dir Direction, d time.Duration, streams int) (Throughput, error) {
	if streams < 1 {
		streams = 1
	}
	if d <= 0 {
		return Throughput{}, errors.New("bench: link measurement needs a positive duration")
	}
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	ln, err := l.Listen(ctx, 0)
	if err != nil {
		return Throughput{}, err
	}
	defer ln.Close()
	// Closing the listener and the connections is what unblocks the
	// goroutines when ctx ends.
	var connMu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		connMu.Lock()
		defer connMu.Unlock()
		if ctx.Err() != nil {
			c.Close()
		}
		conns = append(conns, c)
	}
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		connMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connMu.Unlock()
	})
	defer stop()

	type result struct {
		n           int64
		first, last time.Time
		err         error
	}
	results := make(chan result, 2*streams)
	// Each connection has a sender and a receiver; which side is which
	// depends on dir.
	run := func(c net.Conn, send bool) {
		defer c.Close()
		if send {
			results <- result{err: sendFor(c, d)}
			return
		}
		n, first, last, err := receiveAll(c)
		results <- result{n: n, first: first, last: last, err: err}
	}
	go func() {
		for i := range streams {
			c, err := ln.Accept()
			if err != nil {
				// One result for each connection that will not run, so
				// the count below still adds up.
				for range streams - i {
					results <- result{err: fmt.Errorf("bench: link accept: %w", err)}
				}
				return
			}
			track(c)
			go run(c, dir == TargetToHost)
		}
	}()
	var dialer net.Dialer
	addr := ln.Addr().String()
	for range streams {
		c, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			// Whatever was started ends with ctx (cancel closes the
			// listener and the connections); results is large enough
			// that nothing blocks sending to it.
			cancel()
			return Throughput{}, fmt.Errorf("bench: link dial %s: %w", addr, err)
		}
		track(c)
		go run(c, dir == HostToTarget)
	}
	out := Throughput{Direction: dir.String(), Streams: streams}
	var first, last time.Time
	var errs []error
	for range 2 * streams {
		r := <-results
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		out.Bytes += r.n
		if !r.first.IsZero() && (first.IsZero() || r.first.Before(first)) {
			first = r.first
		}
		if r.last.After(last) {
			last = r.last
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	if out.Bytes == 0 || !last.After(first) {
		return out, errors.New("bench: link measurement received nothing")
	}
	out.Seconds = last.Sub(first).Seconds()
	out.Gbps = float64(out.Bytes) * 8 / out.Seconds / 1e9
	return out, nil
}

// sendFor writes to c for d, then closes its sending side.
func sendFor(c net.Conn, d time.Duration) error {
	buf := make([]byte, linkChunk)
	for i := range buf {
		buf[i] = byte(i)
	}
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("bench: link send: %w", err)
		}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.CloseWrite(); err != nil {
			return fmt.Errorf("bench: link send: %w", err)
		}
		// Wait for the receiver to close, so the sender does not reset
		// a connection with data still in flight.
		_, _ = io.Copy(io.Discard, c)
	}
	return nil
}

// receiveAll reads c to its end, counting bytes and noting when the first
// and last of them arrived.
func receiveAll(c net.Conn) (n int64, first, last time.Time, err error) {
	buf := make([]byte, linkChunk)
	for {
		k, rerr := c.Read(buf)
		if k > 0 {
			last = time.Now()
			if n == 0 {
				first = last
			}
			n += int64(k)
		}
		if rerr == io.EOF {
			return n, first, last, nil
		}
		if rerr != nil {
			return n, first, last, fmt.Errorf("bench: link receive: %w", rerr)
		}
	}
}
