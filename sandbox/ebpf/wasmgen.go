package ebpf

import (
	"encoding/binary"
	"math"

	"github.com/nearstore/nearstore/internal/leb128"
)

// Translation of a verified program into WebAssembly, which wazero
// compiles to native code (wasmrun.go runs it). The translation keeps
// every run-time check the interpreter makes, as code:
//
//   - every load and store goes through the region table at the bottom of
//     linear memory (below): the address's top 32 bits pick the region,
//     the offset must lie inside the region's length, and a store needs a
//     writable region or one of the writable context fields. Anything else
//     calls the host's fault, which builds the interpreter's message, and
//     traps. The program's registers are locals, so it reaches linear
//     memory only through these checks;
//   - each basic block adds its length to the instruction count on entry,
//     and when the count passes the next check point the host checks the
//     instruction budget, the caller's context and the clock, as the
//     interpreter does every clockEvery instructions;
//   - each taken backward jump counts against MaxBackJumps;
//   - division and modulo by zero give the kernel's results, and signed
//     overflow wraps as in Go (wasm would trap).
//
// Programs with BPF-to-BPF calls or helper calls are not translated; the
// interpreter runs them.

// Linear memory layout of a translated program's instance. The region
// table holds, for region i at tableEntry*i: the low 32 bits of the
// region's virtual base (vlo), its length, its address in linear memory
// (wbase) and its permission (perm*), each a u32. Region 0 has length 0,
// so an unmapped address always faults.
const (
	tableEntry  = 16
	tableSize   = tableEntry * numRegions
	memCtx      = 128
	memScratch  = 512
	memStack    = memScratch + sandbox_ScratchSize
	memRodata   = memStack + frameSize
	wasmPage    = 65536
	maxWasmPage = 65536
)

// sandbox_ScratchSize is sandbox.ScratchSize, as a constant this file can
// use without importing sandbox for one number.
const sandbox_ScratchSize = 4096

// Host functions a translated program imports (module "ebpf").
const (
	hostModuleName = "ebpf"
	hostFault      = "fault" // (insn i32, addr i64): a bad access; traps after
	hostCheck      = "check" // (insn i32, executed i64) -> next check point, or -1: stop
	hostBackJumps  = "back"  // (insn i32): over MaxBackJumps; traps after
)

// Wasm opcodes used.
const (
	wUnreachable = 0x00
	wBlock       = 0x02
	wLoop        = 0x03
	wIf          = 0x04
	wElse        = 0x05
	wEnd         = 0x0b
	wBr          = 0x0c
	wBrIf        = 0x0d
	wBrTable     = 0x0e
	wReturn      = 0x0f
	wCall        = 0x10
	wLocalGet    = 0x20
	wLocalSet    = 0x21
	wLocalTee    = 0x22
	wI32Load     = 0x28
	wI64Load     = 0x29
	wI64Load8S   = 0x30
	wI64Load8U   = 0x31
	wI64Load16S  = 0x32
	wI64Load16U  = 0x33
	wI64Load32S  = 0x34
	wI64Load32U  = 0x35
	wI64Store    = 0x37
	wI64Store8   = 0x3c
	wI64Store16  = 0x3d
	wI64Store32  = 0x3e
	wI32Const    = 0x41
	wI64Const    = 0x42
	wI32Eqz      = 0x45
	wI32Eq       = 0x46
	wI32Ne       = 0x47
	wI32LtS      = 0x48
	wI32LtU      = 0x49
	wI32GtS      = 0x4a
	wI32GtU      = 0x4b
	wI32LeS      = 0x4c
	wI32LeU      = 0x4d
	wI32GeS      = 0x4e
	wI32GeU      = 0x4f
	wI64Eqz      = 0x50
	wI64Eq       = 0x51
	wI64Ne       = 0x52
	wI64LtS      = 0x53
	wI64LtU      = 0x54
	wI64GtS      = 0x55
	wI64GtU      = 0x56
	wI64LeS      = 0x57
	wI64LeU      = 0x58
	wI64GeS      = 0x59
	wI64GeU      = 0x5a
	wI32Add      = 0x6a
	wI32Sub      = 0x6b
	wI32Mul      = 0x6c
	wI32DivS     = 0x6d
	wI32DivU     = 0x6e
	wI32RemS     = 0x6f
	wI32RemU     = 0x70
	wI32And      = 0x71
	wI32Or       = 0x72
	wI32Xor      = 0x73
	wI32Shl      = 0x74
	wI32ShrS     = 0x75
	wI32ShrU     = 0x76
	wI64Add      = 0x7c
	wI64Sub      = 0x7d
	wI64Mul      = 0x7e
	wI64DivS     = 0x7f
	wI64DivU     = 0x80
	wI64RemS     = 0x81
	wI64RemU     = 0x82
	wI64And      = 0x83
	wI64Or       = 0x84
	wI64Xor      = 0x85
	wI64Shl      = 0x86
	wI64ShrS     = 0x87
	wI64ShrU     = 0x88
	wI32WrapI64  = 0xa7
	wI64ExtI32U  = 0xad
	wI32Ext8S    = 0xc0
	wI32Ext16S   = 0xc1
	wI64Ext8S    = 0xc2
	wI64Ext16S   = 0xc3
	wI64Ext32S   = 0xc4
	wTypeI32     = 0x7f
	wTypeI64     = 0x7e
	wTypeVoid    = 0x40
)

