package ebpf

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/nearstore/nearstore/sandbox"
)

// maxInsns is the longest program accepted, in raw 8-byte instruction slots.
const maxInsns = 4096

// Helpers a program may call.
const (
	helperKtimeGetNs  = 5
	helperTracePrintk = 6
)

// op is the interpreter's own dense opcode, so that its switch compiles to
// a jump table.
type op uint8

// Interpreter opcodes. "I" forms take the immediate, "R" forms the source
// register; "32" forms are BPF_ALU / BPF_JMP32.
const (
	opInvalid op = iota
	// ALU64
	opAddI
	opAddR
	opSubI
	opSubR
	opMulI
	opMulR
	opDivI
	opDivR
	opSDivI
	opSDivR
	opModI
	opModR
	opSModI
	opSModR
	opOrI
	opOrR
	opAndI
	opAndR
	opXorI
	opXorR
	opLshI
	opLshR
	opRshI
	opRshR
	opArshI
	opArshR
	opNeg
	opMovI
	opMovR
	opMovSX8
	opMovSX16
	opMovSX32
	// ALU32
	opAdd32I
	opAdd32R
	opSub32I
	opSub32R
	opMul32I
	opMul32R
	opDiv32I
	opDiv32R
	opSDiv32I
	opSDiv32R
	opMod32I
	opMod32R
	opSMod32I
	opSMod32R
	opOr32I
	opOr32R
	opAnd32I
	opAnd32R
	opXor32I
	opXor32R
	opLsh32I
	opLsh32R
	opRsh32I
	opRsh32R
	opArsh32I
	opArsh32R
	opNeg32
	opMov32I
	opMov32R
	opMovSX8x32
	opMovSX16x32
	// byte order
	opLe16
	opLe32
	opLe64
	opBe16
	opBe32
	opBe64
	// lddw
	opLdDW
	// memory
	opLdxB
	opLdxH
	opLdxW
	opLdxDW
	opLdxSB
	opLdxSH
	opLdxSW
	opStB
	opStH
	opStW
	opStDW
	opStxB
	opStxH
	opStxW
	opStxDW
	// control flow
	opJa
	opJeqI
	opJeqR
	opJgtI
	opJgtR
	opJgeI
	opJgeR
	opJltI
	opJltR
	opJleI
	opJleR
	opJsetI
	opJsetR
	opJneI
	opJneR
	opJsgtI
	opJsgtR
	opJsgeI
	opJsgeR
	opJsltI
	opJsltR
	opJsleI
	opJsleR
	opJeq32I
	opJeq32R
	opJgt32I
	opJgt32R
	opJge32I
	opJge32R
	opJlt32I
	opJlt32R
	opJle32I
	opJle32R
	opJset32I
	opJset32R
	opJne32I
	opJne32R
	opJsgt32I
	opJsgt32R
	opJsge32I
	opJsge32R
	opJslt32I
	opJslt32R
	opJsle32I
	opJsle32R
	opCall   // BPF-to-BPF call, target in off
	opHelper // helper call, id in imm
	opExit
	// Pairs the interpreter runs as one (fusedOps in ops.go); only
	// program.code has them.
	opMovRAddR
	opAddIMovR
	opAddIJneI
	opAddIJltI
	opLdxDWMovR
	opMovRLdxDW
	opMovRJeqI
	opMovRJgtR
)

// insn is one decoded instruction: 16 bytes, lddw included.
type insn struct {
	op  op
	dst uint8
	src uint8
	_   uint8
	// off is the memory offset of loads and stores, or the absolute
	// target index of jumps and calls.
	off int32
	// imm is the immediate, sign-extended to 64 bits (lddw: all 64 bits).
	imm uint64
}

// program is one verified entry point, linked into a flat slice.
type program struct {
	name string
	// label names the program in error messages: its section and
	// function for a program from an ELF object.
	label string
	insns []insn
	// code is what the interpreter runs: insns with fused pairs (fuse).
	code []insn
	// raw is each instruction's offset in raw 8-byte slots, for messages.
	raw []int32
	// funcs are the start indices of the functions, ascending; funcs[0]
	// is 0, the entry.
	funcs []int
	names map[int]string
}

