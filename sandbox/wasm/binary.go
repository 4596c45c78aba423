package wasm

import (
	"errors"
	"fmt"

	"github.com/nearstore/nearstore/internal/leb128"
	"github.com/nearstore/nearstore/sandbox"
)

// wasiModule is the only import module ever satisfied.
const wasiModule = "wasi_snapshot_preview1"

// pageSize is the size of a wasm memory page.
const pageSize = 1 << 16

// maxPages is the most pages a module may be allowed: one less than the
// 4 GiB of wasm32, so that sizes fit in a uint32.
const maxPages = 1<<16 - 1

// Section IDs of the binary format.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// Bounds on what a module may declare, checked before wazero decodes it:
// wazero sizes allocations from declared counts, so a few hostile bytes
// could otherwise make the host allocate gigabytes.
const (
	maxModuleBytes  = 64 << 20
	maxTableEntries = 1 << 17 // per table; a funcref is 8 bytes
	maxTables       = 16
	maxFuncLocals   = 50000 // per function, as in V8
	maxTotalLocals  = 1 << 22
)

var errTruncated = errors.New("truncated")

// reader decodes the parts of the binary format prepare needs; every read
// is bounds-checked, so arbitrary bytes never panic.
type reader struct {
	b   []byte
	off int
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// u32 reads an unsigned LEB128 value of at most 32 bits.
func (r *reader) u32() (uint32, error) {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c&0x70 != 0 {
			return 0, errors.New("LEB128 value overflows 32 bits")
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errors.New("LEB128 value too long")
}

func (r *reader) bytes(n uint32) ([]byte, error) {
	if uint64(n) > uint64(len(r.b)-r.off) {
		return nil, errTruncated
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(n)
	return string(b), err
}

// limits reads a limits entry (flags, min, optional max).
func (r *reader) limits() (flags byte, min, max uint32, err error) {
	if flags, err = r.byte(); err != nil {
		return
	}
	if min, err = r.u32(); err != nil {
		return
	}
	if flags&1 != 0 {
		max, err = r.u32()
	}
	return
}

// appendU32 appends v as an unsigned LEB128.
func appendU32(b []byte, v uint32) []byte { return leb128.AppendUint(b, uint64(v)) }

// prepare checks what the runtime requires of a module's binary form before
// wazero sees it, and returns the bytes to compile:
//
//   - the wasm magic and version 1, at most 64 MiB;
//   - imports: functions from wasi_snapshot_preview1 only (no memories,
//     tables or globals from anywhere);
//   - memory: at most one, not shared and not 64-bit, starting at no more
//     than limitPages pages;
//   - every vector count within its section's bytes, function locals
//     bounded, tables bounded: wazero allocates by declared counts.
//
// The memory's maximum is rewritten to min(declared maximum, limitPages),
// so that memory.grow fails in the guest, as the spec allows, once the
// instance reaches its limit: the per-module memory limit is part of the
// module itself, and modules loaded with different limits share one wazero
// runtime. Tables' maximums are capped the same way. Custom sections
// (names, debug information) are dropped. Everything else is left to
// wazero's decoder and validator.
//
// Every call is instrumented to keep the call stack within stackBytes
// (stack.go), which adds a global and its export.
func prepare(module []byte, limitPages uint32, stackBytes uint64) ([]byte, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: wasm: %s", sandbox.ErrBadModule, fmt.Sprintf(format, args...))
	}
	if len(module) < 8 || string(module[:4]) != "\x00asm" {
		return nil, bad("not a wasm module (bad magic)")
	}
	if string(module[4:8]) != "\x01\x00\x00\x00" {
		return nil, bad("unsupported binary version %x", module[4:8])
	}
	if len(module) > maxModuleBytes {
		return nil, bad("module is %d bytes, over %d", len(module), maxModuleBytes)
	}
	r := &reader{b: module, off: 8}
	out := make([]byte, 0, len(module))
	out = append(out, module[:8]...)
	memories := 0
	totalLocals := 0
	var info moduleInfo
	globalDone := false // the stack global is in out
	// addGlobal appends a global section holding only the stack global,
	// for a module without one.
	addGlobal := func() {
		if !globalDone {
			sec := append(appendU32(nil, 1), stackGlobal()...)
			out = append(out, secGlobal)
			out = appendU32(out, uint32(len(sec)))
			out = append(out, sec...)
			globalDone = true
		}
	}
	for r.off < len(module) {
		start := r.off
		id, _ := r.byte()
		size, err := r.u32()
		if err != nil {
			return nil, bad("section at offset %d: %v", start, err)
		}
		payload, err := r.bytes(size)
		if err != nil {
			return nil, bad("section %d at offset %d: size %d runs past the end", id, start, size)
		}
		p := &reader{b: payload}
		var sec []byte // a replacement payload
		switch id {
		case secCustom:
			continue // dropped
		case secType:
			info.typeParams, err = checkTypes(p)
		case secImport:
			info.imported, err = checkImports(p)
		case secFunction:
			info.funcTypes, err = p.indices()
		case secGlobal:
			sec, err = addStackGlobal(p, &info)
			globalDone = true
		case secExport:
			addGlobal()
			sec, err = addStackExport(p, info.globals)
		case secTag:
			_, err = p.count()
		case secTable:
			sec, err = capTables(p)
		case secMemory:
			memories++
			if memories > 1 {
				return nil, bad("more than one memory section")
			}
			sec, err = capMemory(p, limitPages)
		case secElement:
			err = checkElements(p)
		case secCode:
			if err = checkCode(p, &totalLocals); err == nil {
				if !globalDone {
					return nil, bad("module exports nothing")
				}
				sec, err = instrumentCode(&reader{b: payload}, &info, info.globals, stackBytes)
			}
		case secData:
			err = checkData(p)
		case secDataCount:
			var n uint32
			if n, err = p.u32(); err == nil && uint64(n) > uint64(len(module)) {
				err = fmt.Errorf("data count %d", n)
			}
		}
		if err != nil {
			return nil, bad("section %d: %v", id, err)
		}
		if sec == nil {
			out = append(out, module[start:r.off]...)
			continue
		}
		out = append(out, id)
		out = appendU32(out, uint32(len(sec)))
		out = append(out, sec...)
	}
	return out, nil
}

// count reads a vector's length and checks that its elements could fit in
// what is left (each takes at least one byte).
func (r *reader) count() (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n) > uint64(len(r.b)-r.off) {
		return 0, fmt.Errorf("vector of %d elements in %d bytes", n, len(r.b)-r.off)
	}
	return n, nil
}

// skipLEB skips a LEB128 value of up to 10 bytes.
func (r *reader) skipLEB() error {
	for i := 0; i < 10; i++ {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
	}
	return errors.New("LEB128 value too long")
}

// valueType skips a value type: one byte, or a ref type prefix and a heap
// type.
func (r *reader) valueType() error {
	c, err := r.byte()
	if err != nil {
		return err
	}
	if c == 0x63 || c == 0x64 { // (ref null ht), (ref ht)
		return r.skipLEB()
	}
	return nil
}

// constExpr skips a constant expression up to its end opcode.
func (r *reader) constExpr() error {
	for {
		op, err := r.byte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0b: // end
			return nil
		case 0x41, 0x42, 0x23, 0xd0, 0xd2: // i32/i64.const, global.get, ref.null, ref.func
			err = r.skipLEB()
		case 0x43: // f32.const
			_, err = r.bytes(4)
		case 0x44: // f64.const
			_, err = r.bytes(8)
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant arithmetic
		case 0xfd: // v128.const
			var sub uint32
			if sub, err = r.u32(); err == nil && sub != 12 {
				return fmt.Errorf("opcode 0xfd %d in a constant expression", sub)
			}
			_, err = r.bytes(16)
		default:
			return fmt.Errorf("opcode %#x in a constant expression", op)
		}
		if err != nil {
			return err
		}
	}
}