// Locals of the translated function. Parameters 0-4 are R1-R5.
const (
	locR0      = 5
	locR6      = 6 // R6-R10 are 6-10
	locAddr    = 11
	locOff     = 12
	locExec    = 13
	locCheckAt = 14
	locBack    = 15
	locPC      = 16 // i32
	locTab     = 17 // i32
	numI64Loc  = 11 // R0, R6-R10, addr, off, exec, checkAt, back
	numI32Loc  = 2
)

// Imported function indices; the program is function 3.
const (
	fnFault = 0
	fnCheck = 1
	fnBack  = 2
)

func regLocal(r uint8) uint32 {
	switch {
	case r == 0:
		return locR0
	case r <= 5:
		return uint32(r) - 1
	}
	return uint32(r)
}

// translatable reports whether p can be translated: no calls, no helpers.
func translatable(p *program) bool {
	for i := range p.insns {
		switch p.insns[i].op {
		case opCall, opHelper:
			return false
		}
	}
	return true
}

// code is a function body under construction.
type code []byte

func (c *code) op(b ...byte) { *c = append(*c, b...) }
func (c *code) u32(v uint32) { *c = leb128.AppendUint(*c, uint64(v)) }
func (c *code) get(l uint32) { c.op(wLocalGet); c.u32(l) }
func (c *code) set(l uint32) { c.op(wLocalSet); c.u32(l) }
func (c *code) tee(l uint32) { c.op(wLocalTee); c.u32(l) }
func (c *code) i32(v int32)  { c.op(wI32Const); *c = leb128.AppendInt(*c, int64(v)) }
func (c *code) i64(v int64)  { c.op(wI64Const); *c = leb128.AppendInt(*c, v) }
func (c *code) call(f uint32) {
	c.op(wCall)
	c.u32(f)
}

// operand pushes an instruction's second operand: the immediate, or
// local s; its low 32 bits when is32.
func (c *code) operand(s uint32, imm uint64, useImm, is32 bool) {
	switch {
	case useImm && is32:
		c.i32(int32(uint32(imm)))
	case useImm:
		c.i64(int64(imm))
	case is32:
		c.get(s)
		c.op(wI32WrapI64)
	default:
		c.get(s)
	}
}

// mem emits a memory instruction with alignment hint 0 and offset off.
func (c *code) mem(op byte, off uint32) {
	c.op(op, 0)
	c.u32(off)
}

func appendName(b []byte, s string) []byte {
	b = leb128.AppendUint(b, uint64(len(s)))
	return append(b, s...)
}

func appendSection(b []byte, id byte, body []byte) []byte {
	b = append(b, id)
	b = leb128.AppendUint(b, uint64(len(body)))
	return append(b, body...)
}

// sizeOf returns the access size of a load or store.
func sizeOf(o op) uint64 {
	switch o {
	case opLdxB, opLdxSB, opStB, opStxB:
		return 1
	case opLdxH, opLdxSH, opStH, opStxH:
		return 2
	case opLdxW, opLdxSW, opStW, opStxW:
		return 4
	}
	return 8
}

