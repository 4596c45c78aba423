package bench

import (
	"context"
	"net"
	"time"

	"github.com/nearstore/nearstore/target"
)

// serveInProcess serves srv on ln from this process, for a benchmark run
// with --in-process, and returns what stops it: a graceful shutdown of at
// most 5 s, then waiting for Serve to return.
func serveInProcess(srv *target.Server, ln net.Listener) (stop func() error) {
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
