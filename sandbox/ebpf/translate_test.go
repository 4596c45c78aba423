package ebpf

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/nearstore/nearstore/sandbox"
)

// TestTranslated: compute entries without calls are translated to wasm,
// pushdown entries only with Options.TranslatePushdown, and
// Options.Interpreter turns translation off.
func TestTranslated(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"stats64.o", "xrp_agg.o", "compute_xrp.o"} {
		m, err := NewRuntime(Options{TranslatePushdown: true}).Load(ctx, readObj(t, name), sandbox.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		mod := m.(*module)
		if (mod.pushdown != nil) != (mod.pushT != nil) || (mod.compute != nil) != (mod.compT != nil) {
			t.Errorf("%s: not translated", name)
		}
		m, err = NewRuntime(Options{}).Load(ctx, readObj(t, name), sandbox.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if mod := m.(*module); mod.pushT != nil || (mod.compute != nil) != (mod.compT != nil) {
			t.Errorf("%s: by default, want compute translated and pushdown interpreted", name)
		}
		mi, err := NewRuntime(Options{Interpreter: true}).Load(ctx, readObj(t, name), sandbox.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if mi.(*module).pushT != nil || mi.(*module).compT != nil {
			t.Errorf("%s: translated with Options.Interpreter", name)
		}
	}
	// Calls and helpers stay in the interpreter.
	m, err := NewRuntime(Options{TranslatePushdown: true}).Load(ctx, readObj(t, "calls.o"), sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if mod := m.(*module); mod.pushT != nil || mod.compT != nil {
		t.Error("calls.o translated")
	}
}

// outcome is what one run of a program did, for comparing the engines.
type outcome struct {
	r0      uint64
	err     error
	done    bool
	next    []sandbox.Next
	scratch []byte
	out     []byte
}

// runEngine runs insns as entry in rt's engine on fixed inputs.
func runEngine(t *testing.T, rt *Runtime, insns asm.Instructions, entry string, lim sandbox.Limits) (outcome, bool) {
	m, err := rt.loadInstructions(insns, entry, lim)
	if err != nil {
		if !errors.Is(err, sandbox.ErrBadModule) {
			t.Fatalf("verifier: %v", err)
		}
		return outcome{}, false
	}
	defer m.Close(context.Background())
	ctx := context.Background()
	inst, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Release()
	in := inst.(*instance)
	var o outcome
	fill := func(b []byte, seed byte) {
		for i := range b {
			b[i] = seed + byte(i*7)
		}
	}
	fill(in.Scratch(), 3)
	if entry == "pushdown" {
		d, err := in.Data(100)
		if err != nil {
			t.Fatal(err)
		}
		fill(d, 1)
		o.done, o.next, o.err = in.Step(ctx, 2, 4096, 100)
	} else {
		ib, err := in.Input(40)
		if err != nil {
			t.Fatal(err)
		}
		fill(ib, 5)
		ob, err := in.Output(24)
		if err != nil {
			t.Fatal(err)
		}
		fill(ob, 9)
		n, err := in.Compute(ctx, 40, 24)
		o.r0, o.err = uint64(n), err
		ob, _ = in.Output(24)
		o.out = append([]byte(nil), ob...)
	}
	o.scratch = append([]byte(nil), in.Scratch()...)
	return o, true
}

// FuzzTranslation runs random programs the verifier accepts both in the
// interpreter and translated to wasm, and wants the same result, the same
// error (the same message for a memory fault) and the same scratch and
// output. Budget errors may differ at the edge (the interpreter counts
// instructions when control transfers, the translation when a block is
// entered), so a run where either ran out of budget is not compared.
func FuzzTranslation(f *testing.F) {
	for _, p := range seedPrograms() {
		f.Add(marshal(f, p))
	}
	for _, p := range translationSeeds() {
		f.Add(marshal(f, p))
	}
	interp := NewRuntime(Options{Interpreter: true})
	wasm := NewRuntime(Options{TranslatePushdown: true})
	defer wasm.Close(context.Background())
	lim := fuzzLimits()
	f.Fuzz(func(t *testing.T, code []byte) {
		insns, ok := fuzzProgram(code)
		if !ok {
			return
		}
		for _, entry := range []string{"pushdown", "compute"} {
			a, ok := runEngine(t, interp, insns, entry, lim)
			if !ok {
				return
			}
			b, _ := runEngine(t, wasm, insns, entry, lim)
			if errors.Is(a.err, sandbox.ErrTimeout) || errors.Is(b.err, sandbox.ErrTimeout) {
				continue
			}
			if (a.err == nil) != (b.err == nil) || (a.err != nil && a.err.Error() != b.err.Error()) {
				t.Fatalf("%s: interpreter: %v; translated: %v", entry, a.err, b.err)
			}
			if a.r0 != b.r0 || a.done != b.done || len(a.next) != len(b.next) {
				t.Fatalf("%s: interpreter %d %v %v; translated %d %v %v", entry, a.r0, a.done, a.next, b.r0, b.done, b.next)
			}
			for i := range a.next {
				if a.next[i] != b.next[i] {
					t.Fatalf("%s: next %v, translated %v", entry, a.next, b.next)
				}
			}
			if !bytes.Equal(a.scratch, b.scratch) || !bytes.Equal(a.out, b.out) {
				t.Fatalf("%s: scratch or output differ", entry)
			}
		}
	})
}

// translationSeeds exercise what the translation does differently from
// the interpreter: every ALU and jump form, division edge cases, every
// access size, faults in each region, and the writable context fields.
func translationSeeds() []asm.Instructions {
	ldData := asm.LoadMem(r2, r1, ctxData, asm.DWord)
	ldScratch := asm.LoadMem(asm.R3, r1, ctxScratch, asm.DWord)
	var alu asm.Instructions
	alu = append(alu, ldData, ldScratch, asm.LoadMem(asm.R4, r2, 0, asm.DWord), asm.LoadImm(asm.R5, -1<<63, asm.DWord))
	for _, op := range []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.Mod, asm.Or, asm.And, asm.LSh, asm.RSh, asm.ArSh, asm.Xor, asm.Mov} {
		alu = append(alu,
			op.Imm(asm.R4, 13), op.Reg(asm.R4, r2), op.Imm32(asm.R4, -3), op.Reg32(asm.R4, asm.R5),
			op.Imm(asm.R5, -1), op.Imm32(asm.R5, 0),
			asm.StoreMem(asm.R3, 0, asm.R4, asm.DWord), asm.StoreMem(asm.R3, 8, asm.R5, asm.DWord))
	}
	alu = append(alu, asm.Neg.Reg(asm.R4, asm.R4), asm.HostTo(asm.BE, asm.R4, asm.Half), asm.HostTo(asm.BE, asm.R5, asm.Word),
		asm.HostTo(asm.BE, r2, asm.DWord), asm.HostTo(asm.LE, asm.R4, asm.Word),
		asm.StoreMem(asm.R3, 16, asm.R4, asm.DWord), asm.StoreMem(asm.R3, 24, asm.R5, asm.DWord), asm.Mov.Imm(r0, 0))
	var jumps asm.Instructions
	jumps = append(jumps, ldData, asm.LoadMem(asm.R4, r2, 8, asm.DWord), asm.Mov.Imm(r0, 0))
	for k, op := range []asm.JumpOp{asm.JEq, asm.JGT, asm.JGE, asm.JSet, asm.JNE, asm.JSGT, asm.JSGE, asm.JLT, asm.JLE, asm.JSLT, asm.JSLE} {
		l := string(rune('a' + k))
		jumps = append(jumps, op.Imm(asm.R4, 77, l), asm.Add.Imm(r0, 1<<k), op.Reg32(asm.R4, r2, l+"x").WithSymbol(l), asm.Add.Imm(r0, 1<<(k+12)), asm.Mov.Reg(r0, r0).WithSymbol(l+"x"))
	}
	jumps = append(jumps, asm.Return())
	return []asm.Instructions{
		append(alu, asm.Return()),
		jumps,
		prog(ldData, asm.LoadMem(r0, r2, 96, asm.Word), asm.LoadMem(r0, r2, 97, asm.Word)),
		prog(ldData, asm.LoadMem(r0, r2, 99, asm.Byte), asm.LoadMem(r0, r2, -1, asm.Byte)),
		prog(asm.LoadMem(r0, r10, -512, asm.DWord), asm.LoadMem(r0, r10, -513, asm.Byte)),
		prog(asm.StoreImm(r1, ctxDone, 1, asm.Word), asm.Mov.Imm(r2, 8), asm.StoreMem(r1, ctxNextAddr, r2, asm.DWord), asm.StoreImm(r1, ctxSizeField, 16, asm.Word), asm.Mov.Imm(r0, 0)),
		prog(asm.StoreImm(r1, ctxDataLen, 1, asm.Word)),
		prog(asm.StoreMem(r1, ctxScratch-4, r1, asm.DWord)),
		prog(asm.LoadMem(r0, r1, 8, asm.DWord), asm.StoreMem(asm.R3, 16, r0, asm.DWord), asm.StoreMem(asm.R3, 17, r0, asm.DWord)),
		prog(asm.LoadMem(r0, r1, 39, asm.Byte), asm.LoadMem(r0, r1, 40, asm.Byte)),
		spin(),
	}
}
