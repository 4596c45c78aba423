package wasm

import (
	"errors"
	"fmt"

	"github.com/nearstore/nearstore/internal/leb128"
)

// The call stack of a wasm call is bounded by instrumenting the module
// (prepare), as wasm-instrument's stack limiter does, because wazero has
// no setting for it: its compiler grows a call's native stack by doubling,
// up to about 84 MB, and keeps it in the instance for the next call, so a
// runaway recursion cost tens of MB per instance and per call in flight.
//
// Every function gets a frame cost, an upper bound on the bytes its frame
// takes: frameBase, plus 8 bytes per parameter and local, plus 8 bytes per
// instruction of its body (a bound on its operand stack, from which the
// compiler's spill slots come). A global, exported as exportStack, holds
// the costs of the frames now on the stack below the entry function's:
// each call of a defined function adds its callee's cost before the call,
// traps if that passes the limit, and takes it off after. A call_indirect
// is charged the largest cost of any function. The limit is
// Limits.StackBytes less the largest frame cost, so the entry frame fits
// too; a module with a frame larger than Limits.StackBytes is refused.
// Before trapping, the check sets the global to stackOverflowMark, so
// that the runtime can tell this trap from any other.
//
// Calls that trap leave the global unbalanced, but an instance that
// trapped is never used again (state.broken); calls that return restore
// it, so each call from the host starts at 0.

// frameBase is the fixed part of a frame cost: return address, frame
// pointer, saved registers.
const frameBase = 64

// exportStack is the export name of the stack depth global.
const exportStack = "__nearstore_stack"

// stackOverflowMark is the global's value after a call went too deep.
const stackOverflowMark = 0xFFFFFFFF

// moduleInfo is what prepare collects before the code section to
// instrument it.
type moduleInfo struct {
	// typeParams is each function type's parameter count.
	typeParams []uint32
	// imported is how many functions are imported (they come first in the
	// function index space and run on the host: not charged).
	imported uint32
	// funcTypes is each defined function's type index.
	funcTypes []uint32
	// globals is how many globals the module defines: the stack global
	// is the next index (imported globals are refused).
	globals uint32
}

// stackGlobal returns the global section entry of the stack global: a
// mutable i32 initialized to 0.
func stackGlobal() []byte { return []byte{0x7f, 0x01, 0x41, 0x00, 0x0b} }

// bodyInfo is one function body, split at its code.
type bodyInfo struct {
	locals []byte // the local declarations, as they are
	code   []byte // the instructions, up to and including the final end
	cost   uint64
}