func isStore(o op) bool { return o >= opStB && o <= opStxDW }
func isJump(o op) bool  { return o >= opJa && o <= opJsle32R }

// translate returns p as a wasm module exporting "memory" (minPages to
// maxPages) and "run" (i64 × 5) -> i64, where the arguments are R1-R5
// and the result R0. lim gives the budgets, fixed at translation.
func translate(p *program, minPages, maxPages uint32, maxInsns, maxBack uint64) []byte {
	n := len(p.insns)
	// Basic blocks: leaders are 0, jump targets, and what follows a jump
	// or exit.
	leader := make([]bool, n+1)
	leader[0] = true
	for i := range p.insns {
		d := &p.insns[i]
		if isJump(d.op) {
			leader[d.off] = true
			leader[i+1] = true
		} else if d.op == opExit {
			leader[i+1] = true
		}
	}
	blockOf := make([]int, n+1)
	var starts []int
	for i := 0; i < n; i++ {
		if leader[i] {
			starts = append(starts, i)
		}
		blockOf[i] = len(starts) - 1
	}
	nb := len(starts)

	var c code
	// Prologue: R10, the budgets' state, pc = 0.
	c.i64(int64(stackAddr + stackSize))
	c.set(10)
	c.i64(int64(min(maxInsns, clockEvery)))
	c.set(locCheckAt)
	c.op(wLoop, wTypeVoid)
	for range nb {
		c.op(wBlock, wTypeVoid)
	}
	c.get(locPC)
	c.op(wBrTable)
	c.u32(uint32(nb))
	for k := range nb {
		c.u32(uint32(k))
	}
	c.u32(0)
	for b := range nb {
		c.op(wEnd) // end of E_b: block b's code follows
		start := starts[b]
		end := n
		if b+1 < nb {
			end = starts[b+1]
		}
		// Count the block's instructions; check the budgets when past
		// the check point.
		c.get(locExec)
		c.i64(int64(end - start))
		c.op(wI64Add)
		c.tee(locExec)
		c.get(locCheckAt)
		c.op(wI64GtU, wIf, wTypeVoid)
		c.i32(int32(start))
		c.get(locExec)
		c.call(fnCheck)
		c.tee(locCheckAt)
		c.i64(0)
		c.op(wI64LtS, wIf, wTypeVoid, wUnreachable, wEnd)
		c.op(wEnd)
		// depth from inside block b's code to E_k is k-b-1; to the
		// loop, nb-1-b.
		for i := start; i < end; i++ {
			emitInsn(&c, p, i, b, nb, blockOf, maxBack)
		}
	}
	c.op(wEnd) // loop
	c.op(wUnreachable)
	c.op(wEnd) // function

	// The function body: locals then code.
	var body []byte
	body = leb128.AppendUint(body, 2)
	body = leb128.AppendUint(body, numI64Loc)
	body = append(body, wTypeI64)
	body = leb128.AppendUint(body, numI32Loc)
	body = append(body, wTypeI32)
	body = append(body, c...)

	m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	// Types: 0 run (i64×5)->i64; 1 fault (i32 i64)->(); 2 check
	// (i32 i64)->i64; 3 back (i32)->().
	var ty []byte
	ty = leb128.AppendUint(ty, 4)
	ty = append(ty, 0x60, 5, wTypeI64, wTypeI64, wTypeI64, wTypeI64, wTypeI64, 1, wTypeI64)
	ty = append(ty, 0x60, 2, wTypeI32, wTypeI64, 0)
	ty = append(ty, 0x60, 2, wTypeI32, wTypeI64, 1, wTypeI64)
	ty = append(ty, 0x60, 1, wTypeI32, 0)
	m = appendSection(m, 1, ty)
	var im []byte
	im = leb128.AppendUint(im, 3)
	for i, name := range []string{hostFault, hostCheck, hostBackJumps} {
		im = appendName(im, hostModuleName)
		im = appendName(im, name)
		im = append(im, 0x00)
		im = leb128.AppendUint(im, uint64(i+1))
	}
	m = appendSection(m, 2, im)
	m = appendSection(m, 3, []byte{1, 0})
	var mem []byte
	mem = append(mem, 1, 0x01)
	mem = leb128.AppendUint(mem, uint64(minPages))
	mem = leb128.AppendUint(mem, uint64(maxPages))
	m = appendSection(m, 5, mem)
	var ex []byte
	ex = leb128.AppendUint(ex, 2)
	ex = appendName(ex, "run")
	ex = append(ex, 0x00, 3)
	ex = appendName(ex, "memory")
	ex = append(ex, 0x02, 0)
	m = appendSection(m, 7, ex)
	var cs []byte
	cs = leb128.AppendUint(cs, 1)
	cs = leb128.AppendUint(cs, uint64(len(body)))
	cs = append(cs, body...)
	return appendSection(m, 10, cs)
}

