package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"runtime"

	"github.com/nearstore/nearstore/sandbox"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Byte offsets of struct bpf_xrp in wasm32 (docs/ABI.md).
const (
	offData     = 0
	offDone     = 4
	offNextAddr = 8
	offSize     = 136
	offScratch  = 264
	offNextFile = 268
	offCurFile  = 332
	offDataLen  = 336
	offCurAddr  = 344
	ctxSize     = 352
)

// minAlloc is the smallest input or output buffer a Go module is asked for;
// larger ones are rounded up to a power of two, so a request stream of
// growing sizes reallocates a logarithmic number of times.
const minAlloc = 4096

// buf is one buffer in linear memory.
type buf struct{ ptr, cap uint32 }

// state is one wazero module instance and its buffers. It is used by one
// request at a time and pooled by its Module.
type state struct {
	m   *Module
	mod api.Module
	mem api.Memory

	pushdown, compute, alloc, free api.Function
	// depth is the stack depth global the runtime adds (stack.go).
	depth api.Global

	// runner calls pushdown once per step, inside one call to run that
	// lasts from the instance's first request until stopRunner
	// (steprun.go): pull resumes it with a request, stop ends it, and
	// yield, inside it, hands a request back. rc is the call's context,
	// drive the request's state, runStack the call's parameter stack.
	runner   api.Module
	run      api.Function
	rc       *runCtx
	drive    driving
	pull     func() (error, bool)
	stop     func()
	yield    func(error) bool
	runStack [1]uint64

	// Buffers. C modules: fixed layout from __heap_base (ctx, scratch,
	// data, then input and output). Go modules: from ns_alloc.
	ctx, scratch, data, in, out buf
	// base is where a C module's compute buffers start.
	base uint32

	// stack is the parameter and result stack of calls, reused so calls
	// do not allocate.
	stack [4]uint64
	// resultLen is the result length the last finished step set.
	resultLen int
	// broken: the instance trapped, timed out or failed an allocation, so
	// it is not reused.
	broken bool
	// tenant is whose requests the instance runs (sandbox.WithTenant): it
	// never runs another's.
	tenant string
}

func align16(v uint64) uint64 { return (v + 15) &^ 15 }

// instantiate makes a new instance and lays out (C) or allocates (Go) its
// pushdown buffers.
func (m *Module) instantiate(ctx context.Context) (*state, error) {
	ictx, cancel := context.WithTimeout(ctx, m.rt.opts.InitTimeout)
	defer cancel()
	cfg := wazero.NewModuleConfig().
		WithName(""). // anonymous: instances of one module must not clash
		WithStartFunctions(exportInit)
	mod, err := m.rt.rt.InstantiateModule(ictx, m.compiled, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("wasm: instantiating: %w", ctx.Err())
		}
		if ictx.Err() != nil {
			return nil, fmt.Errorf("%w: wasm: instantiating took over %v: %w",
				sandbox.ErrBadModule, m.rt.opts.InitTimeout, sandbox.ErrTimeout)
		}
		return nil, fmt.Errorf("%w: wasm: instantiating: %w", sandbox.ErrBadModule, err)
	}
	s := &state{
		m:        m,
		mod:      mod,
		mem:      mod.ExportedMemory(exportMemory),
		pushdown: mod.ExportedFunction(exportPushdown),
		compute:  mod.ExportedFunction(exportCompute),
		depth:    mod.ExportedGlobal(exportStack),
	}
	if m.hasAlloc {
		s.alloc = mod.ExportedFunction(exportAlloc)
		if m.hasFree {
			s.free = mod.ExportedFunction(exportFree)
		}
	} else {
		g := mod.ExportedGlobal(exportHeapBase)
		if g == nil || g.Type() != api.ValueTypeI32 {
			mod.Close(ctx)
			return nil, fmt.Errorf("%w: wasm: module exports neither the global %s (i32) nor %s (i32) -> i32, so its buffers cannot be placed",
				sandbox.ErrBadModule, exportHeapBase, exportAlloc)
		}
		s.base = uint32(align16(uint64(uint32(g.Get()))))
	}
	if m.hasPushdown {
		if err := s.layoutPushdown(ctx); err != nil {
			s.close()
			return nil, err
		}
		if err := s.instantiateRunner(ctx); err != nil {
			s.close()
			return nil, err
		}
	}
	// A spare instance (Module.spares) is closed when the GC drops it;
	// closing twice is harmless.
	runtime.AddCleanup(s, func(mods [2]api.Module) {
		for _, mod := range mods {
			if mod != nil {
				_ = mod.Close(context.Background())
			}
		}
	}, [2]api.Module{s.mod, s.runner})
	if s.alloc == nil {
		// C compute buffers: input at base, output after it.
		s.in = buf{s.base, 0}
		s.out = buf{s.base, 0}
	}
	return s, nil
}

