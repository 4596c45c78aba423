package ebpf

import (
	"slices"

	"github.com/cilium/ebpf/asm"
)

// The tables below are the one list of BPF's two-operand ALU operations
// and conditional jumps that decode and the wasm translator both read: an
// operation added here is decoded and translated. The interpreter keeps a
// case per opcode in its own switch, because that switch is its hot loop:
// Go compiles a switch over the dense op to a jump table with each case's
// code inline, where a table of functions would cost an indirect call
// per instruction.

// aluKind is how the translator computes an ALU operation.
type aluKind uint8

const (
	aluBin aluKind = iota // one wasm instruction on both operands
	aluDiv                // division or modulo, with the kernel's rules for a zero divisor and signed overflow
	aluMov                // the source operand itself
)

// aluOp is one two-operand ALU operation. Its interpreter opcodes are the
// immediate forms op64 and op32; the register form of each is the next
// opcode.
type aluOp struct {
	bpf         asm.ALUOp
	op64, op32  op
	kind        aluKind
	w64, w32    byte // aluBin: the wasm instruction
	signed, rem bool // aluDiv: signed division; modulo rather than quotient
}

var aluOps = [...]aluOp{
	{bpf: asm.Add, op64: opAddI, op32: opAdd32I, w64: wI64Add, w32: wI32Add},
	{bpf: asm.Sub, op64: opSubI, op32: opSub32I, w64: wI64Sub, w32: wI32Sub},
	{bpf: asm.Mul, op64: opMulI, op32: opMul32I, w64: wI64Mul, w32: wI32Mul},
	{bpf: asm.Div, op64: opDivI, op32: opDiv32I, kind: aluDiv},
	{bpf: asm.SDiv, op64: opSDivI, op32: opSDiv32I, kind: aluDiv, signed: true},
	{bpf: asm.Mod, op64: opModI, op32: opMod32I, kind: aluDiv, rem: true},
	{bpf: asm.SMod, op64: opSModI, op32: opSMod32I, kind: aluDiv, signed: true, rem: true},
	{bpf: asm.Or, op64: opOrI, op32: opOr32I, w64: wI64Or, w32: wI32Or},
	{bpf: asm.And, op64: opAndI, op32: opAnd32I, w64: wI64And, w32: wI32And},
	{bpf: asm.Xor, op64: opXorI, op32: opXor32I, w64: wI64Xor, w32: wI32Xor},
	// wasm masks shift counts to the operand's width, as BPF does.
	{bpf: asm.LSh, op64: opLshI, op32: opLsh32I, w64: wI64Shl, w32: wI32Shl},
	{bpf: asm.RSh, op64: opRshI, op32: opRsh32I, w64: wI64ShrU, w32: wI32ShrU},
	{bpf: asm.ArSh, op64: opArshI, op32: opArsh32I, w64: wI64ShrS, w32: wI32ShrS},
	{bpf: asm.Mov, op64: opMovI, op32: opMov32I, kind: aluMov},
}

// aluByBPF returns the table's entry for a BPF ALU operation, or nil.
func aluByBPF(a asm.ALUOp) *aluOp {
	for i := range aluOps {
		if aluOps[i].bpf == a {
			return &aluOps[i]
		}
	}
	return nil
}

// aluOf returns the table's entry for interpreter opcode o (nil if o is
// none of them), whether o is the 32-bit form and whether it takes the
// immediate.
func aluOf(o op) (a *aluOp, is32, imm bool) {
	for i := range aluOps {
		a := &aluOps[i]
		switch o {
		case a.op64, a.op64 + 1:
			return a, false, o == a.op64
		case a.op32, a.op32 + 1:
			return a, true, o == a.op32
		}
	}
	return nil, false, false
}

// condJump is one conditional jump: taken when dst OP src (jset: when
// dst & src is not 0).
type condJump struct {
	bpf      asm.JumpOp
	w64, w32 byte // the wasm comparison (jset: and)
	set      bool // jset: taken when the and is not 0
}

// condJumps are in the order of the interpreter's opcodes: entry k is
// opJeqI+2k (then its register form), and opJeq32I+2k in the JMP32
// class.
var condJumps = [...]condJump{
	{asm.JEq, wI64Eq, wI32Eq, false},
	{asm.JGT, wI64GtU, wI32GtU, false},
	{asm.JGE, wI64GeU, wI32GeU, false},
	{asm.JLT, wI64LtU, wI32LtU, false},
	{asm.JLE, wI64LeU, wI32LeU, false},
	{asm.JSet, wI64And, wI32And, true},
	{asm.JNE, wI64Ne, wI32Ne, false},
	{asm.JSGT, wI64GtS, wI32GtS, false},
	{asm.JSGE, wI64GeS, wI32GeS, false},
	{asm.JSLT, wI64LtS, wI32LtS, false},
	{asm.JSLE, wI64LeS, wI32LeS, false},
}

// condJumpOp returns the interpreter opcode of condJumps[k]'s form.
func condJumpOp(k int, is32, reg bool) op {
	o := opJeqI + op(2*k)
	if is32 {
		o += opJeq32I - opJeqI
	}
	if reg {
		o++
	}
	return o
}

// condJumpOf returns the condJumps entry of conditional jump opcode o
// (opJeqI..opJsle32R), whether o is the JMP32 form, and whether it
// compares with the immediate.
func condJumpOf(o op) (j *condJump, is32, imm bool) {
	i := int(o - opJeqI)
	if is32 = o >= opJeq32I; is32 {
		i = int(o - opJeq32I)
	}
	return &condJumps[i/2], is32, i%2 == 0
}

// fusedOps are the interpreter's superinstructions: pairs of adjacent
// instructions it runs as one, saving a dispatch, because clang emits
// them back to back in loops (BPF-KV's node scans and value copy:
// functions/src/btree_lookup.c). The first of each pair never jumps, so
// the second always follows it.
var fusedOps = [...]struct{ first, second, fused op }{
	{opMovR, opAddR, opMovRAddR},   // a = b + c
	{opAddI, opMovR, opAddIMovR},   // p += 8; a = b
	{opAddI, opJneI, opAddIJneI},   // a loop's latch: i++; if i != n
	{opAddI, opJltI, opAddIJltI},   // i++; if j < n
	{opLdxDW, opMovR, opLdxDWMovR}, // k = *p; a = b
	{opMovR, opLdxDW, opMovRLdxDW}, // a = b; k = *p
	{opMovR, opJeqI, opMovRJeqI},   // a = b; if k == c
	{opMovR, opJgtR, opMovRJgtR},   // a = b; if k > key
}

// fuse returns the interpreter's code for insns: a copy in which the
// first instruction of every pair in fusedOps has the fused opcode. Every
// other field stays the first instruction's, and the second instruction
// stays as it was, both for the fused op to read and for jumps to it.
// Nothing else reads the fused opcodes: the verifier, error messages and
// the translation to wasm keep to insns.
func fuse(insns []insn) []insn {
	code := slices.Clone(insns)
	for i := 0; i+1 < len(insns); i++ {
		for _, f := range fusedOps {
			if insns[i].op == f.first && insns[i+1].op == f.second {
				code[i].op = f.fused
				break
			}
		}
	}
	return code
}