// emitInsn emits instruction i, in block b of nb.
func emitInsn(c *code, p *program, i, b, nb int, blockOf []int, maxBack uint64) {
	ins := &p.insns[i]
	d, s := regLocal(ins.dst&15), regLocal(ins.src&15)
	imm := int64(ins.imm)
	src64 := func(useImm bool) { c.operand(s, ins.imm, useImm, false) }
	src32 := func(useImm bool) { c.operand(s, ins.imm, useImm, true) }
	// bin64 emits rd = rd OP (imm or rs).
	bin64 := func(w byte, useImm bool) {
		c.get(d)
		src64(useImm)
		c.op(w)
		c.set(d)
	}
	// bin32 emits rd = uint32(rd) OP uint32(imm or rs), zero-extended.
	bin32 := func(w byte, useImm bool) {
		c.get(d)
		c.op(wI32WrapI64)
		src32(useImm)
		c.op(w, wI64ExtI32U)
		c.set(d)
	}
	// div emits the kernel's division rules: x/0 = 0, x%0 = x; signed
	// MinInt/-1 wraps (wasm would trap). The 32-bit forms divide the low
	// halves and zero-extend the result; locAddr holds the divisor,
	// zero-extended, in both.
	div := func(is32, useImm, signed, rem bool) {
		ty, minus1, sub := byte(wTypeI64), int64(-1), byte(wI64Sub)
		ops := [4]byte{wI64DivU, wI64RemU, wI64DivS, wI64RemS}
		dst := func() { c.get(d) }
		zero := func() { c.i64(0) }
		if is32 {
			ty, minus1, sub = wTypeI32, 0xffffffff, wI32Sub
			ops = [4]byte{wI32DivU, wI32RemU, wI32DivS, wI32RemS}
			dst = func() { c.get(d); c.op(wI32WrapI64) }
			zero = func() { c.i32(0) }
		}
		c.operand(s, ins.imm, useImm, is32)
		if is32 {
			c.op(wI64ExtI32U)
		}
		c.set(locAddr)
		c.get(locAddr)
		c.op(wI64Eqz, wIf, ty)
		if rem {
			dst()
		} else {
			zero()
		}
		c.op(wElse)
		if signed {
			c.get(locAddr)
			c.i64(minus1)
			c.op(wI64Eq, wIf, ty)
			zero()
			if !rem {
				dst()
				c.op(sub)
			}
			c.op(wElse)
		}
		dst()
		c.get(locAddr)
		if is32 {
			c.op(wI32WrapI64)
		}
		k := 0
		if rem {
			k++
		}
		if signed {
			k += 2
		}
		c.op(ops[k])
		if signed {
			c.op(wEnd)
		}
		c.op(wEnd)
		if is32 {
			c.op(wI64ExtI32U)
		}
		c.set(d)
	}
	// bswap emits rd = the low n bytes of rd in reverse order.
	bswap := func(nBytes int) {
		for k := range nBytes {
			c.get(d)
			if k > 0 {
				c.i64(int64(8 * k))
				c.op(wI64ShrU)
			}
			c.i64(0xff)
			c.op(wI64And)
			if sh := 8 * (nBytes - 1 - k); sh > 0 {
				c.i64(int64(sh))
				c.op(wI64Shl)
			}
			if k > 0 {
				c.op(wI64Or)
			}
		}
		c.set(d)
	}
	if a, is32, useImm := aluOf(ins.op); a != nil {
		switch {
		case a.kind == aluDiv:
			div(is32, useImm, a.signed, a.rem)
		case a.kind == aluMov && is32:
			src32(useImm)
			c.op(wI64ExtI32U)
			c.set(d)
		case a.kind == aluMov:
			src64(useImm)
			c.set(d)
		case is32:
			bin32(a.w32, useImm)
		default:
			bin64(a.w64, useImm)
		}
		return
	}
	switch o := ins.op; o {
	case opNeg:
		c.i64(0)
		c.get(d)
		c.op(wI64Sub)
		c.set(d)
	case opMovSX8, opMovSX16, opMovSX32:
		c.get(s)
		c.op(map[op]byte{opMovSX8: wI64Ext8S, opMovSX16: wI64Ext16S, opMovSX32: wI64Ext32S}[o])
		c.set(d)
	case opNeg32:
		c.i32(0)
		c.get(d)
		c.op(wI32WrapI64, wI32Sub, wI64ExtI32U)
		c.set(d)
	case opMovSX8x32, opMovSX16x32:
		c.get(s)
		c.op(wI32WrapI64)
		if o == opMovSX8x32 {
			c.op(wI32Ext8S)
		} else {
			c.op(wI32Ext16S)
		}
		c.op(wI64ExtI32U)
		c.set(d)
	case opLe16:
		c.get(d)
		c.i64(0xffff)
		c.op(wI64And)
		c.set(d)
	case opLe32:
		c.get(d)
		c.i64(math.MaxUint32)
		c.op(wI64And)
		c.set(d)
	case opLe64:
	case opBe16:
		bswap(2)
	case opBe32:
		bswap(4)
	case opBe64:
		bswap(8)
	case opLdDW:
		c.i64(imm)
		c.set(d)
	case opLdxB, opLdxH, opLdxW, opLdxDW, opLdxSB, opLdxSH, opLdxSW:
		emitAddr(c, i, s, ins.off, sizeOf(o), false)
		c.mem(map[op]byte{opLdxB: wI64Load8U, opLdxH: wI64Load16U, opLdxW: wI64Load32U, opLdxDW: wI64Load,
			opLdxSB: wI64Load8S, opLdxSH: wI64Load16S, opLdxSW: wI64Load32S}[o], 0)
		c.set(d)
	case opStB, opStH, opStW, opStDW, opStxB, opStxH, opStxW, opStxDW:
		emitAddr(c, i, d, ins.off, sizeOf(o), true)
		if o >= opStxB {
			c.get(s)
		} else {
			c.i64(imm)
		}
		c.mem(map[uint64]byte{1: wI64Store8, 2: wI64Store16, 4: wI64Store32, 8: wI64Store}[sizeOf(o)], 0)
	case opExit:
		c.get(locR0)
		c.op(wReturn)
	default:
		if !isJump(o) {
			// translatable refused calls and helpers; the verifier
			// everything else.
			c.op(wUnreachable)
			return
		}
		emitJump(c, p, i, b, nb, blockOf, maxBack, d, s)
	}
}

