package blockio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
)

// Sizes of one ping-pong exchange: what a 4 KiB NVMe/TCP read moves, a
// command capsule (8-byte common header and 64-byte command) one way and
// C2HData (24-byte header) with 4 KiB of data the other.
const (
	pingSize      = 72
	pongHeaderLen = 24
)

// PingPong is the floor a block I/O comparison is measured against: bare
// Go TCP on loopback with nothing but the bytes of a read. A server
// goroutine per connection reads each PingSize-byte request and answers
// with one write of a 24-byte header and BlockSize bytes; the client keeps
// QueueDepth requests in flight per connection from one goroutine, as
// Run keeps commands in flight on a queue. Both ends are in this process
// and TCP_NODELAY is on (Go's default). Start it, then Run; Close stops it.
type PingPong struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Name returns "pingpong".
func (p *PingPong) Name() string { return "pingpong" }

// Version names the Go runtime both ends run on.
func (p *PingPong) Version(context.Context) string { return "bare Go TCP (" + runtime.Version() + ")" }

// Start listens on a loopback port and serves connections until Close.
func (p *PingPong) Start(context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: pingpong: %w", err)
	}
	p.ln, p.conns = ln, map[net.Conn]struct{}{}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns[c] = struct{}{}
			p.mu.Unlock()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				pongs(c)
				p.mu.Lock()
				delete(p.conns, c)
				p.mu.Unlock()
				c.Close()
			}()
		}
	}()
	return nil
}

// pongs answers each request on c until c ends. A request's first four
// bytes say how many bytes of data the reply carries.
func pongs(c net.Conn) {
	req := make([]byte, pingSize)
	var reply []byte
	for {
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		n := pongHeaderLen + int(uint32(req[0])|uint32(req[1])<<8|uint32(req[2])<<16|uint32(req[3])<<24)
		if cap(reply) < n {
			reply = make([]byte, n)
		}
		if _, err := c.Write(reply[:n]); err != nil {
			return
		}
	}
}

// Run drives cfg.Queues connections with cfg.QueueDepth exchanges in
// flight on each for cfg.Duration. The pattern does not matter: every
// exchange carries BlockSize bytes back.
func (p *PingPong) Run(ctx context.Context, cfg Config) (Result, error) {
	if p.ln == nil {
		return Result{}, errors.New("bench: pingpong not started")
	}
	if cfg.QueueDepth <= 0 || cfg.Queues <= 0 || cfg.Duration <= 0 || cfg.BlockSize <= 0 {
		return Result{}, errors.New("bench: pingpong: queue depth, queues, block size and duration must be positive")
	}
	var ops atomic.Int64
	hists := hist.NewSet(cfg.Queues)
	errs := make([]error, cfg.Queues)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	cpu := startCPU(0)
	var wg sync.WaitGroup
	for i := range hists {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pings(ctx, p.ln.Addr().String(), cfg, deadline, hists[i], &ops)
		}()
	}
	wg.Wait()
	elapsed := min(time.Since(start), cfg.Duration)
	res := newResult(p.Name(), cfg, elapsed, ops.Load(), hists)
	cpu.stop(&res)
	return res, errors.Join(errs...)
}

// pings runs one connection's client: QueueDepth requests in flight, each
// answered one replaced by the next, until the deadline.
func pings(ctx context.Context, addr string, cfg Config, deadline time.Time, h *hist.Histogram, ops *atomic.Int64) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("bench: pingpong: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// An error once ctx has ended is the interruption, not a failure.
	failed := func(err error) error {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("bench: pingpong: %w", err)
	}
	req := make([]byte, pingSize)
	n := uint32(cfg.BlockSize)
	req[0], req[1], req[2], req[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	reply := make([]byte, pongHeaderLen+cfg.BlockSize)
	sent := make([]time.Time, 0, cfg.QueueDepth) // send times, oldest first
	for range cfg.QueueDepth {
		sent = append(sent, time.Now())
		if _, err := c.Write(req); err != nil {
			return failed(err)
		}
	}
	for len(sent) > 0 {
		if _, err := io.ReadFull(c, reply); err != nil {
			return failed(err)
		}
		now := time.Now()
		t0 := sent[0]
		sent = sent[1:]
		if now.Before(deadline) {
			ops.Add(1)
			h.Record(now.Sub(t0))
			sent = append(sent, time.Now())
			if _, err := c.Write(req); err != nil {
				return failed(err)
			}
		}
	}
	return nil
}

// Close stops the server and its connections.
func (p *PingPong) Close() error {
	if p.ln == nil {
		return nil
	}
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.ln = nil
	return err
}
