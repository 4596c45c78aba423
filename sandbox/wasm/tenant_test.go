package wasm

import (
	"bytes"
	"context"
	"testing"

	"github.com/nearstore/nearstore/sandbox"
)

// revealModule is a C-layout module whose compute(in, in_len, out, out_cap)
// copies out_cap bytes from in to out, whatever in_len says: it hands its
// caller whatever its memory held past the input. Assembled by hand, as
// there is no wat2wasm here:
//
//	(module
//	  (memory (export "memory") 2)
//	  (global (export "__heap_base") i32 (i32.const 1024))
//	  (func (export "compute") (param i32 i32 i32 i32) (result i32)
//	    (memory.copy (local.get 2) (local.get 0) (local.get 3))
//	    local.get 3))
func revealModule() []byte {
	section := func(id byte, body ...byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	var exports []byte
	exports = append(exports, 3)
	exports = append(append(exports, name("memory")...), 2, 0)
	exports = append(append(exports, name("__heap_base")...), 3, 0)
	exports = append(append(exports, name("compute")...), 0, 0)
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	m = append(m, section(1, 1, 0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f)...)
	m = append(m, section(3, 1, 0)...)
	m = append(m, section(5, 1, 0, 2)...)
	m = append(m, section(6, 1, 0x7f, 0, 0x41, 0x80, 0x08, 0x0b)...)
	m = append(m, section(7, exports...)...)
	m = append(m, section(10, 1, 14, 0, 0x20, 2, 0x20, 0, 0x20, 3, 0xfc, 0x0a, 0, 0, 0x20, 3, 0x0b)...)
	return m
}

// TestNoLeakAcrossTenants: issue 18's leak. A pooled instance kept the
// linear memory of the request before it, and reset cleared only the
// scratch: one host's input (or blocks, or anything the function left in
// memory) reached the next host's request through a module that outputs
// memory it never wrote. Instances are now never shared across tenants:
// the other tenant's request sees zero bytes of the first one's, and the
// first tenant still reuses its own instance.
func TestNoLeakAcrossTenants(t *testing.T) {
	r := newRuntime(t, Options{})
	m := loadBytes(t, r, revealModule(), sandbox.Limits{})
	const n = 8 << 10
	secret := bytes.Repeat([]byte("owner's data "), n/13+1)[:n]
	run := func(tenant string, input []byte) []byte {
		t.Helper()
		ctx := sandbox.WithTenant(context.Background(), tenant)
		inst, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Release()
		in, err := inst.Input(len(input))
		if err != nil {
			t.Fatal(err)
		}
		copy(in, input)
		out, err := inst.Output(n)
		if err != nil {
			t.Fatal(err)
		}
		k, err := inst.Compute(ctx, len(input), n)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(out[:k])
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
