// Package testhost connects a host to a running target inside a test: the
// one place tests dial a controller and open a namespace, so each test
// says only which host it is.
package testhost

import (
	"context"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
)

// ConnectTimeout bounds how long Connect waits for the target.
const ConnectTimeout = 10 * time.Second

// Connect connects a host with opts to the subsystem nqn at addr, within
// ConnectTimeout, and returns its controller and namespace nsid. The
// controller is closed when the test ends (closing it earlier is fine);
// the test fails if either cannot be had.
func Connect(t testing.TB, addr, nqn string, nsid uint32, opts host.Options) (*host.Controller, *host.Namespace) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
	defer cancel()
	ctrl, err := host.Connect(ctx, addr, nqn, opts)
	if err != nil {
		t.Fatalf("connect to %s at %s: %v", nqn, addr, err)
	}
	t.Cleanup(func() { ctrl.Close() })
	ns, err := ctrl.Namespace(nsid)
	if err != nil {
		t.Fatalf("namespace %d of %s: %v", nsid, nqn, err)
	}
	return ctrl, ns
}
