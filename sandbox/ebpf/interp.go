package ebpf

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/bits"
	"time"

	"github.com/nearstore/nearstore/sandbox"
)

// The region map (see the package documentation). Region i occupies the
// 4 GiB slot starting at i<<32.
const (
	regionCtx = iota + 1
	regionData
	regionScratch
	regionStack
	regionInput
	regionOutput
	regionRodata
	numRegions
)

const (
	ctxAddr     uint64 = regionCtx << 32
	dataAddr    uint64 = regionData << 32
	scratchAddr uint64 = regionScratch << 32
	stackAddr   uint64 = regionStack << 32
	inputAddr   uint64 = regionInput << 32
	outputAddr  uint64 = regionOutput << 32
	rodataAddr  uint64 = regionRodata << 32
)

// regionName names region i for messages.
func regionName(i uint64) string {
	switch i {
	case regionCtx:
		return "ctx"
	case regionData:
		return "data"
	case regionScratch:
		return "scratch"
	case regionStack:
		return "stack"
	case regionInput:
		return "input"
	case regionOutput:
		return "output"
	case regionRodata:
		return "rodata"
	}
	return "unmapped"
}

// Stack geometry: the entry frame plus maxDepth nested BPF-to-BPF calls.
const (
	frameSize = 512
	maxDepth  = 8
	stackSize = frameSize * (maxDepth + 1)
)

// clockEvery is how many instructions run between looks at the clock.
const clockEvery = 1 << 16

// struct bpf_xrp, 64-bit layout (docs/ABI.md).
const (
	ctxSize        = 360
	ctxData        = 0
	ctxDone        = 8
	ctxNextAddr    = 16
	ctxSizeField   = 144
	ctxScratch     = 272
	ctxNextFile    = 280
	ctxCurFile     = 344
	ctxDataLen     = 348
	ctxCurAddr     = 352
	ctxNextFileEnd = ctxNextFile + 4*sandbox.MaxFanout
)

// Region permissions.
const (
	permRO  uint8 = iota // loads only
	permRW               // loads and stores
	permCtx              // loads; stores only to the writable ctx fields
)

// region is one mapped range of the program's address space.
type region struct {
	base uint64
	buf  []byte
	perm uint8
}

// frame is a caller's state saved across a BPF-to-BPF call.
type frame struct {
	ret   int
	saved [4]uint64 // R6-R9
}

// machine is the interpreter state of one instance. Its regions are the
// only way a program reaches memory.
type machine struct {
	// regs is the register file. Programs use R0-R10 (the verifier
	// refuses any other register); it has 256 so that the interpreter
	// indexes it with an instruction's uint8 register fields as they
	// are, without a bounds check or mask per operand.
	regs    [256]uint64
	regions [numRegions]region
	frames  [maxDepth]frame
	st      runState
	stack   [stackSize]byte
	// stackHigh is the deepest call depth mapped since the stack was
	// last cleared: only the frames of depths 0..stackHigh, the end of
	// stack from (maxDepth-stackHigh)*frameSize on, can hold anything.
	stackHigh int
	log       *slog.Logger
	epoch     time.Time
}

// ctxWritable reports whether [off, off+size) lies inside one of the
// context fields a program may write: done, next_addr, size, next_file.
func ctxWritable(off, size uint64) bool {
	end := off + size
	return (off >= ctxDone && end <= ctxDone+4) ||
		(off >= ctxNextAddr && end <= ctxScratch) ||
		(off >= ctxNextFile && end <= ctxNextFileEnd)
}

// load returns the memory at a for a size-byte load, or nil.
func (m *machine) load(a, size uint64) []byte {
	hi := a >> 32
	if hi >= numRegions {
		return nil
	}
	rg := &m.regions[hi]
	off := a - rg.base
	if off >= uint64(len(rg.buf)) || off+size > uint64(len(rg.buf)) {
		return nil
	}
	return rg.buf[off:]
}

