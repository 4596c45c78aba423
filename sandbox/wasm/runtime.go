package wasm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nearstore/nearstore/sandbox"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Options configure a Runtime. The zero value is ready to use.
type Options struct {
	// CacheDir, if set, keeps compiled code in that directory so that a
	// restarted process does not compile its modules again (DefaultCacheDir
	// is the usual choice). Empty: an in-memory cache for the Runtime's
	// lifetime.
	CacheDir string
	// PoolSize is how many idle instances a module keeps for good
	// (default 256: a target runs one pushdown per goroutine, and bench
	// btree has hundreds in flight). Acquire never waits: past the pool
	// it takes a spare instance or instantiates; Release keeps instances
	// past PoolSize as spares until the GC drops them.
	PoolSize int
	// InitTimeout caps instantiating one instance, including a module's
	// start function and a Go module's runtime initialization (default 2s).
	InitTimeout time.Duration
	// Interpreter forces wazero's interpreter instead of its compiler (for
	// tests; the compiler is used wherever wazero supports it).
	Interpreter bool
}

// defaultPoolSize is Options.PoolSize's default. An idle C instance holds
// a few pages of linear memory (about 200 KiB for the standard functions),
// so a module that once ran 256 requests at a time keeps about 50 MiB.
const defaultPoolSize = 256

func (o Options) withDefaults() Options {
	if o.PoolSize <= 0 {
		o.PoolSize = defaultPoolSize
	}
	if o.InitTimeout <= 0 {
		o.InitTimeout = 2 * time.Second
	}
	return o
}

// DefaultCacheDir returns the usual Options.CacheDir:
// os.UserCacheDir()/nearstore/wazero.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("wasm: compilation cache: %w", err)
	}
	return filepath.Join(d, "nearstore", "wazero"), nil
}

// Runtime loads wasm functions. It is backed by one wazero runtime and
// compilation cache, shared by all its modules, and by one WASI preview 1
// host module for Go-built functions. It is safe for concurrent use.
type Runtime struct {
	opts  Options
	rt    wazero.Runtime
	cache wazero.CompilationCache
	// runner is the compiled step runner (steprun.go).
	runner wazero.CompiledModule
}

var _ sandbox.Runtime = (*Runtime)(nil)

// NewRuntime returns a Runtime. Close it to release its compiled code and
// instances.
func NewRuntime(ctx context.Context, opts Options) (*Runtime, error) {
	opts = opts.withDefaults()
	var cache wazero.CompilationCache
	if opts.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache in %s: %w", opts.CacheDir, err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	// NewRuntimeConfig picks the compiler wherever wazero supports it and
	// the interpreter elsewhere.
	cfg := wazero.NewRuntimeConfig()
	if opts.Interpreter {
		cfg = wazero.NewRuntimeConfigInterpreter()
	}
	cfg = cfg.
		WithCompilationCache(cache).
		// Every call runs under a deadline; this makes wazero check it in
		// loops and function prologues and close the instance when it
		// passes.
		WithCloseOnContextDone(true).
		// The per-module limit is written into each module's memory
		// section (see prepare); this is the ceiling for all of them.
		WithMemoryLimitPages(maxPages).
		WithDebugInfoEnabled(false)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	// WASI preview 1 for Go-built functions. Each instance gets its own
	// module config: no files, arguments, environment or network, stdout
	// and stderr discarded, and wazero's deterministic fake clocks and
	// random source.
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		cache.Close(ctx)
		return nil, fmt.Errorf("wasm: instantiating WASI: %w", err)
	}
	r := &Runtime{opts: opts, rt: rt, cache: cache}
	if err := r.instantiateHost(ctx); err != nil {
		rt.Close(ctx)
		cache.Close(ctx)
		return nil, err
	}
	return r, nil
}

// Kind reports sandbox.KindWasm.
func (r *Runtime) Kind() sandbox.Kind { return sandbox.KindWasm }

// Close closes every module loaded by r and frees the compiled code.
func (r *Runtime) Close(ctx context.Context) error {
	return errors.Join(r.rt.Close(ctx), r.cache.Close(ctx))
}

// Load verifies and compiles a module (see the package documentation for
// what is required of it) and instantiates it once, so that a module whose
// start function or runtime initialization fails is refused here; that
// instance becomes the first of the module's pool. Every call into the
// module obeys lim. Errors wrap sandbox.ErrBadModule.
func (r *Runtime) Load(ctx context.Context, module []byte, lim sandbox.Limits) (sandbox.Module, error) {
	m, err := r.load(ctx, module, lim)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (r *Runtime) load(ctx context.Context, module []byte, lim sandbox.Limits) (*Module, error) {
	lim = lim.WithDefaults()
	limitPages := uint32(min(uint64(lim.MemoryBytes)/pageSize, maxPages))
	if limitPages == 0 {
		return nil, fmt.Errorf("wasm: memory limit %d bytes is under one page: %w", lim.MemoryBytes, sandbox.ErrMemory)
	}
	bin, err := prepare(module, limitPages, uint64(lim.StackBytes))
	if err != nil {
		return nil, err
	}
	compiled, err := r.compile(ctx, bin)
	if err != nil {
		return nil, err
	}
	m := &Module{
		rt:       r,
		id:       sandbox.IDOf(module),
		lim:      lim,
		compiled: compiled,
	}
	if err := m.checkExports(); err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	s, err := m.instantiate(ctx)
	if err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	m.free = append(m.free, s)
	return m, nil
}

// compile compiles bin, turning a panic inside wazero into an error: a
// hostile module must not bring the process down.
func (r *Runtime) compile(ctx context.Context, bin []byte) (c wazero.CompiledModule, err error) {
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("%w: wasm: compiler failed: %v", sandbox.ErrBadModule, p)
		}
	}()
	c, err = r.rt.CompileModule(ctx, bin)
	if err != nil {
		return nil, fmt.Errorf("%w: wasm: %w", sandbox.ErrBadModule, err)
	}
	return c, nil
}
