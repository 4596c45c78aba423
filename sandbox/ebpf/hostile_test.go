package ebpf

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/nearstore/nearstore/sandbox"
)

const (
	r2  = asm.R2
	r6  = asm.R6
	r10 = asm.R10
)

// spin never exits in practice: r0 stays 0, so the loop runs forever.
func spin() asm.Instructions {
	return asm.Instructions{
		asm.Mov.Imm(r0, 0),
		asm.JEq.Imm(r0, 1, "out").WithSymbol("loop"),
		asm.Ja.Label("loop"),
		asm.Return().WithSymbol("out"),
	}
}

func TestInfiniteLoop(t *testing.T) {
	for name, lim := range map[string]sandbox.Limits{
		"back jumps":   {MaxBackJumps: 1000, MaxInstructions: 1 << 40},
		"instructions": {MaxBackJumps: 1 << 40, MaxInstructions: 5000},
		"defaults":     {},
		"time":         {MaxBackJumps: 1 << 60, MaxInstructions: 1 << 60, Time: 20 * time.Millisecond},
	} {
		// Each budget must end the loop with ErrTimeout; how long that
		// takes is the benchmarks' business (a hang fails the test run).
		t.Run(name, func(t *testing.T) {
			_, err := runRaw(t, spin(), lim)
			if !errors.Is(err, sandbox.ErrTimeout) {
				t.Fatalf("got %v, want ErrTimeout", err)
			}
			t.Log(err)
		})
	}
	t.Run("context", func(t *testing.T) {
		m := mustModule(t, spin(), "pushdown", sandbox.Limits{MaxBackJumps: 1 << 60, MaxInstructions: 1 << 60, Time: time.Hour})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		in, _ := m.Acquire(context.Background())
		in.Data(8)
		_, _, err := in.Step(ctx, 0, 0, 8)
		if !errors.Is(err, sandbox.ErrTimeout) {
			t.Fatalf("got %v, want ErrTimeout", err)
		}
	})
}

// stepErr runs insns as a pushdown over n data bytes.
func stepErr(t *testing.T, insns asm.Instructions, n int) error {
	t.Helper()
	m := mustModule(t, insns, "pushdown", sandbox.Limits{})
	in, err := m.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	if _, err := in.Data(n); err != nil {
		t.Fatal(err)
	}
	_, _, err = in.Step(context.Background(), 0, 0, n)
	return err
}