// writable reports whether a size-byte store may go to a, an address load
// maps for it: to a read/write region, or to a writable context field.
func (m *machine) writable(a, size uint64) bool {
	rg := &m.regions[(a>>32)%numRegions]
	return rg.perm == permRW || rg.perm == permCtx && ctxWritable(a-rg.base, size)
}

// setStack maps the frames of depth 0..d.
func (m *machine) setStack(d int) {
	m.stackHigh = max(m.stackHigh, d)
	lo := (maxDepth - d) * frameSize
	rg := &m.regions[regionStack]
	rg.base = stackAddr + uint64(lo)
	rg.buf = m.stack[lo:]
}

// describe names the region and offset of address a, for messages.
func (m *machine) describe(a uint64) string {
	hi := a >> 32
	if hi == 0 || hi >= numRegions {
		return "unmapped"
	}
	rg := &m.regions[hi]
	if hi == regionStack {
		// Relative to the current frame's top (R10).
		top := rg.base + frameSize
		return fmt.Sprintf("stack, R10%+d; the frame is the %d bytes below R10", int64(a-top), frameSize)
	}
	return fmt.Sprintf("%s+%#x, a region of %d bytes", regionName(hi), a-rg.base, len(rg.buf))
}

func (m *machine) fault(p *program, i int, kind string, a, size uint64) error {
	why := ""
	if kind == "store" && m.load(a, size) != nil {
		why = ", which is read-only"
	}
	return fmt.Errorf("%w: %s: %s of %d bytes at %#x (%s%s)", sandbox.ErrMemory, p.where(i), kind, size, a, m.describe(a), why)
}

// tracePrintk implements bpf_trace_printk(fmt, fmt_size, a1, a2, a3): the
// format is read through the region check and logged at debug level.
func (m *machine) tracePrintk(ctx context.Context, p *program, i int, r *[256]uint64) (uint64, error) {
	size := r[2]
	if size == 0 || size > 1024 {
		return 0, fmt.Errorf("%w: %s: bpf_trace_printk format of %d bytes", sandbox.ErrMemory, p.where(i), size)
	}
	b := m.load(r[1], size)
	if b == nil {
		return 0, m.fault(p, i, "bpf_trace_printk read", r[1], size)
	}
	f := b[:size]
	for j, c := range f {
		if c == 0 {
			f = f[:j]
			break
		}
	}
	if m.log.Enabled(ctx, slog.LevelDebug) {
		m.log.DebugContext(ctx, "ebpf: bpf_trace_printk", "program", p.name, "fmt", string(f), "args", []uint64{r[3], r[4], r[5]})
	}
	return uint64(len(f)), nil
}

// run executes p from its entry with R1-R5 set to args and returns R0.
// It lets go of the call's context and program after, without a defer:
// runLoop's many returns would make it a deferred call through the
// runtime, whose frame, at the bottom of a command's goroutine, cost a
// stack growth per request.
func (m *machine) run(ctx context.Context, p *program, lim *sandbox.Limits, args [5]uint64) (uint64, error) {
	r0, err := m.runLoop(ctx, p, lim, args)
	st := &m.st
	st.ctx, st.p, st.lim, st.done, st.yield = nil, nil, nil, nil, nil
	return r0, err
}

// event is why exec stopped at an instruction: what it needs is left to
// runLoop.
type event uint8

const (
	evExit       event = iota // exit
	evCall                    // BPF-to-BPF call
	evHelper                  // helper call
	evLoadFault               // a load the region map refuses
	evStoreFault              // a store the region map refuses
	evBackJumps               // a taken backward jump over the limit, counted
	evCheck                   // a taken jump that brought executed past checkAt, counted
	evBadPC                   // pc outside the program
	evBadOp                   // an opcode the verifier should have refused
)