// layoutPushdown places the context and scratch (and, for C modules,
// reserves the data area up to MaxStepBytes; memory is grown as Data asks).
func (s *state) layoutPushdown(ctx context.Context) error {
	if s.alloc != nil {
		var err error
		if s.ctx, err = s.allocate(ctx, buf{}, ctxSize, false); err != nil {
			return err
		}
		if s.scratch, err = s.allocate(ctx, buf{}, sandbox.ScratchSize, false); err != nil {
			return err
		}
		s.data, err = s.allocate(ctx, buf{}, uint64(s.m.lim.MaxStepBytes), false)
		return err
	}
	step := align16(uint64(s.m.lim.MaxStepBytes))
	end := uint64(s.base) + ctxSize + sandbox.ScratchSize
	if err := s.ensure(end); err != nil {
		return fmt.Errorf("%w (placing the pushdown context at __heap_base %d)", err, s.base)
	}
	s.ctx = buf{s.base, ctxSize}
	s.scratch = buf{s.base + ctxSize, sandbox.ScratchSize}
	s.data = buf{uint32(end), uint32(step)}
	if end+step > uint64(s.limitBytes()) {
		return fmt.Errorf("%w: wasm: pushdown buffers (%d bytes from __heap_base %d) do not fit the memory limit of %d bytes",
			sandbox.ErrMemory, end+step-uint64(s.base), s.base, s.limitBytes())
	}
	s.base = uint32(end + step)
	return nil
}

// limitBytes is the instance's memory limit.
func (s *state) limitBytes() uint32 {
	max, _ := s.mem.Definition().Max()
	return max * pageSize
}

// ensure grows memory so that it is at least end bytes long.
func (s *state) ensure(end uint64) error {
	size := uint64(s.mem.Size())
	if end <= size {
		return nil
	}
	pages := (end - size + pageSize - 1) / pageSize
	if end > uint64(s.limitBytes()) || pages > maxPages {
		return fmt.Errorf("%w: wasm: needs %d bytes of linear memory, limit %d", sandbox.ErrMemory, end, s.limitBytes())
	}
	if _, ok := s.mem.Grow(uint32(pages)); !ok {
		return fmt.Errorf("%w: wasm: cannot grow linear memory to %d bytes", sandbox.ErrMemory, end)
	}
	return nil
}

// allocate returns a Go module's buffer of at least n bytes: b if it is
// large enough, else a new one from ns_alloc (giving b back to ns_free),
// its size rounded up to a power of two if round is set.
func (s *state) allocate(ctx context.Context, b buf, n uint64, round bool) (buf, error) {
	if n <= uint64(b.cap) && b.ptr != 0 {
		return b, nil
	}
	if n > uint64(s.limitBytes()) {
		return b, fmt.Errorf("%w: wasm: buffer of %d bytes over the memory limit of %d", sandbox.ErrMemory, n, s.limitBytes())
	}
	if round {
		n = min(max(minAlloc, uint64(1)<<bits.Len64(n-1)), uint64(s.limitBytes()))
	}
	if b.ptr != 0 && s.free != nil {
		if _, err := s.call(ctx, s.free, exportFree, uint64(b.ptr)); err != nil {
			return buf{}, err
		}
	}
	p, err := s.call(ctx, s.alloc, exportAlloc, n)
	if err != nil {
		return buf{}, err
	}
	ptr := uint32(p)
	if ptr == 0 || uint64(ptr)+n > uint64(s.mem.Size()) {
		s.broken = true
		return buf{}, fmt.Errorf("%w: wasm: %s(%d) returned %#x, not a buffer inside its %d bytes of memory",
			sandbox.ErrMemory, exportAlloc, n, ptr, s.mem.Size())
	}
	return buf{ptr, uint32(n)}, nil
}

