package wasm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nearstore/nearstore/sandbox"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Export names of the ABI.
const (
	exportMemory   = "memory"
	exportPushdown = "pushdown"
	exportCompute  = "compute"
	exportHeapBase = "__heap_base"
	exportAlloc    = "ns_alloc"
	exportFree     = "ns_free"
	exportInit     = "_initialize"
	exportStart    = "_start"
)

// i32 is the only value type of the ABI.
const i32 = api.ValueTypeI32

// Module is a loaded wasm function. It is safe for concurrent use; see
// sandbox.Module.
type Module struct {
	rt       *Runtime
	id       sandbox.ID
	lim      sandbox.Limits
	compiled wazero.CompiledModule

	hasPushdown, hasCompute bool
	hasAlloc, hasFree       bool // Go-style buffers from ns_alloc (and ns_free)

	mu     sync.Mutex
	free   []*state // idle instances, at most Options.PoolSize
	closed bool
	// spares hold idle instances past PoolSize until the GC drops them
	// (their wazero modules are closed then: instantiate), one pool per
	// tenant, since an instance never serves another tenant (Acquire). A
	// target runs one pushdown per goroutine, so hundreds may be in
	// flight; without them, most would instantiate and close an instance
	// each.
	spares map[string]*sync.Pool
}

// sparesOf returns tenant's spare pool, making it; callers hold mu.
func (m *Module) sparesOf(tenant string) *sync.Pool {
	p := m.spares[tenant]
	if p == nil {
		if m.spares == nil {
			m.spares = map[string]*sync.Pool{}
		}
		p = &sync.Pool{}
		m.spares[tenant] = p
	}
	return p
}

var _ sandbox.Module = (*Module)(nil)

// ID returns the SHA-256 of the module's bytes as given to Load.
func (m *Module) ID() sandbox.ID { return m.id }

// Kind reports sandbox.KindWasm.
func (m *Module) Kind() sandbox.Kind { return sandbox.KindWasm }

// HasPushdown reports whether the module exports pushdown.
func (m *Module) HasPushdown() bool { return m.hasPushdown }

// HasCompute reports whether the module exports compute.
func (m *Module) HasCompute() bool { return m.hasCompute }

// Limits returns the limits every call obeys (with defaults filled in).
func (m *Module) Limits() sandbox.Limits { return m.lim }

// checkExports checks the exported functions and memory; the __heap_base
// global is checked when instantiating (wazero does not describe exported
// globals before that).
func (m *Module) checkExports() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: wasm: %s", sandbox.ErrBadModule, fmt.Sprintf(format, args...))
	}
	if _, ok := m.compiled.ExportedMemories()[exportMemory]; !ok {
		return bad("module does not export its memory as %q", exportMemory)
	}
	fns := m.compiled.ExportedFunctions()
	check := func(name string, params, results []api.ValueType) (bool, error) {
		f, ok := fns[name]
		if !ok {
			return false, nil
		}
		if !slices.Equal(f.ParamTypes(), params) || !slices.Equal(f.ResultTypes(), results) {
			return false, bad("export %q has type %s, want %s", name,
				sig(f.ParamTypes(), f.ResultTypes()), sig(params, results))
		}
		return true, nil
	}
	var err error
	if m.hasPushdown, err = check(exportPushdown, []api.ValueType{i32}, []api.ValueType{i32}); err != nil {
		return err
	}
	if m.hasCompute, err = check(exportCompute, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}); err != nil {
		return err
	}
	if !m.hasPushdown && !m.hasCompute {
		return bad("module exports neither %s (i32) -> i32 nor %s (i32, i32, i32, i32) -> i32",
			exportPushdown, exportCompute)
	}
	if m.hasAlloc, err = check(exportAlloc, []api.ValueType{i32}, []api.ValueType{i32}); err != nil {
		return err
	}
	if m.hasFree, err = check(exportFree, []api.ValueType{i32}, nil); err != nil {
		return err
	}
	if _, err := check(exportInit, nil, nil); err != nil {
		return err
	}
	if _, ok := fns[exportStart]; ok {
		if _, ok := fns[exportInit]; !ok {
			return bad("module is a WASI command (exports %s): build Go functions with -buildmode=c-shared", exportStart)
		}
	}
	return nil
}

