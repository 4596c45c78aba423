package offload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// A task may be a wasm module sent with its request (Request.Module)
// instead of a registered name. The module runs in wazero with no WASI
// and nothing else: its only imports are these functions of the module
// "offload", which reach the task's Env and so refuse what Env refuses
// (anything outside the task's files, a write to an input, I/O after the
// run ended). Integers are wasm i32 unless noted; ptr/n name a range of
// the module's memory.
//
//	offload_num_files() -> i32               the request's files
//	offload_size(i) -> i64                   file i's size (-1: no such file)
//	offload_writable(i) -> i32               1 if the task may write file i
//	offload_args(ptr, n) -> i32              copies up to n bytes of the
//	                                         arguments to ptr; their length
//	offload_read(i, off i64, ptr, n) -> i32  offload_read: n bytes of file i
//	                                         at off into ptr
//	offload_write(i, off i64, ptr, n) -> i32 offload_write: n bytes at ptr
//	                                         into file i at off
//	offload_output(ptr, n) -> i32            appends n bytes to the task's
//	                                         output (MaxOutput in all)
//
// Those returning a status return 0 for success or a negative WasmErr.
// The module exports its memory as "memory" and "run() -> i32", which
// the engine calls once per task: 0 is success, anything else fails the
// task with that code. A module that never returns is ended with its
// run (the engine's TaskTimeout, or the client's deadline); its memory
// is bounded by Config.WasmMemory.

// WasmErr is a status an offload_* function returns to a wasm task.
type WasmErr int32

// The statuses, as the module sees them (negative i32).
const (
	// WasmOutsideGrant: ErrOutsideGrant (also: no such file).
	WasmOutsideGrant WasmErr = -1
	// WasmEnded: the task's run has ended.
	WasmEnded WasmErr = -2
	// WasmIO: the device failed the I/O.
	WasmIO WasmErr = -3
	// WasmBadMemory: ptr/n is not inside the module's memory.
	WasmBadMemory WasmErr = -4
	// WasmOutputFull: the output would pass MaxOutput.
	WasmOutputFull WasmErr = -5
)

// MaxModule bounds a wasm task's module.
const MaxModule = 16 << 20

// defaultWasmMemory is Config.WasmMemory's default.
const defaultWasmMemory = 256 << 20

// wasmHost compiles and runs an engine's wasm tasks: one wazero runtime,
// the "offload" host module in it, and the modules compiled lately,
// keyed by their SHA-256, so a client sending the same module again does
// not pay for compiling it again.
type wasmHost struct {
	rt wazero.Runtime

	mu       sync.Mutex
	compiled map[[32]byte]wazero.CompiledModule
	order    [][32]byte // oldest first
}

// maxCompiled bounds the modules an engine keeps compiled.
const maxCompiled = 16

// wasmCallKey carries a call's state in the context its host functions get.
type wasmCallKey struct{}

// wasmCall is one running wasm task's state.
type wasmCall struct {
	env  *Env
	args []byte
	out  []byte
}

func newWasmHost(memory int64) (*wasmHost, error) {
	ctx := context.Background()
	pages := uint32(min(memory, 4<<30) / 65536)
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCloseOnContextDone(true).WithMemoryLimitPages(max(pages, 1)))
	b := rt.NewHostModuleBuilder("offload")
	fn := func(name string, params, results []api.ValueType, f func(c *wasmCall, m api.Module, s []uint64)) {
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
			f(ctx.Value(wasmCallKey{}).(*wasmCall), m, s)
		}), params, results).Export(name)
	}
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	fn("offload_num_files", nil, []api.ValueType{i32}, func(c *wasmCall, _ api.Module, s []uint64) {
		s[0] = uint64(c.env.NumFiles())
	})
	fn("offload_size", []api.ValueType{i32}, []api.ValueType{i64}, func(c *wasmCall, _ api.Module, s []uint64) {
		s[0] = uint64(c.env.Size(int(int32(s[0]))))
	})
	fn("offload_writable", []api.ValueType{i32}, []api.ValueType{i32}, func(c *wasmCall, _ api.Module, s []uint64) {
		w := c.env.Writable(int(int32(s[0])))
		s[0] = 0
		if w {
			s[0] = 1
		}
	})
	fn("offload_args", []api.ValueType{i32, i32}, []api.ValueType{i32}, func(c *wasmCall, m api.Module, s []uint64) {
		n := min(uint32(s[1]), uint32(len(c.args)))
		if !m.Memory().Write(uint32(s[0]), c.args[:n]) {
			s[0] = wasmStatus(WasmBadMemory)
			return
		}
		s[0] = uint64(len(c.args))
	})
	io := func(write bool) func(c *wasmCall, m api.Module, s []uint64) {
		return func(c *wasmCall, m api.Module, s []uint64) {
			i, off, ptr, n := int(int32(s[0])), int64(s[1]), uint32(s[2]), uint32(s[3])
			buf, ok := m.Memory().Read(ptr, n)
			if !ok {
				s[0] = wasmStatus(WasmBadMemory)
				return
			}
			var err error
			if write {
				_, err = c.env.WriteAt(c.env.ctx, i, buf, off)
			} else {
				_, err = c.env.ReadAt(c.env.ctx, i, buf, off)
			}
			s[0] = wasmStatus(wasmErrOf(err))
		}
	}
	fn("offload_read", []api.ValueType{i32, i64, i32, i32}, []api.ValueType{i32}, io(false))
	fn("offload_write", []api.ValueType{i32, i64, i32, i32}, []api.ValueType{i32}, io(true))
	fn("offload_output", []api.ValueType{i32, i32}, []api.ValueType{i32}, func(c *wasmCall, m api.Module, s []uint64) {
		buf, ok := m.Memory().Read(uint32(s[0]), uint32(s[1]))
		switch {
		case !ok:
			s[0] = wasmStatus(WasmBadMemory)
		case len(c.out)+len(buf) > MaxOutput:
			s[0] = wasmStatus(WasmOutputFull)
		default:
			c.out = append(c.out, buf...)
			s[0] = 0
		}
	})
	if _, err := b.Instantiate(ctx); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("offload: wasm host functions: %w", err)
	}
	return &wasmHost{rt: rt, compiled: map[[32]byte]wazero.CompiledModule{}}, nil
}