// checkTypes bounds the parameter and result counts of function types,
// and returns each type's parameter count.
func checkTypes(r *reader) ([]uint32, error) {
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	params := make([]uint32, 0, n)
	for i := uint32(0); i < n; i++ {
		form, err := r.byte()
		if err != nil {
			return nil, err
		}
		if form != 0x60 {
			return nil, fmt.Errorf("type %d: form %#x; only function types are supported", i, form)
		}
		for k := range 2 { // params, results
			m, err := r.count()
			if err != nil {
				return nil, fmt.Errorf("type %d: %v", i, err)
			}
			if k == 0 {
				params = append(params, m)
			}
			for j := uint32(0); j < m; j++ {
				if err := r.valueType(); err != nil {
					return nil, fmt.Errorf("type %d: %v", i, err)
				}
			}
		}
	}
	return params, nil
}

// indices reads a vector of u32 indices (the function section).
func (r *reader) indices() ([]uint32, error) {
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	v := make([]uint32, n)
	for i := range v {
		if v[i], err = r.u32(); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// addStackGlobal returns the global section with the stack global
// appended, counting the module's globals into info.
func addStackGlobal(r *reader, info *moduleInfo) ([]byte, error) {
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	info.globals = n
	sec := appendU32(nil, n+1)
	sec = append(sec, r.b[r.off:]...)
	return append(sec, stackGlobal()...), nil
}

// addStackExport returns the export section with the stack global's
// export (global index global) appended; a module exporting that name
// itself is refused.
func addStackExport(r *reader, global uint32) ([]byte, error) {
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	body := r.off
	for i := uint32(0); i < n; i++ {
		name, err := r.name()
		if err != nil {
			return nil, err
		}
		if name == exportStack {
			return nil, fmt.Errorf("export %q: the name is the runtime's", name)
		}
		if _, err := r.byte(); err != nil {
			return nil, err
		}
		if _, err := r.u32(); err != nil {
			return nil, err
		}
	}
	sec := appendU32(nil, n+1)
	sec = append(sec, r.b[body:r.off]...)
	sec = appendU32(sec, uint32(len(exportStack)))
	sec = append(sec, exportStack...)
	sec = append(sec, 0x03)
	return appendU32(sec, global), nil
}

// checkImports refuses any import but a function from
// wasi_snapshot_preview1, and returns how many there are.
func checkImports(r *reader) (uint32, error) {
	n, err := r.count()
	if err != nil {
		return 0, err
	}
	kinds := [...]string{"function", "table", "memory", "global", "tag"}
	for i := uint32(0); i < n; i++ {
		mod, err := r.name()
		if err != nil {
			return 0, fmt.Errorf("import %d: %v", i, err)
		}
		name, err := r.name()
		if err != nil {
			return 0, fmt.Errorf("import %d: %v", i, err)
		}
		kind, err := r.byte()
		if err != nil {
			return 0, fmt.Errorf("import %d: %v", i, err)
		}
		what := fmt.Sprintf("kind %d", kind)
		if int(kind) < len(kinds) {
			what = kinds[kind]
		}
		if mod != wasiModule || kind != 0 {
			return 0, fmt.Errorf("imports %s %q from %q: functions may import only WASI preview 1 functions (%s)",
				what, name, mod, wasiModule)
		}
		if _, err := r.u32(); err != nil { // type index
			return 0, fmt.Errorf("import %d: %v", i, err)
		}
	}
	return n, nil
}

// capTables re-encodes a table section with every table's size bounded by
// maxTableEntries.
func capTables(r *reader) ([]byte, error) {
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	if n > maxTables {
		return nil, fmt.Errorf("%d tables, over %d", n, maxTables)
	}
	sec := appendU32(nil, n)
	for i := uint32(0); i < n; i++ {
		rt, err := r.byte()
		if err != nil {
			return nil, err
		}
		if rt != 0x70 && rt != 0x6f { // funcref, externref
			return nil, fmt.Errorf("table %d: element type %#x not supported", i, rt)
		}
		flags, lo, hi, err := r.limits()
		if err != nil {
			return nil, fmt.Errorf("table %d: %v", i, err)
		}
		if flags > 1 {
			return nil, fmt.Errorf("table %d: limits flags %#x not supported", i, flags)
		}
		if lo > maxTableEntries {
			return nil, fmt.Errorf("table %d: %d entries, over %d", i, lo, maxTableEntries)
		}
		if flags == 0 || hi > maxTableEntries {
			hi = maxTableEntries
		}
		sec = append(sec, rt, 1)
		sec = appendU32(appendU32(sec, lo), hi)
	}
	if r.off != len(r.b) {
		return nil, errors.New("trailing bytes")
	}
	return sec, nil
}

// capMemory decodes a memory section and returns it re-encoded with its
// maximum capped at limitPages.
func capMemory(r *reader, limitPages uint32) ([]byte, error) {
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	switch {
	case n == 0:
		return []byte{0}, nil
	case n > 1:
		return nil, fmt.Errorf("%d memories; a function has one", n)
	}
	flags, lo, hi, err := r.limits()
	if err != nil {
		return nil, err
	}
	if flags > 1 {
		return nil, fmt.Errorf("memory flags %#x: shared or 64-bit memory is not supported", flags)
	}
	if r.off != len(r.b) {
		return nil, errors.New("trailing bytes")
	}
	if lo > limitPages {
		return nil, fmt.Errorf("memory starts at %d pages (%d bytes), over the limit of %d bytes",
			lo, uint64(lo)*pageSize, uint64(limitPages)*pageSize)
	}
	if flags&1 == 0 || hi > limitPages {
		hi = limitPages
	}
	sec := []byte{1, 1} // one memory, with a maximum
	sec = appendU32(sec, lo)
	return appendU32(sec, hi), nil
}

// checkElements bounds the vectors of element segments.
func checkElements(r *reader) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		flags, err := r.u32()
		if err != nil {
			return err
		}
		if flags > 7 {
			return fmt.Errorf("element segment %d: flags %d", i, flags)
		}
		if flags == 2 || flags == 6 { // table index
			if _, err := r.u32(); err != nil {
				return err
			}
		}
		if flags&1 == 0 { // active: offset expression
			if err := r.constExpr(); err != nil {
				return fmt.Errorf("element segment %d: %v", i, err)
			}
		}
		if flags&3 != 0 { // element kind or reference type
			if err := r.valueType(); err != nil {
				return err
			}
		}
		m, err := r.count()
		if err != nil {
			return fmt.Errorf("element segment %d: %v", i, err)
		}
		for j := uint32(0); j < m; j++ {
			if flags&4 == 0 {
				err = r.skipLEB() // function index
			} else {
				err = r.constExpr()
			}
			if err != nil {
				return fmt.Errorf("element segment %d: %v", i, err)
			}
		}
	}
	return nil
}