// instrumentCode rewrites a code section's payload so that every call
// charges the stack global (index global) its callee's frame cost, within
// stackBytes in all.
func instrumentCode(r *reader, info *moduleInfo, global uint32, stackBytes uint64) ([]byte, error) {
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	if n != uint32(len(info.funcTypes)) {
		return nil, fmt.Errorf("%d function bodies for %d functions", n, len(info.funcTypes))
	}
	bodies := make([]bodyInfo, n)
	var maxCost uint64
	for i := range bodies {
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(size)
		if err != nil {
			return nil, fmt.Errorf("function %d: %v", i, err)
		}
		b := &reader{b: body}
		decls, err := b.count()
		if err != nil {
			return nil, fmt.Errorf("function %d: locals: %v", i, err)
		}
		var locals uint64
		for j := uint32(0); j < decls; j++ {
			k, err := b.u32()
			if err != nil {
				return nil, fmt.Errorf("function %d: locals: %v", i, err)
			}
			if err := b.valueType(); err != nil {
				return nil, fmt.Errorf("function %d: locals: %v", i, err)
			}
			locals += uint64(k)
		}
		bodies[i].locals = body[:b.off]
		bodies[i].code = body[b.off:]
		ops, err := walkCode(bodies[i].code, nil)
		if err != nil {
			return nil, fmt.Errorf("function %d: %v", i, err)
		}
		t := info.funcTypes[i]
		if uint64(t) >= uint64(len(info.typeParams)) {
			return nil, fmt.Errorf("function %d: type %d out of range", i, t)
		}
		bodies[i].cost = frameBase + 8*(uint64(info.typeParams[t])+locals) + 8*uint64(ops)
		maxCost = max(maxCost, bodies[i].cost)
	}
	if maxCost > stackBytes {
		return nil, fmt.Errorf("a function's frame may take %d bytes of call stack, over the limit of %d (Limits.StackBytes)", maxCost, stackBytes)
	}
	limit := stackBytes - maxCost
	out := appendU32(nil, n)
	var code []byte
	for i := range bodies {
		code = append(code[:0], bodies[i].locals...)
		var werr error
		_, err := walkCode(bodies[i].code, func(op byte, imm []byte, callee int64) {
			if werr != nil {
				return
			}
			if (op == 0x23 || op == 0x24) && globalIndex(imm) >= uint64(info.globals) {
				// The stack global is the module's next index, which the
				// module's own code must not name: it is checked here
				// because wazero validates only the rewritten module.
				werr = fmt.Errorf("global.%s of global %d, out of range (the module has %d)",
					map[byte]string{0x23: "get", 0x24: "set"}[op], globalIndex(imm), info.globals)
				return
			}
			var cost uint64
			switch {
			case op == 0x10 && callee >= 0 && uint64(callee) >= uint64(info.imported):
				k := uint64(callee) - uint64(info.imported)
				if k >= uint64(len(bodies)) {
					werr = fmt.Errorf("call of function %d, out of range", callee)
					return
				}
				cost = bodies[k].cost
			case op == 0x11:
				cost = maxCost
			}
			if cost == 0 {
				code = append(code, op)
				code = append(code, imm...)
				return
			}
			code = appendCharge(code, global, cost, limit)
			code = append(code, op)
			code = append(code, imm...)
			code = appendRefund(code, global, cost)
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			return nil, fmt.Errorf("function %d: %v", i, err)
		}
		out = appendU32(out, uint32(len(code)))
		out = append(out, code...)
	}
	if r.off != len(r.b) {
		return nil, errors.New("trailing bytes after the function bodies")
	}
	return out, nil
}

// globalIndex decodes a global.get or global.set immediate (walkCode has
// checked it is a LEB128 u32).
func globalIndex(imm []byte) uint64 {
	r := &reader{b: imm}
	v, _ := r.u32()
	return uint64(v)
}

// appendCharge appends: global += cost; if global > limit { global =
// stackOverflowMark; unreachable }.
func appendCharge(b []byte, global uint32, cost, limit uint64) []byte {
	b = appendU32(append(b, 0x23), global) // global.get
	b = appendS32(append(b, 0x41), int32(cost))
	b = append(b, 0x6a)                    // i32.add
	b = appendU32(append(b, 0x24), global) // global.set
	b = appendU32(append(b, 0x23), global)
	b = appendS32(append(b, 0x41), int32(limit))
	b = append(b, 0x4b, 0x04, 0x40) // i32.gt_u; if (no result)
	b = appendS32(append(b, 0x41), -1)
	b = appendU32(append(b, 0x24), global)
	return append(b, 0x00, 0x0b) // unreachable; end
}

// appendRefund appends: global -= cost.
func appendRefund(b []byte, global uint32, cost uint64) []byte {
	b = appendU32(append(b, 0x23), global)
	b = appendS32(append(b, 0x41), int32(cost))
	b = append(b, 0x6b) // i32.sub
	return appendU32(append(b, 0x24), global)
}

// appendS32 appends v as a signed LEB128.
func appendS32(b []byte, v int32) []byte { return leb128.AppendInt(b, int64(v)) }

// walkCode decodes a function's instructions and returns how many there
// are; if each is set, it is called with every instruction's opcode byte
// and the rest of its bytes (prefix sub-opcode and immediates), and the
// function index of a call (-1 for anything else). Only the opcodes of
// the features the runtime enables (WebAssembly 2.0) are known; anything
// else is an error, which wazero's validator would give too.
func walkCode(code []byte, each func(op byte, imm []byte, callee int64)) (int, error) {
	r := &reader{b: code}
	ops := 0
	for r.off < len(code) {
		at := r.off
		op, _ := r.byte()
		callee := int64(-1)
		var err error
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if: block type
			err = r.blockType()
		case op == 0x0c || op == 0x0d: // br, br_if
			_, err = r.u32()
		case op == 0x0e: // br_table
			var n uint32
			if n, err = r.count(); err == nil {
				for i := uint32(0); i <= n && err == nil; i++ {
					_, err = r.u32()
				}
			}
		case op == 0x10: // call
			var f uint32
			f, err = r.u32()
			callee = int64(f)
		case op == 0x11: // call_indirect
			if _, err = r.u32(); err == nil {
				_, err = r.u32()
			}
		case op == 0x1c: // select t*
			var n uint32
			if n, err = r.count(); err == nil {
				for i := uint32(0); i < n && err == nil; i++ {
					err = r.valueType()
				}
			}
		case op >= 0x20 && op <= 0x26: // locals, globals, table.get/set
			_, err = r.u32()
		case op >= 0x28 && op <= 0x3e: // loads and stores: memarg
			err = r.memarg()
		case op == 0x3f || op == 0x40: // memory.size, memory.grow
			_, err = r.byte()
		case op == 0x41 || op == 0x42: // i32.const, i64.const
			err = r.skipLEB()
		case op == 0x43:
			_, err = r.bytes(4)
		case op == 0x44:
			_, err = r.bytes(8)
		case op == 0xd0: // ref.null heap type
			err = r.skipLEB()
		case op == 0xd2: // ref.func
			_, err = r.u32()
		case op == 0xfc:
			err = r.prefixFC()
		case op == 0xfd:
			err = r.prefixFD()
		case op <= 0x01, op == 0x05, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b,
			op >= 0x45 && op <= 0xc4, op == 0xd1:
			// no immediates
		default:
			return 0, fmt.Errorf("opcode %#x at byte %d is not supported", op, at)
		}
		if err != nil {
			return 0, fmt.Errorf("opcode %#x at byte %d: %v", op, at, err)
		}
		ops++
		if each != nil {
			each(op, code[at+1:r.off], callee)
		}
	}
	return ops, nil
}