// runLoop runs p: exec runs the instructions, and runLoop does at the
// instructions exec stops at what takes a function call (calls and
// returns, helpers, the budget and clock checks, error messages), then
// resumes it.
func (m *machine) runLoop(ctx context.Context, p *program, lim *sandbox.Limits, args [5]uint64) (uint64, error) {
	r := &m.regs
	clear(r[:11])
	copy(r[1:6], args[:])
	r[10] = stackAddr + stackSize
	m.setStack(0)

	// Instructions are counted per straight-line run, when control
	// transfers (a taken jump, a call, a return): a run is at most the
	// program's length, so the budget is exact to within 4096. The
	// clock, the context's end and its Yield are looked at from the first
	// check on (runState.arm): a run that ends within clockEvery
	// instructions, as a pushdown step does, reads neither.
	st := &m.st
	*st = runState{ctx: ctx, p: p, lim: lim, checkAt: min(lim.MaxInstructions, clockEvery), lazy: true}
	insns := p.insns
	pc := 0
	for {
		i, ev := m.exec(p.code, pc)
		if ev == evBadPC {
			// The verifier makes this impossible; never index out of range.
			return 0, fmt.Errorf("ebpf: internal error: pc %d outside the program", i)
		}
		ins := &insns[i]
		pc = i + 1
		switch ev {
		case evCheck:
			if err := st.check(i); err != nil {
				return 0, err
			}
			pc = int(ins.off)
			st.runStart = pc
		case evBackJumps:
			return 0, fmt.Errorf("%w: %s: %d backward jumps taken, the limit", sandbox.ErrTimeout, p.where(i), lim.MaxBackJumps)
		case evLoadFault:
			return 0, m.fault(p, i, "load", r[ins.src]+uint64(int64(ins.off)), sizeOf(ins.op))
		case evStoreFault:
			return 0, m.fault(p, i, "store", r[ins.dst]+uint64(int64(ins.off)), sizeOf(ins.op))
		case evCall:
			if st.depth >= maxDepth {
				return 0, fmt.Errorf("%w: %s: BPF-to-BPF calls nested deeper than %d", sandbox.ErrMemory, p.where(i), maxDepth)
			}
			if st.executed += uint64(pc - st.runStart); st.executed > st.checkAt {
				if err := st.check(i); err != nil {
					return 0, err
				}
			}
			f := &m.frames[st.depth]
			f.ret = pc
			f.saved = [4]uint64{r[6], r[7], r[8], r[9]}
			st.depth++
			r[10] -= frameSize
			m.setStack(st.depth)
			pc = int(ins.off)
			st.runStart = pc
		case evHelper:
			switch ins.imm {
			case helperKtimeGetNs:
				r[0] = uint64(time.Since(m.epoch))
			case helperTracePrintk:
				v, err := m.tracePrintk(ctx, p, i, r)
				if err != nil {
					return 0, err
				}
				r[0] = v
			default:
				return 0, fmt.Errorf("ebpf: internal error: %s: helper %d passed the verifier", p.where(i), ins.imm)
			}
		case evExit:
			if st.depth == 0 {
				return r[0], nil
			}
			if st.executed += uint64(pc - st.runStart); st.executed > st.checkAt {
				if err := st.check(i); err != nil {
					return 0, err
				}
			}
			st.depth--
			f := &m.frames[st.depth]
			pc = f.ret
			st.runStart = pc
			r[6], r[7], r[8], r[9] = f.saved[0], f.saved[1], f.saved[2], f.saved[3]
			r[10] += frameSize
			m.setStack(st.depth)
		default:
			return 0, fmt.Errorf("ebpf: internal error: %s: opcode %d passed the verifier", p.where(i), ins.op)
		}
	}
}