func sig(params, results []api.ValueType) string {
	s := "("
	for i, p := range params {
		if i > 0 {
			s += ", "
		}
		s += api.ValueTypeName(p)
	}
	s += ") -> ("
	for i, r := range results {
		if i > 0 {
			s += ", "
		}
		s += api.ValueTypeName(r)
	}
	return s + ")"
}

// Acquire returns an idle instance that last ran for the same tenant
// (sandbox.WithTenant), or a new one if there is none, with its scratch
// zeroed.
//
// An instance's linear memory keeps whatever its requests left there —
// blocks read into the data buffer, its globals, heap and stack — and
// clearing it all would cost a copy of the whole memory per request (and
// could not restore a module's unexported globals). So instances are never
// shared across tenants: a tenant with no idle instance of its own gets a
// fresh one, and idle instances of other tenants are left, or evicted as
// the pool fills.
func (m *Module) Acquire(ctx context.Context) (sandbox.Instance, error) {
	s, err := m.idle(sandbox.TenantOf(ctx))
	if err != nil {
		return nil, err
	}
	if s == nil {
		if s, err = m.instantiate(ctx); err != nil {
			return nil, err
		}
		s.tenant = sandbox.TenantOf(ctx)
	}
	return m.ready(ctx, s)
}

// AcquireIdle is Acquire without making an instance: ok is false when the
// tenant has no idle one. Taking an idle instance runs no function code
// (only Acquire's instantiation runs the module's start code), so a
// caller that schedules function code on CPU slots needs no slot for it.
func (m *Module) AcquireIdle(ctx context.Context) (_ sandbox.Instance, ok bool, _ error) {
	s, err := m.idle(sandbox.TenantOf(ctx))
	if err != nil || s == nil {
		return nil, false, err
	}
	inst, err := m.ready(ctx, s)
	return inst, err == nil, err
}

// idle takes an idle instance of tenant from the pool or its spares, or
// returns nil.
func (m *Module) idle(tenant string) (*state, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errClosed
	}
	var s *state
	for i := len(m.free) - 1; i >= 0; i-- {
		if m.free[i].tenant == tenant {
			s = m.free[i]
			m.free = slices.Delete(m.free, i, i+1)
			break
		}
	}
	var spares *sync.Pool
	if s == nil {
		spares = m.spares[tenant]
	}
	m.mu.Unlock()
	if spares != nil {
		s, _ = spares.Get().(*state)
	}
	return s, nil
}

// ready zeroes s's scratch and hands it out.
func (m *Module) ready(ctx context.Context, s *state) (sandbox.Instance, error) {
	if err := s.reset(ctx); err != nil {
		s.close()
		return nil, err
	}
	return &instance{s: s}, nil
}

var errClosed = errors.New("wasm: module closed")

// keepBytes is the most linear memory an instance kept for good may
// have: one that grew for a large compute input or output is only a
// spare, so that a burst of large requests does not pin PoolSize times
// their memory.
const keepBytes = 1 << 20

// release takes an instance back, or closes it if it cannot be reused: it
// trapped or timed out (wazero closes an instance whose deadline passed,
// and a trap may leave its memory inconsistent) or the module is closed.
// Past PoolSize, or past keepBytes of memory, it goes to its tenant's
// spare pool.
func (m *Module) release(s *state) {
	if !s.broken {
		m.mu.Lock()
		if !m.closed && len(m.free) < m.rt.opts.PoolSize && s.mem.Size() <= keepBytes {
			m.free = append(m.free, s)
			m.mu.Unlock()
			return
		}
		closed := m.closed
		m.mu.Unlock()
		if !closed {
			// A spare's run call ends first (outside mu: it runs the
			// runner's way out), or it would keep the spare alive.
			s.stopRunner()
			m.mu.Lock()
			if !m.closed {
				m.sparesOf(s.tenant).Put(s)
				m.mu.Unlock()
				return
			}
			m.mu.Unlock()
		}
	}
	s.close()
}

// Close closes the idle instances and the compiled code. Instances in use
// are closed when released, spare ones when the GC drops them.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	free := m.free
	m.free = nil
	m.mu.Unlock()
	var errs []error
	for _, s := range free {
		s.stopRunner()
		if s.runner != nil {
			errs = append(errs, s.runner.Close(ctx))
		}
		errs = append(errs, s.mod.Close(ctx))
	}
	errs = append(errs, m.compiled.Close(ctx))
	return errors.Join(errs...)
}