// reset prepares a pooled instance for a new request: zero scratch.
func (s *state) reset(context.Context) error {
	if s.scratch.cap == 0 {
		return nil
	}
	b, ok := s.mem.Read(s.scratch.ptr, sandbox.ScratchSize)
	if !ok {
		s.broken = true
		return fmt.Errorf("%w: wasm: scratch outside linear memory", sandbox.ErrMemory)
	}
	clear(b)
	return nil
}

func (s *state) close() {
	s.stopRunner()
	// Closing only releases wazero's bookkeeping for the instance, and
	// the context is not used by it.
	if s.runner != nil {
		_ = s.runner.Close(context.Background())
	}
	_ = s.mod.Close(context.Background())
}

// read returns the n bytes of linear memory at b. The slice aliases linear
// memory, until the memory next grows.
func (s *state) read(b buf, n uint32) []byte {
	v, ok := s.mem.Read(b.ptr, n)
	if !ok {
		return nil
	}
	return v
}

// call calls fn with params under the module's time limit and returns its
// first result. Any failure marks the instance broken.
func (s *state) call(ctx context.Context, fn api.Function, name string, params ...uint64) (uint64, error) {
	if s.broken {
		return 0, errBroken
	}
	cctx, cancel := context.WithTimeout(ctx, s.m.lim.Time)
	defer cancel()
	stack := s.stack[:max(len(params), 1)]
	copy(stack, params)
	err := fn.CallWithStack(cctx, stack)
	if err == nil && cctx.Err() != nil {
		// The deadline passed as the call returned: wazero may have
		// closed the instance, and the call took its whole budget anyway.
		err = cctx.Err()
	}
	if err != nil {
		s.broken = true
		return 0, s.classify(ctx, name, err)
	}
	return stack[0], nil
}

// classify is Module.classify, knowing a call that went past the stack
// limit by the stack global's mark.
func (s *state) classify(ctx context.Context, name string, err error) error {
	if s.depth != nil && uint32(s.depth.Get()) == stackOverflowMark {
		return fmt.Errorf("%w: wasm: %s: call stack over its limit of %d bytes (recursion too deep)",
			sandbox.ErrMemory, name, s.m.lim.StackBytes)
	}
	return s.m.classify(ctx, name, err)
}

var errBroken = errors.New("wasm: instance unusable after an earlier failure")

// instance is the handle Acquire returns; Release clears it, so a stale
// handle cannot touch an instance another request now owns.
type instance struct{ s *state }

var errReleased = errors.New("wasm: instance used after Release")

// Data returns the buffer the next Step reads its block(s) from.
func (h *instance) Data(n int) ([]byte, error) {
	s := h.s
	if s == nil {
		return nil, errReleased
	}
	if s.pushdown == nil {
		return nil, fmt.Errorf("wasm: Data: %w (pushdown)", sandbox.ErrNoEntry)
	}
	if n < 0 || n > s.m.lim.MaxStepBytes {
		return nil, fmt.Errorf("%w: wasm: Data(%d) over MaxStepBytes (%d)", sandbox.ErrMemory, n, s.m.lim.MaxStepBytes)
	}
	if s.alloc == nil {
		if err := s.ensure(uint64(s.data.ptr) + uint64(n)); err != nil {
			return nil, err
		}
	}
	return s.read(s.data, uint32(n)), nil
}