// exec runs insns from pc until an instruction that needs runLoop, and
// returns its index and the event. It calls no function: Go has no
// callee-saved registers, so a call anywhere in this loop would make it
// keep pc and the program on the stack, storing and reloading them at
// every instruction. The region map's checks are inlined (load,
// writable).
func (m *machine) exec(insns []insn, pc int) (int, event) {
	// The budgets live in registers while exec runs: left is what
	// executed may grow by before the next check (executed <= checkAt
	// whenever exec starts: runLoop checks first), backLeft the backward
	// jumps still allowed (back <= MaxBackJumps likewise).
	st := &m.st
	start := st.runStart
	left := st.checkAt - st.executed
	backLeft := st.lim.MaxBackJumps - st.back
	r := &m.regs
	var ev event
run:
	for {
		if uint(pc) >= uint(len(insns)) {
			pc++ // returned as pc-1
			ev = evBadPC
			break
		}
		ins := &insns[pc]
		pc++
		d, s := ins.dst, ins.src
		var t int // a taken jump's target
		switch ins.op {
		case opInvalid:
			ev = evBadOp
			break run
		// ALU64
		case opAddI:
			r[d] += ins.imm
			continue
		case opAddR:
			r[d] += r[s]
			continue
		case opSubI:
			r[d] -= ins.imm
			continue
		case opSubR:
			r[d] -= r[s]
			continue
		case opMulI:
			r[d] *= ins.imm
			continue
		case opMulR:
			r[d] *= r[s]
			continue
		case opDivI:
			r[d] = div64(r[d], ins.imm)
			continue
		case opDivR:
			r[d] = div64(r[d], r[s])
			continue
		case opSDivI:
			r[d] = sdiv64(r[d], ins.imm)
			continue
		case opSDivR:
			r[d] = sdiv64(r[d], r[s])
			continue
		case opModI:
			r[d] = mod64(r[d], ins.imm)
			continue
		case opModR:
			r[d] = mod64(r[d], r[s])
			continue
		case opSModI:
			r[d] = smod64(r[d], ins.imm)
			continue
		case opSModR:
			r[d] = smod64(r[d], r[s])
			continue
		case opOrI:
			r[d] |= ins.imm
			continue
		case opOrR:
			r[d] |= r[s]
			continue
		case opAndI:
			r[d] &= ins.imm
			continue
		case opAndR:
			r[d] &= r[s]
			continue
		case opXorI:
			r[d] ^= ins.imm
			continue
		case opXorR:
			r[d] ^= r[s]
			continue
		case opLshI:
			r[d] <<= ins.imm & 63
			continue
		case opLshR:
			r[d] <<= r[s] & 63
			continue
		case opRshI:
			r[d] >>= ins.imm & 63
			continue
		case opRshR:
			r[d] >>= r[s] & 63
			continue
		case opArshI:
			r[d] = uint64(int64(r[d]) >> (ins.imm & 63))
			continue
		case opArshR:
			r[d] = uint64(int64(r[d]) >> (r[s] & 63))
			continue
		case opNeg:
			r[d] = -r[d]
			continue
		case opMovI:
			r[d] = ins.imm
			continue
		case opMovR:
			r[d] = r[s]
			continue
		case opMovSX8:
			r[d] = uint64(int64(int8(r[s])))
			continue
		case opMovSX16:
			r[d] = uint64(int64(int16(r[s])))
			continue
		case opMovSX32:
			r[d] = uint64(int64(int32(r[s])))
			continue

		// ALU32: results are zero-extended.
		case opAdd32I:
			r[d] = uint64(uint32(r[d]) + uint32(ins.imm))
			continue
		case opAdd32R:
			r[d] = uint64(uint32(r[d]) + uint32(r[s]))
			continue
		case opSub32I:
			r[d] = uint64(uint32(r[d]) - uint32(ins.imm))
			continue
		case opSub32R:
			r[d] = uint64(uint32(r[d]) - uint32(r[s]))
			continue
		case opMul32I:
			r[d] = uint64(uint32(r[d]) * uint32(ins.imm))
			continue
		case opMul32R:
			r[d] = uint64(uint32(r[d]) * uint32(r[s]))
			continue
		case opDiv32I:
			r[d] = div32(r[d], ins.imm)
			continue
		case opDiv32R:
			r[d] = div32(r[d], r[s])
			continue
		case opSDiv32I:
			r[d] = sdiv32(r[d], ins.imm)
			continue
		case opSDiv32R:
			r[d] = sdiv32(r[d], r[s])
			continue
		case opMod32I:
			r[d] = mod32(r[d], ins.imm)
			continue
		case opMod32R:
			r[d] = mod32(r[d], r[s])
			continue
		case opSMod32I:
			r[d] = smod32(r[d], ins.imm)
			continue
		case opSMod32R:
			r[d] = smod32(r[d], r[s])
			continue
		case opOr32I:
			r[d] = uint64(uint32(r[d]) | uint32(ins.imm))
			continue
		case opOr32R:
			r[d] = uint64(uint32(r[d]) | uint32(r[s]))
			continue
		case opAnd32I:
			r[d] = uint64(uint32(r[d]) & uint32(ins.imm))
			continue
		case opAnd32R:
			r[d] = uint64(uint32(r[d]) & uint32(r[s]))
			continue
		case opXor32I:
			r[d] = uint64(uint32(r[d]) ^ uint32(ins.imm))
			continue
		case opXor32R:
			r[d] = uint64(uint32(r[d]) ^ uint32(r[s]))
			continue
		case opLsh32I:
			r[d] = uint64(uint32(r[d]) << (ins.imm & 31))
			continue
		case opLsh32R:
			r[d] = uint64(uint32(r[d]) << (r[s] & 31))
			continue
		case opRsh32I:
			r[d] = uint64(uint32(r[d]) >> (ins.imm & 31))
			continue
		case opRsh32R:
			r[d] = uint64(uint32(r[d]) >> (r[s] & 31))
			continue
		case opArsh32I:
			r[d] = uint64(uint32(int32(uint32(r[d])) >> (ins.imm & 31)))
			continue
		case opArsh32R:
			r[d] = uint64(uint32(int32(uint32(r[d])) >> (r[s] & 31)))
			continue
		case opNeg32:
			r[d] = uint64(-uint32(r[d]))
			continue
		case opMov32I:
			r[d] = uint64(uint32(ins.imm))
			continue
		case opMov32R:
			r[d] = uint64(uint32(r[s]))
			continue
		case opMovSX8x32:
			r[d] = uint64(uint32(int32(int8(r[s]))))
			continue
		case opMovSX16x32:
			r[d] = uint64(uint32(int32(int16(r[s]))))
			continue

		// Byte order (the host order of BPF here is little-endian).
		case opLe16:
			r[d] = uint64(uint16(r[d]))
			continue
		case opLe32:
			r[d] = uint64(uint32(r[d]))
			continue
		case opLe64:
			continue
		case opBe16:
			r[d] = uint64(bits.ReverseBytes16(uint16(r[d])))
			continue
		case opBe32:
			r[d] = uint64(bits.ReverseBytes32(uint32(r[d])))
			continue
		case opBe64:
			r[d] = bits.ReverseBytes64(r[d])
			continue

		case opLdDW:
			r[d] = ins.imm
			continue

		// Loads.
		case opLdxB:
			b := m.load(r[s]+uint64(int64(ins.off)), 1)
			if b == nil {
				ev = evLoadFault
				break run
			}
			r[d] = uint64(b[0])
			continue
		case opLdxH:
			b := m.load(r[s]+uint64(int64(ins.off)), 2)
			if b == nil {
				ev = evLoadFault
				break run
			}
			r[d] = uint64(binary.LittleEndian.Uint16(b))
			continue
		case opLdxW:
			b := m.load(r[s]+uint64(int64(ins.off)), 4)
			if b == nil {
				ev = evLoadFault
				break run
			}
			r[d] = uint64(binary.LittleEndian.Uint32(b))
			continue
		case opLdxDW:
			b := m.load(r[s]+uint64(int64(ins.off)), 8)
			if b == nil {
				ev = evLoadFault
				break run
			}
			r[d] = binary.LittleEndian.Uint64(b)
			continue
		case opLdxSB:
			b := m.load(r[s]+uint64(int64(ins.off)), 1)
			if b == nil {
				ev = evLoadFault
				break run
			}
			r[d] = uint64(int64(int8(b[0])))
			continue
		case opLdxSH:
			b := m.load(r[s]+uint64(int64(ins.off)), 2)
			if b == nil {
				ev = evLoadFault
				break run
			}
			r[d] = uint64(int64(int16(binary.LittleEndian.Uint16(b))))
			continue
		case opLdxSW:
			b := m.load(r[s]+uint64(int64(ins.off)), 4)
			if b == nil {
				ev = evLoadFault
				break run
			}
			r[d] = uint64(int64(int32(binary.LittleEndian.Uint32(b))))
			continue

		// Stores.
		case opStB, opStxB:
			v := ins.imm
			if ins.op == opStxB {
				v = r[s]
			}
			a := r[d] + uint64(int64(ins.off))
			b := m.load(a, 1)
			if b == nil || !m.writable(a, 1) {
				ev = evStoreFault
				break run
			}
			b[0] = byte(v)
			continue
		case opStH, opStxH:
			v := ins.imm
			if ins.op == opStxH {
				v = r[s]
			}
			a := r[d] + uint64(int64(ins.off))
			b := m.load(a, 2)
			if b == nil || !m.writable(a, 2) {
				ev = evStoreFault
				break run
			}
			binary.LittleEndian.PutUint16(b, uint16(v))
			continue
		case opStW, opStxW:
			v := ins.imm
			if ins.op == opStxW {
				v = r[s]
			}
			a := r[d] + uint64(int64(ins.off))
			b := m.load(a, 4)
			if b == nil || !m.writable(a, 4) {
				ev = evStoreFault
				break run
			}
			binary.LittleEndian.PutUint32(b, uint32(v))
			continue
		case opStDW, opStxDW:
			v := ins.imm
			if ins.op == opStxDW {
				v = r[s]
			}
			a := r[d] + uint64(int64(ins.off))
			b := m.load(a, 8)
			if b == nil || !m.writable(a, 8) {
				ev = evStoreFault
				break run
			}
			binary.LittleEndian.PutUint64(b, v)
			continue

		// Jumps: a taken jump leaves the switch; not taken continues.
		case opJa:
		case opJeqI:
			if r[d] != ins.imm {
				continue
			}
		case opJeqR:
			if r[d] != r[s] {
				continue
			}
		case opJgtI:
			if r[d] <= ins.imm {
				continue
			}
		case opJgtR:
			if r[d] <= r[s] {
				continue
			}
		case opJgeI:
			if r[d] < ins.imm {
				continue
			}
		case opJgeR:
			if r[d] < r[s] {
				continue
			}
		case opJltI:
			if r[d] >= ins.imm {
				continue
			}
		case opJltR:
			if r[d] >= r[s] {
				continue
			}
		case opJleI:
			if r[d] > ins.imm {
				continue
			}
		case opJleR:
			if r[d] > r[s] {
				continue
			}
		case opJsetI:
			if r[d]&ins.imm == 0 {
				continue
			}
		case opJsetR:
			if r[d]&r[s] == 0 {
				continue
			}
		case opJneI:
			if r[d] == ins.imm {
				continue
			}
		case opJneR:
			if r[d] == r[s] {
				continue
			}
		case opJsgtI:
			if int64(r[d]) <= int64(ins.imm) {
				continue
			}
		case opJsgtR:
			if int64(r[d]) <= int64(r[s]) {
				continue
			}
		case opJsgeI:
			if int64(r[d]) < int64(ins.imm) {
				continue
			}
		case opJsgeR:
			if int64(r[d]) < int64(r[s]) {
				continue
			}
		case opJsltI:
			if int64(r[d]) >= int64(ins.imm) {
				continue
			}
		case opJsltR:
			if int64(r[d]) >= int64(r[s]) {
				continue
			}
		case opJsleI:
			if int64(r[d]) > int64(ins.imm) {
				continue
			}
		case opJsleR:
			if int64(r[d]) > int64(r[s]) {
				continue
			}
		case opJeq32I:
			if uint32(r[d]) != uint32(ins.imm) {
				continue
			}
		case opJeq32R:
			if uint32(r[d]) != uint32(r[s]) {
				continue
			}
		case opJgt32I:
			if uint32(r[d]) <= uint32(ins.imm) {
				continue
			}
		case opJgt32R:
			if uint32(r[d]) <= uint32(r[s]) {
				continue
			}
		case opJge32I:
			if uint32(r[d]) < uint32(ins.imm) {
				continue
			}
		case opJge32R:
			if uint32(r[d]) < uint32(r[s]) {
				continue
			}
		case opJlt32I:
			if uint32(r[d]) >= uint32(ins.imm) {
				continue
			}
		case opJlt32R:
			if uint32(r[d]) >= uint32(r[s]) {
				continue
			}
		case opJle32I:
			if uint32(r[d]) > uint32(ins.imm) {
				continue
			}
		case opJle32R:
			if uint32(r[d]) > uint32(r[s]) {
				continue
			}
		case opJset32I:
			if uint32(r[d])&uint32(ins.imm) == 0 {
				continue
			}
		case opJset32R:
			if uint32(r[d])&uint32(r[s]) == 0 {
				continue
			}
		case opJne32I:
			if uint32(r[d]) == uint32(ins.imm) {
				continue
			}
		case opJne32R:
			if uint32(r[d]) == uint32(r[s]) {
				continue
			}
		case opJsgt32I:
			if int32(r[d]) <= int32(ins.imm) {
				continue
			}
		case opJsgt32R:
			if int32(r[d]) <= int32(r[s]) {
				continue
			}
		case opJsge32I:
			if int32(r[d]) < int32(ins.imm) {
				continue
			}
		case opJsge32R:
			if int32(r[d]) < int32(r[s]) {
				continue
			}
		case opJslt32I:
			if int32(r[d]) >= int32(ins.imm) {
				continue
			}
		case opJslt32R:
			if int32(r[d]) >= int32(r[s]) {
				continue
			}
		case opJsle32I:
			if int32(r[d]) > int32(ins.imm) {
				continue
			}
		case opJsle32R:
			if int32(r[d]) > int32(r[s]) {
				continue
			}

		// Fused pairs (fuse): the pair's first instruction, then, with pc
		// past it, its second, as the cases above run them; a fault or a
		// taken jump is the second's.
		case opMovRAddR:
			r[d] = r[s]
			j := &insns[pc]
			pc++
			r[j.dst] += r[j.src]
			continue
		case opAddIMovR:
			r[d] += ins.imm
			j := &insns[pc]
			pc++
			r[j.dst] = r[j.src]
			continue
		case opAddIJneI:
			r[d] += ins.imm
			j := &insns[pc]
			pc++
			if r[j.dst] == j.imm {
				continue
			}
			t = int(j.off)
			goto taken
		case opAddIJltI:
			r[d] += ins.imm
			j := &insns[pc]
			pc++
			if r[j.dst] >= j.imm {
				continue
			}
			t = int(j.off)
			goto taken
		case opLdxDWMovR:
			b := m.load(r[s]+uint64(int64(ins.off)), 8)
			if b == nil {
				ev = evLoadFault
				break run
			}
			r[d] = binary.LittleEndian.Uint64(b)
			j := &insns[pc]
			pc++
			r[j.dst] = r[j.src]
			continue
		case opMovRLdxDW:
			r[d] = r[s]
			j := &insns[pc]
			pc++
			b := m.load(r[j.src]+uint64(int64(j.off)), 8)
			if b == nil {
				ev = evLoadFault
				break run
			}
			r[j.dst] = binary.LittleEndian.Uint64(b)
			continue
		case opMovRJeqI:
			r[d] = r[s]
			j := &insns[pc]
			pc++
			if r[j.dst] != j.imm {
				continue
			}
			t = int(j.off)
			goto taken
		case opMovRJgtR:
			r[d] = r[s]
			j := &insns[pc]
			pc++
			if r[j.dst] <= r[j.src] {
				continue
			}
			t = int(j.off)
			goto taken

		case opCall:
			ev = evCall
			break run
		case opHelper:
			ev = evHelper
			break run
		case opExit:
			ev = evExit
			break run
		default:
			ev = evBadOp
			break run
		}
		// A taken jump.
		t = int(ins.off)
	taken:
		if t < pc {
			if backLeft == 0 {
				ev = evBackJumps
				st.back = st.lim.MaxBackJumps + 1
				break
			}
			backLeft--
		}
		n := uint64(pc - start)
		if n > left {
			st.executed = st.checkAt - left + n
			st.back = st.lim.MaxBackJumps - backLeft
			return pc - 1, evCheck
		}
		left -= n
		pc = t
		start = t
	}
	st.runStart = start
	st.executed = st.checkAt - left
	if ev != evBackJumps {
		st.back = st.lim.MaxBackJumps - backLeft
	}
	return pc - 1, ev
}