// wasmStatus is s as an i32 result.
func wasmStatus(s WasmErr) uint64 { return uint64(uint32(int32(s))) }

// wasmErrOf maps an Env error to the module's status.
func wasmErrOf(err error) WasmErr {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrOutsideGrant):
		return WasmOutsideGrant
	case errors.Is(err, ErrTaskEnded), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return WasmEnded
	default:
		return WasmIO
	}
}

// task compiles module (or finds it compiled) and returns it as a Task.
func (h *wasmHost) task(ctx context.Context, module []byte) (Task, error) {
	if len(module) > MaxModule {
		return nil, fmt.Errorf("%w: a wasm module of %d bytes, at most %d", ErrBadRequest, len(module), MaxModule)
	}
	key := sha256.Sum256(module)
	h.mu.Lock()
	cm, ok := h.compiled[key]
	h.mu.Unlock()
	if !ok {
		c, err := h.rt.CompileModule(ctx, module)
		if err != nil {
			return nil, fmt.Errorf("%w: wasm module: %w", ErrBadRequest, err)
		}
		if err := checkWasmModule(c); err != nil {
			c.Close(ctx)
			return nil, err
		}
		h.mu.Lock()
		if old, dup := h.compiled[key]; dup {
			c.Close(ctx)
			c = old
		} else {
			h.compiled[key] = c
			h.order = append(h.order, key)
			if len(h.order) > maxCompiled {
				// Instances of an evicted module keep running: wazero
				// closes compiled code only once no instance uses it.
				h.compiled[h.order[0]].Close(ctx)
				delete(h.compiled, h.order[0])
				h.order = h.order[1:]
			}
		}
		h.mu.Unlock()
		cm = c
	}
	return func(ctx context.Context, env *Env, args []byte) ([]byte, error) {
		call := &wasmCall{env: env, args: args}
		ctx = context.WithValue(ctx, wasmCallKey{}, call)
		mod, err := h.rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		if err != nil {
			return nil, fmt.Errorf("offload: wasm task: %w", err)
		}
		defer mod.Close(context.WithoutCancel(ctx))
		res, err := mod.ExportedFunction("run").Call(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: wasm task: %w", ErrTaskEnded, context.Cause(ctx))
			}
			return nil, fmt.Errorf("offload: wasm task: %w", err)
		}
		if code := int32(res[0]); code != 0 {
			return nil, fmt.Errorf("offload: wasm task: run returned %d", code)
		}
		return call.out, nil
	}, nil
}

// checkWasmModule wants "run() -> i32" and "memory" exported, and imports
// from "offload" only (the runtime has nothing else to link anyway; this
// says so plainly).
func checkWasmModule(c wazero.CompiledModule) error {
	for _, f := range c.ImportedFunctions() {
		if mod, name, _ := f.Import(); mod != "offload" {
			return fmt.Errorf("%w: a wasm task imports %s.%s; only the offload module's functions exist", ErrBadRequest, mod, name)
		}
	}
	for _, m := range c.ImportedMemories() {
		mod, name, _ := m.Import()
		return fmt.Errorf("%w: a wasm task imports memory %s.%s; it must define its own", ErrBadRequest, mod, name)
	}
	run, ok := c.ExportedFunctions()["run"]
	if !ok || len(run.ParamTypes()) != 0 || len(run.ResultTypes()) != 1 || run.ResultTypes()[0] != api.ValueTypeI32 {
		return fmt.Errorf("%w: a wasm task exports run() -> i32", ErrBadRequest)
	}
	if _, ok := c.ExportedMemories()["memory"]; !ok {
		return fmt.Errorf("%w: a wasm task exports its memory as \"memory\"", ErrBadRequest)
	}
	return nil
}

// close frees the runtime and the compiled modules.
func (h *wasmHost) close() {
	h.rt.Close(context.Background())
}