// blockType skips a block type: empty, a value type, or a type index (s33).
func (r *reader) blockType() error {
	if r.off >= len(r.b) {
		return errTruncated
	}
	switch c := r.b[r.off]; c {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		r.off++
		return nil
	}
	return r.skipLEB()
}

// memarg skips a memory argument: alignment and offset.
func (r *reader) memarg() error {
	if err := r.skipLEB(); err != nil {
		return err
	}
	return r.skipLEB()
}

// prefixFC skips a 0xFC instruction: saturating truncations, bulk memory
// and table operations.
func (r *reader) prefixFC() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 7:
		return nil
	case sub == 8, sub == 12, sub == 14: // memory.init, table.init, table.copy
		if err := r.skipLEB(); err != nil {
			return err
		}
		return r.skipLEB()
	case sub == 9, sub == 13, sub == 15, sub == 16, sub == 17: // data.drop, elem.drop, table.grow/size/fill
		return r.skipLEB()
	case sub == 10: // memory.copy
		_, err := r.bytes(2)
		return err
	case sub == 11: // memory.fill
		_, err := r.byte()
		return err
	}
	return fmt.Errorf("0xfc %d is not supported", sub)
}

// prefixFD skips a SIMD instruction.
func (r *reader) prefixFD() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11, sub == 92, sub == 93: // loads and stores
		return r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		_, err := r.bytes(16)
		return err
	case sub >= 21 && sub <= 34: // extract and replace lane
		_, err := r.byte()
		return err
	case sub >= 84 && sub <= 91: // load and store lane
		if err := r.memarg(); err != nil {
			return err
		}
		_, err := r.byte()
		return err
	case sub <= 0xff:
		return nil
	}
	return fmt.Errorf("0xfd %d is not supported", sub)
}