// runState is the interpreter's state that the hot loop does not need:
// budgets, the clock and the call depth.
type runState struct {
	ctx context.Context
	p   *program
	lim *sandbox.Limits
	// deadline and done are set when the run starts, or, when lazy is
	// set, at its first check (arm).
	deadline time.Time
	done     <-chan struct{}
	lazy     bool
	checkAt  uint64
	executed uint64
	back     uint64
	runStart int
	depth    int
	// yield, if set, is the caller's scheduler (sandbox.Yield): check
	// offers it the CPU, and the time paused moves the deadline on.
	yield sandbox.Yield
}

// arm sets a lazy run's deadline, context end and Yield at its first
// check. The rule: a run's time limit counts from its first check, which
// comes after at most clockEvery instructions, so a run may overrun
// lim.Time by the time its first clockEvery instructions took (a few
// hundred microseconds of interpretation, plus any time the OS took the
// CPU away); every check after it holds the limit exactly as before.
func (b *runState) arm() {
	b.lazy = false
	b.deadline = time.Now().Add(b.lim.Time)
	if d, ok := b.ctx.Deadline(); ok && d.Before(b.deadline) {
		b.deadline = d
	}
	b.done = b.ctx.Done()
	b.yield = sandbox.YieldOf(b.ctx)
}