// Scratch returns the request's scratch (nil if the module has no
// pushdown entry). Call it again after each Step: the slice aliases linear
// memory, which a step may grow (and so move).
func (h *instance) Scratch() []byte {
	s := h.s
	if s == nil || s.scratch.cap == 0 {
		return nil
	}
	return s.read(s.scratch, sandbox.ScratchSize)
}

// ResultLen returns the result length the last finished step set.
func (h *instance) ResultLen() int {
	if h.s == nil {
		return 0
	}
	return h.s.resultLen
}

// Step runs one pushdown step on the first n bytes of Data.
func (h *instance) Step(ctx context.Context, curFile uint32, curOffset uint64, n int) (bool, []sandbox.Next, error) {
	s := h.s
	if s == nil {
		return false, nil, errReleased
	}
	if s.pushdown == nil {
		return false, nil, fmt.Errorf("wasm: Step: %w (pushdown)", sandbox.ErrNoEntry)
	}
	if err := s.setStep(curFile, curOffset, n); err != nil {
		return false, nil, err
	}
	ret, err := s.call(ctx, s.pushdown, exportPushdown, uint64(s.ctx.ptr))
	if err != nil {
		return false, nil, err
	}
	return s.stepResult(int32(ret), nil)
}

// setStep fills in the context for a step on the first n bytes of Data,
// which came from file curFile at curOffset.
func (s *state) setStep(curFile uint32, curOffset uint64, n int) error {
	if n < 0 || n > s.m.lim.MaxStepBytes || uint64(n) > uint64(s.data.cap) || s.data.ptr == 0 {
		return fmt.Errorf("wasm: Step with %d bytes but Data gave at most %d", n, s.data.cap)
	}
	c := s.read(s.ctx, ctxSize)
	if c == nil {
		s.broken = true
		return fmt.Errorf("%w: wasm: context outside linear memory", sandbox.ErrMemory)
	}
	le := binary.LittleEndian
	clear(c)
	le.PutUint32(c[offData:], s.data.ptr)
	le.PutUint32(c[offScratch:], s.scratch.ptr)
	le.PutUint32(c[offCurFile:], curFile)
	le.PutUint32(c[offDataLen:], uint32(n))
	le.PutUint64(c[offCurAddr:], curOffset)
	return nil
}

// stepResult reads what a step that returned code asked for: done, or the
// reads it asks for next, appended to next.
func (s *state) stepResult(code int32, next []sandbox.Next) (bool, []sandbox.Next, error) {
	if code < 0 {
		return false, nil, &sandbox.FunctionError{Code: code}
	}
	le := binary.LittleEndian
	c := s.read(s.ctx, ctxSize) // memory may have moved
	if c == nil {
		s.broken = true
		return false, nil, fmt.Errorf("%w: wasm: context outside linear memory", sandbox.ErrMemory)
	}
	if le.Uint32(c[offDone:]) != 0 {
		n, err := sandbox.ResultLen(le.Uint64(c[offSize:]))
		if err != nil {
			return false, nil, err
		}
		s.resultLen = n
		return true, nil, nil
	}
	var total uint64
	for i := 0; i < sandbox.MaxFanout; i++ {
		size := le.Uint64(c[offSize+8*i:])
		if size == 0 {
			break
		}
		if size > uint64(s.m.lim.MaxStepBytes) || total+size > uint64(s.m.lim.MaxStepBytes) {
			return false, nil, fmt.Errorf("%w: wasm: step asks for more than MaxStepBytes (%d) (read %d is %d bytes, %d before it)",
				sandbox.ErrStep, s.m.lim.MaxStepBytes, i, size, total)
		}
		total += size
		next = append(next, sandbox.Next{
			File:   le.Uint32(c[offNextFile+4*i:]),
			Offset: le.Uint64(c[offNextAddr+8*i:]),
			Len:    size,
		})
	}
	if len(next) == 0 {
		return false, nil, fmt.Errorf("%w: wasm: pushdown returned 0 with neither done set nor a read asked for", sandbox.ErrStep)
	}
	return false, next, nil
}

