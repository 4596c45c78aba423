package ebpf

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/nearstore/nearstore/sandbox"
)

// interpModule links insns as a pushdown entry for the interpreter alone,
// whatever -interpreter says: these tests are about how it leaves and
// resumes its hot loop (exec) at the instructions runLoop handles.
func interpModule(t *testing.T, insns asm.Instructions, lim sandbox.Limits) *module {
	t.Helper()
	if lim.Time == 0 {
		lim.Time = testTime
	}
	m, err := NewRuntime(Options{Interpreter: true}).loadInstructions(insns, "pushdown", lim)
	if err != nil {
		t.Fatalf("loadInstructions: %v", err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// interpStep runs m's pushdown entry as a step over 100 bytes of data
// and returns R0.
func interpStep(t *testing.T, m *module) (uint64, error) {
	t.Helper()
	ctx := context.Background()
	inst, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Release()
	if _, err := inst.Data(100); err != nil {
		t.Fatal(err)
	}
	in := inst.(*instance)
	stepCtx(in.ctx[:], 0, 0, 100)
	in.regions[regionData].buf = in.data[:100]
	return in.run(ctx, m.pushdown, &m.lim, [5]uint64{ctxAddr})
}

// TestInterpErrors: the interpreter's errors name the instruction and
// say what went wrong, in the same words wherever in the loop they come
// from.
func TestInterpErrors(t *testing.T) {
	ldData := asm.LoadMem(r2, r1, ctxData, asm.DWord)
	for _, tc := range []struct {
		name  string
		insns asm.Instructions
		lim   sandbox.Limits
		want  string
	}{
		{"load past data", prog(ldData, asm.LoadMem(r0, r2, 97, asm.Word)), sandbox.Limits{},
			"sandbox: memory access out of bounds or over limit: instruction 1: load of 4 bytes at 0x200000061 (data+0x61, a region of 100 bytes)"},
		{"signed load past data", prog(ldData, asm.LoadMemSX(r0, r2, 100, asm.Byte)), sandbox.Limits{},
			"sandbox: memory access out of bounds or over limit: instruction 1: load of 1 bytes at 0x200000064 (data+0x64, a region of 100 bytes)"},
		{"load below the frame", prog(asm.Mov.Imm(r0, 0), asm.LoadMem(r0, r10, -520, asm.DWord)), sandbox.Limits{},
			"sandbox: memory access out of bounds or over limit: instruction 1: load of 8 bytes at 0x400000ff8 (stack, R10-520; the frame is the 512 bytes below R10)"},
		{"unmapped load", prog(asm.LoadImm(r2, -1, asm.DWord), asm.LoadMem(r0, r2, 1, asm.Half)), sandbox.Limits{},
			"sandbox: memory access out of bounds or over limit: instruction 2: load of 2 bytes at 0x0 (unmapped)"},
		{"store to data", prog(ldData, asm.StoreMem(r2, 8, r1, asm.DWord)), sandbox.Limits{},
			"sandbox: memory access out of bounds or over limit: instruction 1: store of 8 bytes at 0x200000008 (data+0x8, a region of 100 bytes, which is read-only)"},
		{"store to ctx->data_len", prog(asm.Mov.Imm(r0, 0), asm.StoreMem(r1, ctxDataLen, r0, asm.Word)), sandbox.Limits{},
			"sandbox: memory access out of bounds or over limit: instruction 1: store of 4 bytes at 0x10000015c (ctx+0x15c, a region of 360 bytes, which is read-only)"},
		{"store past scratch", prog(asm.LoadMem(r2, r1, ctxScratch, asm.DWord), asm.StoreMem(r2, 4095, r1, asm.Half)), sandbox.Limits{},
			"sandbox: memory access out of bounds or over limit: instruction 1: store of 2 bytes at 0x300000fff (scratch+0xfff, a region of 4096 bytes)"},
		{"back jumps", spin(), sandbox.Limits{MaxBackJumps: 1000, MaxInstructions: 1 << 40},
			"sandbox: function ran too long: instruction 2: 1000 backward jumps taken, the limit"},
		{"instructions", spin(), sandbox.Limits{MaxBackJumps: 1 << 40, MaxInstructions: 5000},
			"sandbox: function ran too long: instruction 2: 5001 instructions executed, over the limit of 5000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := interpStep(t, interpModule(t, tc.insns, tc.lim))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestBudgetsAcrossHelpers: the interpreter leaves its hot loop at every
// helper call and resumes after it; the instructions executed and the
// backward jumps taken before count all the same.
func TestBudgetsAcrossHelpers(t *testing.T) {
	// r6 counts down from n, calling bpf_ktime_get_ns each time round:
	// n-1 backward jumps, 3n+3 instructions.
	loop := func(n int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Imm(r6, n),
			asm.FnKtimeGetNs.Call().WithSymbol("loop"),
			asm.Add.Imm(r6, -1),
			asm.JNE.Imm(r6, 0, "loop"),
			asm.Mov.Imm(r0, 0),
			asm.Return(),
		}
	}
	for _, tc := range []struct {
		name    string
		n       int32
		lim     sandbox.Limits
		timeout bool
	}{
		{"back jumps at the limit", 100, sandbox.Limits{MaxBackJumps: 99, MaxInstructions: 1 << 40}, false},
		{"back jumps over the limit", 101, sandbox.Limits{MaxBackJumps: 99, MaxInstructions: 1 << 40}, true},
		{"instructions under the limit", 1000, sandbox.Limits{MaxBackJumps: 1 << 40, MaxInstructions: 3003 + 4096}, false},
		{"instructions over the limit", 1000, sandbox.Limits{MaxBackJumps: 1 << 40, MaxInstructions: 2000}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := interpStep(t, interpModule(t, loop(tc.n), tc.lim))
			if got := errors.Is(err, sandbox.ErrTimeout); got != tc.timeout {
				t.Fatalf("n=%d: got %v, want timeout %v", tc.n, err, tc.timeout)
			}
		})
	}
}

// TestRegistersClearedBetweenRuns: the register file lives in the
// instance; a run sees none of what the last one left in it.
func TestRegistersClearedBetweenRuns(t *testing.T) {
	// It returns r0|r2|...|r9 as the run started, after it sets every
	// register but r10 to 0x55.
	var insns asm.Instructions
	for _, r := range []asm.Register{asm.R2, asm.R3, asm.R4, asm.R5, asm.R6, asm.R7, asm.R8, asm.R9} {
		insns = append(insns, asm.Or.Reg(r0, r))
	}
	insns = append(insns, asm.Mov.Reg(r1, r0))
	for _, r := range []asm.Register{asm.R2, asm.R3, asm.R4, asm.R5, asm.R6, asm.R7, asm.R8, asm.R9} {
		insns = append(insns, asm.Mov.Imm(r, 0x55))
	}
	insns = append(insns, asm.Mov.Reg(r0, r1), asm.Mov.Imm(r1, 0x55), asm.Return())
	m := interpModule(t, insns, sandbox.Limits{})
	for i := range 3 {
		r0, err := interpStep(t, m)
		if err != nil {
			t.Fatal(err)
		}
		if r0 != 0 {
			t.Fatalf("run %d: R0 and R2-R9 held %#x as it started, want 0", i, r0)
		}
	}
}

// TestFusedPairs runs every pair in fusedOps (runRaw: against the wasm
// translation too, unless -interpreter) with aliased registers, unsigned
// comparisons, jumps into the pair's second instruction and faults in
// either half, and checks that fuse did fuse the pair at the index given.
func TestFusedPairs(t *testing.T) {
	const r3, r4 = asm.R3, asm.R4
	stack := func(v int32) asm.Instructions { // [r10-8] = v
		return asm.Instructions{asm.Mov.Imm(r4, v), asm.StoreMem(r10, -8, r4, asm.DWord)}
	}
	cat := func(parts ...asm.Instructions) asm.Instructions {
		var all asm.Instructions
		for _, p := range parts {
			all = append(all, p...)
		}
		return append(all, asm.Return())
	}
	for _, tc := range []struct {
		name  string
		insns asm.Instructions
		at    int // the fused pair's first instruction
		fused op
		want  uint64
		err   string // the error's text after "instruction ", if any
		lim   sandbox.Limits
	}{
		{"mov+add aliased", cat(asm.Instructions{asm.Mov.Imm(r0, 5), asm.Mov.Imm(r1, 7),
			asm.Mov.Reg(r1, r0), asm.Add.Reg(r1, r1), asm.Mov.Reg(r0, r1)}), 2, opMovRAddR, 10, "", sandbox.Limits{}},
		{"jump into mov+add's add", cat(asm.Instructions{asm.Mov.Imm(r0, 1), asm.Mov.Imm(r1, 2), asm.Ja.Label("add"),
			asm.Mov.Reg(r0, r1), asm.Add.Reg(r0, r1).WithSymbol("add")}), 3, opMovRAddR, 3, "", sandbox.Limits{}},
		{"add+mov", cat(asm.Instructions{asm.Mov.Imm(r1, 1), asm.Add.Imm(r1, -2), asm.Mov.Reg(r0, r1)}), 1, opAddIMovR, ^uint64(0), "", sandbox.Limits{}},
		{"add+jne loop", cat(asm.Instructions{asm.Mov.Imm(r0, 0), asm.Mov.Imm(r1, 10),
			asm.Add.Imm(r0, 3).WithSymbol("loop"), asm.Add.Imm(r1, -1), asm.JNE.Imm(r1, 0, "loop")}), 3, opAddIJneI, 30, "", sandbox.Limits{}},
		{"add+jne back jumps", cat(asm.Instructions{asm.Mov.Imm(r0, 0), asm.Mov.Imm(r1, 10),
			asm.Add.Imm(r0, 3).WithSymbol("loop"), asm.Add.Imm(r1, -1), asm.JNE.Imm(r1, 0, "loop")}), 3, opAddIJneI, 0,
			"4: 5 backward jumps taken, the limit", sandbox.Limits{MaxBackJumps: 5}},
		{"add+jlt loop", cat(asm.Instructions{asm.Mov.Imm(r0, 0),
			asm.Add.Imm(r0, 1).WithSymbol("loop"), asm.JLT.Imm(r0, 7, "loop")}), 1, opAddIJltI, 7, "", sandbox.Limits{}},
		{"add+jlt is unsigned", cat(asm.Instructions{asm.Mov.Imm(r0, -5),
			asm.Add.Imm(r0, 1).WithSymbol("loop"), asm.JLT.Imm(r0, 3, "loop")}), 1, opAddIJltI, ^uint64(3), "", sandbox.Limits{}},
		{"ldx+mov aliased", cat(stack(0x1234), asm.Instructions{asm.Mov.Reg(r1, r10),
			asm.LoadMem(r1, r1, -8, asm.DWord), asm.Mov.Reg(r0, r1)}), 3, opLdxDWMovR, 0x1234, "", sandbox.Limits{}},
		{"ldx+mov faulting load", cat(asm.Instructions{asm.LoadMem(r0, r1, 360, asm.DWord), asm.Mov.Reg(r2, r0)}), 0, opLdxDWMovR, 0,
			"0: load of 8 bytes at 0x100000168", sandbox.Limits{}},
		{"mov+ldx aliased", cat(stack(-7), asm.Instructions{asm.Mov.Reg(r3, r10),
			asm.LoadMem(r3, r3, -8, asm.DWord), asm.Mov.Reg(r0, r3)}), 2, opMovRLdxDW, uint64(1<<64 - 7), "", sandbox.Limits{}},
		{"mov+ldx faulting load", cat(asm.Instructions{asm.Mov.Reg(r2, r1), asm.LoadMem(r0, r2, 356, asm.DWord)}), 0, opMovRLdxDW, 0,
			"1: load of 8 bytes at 0x100000164", sandbox.Limits{}},
		{"mov+jeq taken", cat(asm.Instructions{asm.Mov.Imm(r0, 0), asm.Mov.Imm(r1, -1),
			asm.Mov.Reg(r2, r1), asm.JEq.Imm(r2, -1, "out"), asm.Mov.Imm(r0, 2), asm.Ja.Label("end"),
			asm.Mov.Imm(r0, 1).WithSymbol("out"), asm.Mov.Reg(r0, r0).WithSymbol("end")}), 2, opMovRJeqI, 1, "", sandbox.Limits{}},
		{"mov+jeq not taken", cat(asm.Instructions{asm.Mov.Imm(r0, 0), asm.Mov.Imm(r1, 1),
			asm.Mov.Reg(r2, r1), asm.JEq.Imm(r2, -1, "out"), asm.Mov.Imm(r0, 2), asm.Ja.Label("end"),
			asm.Mov.Imm(r0, 1).WithSymbol("out"), asm.Mov.Reg(r0, r0).WithSymbol("end")}), 2, opMovRJeqI, 2, "", sandbox.Limits{}},
		{"mov+jgt is unsigned", cat(asm.Instructions{asm.Mov.Imm(r0, 0), asm.Mov.Imm(r1, -1), asm.Mov.Imm(r2, 1),
			asm.Mov.Reg(r3, r1), asm.JGT.Reg(r3, r2, "out"), asm.Mov.Imm(r0, 2), asm.Ja.Label("end"),
			asm.Mov.Imm(r0, 1).WithSymbol("out"), asm.Mov.Reg(r0, r0).WithSymbol("end")}), 3, opMovRJgtR, 1, "", sandbox.Limits{}},
		{"mov+jgt aliased, not taken", cat(asm.Instructions{asm.Mov.Imm(r0, 0), asm.Mov.Imm(r1, 5), asm.Mov.Imm(r2, 9),
			asm.Mov.Reg(r1, r2), asm.JGT.Reg(r1, r2, "out"), asm.Mov.Imm(r0, 2), asm.Ja.Label("end"),
			asm.Mov.Imm(r0, 1).WithSymbol("out"), asm.Mov.Reg(r0, r0).WithSymbol("end")}), 3, opMovRJgtR, 2, "", sandbox.Limits{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := link("pushdown", "", tc.insns, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.code[tc.at].op; got != tc.fused {
				t.Fatalf("instruction %d: opcode %d, want the fused %d", tc.at, got, tc.fused)
			}
			got, err := runRaw(t, tc.insns, tc.lim)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), "instruction "+tc.err) {
					t.Fatalf("got %#x, %v; want the error %q", got, err, "instruction "+tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case got != tc.want:
				t.Fatalf("got %#x, want %#x", got, tc.want)
			}
		})
	}
}
