package ebpf

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/nearstore/nearstore/internal/testmodules"
	"github.com/nearstore/nearstore/sandbox"
)

// interpreterOnly runs the tests' modules in the interpreter instead of
// translating them to wasm: go test ./sandbox/ebpf -args -interpreter.
// FuzzTranslation compares the two on every run.
var interpreterOnly = flag.Bool("interpreter", false, "run test modules in the interpreter, not translated to wasm")

// testRuntime translates pushdown entries too, so that the hostile
// pushdown tests cover the translation.
func testRuntime() *Runtime {
	return NewRuntime(Options{Interpreter: *interpreterOnly, TranslatePushdown: true})
}

func readObj(t testing.TB, name string) []byte { return testmodules.Read(t, "testdata", name) }

// testTime replaces the default 100 ms call limit in tests that are not
// about time: CI runs under the race detector on a shared machine, where
// the interpreter is several times slower and a call can be descheduled,
// so a correctness test must not fail on the clock.
const testTime = 10 * time.Second

func loadObj(t testing.TB, name string, lim sandbox.Limits) sandbox.Module {
	t.Helper()
	if lim.Time == 0 {
		lim.Time = testTime
	}
	m, err := testRuntime().Load(context.Background(), readObj(t, name), lim)
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// runRaw links insns as a pushdown entry and runs it once with R1 = the
// context's address, returning the full 64-bit R0.
func runRaw(t testing.TB, insns asm.Instructions, lim sandbox.Limits) (uint64, error) {
	t.Helper()
	if lim.Time == 0 {
		lim.Time = testTime
	}
	m, err := testRuntime().loadInstructions(insns, "pushdown", lim)
	if err != nil {
		return 0, err
	}
	in := m.newInstance()
	return in.run(context.Background(), m.pushdown, &m.lim, [5]uint64{ctxAddr})
}

// mustModule links insns as entry or fails the test.
func mustModule(t testing.TB, insns asm.Instructions, entry string, lim sandbox.Limits) *module {
	t.Helper()
	if lim.Time == 0 {
		lim.Time = testTime
	}
	m, err := testRuntime().loadInstructions(insns, entry, lim)
	if err != nil {
		t.Fatalf("loadInstructions: %v", err)
	}
	return m
}

// prog builds a program from instructions, ending it with exit.
func prog(ins ...asm.Instruction) asm.Instructions {
	return append(asm.Instructions(ins), asm.Return())
}