// checkCode bounds each function's locals, and all functions' together.
func checkCode(r *reader, total *int) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		size, err := r.u32()
		if err != nil {
			return err
		}
		body, err := r.bytes(size)
		if err != nil {
			return fmt.Errorf("function %d: %v", i, err)
		}
		b := &reader{b: body}
		decls, err := b.count()
		if err != nil {
			return fmt.Errorf("function %d: locals: %v", i, err)
		}
		locals := 0
		for j := uint32(0); j < decls; j++ {
			k, err := b.u32()
			if err != nil {
				return fmt.Errorf("function %d: locals: %v", i, err)
			}
			if err := b.valueType(); err != nil {
				return fmt.Errorf("function %d: locals: %v", i, err)
			}
			if uint64(locals)+uint64(k) > maxFuncLocals {
				return fmt.Errorf("function %d: over %d locals", i, maxFuncLocals)
			}
			locals += int(k)
		}
		if *total += locals; *total > maxTotalLocals {
			return fmt.Errorf("over %d locals in all", maxTotalLocals)
		}
	}
	return nil
}

// checkData bounds the data segments' sizes.
func checkData(r *reader) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		flags, err := r.u32()
		if err != nil {
			return err
		}
		switch flags {
		case 0:
			err = r.constExpr()
		case 1:
		case 2:
			if _, err = r.u32(); err == nil {
				err = r.constExpr()
			}
		default:
			return fmt.Errorf("data segment %d: flags %d", i, flags)
		}
		if err != nil {
			return fmt.Errorf("data segment %d: %v", i, err)
		}
		m, err := r.u32()
		if err != nil {
			return err
		}
		if _, err := r.bytes(m); err != nil {
			return fmt.Errorf("data segment %d: %d bytes: %v", i, m, err)
		}
	}
	return nil
}
