// Package harness holds what the experiments use to stand up the system
// under test and time it: serving a target inside this process, the
// reconnect bounds of a benchmark's host, CPU-time readings, and the
// target's command counters.
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/target"
)

// ServeInProcess serves srv on ln from this process, for a benchmark run
// with --in-process, and returns what stops it: a graceful shutdown of at
// most 5 s, then waiting for Serve to return.
func ServeInProcess(srv *target.Server, ln net.Listener) (stop func() error) {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-served
		return err
	}
}

// ServeLoopback is ServeInProcess on a free port of 127.0.0.1: it returns
// the address srv serves on and what stops it.
func ServeLoopback(srv *target.Server) (addr string, stop func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	return ln.Addr().String(), ServeInProcess(srv, ln), nil
}

// Reconnect bounds of a benchmark's host: its target is its own child
// process or in this one, so a target gone for long is a run already
// lost, and the benchmark must fail and exit rather than wait the
// defaults (30 s per submission, 10 minutes of reconnecting), or, with the
// port free again, reconnect to some later benchmark's target.
const (
	benchMaxReconnectWait      = 5 * time.Second
	benchControllerLossTimeout = 15 * time.Second
)

// HostOptions sets a benchmark host's reconnect bounds in o.
func HostOptions(o host.Options) host.Options {
	o.MaxReconnectWait, o.ControllerLossTimeout = benchMaxReconnectWait, benchControllerLossTimeout
	return o
}

// Stage tells progress, if set, the stage a bench is about to run:
// format and args as fmt.Sprintf's. Every bench's Config.Progress is told
// through it.
func Stage(progress func(stage string), format string, args ...any) {
	if progress != nil {
		progress(fmt.Sprintf(format, args...))
	}
}

// Default sets *v to def unless it is positive: a Config field left
// zero (or set to nonsense below zero) takes the bench's default.
func Default[T ~int | ~int64 | ~float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// RunLength checks and defaults a benchmark's timed runs: a zero *d
// becomes def and a zero *repeat 3 (the fewest runs a median means
// something with); negative ones are refused.
func RunLength(d *time.Duration, def time.Duration, repeat *int) error {
	if *d == 0 {
		*d = def
	}
	if *d < 0 {
		return fmt.Errorf("bench: duration %v", *d)
	}
	if *repeat == 0 {
		*repeat = 3
	}
	if *repeat < 0 {
		return fmt.Errorf("bench: repeat %d", *repeat)
	}
	return nil
}

// WorkDir is dir, a bench's data directory as its Config names it, or,
// when dir is empty, a new temporary directory named from pattern (as
// os.MkdirTemp's). remove deletes the temporary directory; a given dir is
// the caller's, and remove leaves it alone.
func WorkDir(dir, pattern string) (_ string, remove func(), err error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// Closers is what a benchmark's environment must undo, in the order it
// was set up (append to it); Close undoes it in reverse, so that nothing
// is closed before what depends on it.
type Closers []func() error

// Close runs every closer, the last appended first, even after one
// fails, forgets them (a second Close does nothing) and returns their
// errors joined.
func (c *Closers) Close() error {
	var errs []error
	for i := len(*c) - 1; i >= 0; i-- {
		errs = append(errs, (*c)[i]())
	}
	*c = nil
	return errors.Join(errs...)
}