// where names instruction i for error messages.
func (p *program) where(i int) string {
	if i < 0 || i >= len(p.raw) {
		return fmt.Sprintf("instruction %d", i)
	}
	s := fmt.Sprintf("instruction %d", p.raw[i])
	// Find the function containing i.
	f := 0
	for _, start := range p.funcs {
		if start <= i {
			f = start
		}
	}
	if name := p.names[f]; name != "" && f != 0 {
		s += fmt.Sprintf(" (%s+%d)", name, p.raw[i]-p.raw[f])
	}
	return s
}

// rodataRef resolves a reference to a read-only data section into the
// virtual address of its first byte; ok is false for anything else.
type rodataRef func(section string) (addr uint64, ok bool)

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sandbox.ErrBadModule}, args...)...)
}

// link decodes and verifies insns (one entry point with its callees
// appended, as cilium/ebpf flattens them) into a program. Symbols mark
// functions and, in programs built with the asm package, jump labels;
// references are resolved to them. rodata resolves data-section loads
// (nil: none allowed). section is the ELF section the entry came from
// ("" for programs built with the asm package); every error names it and
// the function, so a refusal says where the broken rule is.
func link(name, section string, insns asm.Instructions, rodata rodataRef) (*program, error) {
	label := name
	if section != "" {
		label = fmt.Sprintf("section %q, program %q", section, name)
	}
	fn, name := name, label // the messages below name the program by its label
	n := len(insns)
	if n == 0 {
		return nil, badf("%s: no instructions", name)
	}
	// Raw offsets, and the reverse map from raw offset to index.
	raw := make([]int32, n)
	total := 0
	for i := range insns {
		if total > maxInsns {
			break
		}
		raw[i] = int32(total)
		total += int(insns[i].Width())
	}
	if total > maxInsns {
		return nil, badf("%s: %d or more instructions, at most %d", name, total, maxInsns)
	}
	idxOfRaw := make([]int32, total+1)
	for i := range idxOfRaw {
		idxOfRaw[i] = -1
	}
	for i := range insns {
		idxOfRaw[raw[i]] = int32(i)
	}
	symbols := make(map[string]int)
	for i := range insns {
		if s := insns[i].Symbol(); s != "" {
			if _, dup := symbols[s]; dup {
				return nil, badf("%s: instruction %d: duplicate symbol %q", name, raw[i], s)
			}
			symbols[s] = i
		}
	}
	// target turns a relative raw jump into an absolute index.
	target := func(i int, rel int64) (int, error) {
		t := int64(raw[i]) + int64(insns[i].Width()) + rel
		if t < 0 || t >= int64(total) {
			return 0, badf("%s: instruction %d: jump or call to %d, outside the program (0..%d)", name, raw[i], t, total-1)
		}
		j := idxOfRaw[t]
		if j < 0 {
			return 0, badf("%s: instruction %d: jump or call to %d, the middle of an lddw", name, raw[i], t)
		}
		return int(j), nil
	}

	p := &program{name: fn, label: label, insns: make([]insn, n), raw: raw, names: make(map[int]string)}
	isCall := make([]bool, n)
	funcStart := map[int]bool{0: true}
	for i := range insns {
		ins := &insns[i]
		d, err := decode(ins)
		if err != nil {
			return nil, badf("%s: instruction %d: %v", name, raw[i], err)
		}
		if btf.CORERelocationMetadata(ins) != nil {
			return nil, badf("%s: instruction %d: CO-RE relocations are not supported", name, raw[i])
		}
		ref := ins.Reference()
		switch {
		case d.op == opCall:
			var t int
			if ref != "" {
				j, ok := symbols[ref]
				if !ok {
					return nil, badf("%s: instruction %d: call to undefined function %q", name, raw[i], ref)
				}
				t = j
			} else if t, err = target(i, ins.Constant); err != nil {
				return nil, err
			}
			d.off = int32(t)
			isCall[i] = true
			funcStart[t] = true
		case d.op == opHelper:
			if ref != "" {
				return nil, badf("%s: instruction %d: unresolved reference %q", name, raw[i], ref)
			}
			switch d.imm {
			case helperKtimeGetNs, helperTracePrintk:
			default:
				return nil, badf("%s: instruction %d: helper %d (%v) is not allowed; only bpf_ktime_get_ns (5) and bpf_trace_printk (6) are",
					name, raw[i], int64(d.imm), asm.BuiltinFunc(d.imm))
			}
		case d.op == opLdDW:
			switch {
			case ins.Src == asm.PseudoMapValue && ref != "" && rodata != nil:
				base, ok := rodata(ref)
				if !ok {
					return nil, badf("%s: instruction %d: reference to %q: maps and writable global data are not supported", name, raw[i], ref)
				}
				d.imm = base + uint64(ins.Constant)>>32
			case ins.Src != 0 || ref != "":
				what := ref
				if what == "" {
					what = fmt.Sprintf("pseudo source %d", ins.Src)
				}
				return nil, badf("%s: instruction %d: lddw of %s: maps, function pointers and kernel symbols are not supported", name, raw[i], what)
			}
		case d.op >= opJa && d.op <= opJsle32R:
			var t int
			if ref != "" && (ins.Offset == -1 || ins.Constant == -1) {
				j, ok := symbols[ref]
				if !ok {
					return nil, badf("%s: instruction %d: jump to undefined label %q", name, raw[i], ref)
				}
				t = j
			} else {
				rel := int64(ins.Offset)
				if d.op == opJa && ins.OpCode.Class() == asm.Jump32Class {
					rel = ins.Constant // gotol
				}
				if t, err = target(i, rel); err != nil {
					return nil, err
				}
			}
			d.off = int32(t)
		default:
			if ref != "" {
				return nil, badf("%s: instruction %d: unresolved reference %q", name, raw[i], ref)
			}
		}
		p.insns[i] = d
	}
	for s := range funcStart {
		p.funcs = append(p.funcs, s)
	}
	sortInts(p.funcs)
	for s, i := range symbols {
		if funcStart[i] {
			p.names[i] = s
		}
	}
	if err := p.checkFlow(isCall); err != nil {
		return nil, err
	}
	p.code = fuse(p.insns)
	return p, nil
}