func TestMemoryFaults(t *testing.T) {
	ldData := asm.LoadMem(r2, r1, ctxData, asm.DWord) // r2 = ctx->data
	ldScratch := asm.LoadMem(r2, r1, ctxScratch, asm.DWord)
	for _, tc := range []struct {
		name  string
		insns asm.Instructions
		want  string
	}{
		{"ctx beyond 360", prog(asm.LoadMem(r0, r1, 360, asm.Byte)), "ctx+0x168"},
		{"ctx straddling the end", prog(asm.LoadMem(r0, r1, 356, asm.DWord)), "load of 8 bytes"},
		{"ctx below", prog(asm.LoadMem(r0, r1, -1, asm.Byte)), "load"},
		{"data beyond data_len", prog(ldData, asm.LoadMem(r0, r2, 100, asm.Byte)), "data+0x64"},
		{"data word straddling data_len", prog(ldData, asm.LoadMem(r0, r2, 97, asm.Word)), "data"},
		{"stack below the frame", prog(asm.LoadMem(r0, r10, -520, asm.DWord)), "R10-520"},
		{"stack above the top", prog(asm.LoadMem(r0, r10, 0, asm.DWord)), "R10+0"},
		{"stack store below the frame", prog(asm.StoreMem(r10, -513, r1, asm.Byte)), "store"},
		{"scratch beyond 4096", prog(ldScratch, asm.StoreMem(r2, 4096, r1, asm.Byte)), "scratch+0x1000"},
		{"scalar pointer", prog(asm.Mov.Imm(r2, 0x1234), asm.LoadMem(r0, r2, 0, asm.Byte)), "unmapped"},
		{"null", prog(asm.Mov.Imm(r2, 0), asm.LoadMem(r0, r2, 0, asm.DWord)), "unmapped"},
		{"pointer arithmetic on a scalar", prog(asm.LoadImm(r2, 0x7fff_0000_0000, asm.DWord), asm.Add.Reg(r2, r1), asm.LoadMem(r0, r2, 0, asm.Byte)), "unmapped"},
		{"wrapping pointer", prog(asm.LoadImm(r2, -1, asm.DWord), asm.LoadMem(r0, r2, 1, asm.Byte)), "unmapped"},
		{"write to data", prog(ldData, asm.StoreImm(r2, 0, 1, asm.Byte)), "read-only"},
		{"write to ctx->data", prog(asm.StoreImm(r1, ctxData, 0, asm.Word)), "read-only"},
		{"write to ctx->scratch", prog(asm.StoreMem(r1, ctxScratch, r1, asm.DWord)), "read-only"},
		{"write to ctx->data_len", prog(asm.StoreImm(r1, ctxDataLen, 1<<20, asm.Word)), "read-only"},
		{"write to ctx->cur_addr", prog(asm.StoreImm(r1, ctxCurAddr, 0, asm.Word)), "read-only"},
		{"write straddling done into padding", prog(asm.StoreMem(r1, ctxDone, r1, asm.DWord)), "read-only"},
		{"write straddling size into scratch ptr", prog(asm.StoreMem(r1, ctxScratch-4, r1, asm.DWord)), "read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := stepErr(t, tc.insns, 100)
			if !errors.Is(err, sandbox.ErrMemory) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "instruction ") {
				t.Fatalf("got %v, want ErrMemory mentioning %q and the instruction", err, tc.want)
			}
		})
	}
	// The writable ctx fields are writable, at their edges.
	ok := prog(
		asm.StoreImm(r1, ctxDone, 1, asm.Word),
		asm.StoreImm(r1, ctxNextAddr, 1, asm.Byte),
		asm.StoreMem(r1, ctxScratch-8, r1, asm.DWord), // size[15]
		asm.StoreImm(r1, ctxNextFileEnd-4, 7, asm.Word),
		asm.Mov.Imm(r0, 0),
	)
	if err := stepErr(t, ok, 1); err != nil {
		t.Fatalf("writable fields: %v", err)
	}
	// Input is read-only to compute.
	m := mustModule(t, prog(asm.StoreImm(r1, 0, 1, asm.Byte)), "compute", sandbox.Limits{})
	_, err := sandbox.Compute(context.Background(), m, []byte{1, 2, 3}, 8)
	if !errors.Is(err, sandbox.ErrMemory) {
		t.Errorf("write to input: %v", err)
	}
	// Reading input past in_len.
	m = mustModule(t, prog(asm.LoadMem(r0, r1, 3, asm.Byte)), "compute", sandbox.Limits{})
	if _, err = sandbox.Compute(context.Background(), m, []byte{1, 2, 3}, 8); !errors.Is(err, sandbox.ErrMemory) {
		t.Errorf("read past input: %v", err)
	}
}

func TestOutputLength(t *testing.T) {
	ctx := context.Background()
	// compute returns out_cap + 1.
	m := mustModule(t, prog(asm.Mov.Reg(r0, asm.R4), asm.Add.Imm(r0, 1)), "compute", sandbox.Limits{})
	if _, err := sandbox.Compute(ctx, m, nil, 16); !errors.Is(err, sandbox.ErrOutput) {
		t.Errorf("ret > out_cap: %v", err)
	}
	// Exactly out_cap is fine; a huge positive 64-bit R0 is an int32 length.
	m = mustModule(t, prog(asm.Mov.Reg(r0, asm.R4)), "compute", sandbox.Limits{})
	if out, err := sandbox.Compute(ctx, m, nil, 16); err != nil || len(out) != 16 {
		t.Errorf("ret == out_cap: %d bytes, %v", len(out), err)
	}
	m = mustModule(t, prog(asm.Mov.Imm32(r0, 0x7fffffff)), "compute", sandbox.Limits{})
	if _, err := sandbox.Compute(ctx, m, nil, 16); !errors.Is(err, sandbox.ErrOutput) {
		t.Errorf("huge length: %v", err)
	}
	// An output buffer over Limits.MaxOutput.
	m = mustModule(t, prog(asm.Mov.Imm(r0, 0)), "compute", sandbox.Limits{MaxOutput: 1024})
	if _, err := sandbox.Compute(ctx, m, nil, 1025); !errors.Is(err, sandbox.ErrOutput) {
		t.Errorf("output over the limit: %v", err)
	}
	// A step asking for more than MaxStepBytes.
	big := prog(
		asm.StoreImm(r1, ctxSizeField, 40<<10, asm.Word),
		asm.StoreImm(r1, ctxSizeField+8, 40<<10, asm.Word),
		asm.Mov.Imm(r0, 0),
	)
	if err := stepErr(t, big, 1); !errors.Is(err, sandbox.ErrStep) {
		t.Errorf("step over MaxStepBytes: %v", err)
	}
	// Calling an entry the module lacks.
	in, _ := m.Acquire(ctx)
	defer in.Release()
	if _, _, err := in.Step(ctx, 0, 0, 0); !errors.Is(err, sandbox.ErrNoEntry) {
		t.Errorf("missing pushdown: %v", err)
	}
}