// check is called when executed passes checkAt, at instruction i.
func (b *runState) check(i int) error {
	executed := b.executed
	if executed > b.lim.MaxInstructions {
		return fmt.Errorf("%w: %s: %d instructions executed, over the limit of %d", sandbox.ErrTimeout, b.p.where(i), executed, b.lim.MaxInstructions)
	}
	if b.lazy {
		b.arm()
	}
	select {
	case <-b.done:
		return fmt.Errorf("%w: %s: %w", sandbox.ErrTimeout, b.p.where(i), b.ctx.Err())
	default:
	}
	if time.Now().After(b.deadline) {
		return fmt.Errorf("%w: %s: ran past its time limit of %v", sandbox.ErrTimeout, b.p.where(i), b.lim.Time)
	}
	if b.yield != nil {
		paused, err := b.yield(b.ctx)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", sandbox.ErrTimeout, b.p.where(i), err)
		}
		b.deadline = b.deadline.Add(paused)
	}
	b.checkAt = min(b.lim.MaxInstructions, executed+clockEvery)
	return nil
}

// Division and modulo with the kernel's rules for a zero divisor.

func div64(a, b uint64) uint64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func mod64(a, b uint64) uint64 {
	if b == 0 {
		return a
	}
	return a % b
}

func sdiv64(a, b uint64) uint64 {
	if b == 0 {
		return 0
	}
	return uint64(int64(a) / int64(b)) // MinInt64 / -1 wraps in Go
}

func smod64(a, b uint64) uint64 {
	if b == 0 {
		return a
	}
	return uint64(int64(a) % int64(b))
}

func div32(a, b uint64) uint64 {
	if uint32(b) == 0 {
		return 0
	}
	return uint64(uint32(a) / uint32(b))
}

func mod32(a, b uint64) uint64 {
	if uint32(b) == 0 {
		return uint64(uint32(a))
	}
	return uint64(uint32(a) % uint32(b))
}

func sdiv32(a, b uint64) uint64 {
	if uint32(b) == 0 {
		return 0
	}
	return uint64(uint32(int32(a) / int32(b)))
}

func smod32(a, b uint64) uint64 {
	if uint32(b) == 0 {
		return uint64(uint32(a))
	}
	return uint64(uint32(int32(a) % int32(b)))
}