// checkFlow checks, per function: jumps stay inside it, its last
// instruction is exit or an unconditional jump, and an exit is reachable
// from its start.
func (p *program) checkFlow(isCall []bool) error {
	n := len(p.insns)
	reach := make([]bool, n)
	var work []int
	for fi, start := range p.funcs {
		end := n
		if fi+1 < len(p.funcs) {
			end = p.funcs[fi+1]
		}
		last := &p.insns[end-1]
		if last.op != opExit && last.op != opJa {
			return badf("%s: %s: the function falls off its end (last instruction is neither exit nor ja)", p.label, p.where(end-1))
		}
		for i := start; i < end; i++ {
			d := &p.insns[i]
			if d.op >= opJa && d.op <= opJsle32R && !isCall[i] {
				if t := int(d.off); t < start || t >= end {
					return badf("%s: %s: jump to instruction %d leaves the function", p.label, p.where(i), p.raw[t])
				}
			}
		}
		// Reachability of an exit from the function's start.
		work = append(work[:0], start)
		reach[start] = true
		exit := false
		for len(work) > 0 {
			i := work[len(work)-1]
			work = work[:len(work)-1]
			d := &p.insns[i]
			visit := func(j int) {
				if j < end && !reach[j] {
					reach[j] = true
					work = append(work, j)
				}
			}
			switch {
			case d.op == opExit:
				exit = true
			case d.op == opJa:
				visit(int(d.off))
			case d.op > opJa && d.op <= opJsle32R:
				visit(int(d.off))
				visit(i + 1)
			default:
				visit(i + 1)
			}
		}
		if !exit {
			return badf("%s: %s: no exit is reachable from the function's start", p.label, p.where(start))
		}
	}
	return nil
}

