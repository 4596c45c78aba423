package wasm

import (
	"bytes"
	"context"
	"testing"

	"github.com/nearstore/nearstore/internal/testmodules"
	"github.com/nearstore/nearstore/sandbox"
)

// TestNoLeakAcrossTenants: issue 18's leak. A pooled instance kept the
// linear memory of the request before it, and reset cleared only the
// scratch: one host's input (or blocks, or anything the function left in
// memory) reached the next host's request through a module that outputs
// memory it never wrote. Instances are now never shared across tenants:
// the other tenant's request sees zero bytes of the first one's, and the
// first tenant still reuses its own instance.
func TestNoLeakAcrossTenants(t *testing.T) {
	r := newRuntime(t, Options{})
	m := loadBytes(t, r, testmodules.Reveal(), sandbox.Limits{})
	const n = 8 << 10
	secret := bytes.Repeat([]byte("owner's data "), n/13+1)[:n]
	run := func(tenant string, input []byte) []byte {
		t.Helper()
		ctx := sandbox.WithTenant(context.Background(), tenant)
		out, err := sandbox.Compute(ctx, m, input, n)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	run("owner", secret)
	for _, tenant := range []string{"task", ""} {
		got := run(tenant, nil)
		leaked := 0
		for i := range got {
			if got[i] != 0 {
				leaked++
			}
		}
		if leaked != 0 {
			t.Fatalf("tenant %q saw %d bytes it never wrote", tenant, leaked)
		}
	}
	// The owner's own instance is reused: its memory is what it left.
	if got := run("owner", nil); !bytes.Equal(got, secret) {
		t.Fatal("the owner's request did not get the owner's pooled instance back")
	}
}
