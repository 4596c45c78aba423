package ebpf

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/nearstore/nearstore/sandbox"
)

// Running translated programs (wasmgen.go) in wazero.

// wasmRuntime returns the Runtime's wazero runtime, making it on first use:
// the compiler where wazero has one, no per-call context watching (the
// translated code checks its budgets and the clock itself, so a call
// costs no goroutine), and the host module the programs import.
func (rt *Runtime) wasmRuntime(ctx context.Context) (wazero.Runtime, error) {
	rt.wOnce.Do(func() {
		cfg := wazero.NewRuntimeConfig().
			WithMemoryLimitPages(maxWasmPage).
			WithDebugInfoEnabled(false)
		r := wazero.NewRuntimeWithConfig(context.Background(), cfg)
		b := r.NewHostModuleBuilder(hostModuleName)
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostFaultFn), []api.ValueType{api.ValueTypeI32, api.ValueTypeI64}, nil).Export(hostFault)
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostCheckFn), []api.ValueType{api.ValueTypeI32, api.ValueTypeI64}, []api.ValueType{api.ValueTypeI64}).Export(hostCheck)
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostBackFn), []api.ValueType{api.ValueTypeI32}, nil).Export(hostBackJumps)
		if _, err := b.Instantiate(context.Background()); err != nil {
			r.Close(context.Background())
			rt.wErr = fmt.Errorf("ebpf: host module for translated programs: %w", err)
			return
		}
		rt.w = r
	})
	if rt.w == nil && rt.wErr == nil {
		return nil, errors.New("ebpf: runtime closed")
	}
	return rt.w, rt.wErr
}

// translated is a program compiled through wasm.
type translated struct {
	compiled wazero.CompiledModule
	// dynOff is where the data (pushdown) or input (compute) starts in
	// linear memory.
	dynOff uint32
}

func align16(v uint64) uint64 { return (v + 15) &^ 15 }

func pagesFor(bytes uint64) uint32 {
	return uint32(min((bytes+wasmPage-1)/wasmPage, maxWasmPage))
}

// compileProgram translates and compiles p, or returns nil if it cannot
// be translated (the interpreter runs it then).
func (m *module) compileProgram(ctx context.Context, p *program, compute bool) (*translated, error) {
	if p == nil || m.rt.interpretOnly || (!compute && !m.rt.translatePushdown) || !translatable(p) {
		return nil, nil
	}
	dyn := align16(uint64(memRodata) + uint64(len(m.rodata)))
	var minB, maxB uint64
	if compute {
		minB = dyn
		maxB = dyn + uint64(m.lim.MemoryBytes) + 16 + uint64(m.lim.MaxOutput)
	} else {
		minB = dyn + uint64(m.lim.MaxStepBytes)
		maxB = minB
	}
	if maxB > uint64(maxWasmPage)*wasmPage {
		return nil, nil // too large for wasm32: interpret
	}
	r, err := m.rt.wasmRuntime(ctx)
	if err != nil {
		return nil, err
	}
	bin := translate(p, pagesFor(minB), max(pagesFor(maxB), 1), m.lim.MaxInstructions, m.lim.MaxBackJumps)
	c, err := r.CompileModule(ctx, bin)
	if err != nil {
		return nil, fmt.Errorf("ebpf: internal error: compiling %s translated to wasm: %w", p.label, err)
	}
	return &translated{compiled: c, dynOff: uint32(dyn)}, nil
}

// wasmInst is one instance of a translated program: its linear memory
// holds the region table and every region its calls map.
type wasmInst struct {
	t   *translated
	p   *program
	mod api.Module
	mem api.Memory
	run api.Function
	// m mirrors the region table for the interpreter's fault messages;
	// its regions alias linear memory during a call.
	m *machine
	// inCap and outCap are the compute buffers' sizes; output follows
	// input.
	inCap, outCap uint32
	stack         [5]uint64
}

func (m *module) instantiate(ctx context.Context, t *translated, p *program) (*wasmInst, error) {
	r, err := m.rt.wasmRuntime(ctx)
	if err != nil {
		return nil, err
	}
	mod, err := r.InstantiateModule(ctx, t.compiled, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		return nil, fmt.Errorf("ebpf: instantiating a translated program: %w", err)
	}
	w := &wasmInst{t: t, p: p, mod: mod, mem: mod.ExportedMemory("memory"), run: mod.ExportedFunction("run"), m: &machine{}}
	buf := w.view()
	copy(buf[memRodata:], m.rodata)
	return w, nil
}

func (w *wasmInst) close() { _ = w.mod.Close(context.Background()) }

// view returns all of linear memory; it moves when memory grows.
func (w *wasmInst) view() []byte {
	b, _ := w.mem.Read(0, w.mem.Size())
	return b
}

// ensure grows linear memory to at least end bytes.
func (w *wasmInst) ensure(end uint64) error {
	size := uint64(w.mem.Size())
	if end <= size {
		return nil
	}
	if _, ok := w.mem.Grow(uint32((end - size + wasmPage - 1) / wasmPage)); !ok {
		return fmt.Errorf("%w: ebpf: cannot grow memory to %d bytes", sandbox.ErrMemory, end)
	}
	return nil
}

func (w *wasmInst) outOff() uint32 { return uint32(align16(uint64(w.t.dynOff) + uint64(w.inCap))) }