func TestVerifierRejects(t *testing.T) {
	jaOff := func(off int16) asm.Instruction {
		return asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Ja), Offset: off}
	}
	long := make(asm.Instructions, 0, maxInsns+1)
	for range maxInsns {
		long = append(long, asm.Mov.Imm(r0, 0))
	}
	long = append(long, asm.Return())
	okLen := append(asm.Instructions(nil), long[1:]...)
	for _, tc := range []struct {
		name  string
		insns asm.Instructions
		want  string
	}{
		{"jump past the end", asm.Instructions{jaOff(5), asm.Return()}, "outside the program"},
		{"jump before the start", asm.Instructions{asm.Mov.Imm(r0, 0), jaOff(-3), asm.Return()}, "outside the program"},
		{"jump into lddw", asm.Instructions{jaOff(1), asm.LoadImm(r0, 1, asm.DWord), asm.Return()}, "middle of an lddw"},
		{"fall off the end", asm.Instructions{asm.Mov.Imm(r0, 0)}, "falls off"},
		{"conditional jump last", asm.Instructions{asm.Mov.Imm(r0, 0), asm.JEq.Imm(r0, 0, "x").WithSymbol("x")}, "falls off"},
		{"no exit reachable", asm.Instructions{jaOff(-1).WithSymbol("l"), asm.Return()}, "no exit"},
		{"bad opcode", prog(asm.Instruction{OpCode: 0xff}), "opcode"},
		{"bad ALU op 0xe0", prog(asm.Instruction{OpCode: 0xe7}), "opcode"},
		{"legacy LD_ABS", prog(asm.LoadAbs(0, asm.Word)), "LD_ABS"},
		{"atomic add", prog(asm.StoreXAdd(r10, r1, asm.DWord)), "atomic"},
		{"write to r10", prog(asm.Mov.Imm(r10, 0)), "r10"},
		{"load into r10", prog(asm.LoadMem(r10, r1, 0, asm.DWord)), "r10"},
		{"lddw into r10", prog(asm.LoadImm(r10, 0, asm.DWord)), "r10"},
		{"register 11", prog(asm.Mov.Reg(r0, asm.Register(11))), "register"},
		{"disallowed helper", prog(asm.FnMapLookupElem.Call()), "helper 1 "},
		{"disallowed helper probe_read", prog(asm.FnProbeRead.Call()), "helper 4 "},
		{"kfunc", prog(asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoKfuncCall, Constant: 7}), "kfunc"},
		{"map load", prog(asm.LoadMapPtr(r1, 3)), "maps"},
		{"call to nowhere", prog(asm.Call.Label("nope")), "undefined function"},
		{"call out of range", prog(asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoCall, Constant: 100}), "outside"},
		{"too long", long, "at most 4096"},
		{"nonzero reserved field", prog(asm.Instruction{OpCode: asm.Add.Op(asm.RegSource), Dst: r0, Src: r1, Constant: 3}), "reserved"},
		{"jump into another function", asm.Instructions{
			asm.Call.Label("f"),
			asm.Ja.Label("inside"),
			asm.Mov.Imm(r0, 1).WithSymbol("f"),
			asm.Mov.Imm(r0, 2).WithSymbol("inside"),
			asm.Return(),
		}, "leaves the function"},
		{"callee falls into caller", asm.Instructions{
			asm.Call.Label("f"),
			asm.Return(),
			asm.Mov.Imm(r0, 1).WithSymbol("f"),
		}, "falls off"},
		{"byte swap of 8 bits", prog(asm.Instruction{OpCode: asm.OpCode(asm.ALUClass).SetALUOp(asm.Swap), Dst: r0, Constant: 8}), "byte swap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := testRuntime().loadInstructions(tc.insns, "pushdown", sandbox.Limits{})
			if !errors.Is(err, sandbox.ErrBadModule) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrBadModule mentioning %q", err, tc.want)
			}
			t.Log(err)
		})
	}
	if _, err := testRuntime().loadInstructions(okLen, "pushdown", sandbox.Limits{}); err != nil {
		t.Errorf("4096 instructions: %v", err)
	}
}