// emitJump emits instruction i, a jump in block b.
func emitJump(c *code, p *program, i, b, nb int, blockOf []int, maxBack uint64, d, s uint32) {
	ins := &p.insns[i]
	t := int(ins.off)
	cond := ins.op != opJa
	if cond {
		j, is32, useImm := condJumpOf(ins.op)
		c.get(d)
		if is32 {
			c.op(wI32WrapI64)
			c.operand(s, ins.imm, useImm, true)
			c.op(j.w32)
			if j.set {
				c.i32(0)
				c.op(wI32Ne)
			}
		} else {
			c.operand(s, ins.imm, useImm, false)
			c.op(j.w64)
			if j.set {
				c.i64(0)
				c.op(wI64Ne)
			}
		}
	}
	if t > i {
		// Forward: straight to the target block.
		depth := uint32(blockOf[t] - b - 1)
		if cond {
			c.op(wBrIf)
		} else {
			c.op(wBr)
		}
		c.u32(depth)
		return
	}
	// Backward: count it, then through the dispatch loop.
	if cond {
		c.op(wIf, wTypeVoid)
	}
	c.get(locBack)
	c.i64(1)
	c.op(wI64Add)
	c.tee(locBack)
	c.i64(int64(min(maxBack, math.MaxInt64)))
	c.op(wI64GtU, wIf, wTypeVoid)
	c.i32(int32(i))
	c.call(fnBack)
	c.op(wUnreachable, wEnd)
	c.i32(int32(blockOf[t]))
	c.set(locPC)
	c.op(wBr)
	depth := uint32(nb - 1 - b)
	if cond {
		depth++ // inside the if
	}
	c.u32(depth)
	if cond {
		c.op(wEnd)
	}
}