// Input returns the compute entry's input buffer of n bytes. It may move
// the output buffer (whose contents are then lost): call Input first.
func (h *instance) Input(n int) ([]byte, error) {
	s := h.s
	if s == nil {
		return nil, errReleased
	}
	if s.compute == nil {
		return nil, fmt.Errorf("wasm: Input: %w (compute)", sandbox.ErrNoEntry)
	}
	if n < 0 {
		return nil, fmt.Errorf("wasm: Input(%d)", n)
	}
	if s.alloc != nil {
		b, err := s.allocate(context.Background(), s.in, uint64(n), true)
		if err != nil {
			return nil, err
		}
		s.in = b
		return s.read(s.in, uint32(n)), nil
	}
	if uint64(n) > uint64(s.in.cap) {
		// Input at base, output after it: growing the input moves the
		// output.
		if err := s.ensure(uint64(s.in.ptr) + uint64(n)); err != nil {
			return nil, err
		}
		s.in.cap = uint32(n)
		s.out = buf{uint32(align16(uint64(s.in.ptr) + uint64(n))), 0}
	}
	return s.read(s.in, uint32(n)), nil
}

// Output returns the compute entry's output buffer of n bytes (n at most
// Limits.MaxOutput).
func (h *instance) Output(n int) ([]byte, error) {
	s := h.s
	if s == nil {
		return nil, errReleased
	}
	if s.compute == nil {
		return nil, fmt.Errorf("wasm: Output: %w (compute)", sandbox.ErrNoEntry)
	}
	if n < 0 || n > s.m.lim.MaxOutput {
		return nil, fmt.Errorf("%w: wasm: Output(%d) over MaxOutput (%d)", sandbox.ErrOutput, n, s.m.lim.MaxOutput)
	}
	if s.alloc != nil {
		b, err := s.allocate(context.Background(), s.out, uint64(n), true)
		if err != nil {
			return nil, err
		}
		s.out = b
		return s.read(s.out, uint32(n)), nil
	}
	if uint64(n) > uint64(s.out.cap) {
		if err := s.ensure(uint64(s.out.ptr) + uint64(n)); err != nil {
			return nil, err
		}
		s.out.cap = uint32(n)
	}
	return s.read(s.out, uint32(n)), nil
}

// Compute calls compute(input, inLen, output, outCap).
func (h *instance) Compute(ctx context.Context, inLen, outCap int) (int, error) {
	s := h.s
	if s == nil {
		return 0, errReleased
	}
	if s.compute == nil {
		return 0, fmt.Errorf("wasm: Compute: %w (compute)", sandbox.ErrNoEntry)
	}
	if inLen < 0 || outCap < 0 || uint64(inLen) > uint64(s.in.cap) || uint64(outCap) > uint64(s.out.cap) {
		return 0, fmt.Errorf("wasm: Compute(%d, %d) past the buffers Input and Output gave (%d, %d bytes)",
			inLen, outCap, s.in.cap, s.out.cap)
	}
	ret, err := s.call(ctx, s.compute, exportCompute,
		uint64(s.in.ptr), uint64(inLen), uint64(s.out.ptr), uint64(outCap))
	if err != nil {
		return 0, err
	}
	n := int32(ret)
	if n < 0 {
		return 0, &sandbox.FunctionError{Code: n}
	}
	if int(n) > outCap || int(n) > s.m.lim.MaxOutput {
		return 0, fmt.Errorf("%w: wasm: compute returned length %d, output buffer %d bytes (MaxOutput %d)",
			sandbox.ErrOutput, n, outCap, s.m.lim.MaxOutput)
	}
	return int(n), nil
}

// Release returns the instance to its module's pool (or closes it if it
// broke). The handle is unusable afterwards.
func (h *instance) Release() {
	if s := h.s; s != nil {
		h.s = nil
		s.m.release(s)
	}
}