func TestBPFCalls(t *testing.T) {
	// main: r6 = 7; r1 = 5; call add3; r0 += r6 (r6 must survive);
	// a stack buffer of main is passed to and written by the callee.
	insns := asm.Instructions{
		asm.Mov.Imm(r6, 7),
		asm.StoreImm(r10, -8, 100, asm.Word),
		asm.Mov.Reg(r1, r10),
		asm.Add.Imm(r1, -8),
		asm.Call.Label("bump"),
		asm.LoadMem(r0, r10, -8, asm.Word), // 100 + 1 + 2 (nested)
		asm.Add.Reg(r0, r6),                // + 7
		asm.Return(),

		// bump(p): r6 = 1000 (clobbers a callee-saved register it saves
		// implicitly); *p += 1; call bump2(p); return.
		asm.Mov.Imm(r6, 1000).WithSymbol("bump"),
		asm.LoadMem(r2, r1, 0, asm.Word),
		asm.Add.Imm(r2, 1),
		asm.StoreMem(r1, 0, r2, asm.Word),
		asm.StoreImm(r10, -8, 55, asm.Word), // its own frame, not main's
		asm.Call.Label("bump2"),
		asm.Return(),

		asm.LoadMem(r2, r1, 0, asm.Word).WithSymbol("bump2"),
		asm.Add.Imm(r2, 2),
		asm.StoreMem(r1, 0, r2, asm.Word),
		asm.Return(),
	}
	got, err := runRaw(t, insns, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got != 110 {
		t.Errorf("got %d, want 110", got)
	}

	// Recursion deeper than 8 calls.
	rec := asm.Instructions{
		asm.Call.Label("f"),
		asm.Return(),
		asm.Mov.Imm(r0, 0).WithSymbol("f"),
		asm.Call.Label("f"),
		asm.Return(),
	}
	if _, err := runRaw(t, rec, sandbox.Limits{}); !errors.Is(err, sandbox.ErrMemory) || !strings.Contains(err.Error(), "deeper than 8") {
		t.Errorf("deep recursion: %v", err)
	}
	// Exactly 8 nested calls are fine: f(n) recurses while n > 0.
	depth8 := asm.Instructions{
		asm.Mov.Imm(r1, 8),
		asm.Call.Label("f"),
		asm.Return(),
		asm.Mov.Reg(r0, r1).WithSymbol("f"),
		asm.JEq.Imm(r1, 1, "out"),
		asm.Add.Imm(r1, -1),
		asm.Call.Label("f"),
		asm.Return().WithSymbol("out"),
	}
	if _, err := runRaw(t, depth8, sandbox.Limits{}); err != nil {
		t.Errorf("8 nested calls: %v", err)
	}
}

func TestClosedModule(t *testing.T) {
	m := mustModule(t, prog(asm.Mov.Imm(r0, 0)), "compute", sandbox.Limits{})
	m.Close(context.Background())
	if _, err := m.Acquire(context.Background()); err == nil {
		t.Error("Acquire on a closed module succeeded")
	}
}

// TestStackClearedBetweenRequests: what a request's nested call left in
// its frame is gone when the next request gets the instance, at every
// depth the last one reached.
func TestStackClearedBetweenRequests(t *testing.T) {
	// main calls f(3); f reads and returns the word at its frame's
	// bottom, after it stores 0x55 there, and recurses while r1 > 0, so
	// the frames of depths 1 to 4 are written.
	insns := asm.Instructions{
		asm.Mov.Imm(r1, 3),
		asm.Call.Label("f"),
		asm.Return(),
		asm.LoadMem(r6, r10, -512, asm.DWord).WithSymbol("f"),
		asm.Mov.Imm(r2, 0x55),
		asm.StoreMem(r10, -512, r2, asm.DWord),
		asm.JEq.Imm(r1, 0, "out"),
		asm.Add.Imm(r1, -1),
		asm.Call.Label("f"),
		asm.Or.Reg(r6, r0),
		asm.Mov.Reg(r0, r6).WithSymbol("out"),
		asm.Return(),
	}
	m := mustModule(t, insns, "pushdown", sandbox.Limits{})
	defer m.Close(context.Background())
	ctx := context.Background()
	for i := range 3 {
		inst, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inst.Data(0); err != nil {
			t.Fatal(err)
		}
		in := inst.(*instance)
		r0, err := in.run(ctx, m.pushdown, &m.lim, [5]uint64{ctxAddr})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if r0 != 0 {
			t.Fatalf("request %d read %#x an earlier request left on the stack", i, r0)
		}
		inst.Release()
	}
}
