package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/sandbox"
	"github.com/tetratelabs/wazero"
)

// recurseModule is testdata/depth.wat: compute recurses as deep as the
// first 4 bytes of its input say.
func recurseModule(tb testing.TB) []byte { return readModule(tb, "depth") }

// depthInput is recurseModule's input for a recursion depth.
func depthInput(depth uint32) []byte { return binary.LittleEndian.AppendUint32(nil, depth) }

// TestStackBounded: wazero grows a call's stack by doubling, up to about
// 84 MB, and kept it in the pooled instance: 48 runaway recursions took
// 3.5 GB. A recursion within the stack limit works (and the instance is
// reused); a runaway one fails with ErrMemory naming the limit, in both
// engines, and leaves nothing behind: the heap after 48 of them is what
// it was.
func TestStackBounded(t *testing.T) {
	for _, interp := range []bool{false, true} {
		t.Run(map[bool]string{false: "compiler", true: "interpreter"}[interp], func(t *testing.T) {
			r := newRuntime(t, Options{Interpreter: interp})
			m := loadBytes(t, r, recurseModule(t), sandbox.Limits{StackBytes: 256 << 10})
			ctx := context.Background()
			for _, depth := range []uint32{0, 1, 100, 500} {
				if out, err := sandbox.Compute(ctx, m, depthInput(depth), 16); err != nil || len(out) != 0 {
					t.Fatalf("recursion %d deep: %d bytes, %v", depth, len(out), err)
				}
			}
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := range 48 {
				_, err := sandbox.Compute(ctx, m, depthInput(0xFFFFFFFF), 16)
				if !errors.Is(err, sandbox.ErrMemory) || !strings.Contains(err.Error(), "call stack over its limit of 262144 bytes") {
					t.Fatalf("runaway recursion %d: %v", i, err)
				}
			}
			var after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)
			if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 16<<20 {
				t.Errorf("48 runaway recursions left the heap %d MiB larger", grew>>20)
			}
			// The module still works.
			if _, err := sandbox.Compute(ctx, m, depthInput(10), 16); err != nil {
				t.Fatalf("after the runaways: %v", err)
			}
		})
	}
}

// TestStackLimitRefusesHugeFrames: a module one of whose frames could
// take more than the whole stack limit is refused at load, saying so.
func TestStackLimitRefusesHugeFrames(t *testing.T) {
	r := newRuntime(t, Options{})
	_, err := r.Load(context.Background(), recurseModule(t), sandbox.Limits{StackBytes: 100})
	if !errors.Is(err, sandbox.ErrBadModule) || !strings.Contains(err.Error(), "bytes of call stack, over the limit of 100") {
		t.Fatalf("load with a 100-byte stack: %v", err)
	}
}

// TestStackExportReserved: a module may not export the runtime's name.
func TestStackExportReserved(t *testing.T) {
	m := recurseModule(t)
	// Export compute as the reserved name: the export section (34
	// bytes, 3 exports) grows by the names' difference.
	bad := strings.Replace(string(m), "\x07compute", string(rune(len(exportStack)))+exportStack, 1)
	i := strings.Index(string(m), "\x07\x22\x03")
	b := []byte(bad)
	b[i+1] += byte(len(exportStack) - len("compute"))
	if _, err := prepare(b, 1, 1<<20); !errors.Is(err, sandbox.ErrBadModule) || !strings.Contains(err.Error(), "the name is the runtime's") {
		t.Fatalf("a module exporting %s: %v", exportStack, err)
	}
}

// TestStackGlobalUnreachable: a module's code may not name the stack
// global, the index after its own globals (it could reset its depth and
// recurse past the limit); wazero only sees the rewritten module, in which
// that index is valid.
func TestStackGlobalUnreachable(t *testing.T) {
	// (func (export "f") (global.set 0 (i32.const 0))), no globals.
	m := []byte("\x00asm\x01\x00\x00\x00" +
		"\x01\x04\x01\x60\x00\x00" + // type () -> ()
		"\x03\x02\x01\x00" + // function 0 of type 0
		"\x07\x05\x01\x01f\x00\x00" + // export "f" func 0
		"\x0a\x08\x01\x06\x00\x41\x00\x24\x00\x0b") // i32.const 0; global.set 0
	if _, err := prepare(m, 1, 1<<20); !errors.Is(err, sandbox.ErrBadModule) || !strings.Contains(err.Error(), "global.set of global 0, out of range") {
		t.Fatalf("a module setting the stack global: %v", err)
	}
	// Its own global, index 0, is fine.
	withGlobal := []byte("\x00asm\x01\x00\x00\x00" +
		"\x01\x04\x01\x60\x00\x00" +
		"\x03\x02\x01\x00" +
		"\x06\x06\x01\x7f\x01\x41\x00\x0b" + // (global (mut i32) (i32.const 0))
		"\x07\x05\x01\x01f\x00\x00" +
		"\x0a\x08\x01\x06\x00\x41\x00\x24\x00\x0b")
	if _, err := prepare(withGlobal, 1, 1<<20); err != nil {
		t.Fatalf("a module setting its own global: %v", err)
	}
}

// FuzzStackInstrument: whatever prepare accepts and wazero compiles as
// it was given, wazero compiles after prepare's instrumentation too: the
// call charges never make a valid module invalid.
func FuzzStackInstrument(f *testing.F) {
	ents, _ := filepath.Glob("testdata/*.wasm")
	for _, e := range ents {
		b, _ := os.ReadFile(e)
		f.Add(b)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	f.Cleanup(func() { rt.Close(ctx) })
	f.Fuzz(func(t *testing.T, b []byte) {
		bin, err := prepare(b, 16, 1<<20)
		if err != nil {
			return
		}
		orig, err := rt.CompileModule(ctx, b)
		if err != nil {
			return
		}
		orig.Close(ctx)
		inst, err := rt.CompileModule(ctx, bin)
		if err != nil {
			t.Fatalf("compiles as given, not instrumented: %v", err)
		}
		inst.Close(ctx)
	})
}
