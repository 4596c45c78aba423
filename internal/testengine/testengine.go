// Package testengine serves an offload engine to a test over real gRPC on
// loopback, the way `offload serve` does, and stops it when the test ends.
package testengine

import (
	"context"
	"net"
	"testing"

	"github.com/nearstore/nearstore/offload"
)

// Serve starts an engine from cfg, serves it on a loopback listener and
// returns the engine and its address. The server is stopped and the
// engine closed by t.Cleanup, in that order.
func Serve(t testing.TB, cfg offload.Config) (*offload.Engine, string) {
	t.Helper()
	e, err := offload.NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	srv := offload.NewServer(e)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return e, ln.Addr().String()
}
