package ebpf

import (
	"context"
	"errors"
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
// context's address, returning the full 64-bit R0. Unless -interpreter,
// it runs a translatable program translated to wasm as well and fails the
// test if the two engines disagree (a budget error aside: the two count
// instructions at different points), so every ALU and jump case checks
// both.
func runRaw(t testing.TB, insns asm.Instructions, lim sandbox.Limits) (uint64, error) {
	t.Helper()
	if lim.Time == 0 {
		lim.Time = testTime
	}
	m, err := testRuntime().loadInstructions(insns, "pushdown", lim)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	r0, err := m.newInstance().run(ctx, m.pushdown, &m.lim, [5]uint64{ctxAddr})
	if m.pushT == nil {
		return r0, err
	}
	in, werr := m.newWasmInstance(ctx)
	if werr != nil {
		t.Fatal(werr)
	}
	w := in.wp
	w.mapRegions(w.view(), uint32(len(m.rodata)), 0, 0, 0, true)
	wr0, werr := in.callWasm(ctx, w, [5]uint64{ctxAddr})
	if errors.Is(err, sandbox.ErrTimeout) || errors.Is(werr, sandbox.ErrTimeout) {
		return r0, err
	}
	if wr0 != r0 || (werr == nil) != (err == nil) {
		t.Errorf("interpreter: %#x, %v; translated to wasm: %#x, %v", r0, err, wr0, werr)
	}
	return r0, err
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