func sortInts(s []int) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// decode turns one cilium instruction into an insn, checking the opcode,
// registers and reserved fields. Jump and call targets are filled in by
// link.
func decode(ins *asm.Instruction) (insn, error) {
	d := insn{dst: uint8(ins.Dst), src: uint8(ins.Src), imm: uint64(ins.Constant)}
	if ins.Dst > asm.R10 || ins.Src > asm.R10 {
		return d, fmt.Errorf("invalid register (dst r%d, src r%d)", ins.Dst, ins.Src)
	}
	opc := ins.OpCode
	cls := opc.Class()
	zero := func(what string, v int64) error {
		if v != 0 {
			return fmt.Errorf("opcode %#x: reserved field %s is %d, must be 0", uint32(opc), what, v)
		}
		return nil
	}
	noR10 := func() error {
		if ins.Dst == asm.R10 {
			return fmt.Errorf("opcode %#x writes r10, the read-only frame pointer", uint32(opc))
		}
		return nil
	}
	switch cls {
	case asm.ALU64Class, asm.ALUClass:
		if err := noR10(); err != nil {
			return d, err
		}
		if err := zero("offset", int64(ins.Offset)); err != nil {
			return d, err
		}
		alu := opc.ALUOp()
		if alu == asm.Swap {
			if err := zero("src", int64(ins.Src)); err != nil {
				return d, err
			}
			var k int
			switch ins.Constant {
			case 16:
				k = 0
			case 32:
				k = 1
			case 64:
				k = 2
			default:
				return d, fmt.Errorf("byte swap of %d bits", ins.Constant)
			}
			be := opc.Endianness() == asm.BE
			if cls == asm.ALU64Class {
				if be {
					return d, fmt.Errorf("opcode %#x: invalid (ALU64 byte swap with to_be)", uint32(opc))
				}
				be = true // v4 bswap: unconditional, i.e. to_be on a little-endian machine
			}
			if be {
				d.op = opBe16 + op(k)
			} else {
				d.op = opLe16 + op(k)
			}
			d.src, d.imm = 0, 0
			return d, nil
		}
		reg := opc.Source() == asm.RegSource
		if reg {
			if err := zero("immediate", ins.Constant); err != nil {
				return d, err
			}
		} else if err := zero("src", int64(ins.Src)); err != nil {
			return d, err
		}
		is64 := cls == asm.ALU64Class
		if a := aluByBPF(alu); a != nil {
			d.op = a.op32
			if is64 {
				d.op = a.op64
			}
			if reg {
				d.op++
			}
			return d, nil
		}
		switch alu {
		case asm.Neg:
			if reg {
				return d, fmt.Errorf("opcode %#x: neg takes no source register", uint32(opc))
			}
			if err := zero("immediate", ins.Constant); err != nil {
				return d, err
			}
			if is64 {
				d.op = opNeg
			} else {
				d.op = opNeg32
			}
		case asm.MovSX8, asm.MovSX16, asm.MovSX32:
			if !reg {
				return d, fmt.Errorf("opcode %#x: movsx takes a source register", uint32(opc))
			}
			switch {
			case is64 && alu == asm.MovSX8:
				d.op = opMovSX8
			case is64 && alu == asm.MovSX16:
				d.op = opMovSX16
			case is64:
				d.op = opMovSX32
			case alu == asm.MovSX8:
				d.op = opMovSX8x32
			case alu == asm.MovSX16:
				d.op = opMovSX16x32
			}
		}
		if d.op == opInvalid {
			return d, fmt.Errorf("invalid ALU opcode %#x", uint32(opc))
		}
		return d, nil

	case asm.JumpClass, asm.Jump32Class:
		jop := jumpOpOf(opc)
		is32 := cls == asm.Jump32Class
		reg := opc.Source() == asm.RegSource
		switch jop {
		case asm.Exit:
			for _, f := range []struct {
				n string
				v int64
			}{{"dst", int64(ins.Dst)}, {"src", int64(ins.Src)}, {"offset", int64(ins.Offset)}, {"immediate", ins.Constant}} {
				if err := zero(f.n, f.v); err != nil {
					return d, err
				}
			}
			if reg {
				return d, fmt.Errorf("invalid exit opcode %#x", uint32(opc))
			}
			d.op = opExit
			return d, nil
		case asm.Call:
			if reg {
				return d, fmt.Errorf("invalid call opcode %#x", uint32(opc))
			}
			if err := zero("dst", int64(ins.Dst)); err != nil {
				return d, err
			}
			if err := zero("offset", int64(ins.Offset)); err != nil {
				return d, err
			}
			switch ins.Src {
			case 0:
				d.op = opHelper
			case asm.PseudoCall:
				d.op = opCall
			default:
				return d, fmt.Errorf("call with pseudo source %d (kfuncs are not supported)", ins.Src)
			}
			d.src = 0
			return d, nil
		case asm.Ja:
			if reg || ins.Dst != 0 || ins.Src != 0 {
				return d, fmt.Errorf("invalid ja opcode %#x or registers", uint32(opc))
			}
			if is32 {
				if err := zero("offset", int64(ins.Offset)); err != nil {
					return d, err
				}
			} else if err := zero("immediate", ins.Constant); err != nil {
				return d, err
			}
			d.op = opJa
			return d, nil
		}
		if reg {
			if err := zero("immediate", ins.Constant); err != nil {
				return d, err
			}
		} else if err := zero("src", int64(ins.Src)); err != nil {
			return d, err
		}
		for k := range condJumps {
			if condJumps[k].bpf == jop {
				d.op = condJumpOp(k, is32, reg)
				return d, nil
			}
		}
		return d, fmt.Errorf("invalid jump opcode %#x", uint32(opc))

	case asm.LdClass:
		if !opc.IsDWordLoad() {
			return d, fmt.Errorf("opcode %#x: legacy packet loads (LD_ABS/LD_IND) and LD other than lddw are not supported", uint32(opc))
		}
		if err := noR10(); err != nil {
			return d, err
		}
		if err := zero("offset", int64(ins.Offset)); err != nil {
			return d, err
		}
		// Src (pseudo loads) is checked by link.
		d.op, d.src = opLdDW, 0
		return d, nil

	case asm.LdXClass:
		if err := noR10(); err != nil {
			return d, err
		}
		if err := zero("immediate", ins.Constant); err != nil {
			return d, err
		}
		d.off = int32(ins.Offset)
		sz := sizeIndex(opc.Size())
		switch opc.Mode() {
		case asm.MemMode:
			d.op = opLdxB + op(sz)
		case asm.MemSXMode:
			if sz == 3 {
				return d, fmt.Errorf("opcode %#x: sign-extending load of a double word", uint32(opc))
			}
			d.op = opLdxSB + op(sz)
		default:
			return d, fmt.Errorf("opcode %#x: invalid LDX mode", uint32(opc))
		}
		d.imm = 0
		return d, nil

	case asm.StClass, asm.StXClass:
		d.off = int32(ins.Offset)
		sz := sizeIndex(opc.Size())
		if opc.Mode() != asm.MemMode {
			if opc.Mode() == asm.AtomicMode {
				return d, fmt.Errorf("opcode %#x: atomic operations are not supported", uint32(opc))
			}
			return d, fmt.Errorf("opcode %#x: invalid store mode", uint32(opc))
		}
		if cls == asm.StClass {
			if err := zero("src", int64(ins.Src)); err != nil {
				return d, err
			}
			d.op = opStB + op(sz)
			return d, nil
		}
		if err := zero("immediate", ins.Constant); err != nil {
			return d, err
		}
		d.op, d.imm = opStxB+op(sz), 0
		return d, nil
	}
	return d, fmt.Errorf("invalid opcode %#x", uint32(opc))
}

// sizeIndex maps B/H/W/DW to 0..3.
func sizeIndex(s asm.Size) int {
	switch s {
	case asm.Byte:
		return 0
	case asm.Half:
		return 1
	case asm.Word:
		return 2
	}
	return 3
}

// jumpOpOf is opc's jump operation, or InvalidJumpOp for may_goto and for
// exit and call in the JMP32 class.
func jumpOpOf(opc asm.OpCode) asm.JumpOp {
	j := asm.JumpOp(opc & 0xf0)
	if opc.Class() == asm.Jump32Class && (j == asm.Exit || j == asm.Call || j == asm.JCOND) {
		return asm.InvalidJumpOp
	}
	if j == asm.JCOND {
		return asm.InvalidJumpOp
	}
	return j
}
