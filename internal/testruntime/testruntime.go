// Package testruntime gives tests both sandbox runtimes, for checks that
// a function behaves the same in wasm and in eBPF.
package testruntime

import (
	"context"
	"testing"

	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
)

// Both returns a wasm runtime and an eBPF runtime, in that order, with
// default options, closed when tb ends (after whatever tb registers
// later, such as modules loaded into them).
func Both(tb testing.TB) []sandbox.Runtime {
	tb.Helper()
	ctx := context.Background()
	w, err := wasm.NewRuntime(ctx, wasm.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	e := ebpf.NewRuntime(ebpf.Options{})
	tb.Cleanup(func() {
		_ = w.Close(ctx)
		_ = e.Close(ctx)
	})
	return []sandbox.Runtime{w, e}
}
