package ebpf

import (
	"math"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/nearstore/nearstore/sandbox"
)

const (
	r0 = asm.R0
	r1 = asm.R1
)

func TestALU(t *testing.T) {
	const max64 = math.MaxUint64
	minInt64 := uint64(1) << 63
	neg := func(v int64) uint64 { return uint64(v) }
	tests := []struct {
		name string
		a, b uint64 // r0 = a, r1 = b
		op   asm.Instruction
		want uint64
	}{
		// ALU64
		{"add overflow", max64, 1, asm.Add.Reg(r0, r1), 0},
		{"add imm negative", 5, 0, asm.Add.Imm(r0, -7), neg(-2)},
		{"sub underflow", 0, 1, asm.Sub.Reg(r0, r1), max64},
		{"mul overflow", minInt64, 2, asm.Mul.Reg(r0, r1), 0},
		{"mul imm", 3, 0, asm.Mul.Imm(r0, -1), neg(-3)},
		{"div", 7, 2, asm.Div.Reg(r0, r1), 3},
		{"div unsigned of negative", neg(-8), 2, asm.Div.Reg(r0, r1), uint64(1<<63) - 4},
		{"div by zero reg", 7, 0, asm.Div.Reg(r0, r1), 0},
		{"div by zero imm", 7, 0, asm.Div.Imm(r0, 0), 0},
		{"mod", 7, 3, asm.Mod.Reg(r0, r1), 1},
		{"mod by zero keeps dst", 7, 0, asm.Mod.Reg(r0, r1), 7},
		{"mod by zero imm", max64, 0, asm.Mod.Imm(r0, 0), max64},
		{"sdiv", neg(-7), 2, asm.SDiv.Reg(r0, r1), neg(-3)},
		{"sdiv min/-1", minInt64, neg(-1), asm.SDiv.Reg(r0, r1), minInt64},
		{"sdiv by zero", neg(-7), 0, asm.SDiv.Reg(r0, r1), 0},
		{"sdiv imm", neg(-9), 0, asm.SDiv.Imm(r0, -3), 3},
		{"smod", neg(-7), 2, asm.SMod.Reg(r0, r1), neg(-1)},
		{"smod min%-1", minInt64, neg(-1), asm.SMod.Reg(r0, r1), 0},
		{"smod by zero keeps dst", neg(-7), 0, asm.SMod.Reg(r0, r1), neg(-7)},
		{"or", 0xf0, 0x0f, asm.Or.Reg(r0, r1), 0xff},
		{"or imm sign-extends", 0, 0, asm.Or.Imm(r0, -1), max64},
		{"and", 0xff, 0x3c, asm.And.Reg(r0, r1), 0x3c},
		{"and imm sign-extends", max64, 0, asm.And.Imm(r0, math.MinInt32), 0xffffffff80000000},
		{"xor", 0xff, 0x0f, asm.Xor.Reg(r0, r1), 0xf0},
		{"lsh", 1, 63, asm.LSh.Reg(r0, r1), minInt64},
		{"lsh by 64 is masked to 0", 5, 64, asm.LSh.Reg(r0, r1), 5},
		{"lsh by 65 is masked to 1", 5, 65, asm.LSh.Reg(r0, r1), 10},
		{"lsh imm 64 masked", 5, 0, asm.LSh.Imm(r0, 64), 5},
		{"rsh", minInt64, 63, asm.RSh.Reg(r0, r1), 1},
		{"rsh logical", neg(-1), 60, asm.RSh.Reg(r0, r1), 0xf},
		{"arsh", neg(-8), 1, asm.ArSh.Reg(r0, r1), neg(-4)},
		{"arsh 63", minInt64, 63, asm.ArSh.Reg(r0, r1), max64},
		{"arsh by 64 masked", neg(-8), 64, asm.ArSh.Reg(r0, r1), neg(-8)},
		{"neg", 1, 0, asm.Neg.Imm(r0, 0), max64},
		{"neg min", minInt64, 0, asm.Neg.Imm(r0, 0), minInt64},
		{"mov imm sign-extends", 0, 0, asm.Mov.Imm(r0, -1), max64},
		{"mov reg", 0, 42, asm.Mov.Reg(r0, r1), 42},
		{"movsx8", 0, 0x180, asm.MovSX8.Reg(r0, r1), neg(-128)},
		{"movsx16", 0, 0x18000, asm.MovSX16.Reg(r0, r1), neg(-32768)},
		{"movsx32", 0, 0x1_8000_0000, asm.MovSX32.Reg(r0, r1), neg(math.MinInt32)},
		{"movsx8 positive", 0, 0x17f, asm.MovSX8.Reg(r0, r1), 0x7f},

		// ALU32: every result is zero-extended.
		{"add32 wraps and zero-extends", max64, 1, asm.Add.Reg32(r0, r1), 0},
		{"add32 upper bits dropped", 0x1_0000_0001, 0x2_0000_0002, asm.Add.Reg32(r0, r1), 3},
		{"sub32", 0, 1, asm.Sub.Reg32(r0, r1), 0xffffffff},
		{"mul32", 0x10000, 0x10000, asm.Mul.Reg32(r0, r1), 0},
		{"mul32 imm", 3, 0, asm.Mul.Imm32(r0, -1), 0xfffffffd},
		{"div32", 0x1_0000_0007, 2, asm.Div.Reg32(r0, r1), 3},
		{"div32 by zero", 7, 0x1_0000_0000, asm.Div.Reg32(r0, r1), 0},
		{"mod32 by zero zero-extends dst", 0xdead_0000_0005, 0, asm.Mod.Reg32(r0, r1), 5},
		{"mod32", 0x1_0000_0007, 3, asm.Mod.Reg32(r0, r1), 1},
		{"sdiv32", uint64(uint32(0xfffffff9)), 2, asm.SDiv.Reg32(r0, r1), 0xfffffffd},
		{"sdiv32 min/-1", 0x8000_0000, 0xffff_ffff, asm.SDiv.Reg32(r0, r1), 0x8000_0000},
		{"sdiv32 by zero", 5, 0, asm.SDiv.Reg32(r0, r1), 0},
		{"smod32", uint64(uint32(0xfffffff9)), 2, asm.SMod.Reg32(r0, r1), 0xffffffff},
		{"smod32 by zero", 0xffff_0000_fff9, 0, asm.SMod.Reg32(r0, r1), 0xfff9},
		{"or32", 0xffff_0000_0000_00f0, 0x0f, asm.Or.Reg32(r0, r1), 0xff},
		{"and32 imm", max64, 0, asm.And.Imm32(r0, -1), 0xffffffff},
		{"xor32", 0x1_0000_00ff, 0x0f, asm.Xor.Reg32(r0, r1), 0xf0},
		{"lsh32", 1, 31, asm.LSh.Reg32(r0, r1), 0x8000_0000},
		{"lsh32 by 32 masked", 0x1_0000_0005, 32, asm.LSh.Reg32(r0, r1), 5},
		{"rsh32", 0x1_8000_0000, 31, asm.RSh.Reg32(r0, r1), 1},
		{"arsh32", 0x8000_0000, 4, asm.ArSh.Reg32(r0, r1), 0xf800_0000},
		{"arsh32 imm", 0xffff_ffff_8000_0000, 0, asm.ArSh.Imm32(r0, 31), 0xffff_ffff},
		{"neg32", 1, 0, asm.Neg.Imm32(r0, 0), 0xffff_ffff},
		{"mov32 imm zero-extends", 0, 0, asm.Mov.Imm32(r0, -1), 0xffff_ffff},
		{"mov32 reg drops upper", 0, 0x1234_5678_9abc_def0, asm.Mov.Reg32(r0, r1), 0x9abc_def0},
		{"movsx8 32", 0, 0x80, asm.MovSX8.Reg32(r0, r1), 0xffff_ff80},
		{"movsx16 32", 0, 0x8000, asm.MovSX16.Reg32(r0, r1), 0xffff_8000},

		// Byte order.
		{"le16", 0x1122334455667788, 0, asm.HostTo(asm.LE, r0, asm.Half), 0x7788},
		{"le32", 0x1122334455667788, 0, asm.HostTo(asm.LE, r0, asm.Word), 0x55667788},
		{"le64", 0x1122334455667788, 0, asm.HostTo(asm.LE, r0, asm.DWord), 0x1122334455667788},
		{"be16", 0x1122334455667788, 0, asm.HostTo(asm.BE, r0, asm.Half), 0x8877},
		{"be32", 0x1122334455667788, 0, asm.HostTo(asm.BE, r0, asm.Word), 0x88776655},
		{"be64", 0x1122334455667788, 0, asm.HostTo(asm.BE, r0, asm.DWord), 0x8877665544332211},
		{"bswap16", 0x1122334455667788, 0, asm.BSwap(r0, asm.Half), 0x8877},
		{"bswap32", 0x1122334455667788, 0, asm.BSwap(r0, asm.Word), 0x88776655},
		{"bswap64", 0x1122334455667788, 0, asm.BSwap(r0, asm.DWord), 0x8877665544332211},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runRaw(t, prog(
				asm.LoadImm(r0, int64(tc.a), asm.DWord),
				asm.LoadImm(r1, int64(tc.b), asm.DWord),
				tc.op,
			), sandbox.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%#x, %#x: got %#x, want %#x", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestJumps(t *testing.T) {
	neg := func(v int64) uint64 { return uint64(v) }
	const big = 0x1_0000_0001 // equals 1 in 32 bits
	type jf func(dst asm.Register, v int32, label string) asm.Instruction
	type jr func(dst, src asm.Register, label string) asm.Instruction
	tests := []struct {
		name  string
		a, b  uint64
		op    asm.JumpOp
		is32  bool
		taken bool
	}{
		{"jeq", 5, 5, asm.JEq, false, true},
		{"jeq no", 5, 6, asm.JEq, false, false},
		{"jeq upper bits differ", big, 1, asm.JEq, false, false},
		{"jeq32 upper bits ignored", big, 1, asm.JEq, true, true},
		{"jne", 5, 6, asm.JNE, false, true},
		{"jne32", big, 1, asm.JNE, true, false},
		{"jgt unsigned -1 > 1", neg(-1), 1, asm.JGT, false, true},
		{"jge equal", 7, 7, asm.JGE, false, true},
		{"jlt unsigned", 1, neg(-1), asm.JLT, false, true},
		{"jle", 8, 7, asm.JLE, false, false},
		{"jsgt signed -1 > 1", neg(-1), 1, asm.JSGT, false, false},
		{"jsgt", 2, neg(-5), asm.JSGT, false, true},
		{"jsge", neg(-5), neg(-5), asm.JSGE, false, true},
		{"jslt", neg(-5), 3, asm.JSLT, false, true},
		{"jsle", 3, neg(-5), asm.JSLE, false, false},
		{"jset", 0b1010, 0b0010, asm.JSet, false, true},
		{"jset no", 0b1010, 0b0101, asm.JSet, false, false},
		{"jset32 upper ignored", 0x1_0000_0000, 0x1_0000_0000, asm.JSet, true, false},
		{"jset32 no", 0b1010, 0b0101, asm.JSet, true, false},
		{"jset32", 0x1_0000_0003, 0b0010, asm.JSet, true, true},
		{"jgt32", 0xffff_ffff, 1, asm.JGT, true, true},
		{"jsgt32 signed", 0xffff_ffff, 1, asm.JSGT, true, false},
		{"jslt32", 0x8000_0000, 0, asm.JSLT, true, true},
		{"jsge32 upper ignored", 0x7fff_ffff_0000_0000, 0, asm.JSGE, true, true},
		{"jle32", 0x5_0000_0002, 2, asm.JLE, true, true},
		{"jlt32", 0x5_0000_0002, 2, asm.JLT, true, false},
		{"jge32", 0x5_0000_0002, 3, asm.JGE, true, false},
		{"jsle32", 0xffff_fffe, 0xffff_ffff, asm.JSLE, true, true},
	}
	for _, tc := range tests {
		for _, reg := range []bool{false, true} {
			name := tc.name + "/imm"
			var j asm.Instruction
			switch {
			case reg && tc.is32:
				j = tc.op.Reg32(r0, r1, "yes")
			case reg:
				j = tc.op.Reg(r0, r1, "yes")
			case tc.is32:
				j = tc.op.Imm32(r0, int32(tc.b), "yes")
			default:
				j = tc.op.Imm(r0, int32(tc.b), "yes")
			}
			if reg {
				name = tc.name + "/reg"
			} else if uint64(int64(int32(tc.b))) != tc.b && !tc.is32 {
				continue // not representable as a sign-extended immediate
			}
			t.Run(name, func(t *testing.T) {
				got, err := runRaw(t, asm.Instructions{
					asm.LoadImm(r0, int64(tc.a), asm.DWord),
					asm.LoadImm(r1, int64(tc.b), asm.DWord),
					j,
					asm.Mov.Imm(r0, 0),
					asm.Return(),
					asm.Mov.Imm(r0, 1).WithSymbol("yes"),
					asm.Return(),
				}, sandbox.Limits{})
				if err != nil {
					t.Fatal(err)
				}
				if (got == 1) != tc.taken {
					t.Errorf("%#x vs %#x: taken=%v, want %v", tc.a, tc.b, got == 1, tc.taken)
				}
			})
		}
	}
	var _ jf = asm.JEq.Imm
	var _ jr = asm.JEq.Reg
}

func TestMemoryOps(t *testing.T) {
	// Stores and loads of every size on the stack, sign-extending loads,
	// and ST (immediate) stores.
	r10 := asm.R10
	got, err := runRaw(t, prog(
		asm.LoadImm(r1, 0x0182838485868788, asm.DWord),
		asm.StoreMem(r10, -8, r1, asm.DWord),
		asm.LoadMem(asm.R2, r10, -8, asm.Byte),   // 0x88
		asm.LoadMem(asm.R3, r10, -8, asm.Half),   // 0x8788
		asm.LoadMem(asm.R4, r10, -8, asm.Word),   // 0x85868788
		asm.LoadMemSX(asm.R5, r10, -8, asm.Byte), // -120
		// asm.StoreImm refuses DWord; the kernel (and we) accept it.
		asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: r10, Offset: -16, Constant: -2},
		asm.LoadMem(asm.R6, r10, -16, asm.DWord), // -2
		asm.StoreImm(r10, -24, 0x1234, asm.Half),
		asm.LoadMemSX(asm.R7, r10, -24, asm.Half), // 0x1234
		asm.LoadMemSX(asm.R8, r10, -8, asm.Word),  // int32(0x85868788)
		asm.Mov.Reg(r0, asm.R2),
		asm.Add.Reg(r0, asm.R3),
		asm.Add.Reg(r0, asm.R4),
		asm.Add.Reg(r0, asm.R5),
		asm.Add.Reg(r0, asm.R6),
		asm.Add.Reg(r0, asm.R7),
		asm.Add.Reg(r0, asm.R8),
	), sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	m120, m2, w := int64(-120), int64(-2), int32(-0x7a797878) // 0x85868788 as int32
	want := uint64(0x88) + 0x8788 + 0x85868788 + uint64(m120) + uint64(m2) + 0x1234 + uint64(int64(w))
	if got != want {
		t.Errorf("got %#x, want %#x", got, want)
	}
}