// mapRegions writes the region table for a call and mirrors it in w.m.
// Lengths of 0 unmap a region.
func (w *wasmInst) mapRegions(buf []byte, rodataLen, dataLen, inLen, outLen uint32, pushdown bool) {
	set := func(r int, base uint64, vlo, length, wbase uint32, perm uint8) {
		putTable(buf, r, vlo, length, wbase, perm)
		w.m.regions[r] = region{base: base, buf: buf[wbase : wbase+length : wbase+length], perm: perm}
	}
	// As in the interpreter, the context and scratch stay mapped for
	// compute too.
	set(regionCtx, ctxAddr, 0, ctxSize, memCtx, permCtx)
	set(regionScratch, scratchAddr, 0, sandbox.ScratchSize, memScratch, permRW)
	const lo = maxDepth * frameSize // frame 0 only: no calls are translated
	set(regionStack, stackAddr+lo, lo, frameSize, memStack, permRW)
	set(regionRodata, rodataAddr, 0, rodataLen, memRodata, permRO)
	if pushdown {
		set(regionData, dataAddr, 0, dataLen, w.t.dynOff, permRO)
		set(regionInput, inputAddr, 0, 0, 0, permRO)
		set(regionOutput, outputAddr, 0, 0, 0, permRW)
	} else {
		set(regionData, dataAddr, 0, 0, 0, permRO)
		set(regionInput, inputAddr, 0, inLen, w.t.dynOff, permRO)
		set(regionOutput, outputAddr, 0, outLen, w.outOff(), permRW)
	}
}

// callKey finds the instance in the context of a call.
type callKey struct{}

// callCtx is a call's context: the caller's, plus what the host
// functions need. One per instance, reused, so a call does not allocate.
type callCtx struct {
	context.Context
	w    *wasmInst
	st   runState
	trap error
}

func (c *callCtx) Value(key any) any {
	if key == (callKey{}) {
		return c
	}
	return c.Context.Value(key)
}

func callOf(ctx context.Context) *callCtx {
	c, _ := ctx.Value(callKey{}).(*callCtx)
	if c == nil {
		panic(errors.New("ebpf: host function called outside a translated program"))
	}
	return c
}

func hostFaultFn(ctx context.Context, _ api.Module, stack []uint64) {
	c := callOf(ctx)
	i, a := int(int32(uint32(stack[0]))), stack[1]
	p := c.w.p
	kind := "load"
	if i >= 0 && i < len(p.insns) && isStore(p.insns[i].op) {
		kind = "store"
	}
	size := uint64(8)
	if i >= 0 && i < len(p.insns) {
		size = sizeOf(p.insns[i].op)
	}
	c.trap = c.w.m.fault(p, i, kind, a, size)
}

func hostCheckFn(ctx context.Context, _ api.Module, stack []uint64) {
	c := callOf(ctx)
	c.st.executed = stack[1]
	if err := c.st.check(int(int32(uint32(stack[0])))); err != nil {
		c.trap = err
		stack[0] = ^uint64(0)
		return
	}
	stack[0] = c.st.checkAt
}

func hostBackFn(ctx context.Context, _ api.Module, stack []uint64) {
	c := callOf(ctx)
	c.trap = fmt.Errorf("%w: %s: %d backward jumps taken, the limit", sandbox.ErrTimeout, c.w.p.where(int(int32(uint32(stack[0])))), c.st.lim.MaxBackJumps)
}

// call runs the translated program with R1-R5 = args and returns R0.
func (in *instance) callWasm(ctx context.Context, w *wasmInst, args [5]uint64) (uint64, error) {
	lim := &in.m.lim
	deadline := time.Now().Add(lim.Time)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c := &in.cc
	*c = callCtx{Context: ctx, w: w}
	c.st = runState{ctx: ctx, p: w.p, lim: lim, deadline: deadline, done: ctx.Done(), checkAt: min(lim.MaxInstructions, clockEvery)}
	defer func() { c.Context, c.w, c.st.ctx, c.st.done = nil, nil, nil, nil }()
	w.stack = args
	err := w.run.CallWithStack(c, w.stack[:])
	if c.trap != nil {
		return 0, c.trap
	}
	if err != nil {
		// The translation checks every access before it is made, so a
		// trap of wazero's own is a bug here; refuse the result.
		return 0, fmt.Errorf("%w: ebpf: internal error: %s translated to wasm trapped: %w", sandbox.ErrMemory, w.p.label, err)
	}
	return w.stack[0], nil
}

// stepWasm is Step for a translated pushdown entry.
func (in *instance) stepWasm(ctx context.Context, w *wasmInst, curFile uint32, curOffset uint64, n int) (bool, []sandbox.Next, error) {
	if n < 0 || n > in.wDataLen || n > in.m.lim.MaxStepBytes {
		return false, nil, fmt.Errorf("%w: step over %d bytes of data, but Data gave %d", sandbox.ErrMemory, n, in.wDataLen)
	}
	in.dataHigh = max(in.dataHigh, n)
	buf := w.view()
	c := stepCtx(buf[memCtx:memCtx+ctxSize], curFile, curOffset, n)
	w.mapRegions(buf, uint32(len(in.m.rodata)), uint32(n), 0, 0, true)
	r0, err := in.callWasm(ctx, w, [5]uint64{ctxAddr})
	if err != nil {
		return false, nil, err
	}
	return in.stepResult(r0, c)
}

// computeWasm is Compute for a translated compute entry.
func (in *instance) computeWasm(ctx context.Context, w *wasmInst, inLen, outCap int) (uint64, error) {
	buf := w.view()
	w.mapRegions(buf, uint32(len(in.m.rodata)), 0, uint32(inLen), uint32(outCap), false)
	return in.callWasm(ctx, w, [5]uint64{inputAddr, uint64(inLen), outputAddr, uint64(outCap)})
}