// emitAddr emits the checked translation of the access at reg+off of
// size bytes by instruction i, leaving its linear-memory address (i32)
// on the stack.
func emitAddr(c *code, i int, reg uint32, off int32, size uint64, store bool) {
	// addr = reg + off
	c.get(reg)
	if off != 0 {
		c.i64(int64(off))
		c.op(wI64Add)
	}
	c.tee(locAddr)
	// region = addr >> 32, which must be < numRegions
	c.i64(32)
	c.op(wI64ShrU)
	c.tee(locOff)
	c.i64(numRegions)
	c.op(wI64GeU, wIf, wTypeVoid)
	emitFault(c, i)
	c.op(wEnd)
	c.get(locOff)
	c.op(wI32WrapI64)
	c.i32(4) // log2(tableEntry)
	c.op(wI32Shl)
	c.set(locTab)
	// off = uint32(addr) - vlo, as a signed 64-bit number
	c.get(locAddr)
	c.i64(math.MaxUint32)
	c.op(wI64And)
	c.get(locTab)
	c.mem(wI64Load32U, 0)
	c.op(wI64Sub)
	c.tee(locOff)
	// fault unless 0 <= off and off + size <= len
	c.i64(0)
	c.op(wI64LtS)
	c.get(locOff)
	c.i64(int64(size))
	c.op(wI64Add)
	c.get(locTab)
	c.mem(wI64Load32U, 4)
	c.op(wI64GtS)
	c.op(wI32Or, wIf, wTypeVoid)
	emitFault(c, i)
	c.op(wEnd)
	if store {
		// A store needs perm RW, or ctx and a writable field.
		c.get(locTab)
		c.mem(wI32Load, 12)
		c.i32(int32(permRW))
		c.op(wI32Ne, wIf, wTypeVoid)
		c.get(locTab)
		c.mem(wI32Load, 12)
		c.i32(int32(permCtx))
		c.op(wI32Ne)
		// !ctxWritable(off, size), as in the interpreter
		fieldIn := func(lo, hi int64) {
			c.get(locOff)
			c.i64(lo)
			c.op(wI64GeS)
			c.get(locOff)
			c.i64(int64(size))
			c.op(wI64Add)
			c.i64(hi)
			c.op(wI64LeS)
			c.op(wI32And)
		}
		fieldIn(ctxDone, ctxDone+4)
		fieldIn(ctxNextAddr, ctxScratch)
		c.op(wI32Or)
		fieldIn(ctxNextFile, ctxNextFileEnd)
		c.op(wI32Or, wI32Eqz)
		c.op(wI32Or, wIf, wTypeVoid)
		emitFault(c, i)
		c.op(wEnd)
		c.op(wEnd)
	}
	c.get(locTab)
	c.mem(wI32Load, 8)
	c.get(locOff)
	c.op(wI32WrapI64, wI32Add)
}

func emitFault(c *code, i int) {
	c.i32(int32(i))
	c.get(locAddr)
	c.call(fnFault)
	c.op(wUnreachable)
}

// putTable writes region r's entry of the table at the bottom of mem.
func putTable(mem []byte, r int, vlo, length, wbase uint32, perm uint8) {
	e := mem[r*tableEntry : (r+1)*tableEntry]
	binary.LittleEndian.PutUint32(e[0:], vlo)
	binary.LittleEndian.PutUint32(e[4:], length)
	binary.LittleEndian.PutUint32(e[8:], wbase)
	binary.LittleEndian.PutUint32(e[12:], uint32(perm))
}
