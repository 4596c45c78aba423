package offload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures an engine.
type Config struct {
	// HostNQN is the host NQN the engine reaches the volume as: owners
	// grant to it.
	HostNQN string
	// Device is the volume; Admit, if set, admits every access through
	// the target's grants (the in-target engine).
	Device Device
	Admit  Admit
	// BeforeTask, if set, runs before each admitted task. A peer engine
	// registers its host as a writer of the namespace there
	// (RegisterTaskHost): the target drops a grantee's registration when
	// its last grant ends, so one made at start lasts only until the
	// first task's grants are released.
	BeforeTask func(ctx context.Context) error
	// Tasks are the tasks the engine runs.
	Tasks *Registry
	// CacheBytes is the offload cache's budget; 0 caches nothing.
	CacheBytes int64
	// Admission is the admission policy.
	Admission Admission
	// WasmMemory bounds a wasm task's memory, in bytes (default 256 MiB,
	// at most 4 GiB); negative: the engine runs registered tasks only
	// and refuses modules.
	WasmMemory int64
	// TaskTimeout ends a task that runs longer (default 5 minutes).
	TaskTimeout time.Duration
	// CPU samples the machine's CPU use, 0 to 1, for PolicyCPU (default:
	// /proc/stat, every CPUInterval, by default 200ms).
	CPU         func() float64
	CPUInterval time.Duration
	// Now is the clock tokens expire by (default time.Now).
	Now     func() time.Time
	Logger  *slog.Logger
	Metrics *Metrics
}

// Engine runs tasks. Its methods are safe for concurrent use.
type Engine struct {
	cfg     Config
	bs      uint64
	blocks  uint64
	adm     *admission
	cache   *Cache
	wasm    *wasmHost // nil: no wasm tasks
	running atomic.Int64
	log     *slog.Logger

	stop chan struct{}
	wg   sync.WaitGroup
}

// Info describes an engine.
type Info struct {
	HostNQN    string   `json:"host_nqn"`
	Policy     Policy   `json:"policy"`
	CPU        float64  `json:"cpu"`
	Running    int      `json:"running"`
	TokensFree int      `json:"tokens_free"`
	Tasks      []string `json:"tasks"`
}

// NewEngine checks cfg and starts an engine (for PolicyCPU, its CPU
// sampler, which Close stops).
func NewEngine(cfg Config) (*Engine, error) {
	switch {
	case cfg.HostNQN == "":
		return nil, errors.New("offload: engine: a host NQN is needed")
	case cfg.Device == nil:
		return nil, errors.New("offload: engine: a device is needed")
	case cfg.Tasks == nil:
		return nil, errors.New("offload: engine: tasks are needed")
	}
	bs := cfg.Device.BlockSize()
	if bs <= 0 || cfg.Device.Size() <= 0 {
		return nil, fmt.Errorf("offload: engine: device of %d bytes in %d-byte blocks", cfg.Device.Size(), bs)
	}
	adm, err := newAdmission(cfg.Admission)
	if err != nil {
		return nil, err
	}
	if cfg.TaskTimeout <= 0 {
		cfg.TaskTimeout = 5 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CPUInterval <= 0 {
		cfg.CPUInterval = 200 * time.Millisecond
	}
	e := &Engine{
		cfg: cfg, bs: uint64(bs), blocks: uint64(cfg.Device.Size()) / uint64(bs),
		adm: adm, cache: NewCache(cfg.CacheBytes), log: cfg.Logger, stop: make(chan struct{}),
	}
	if cfg.WasmMemory >= 0 {
		if cfg.WasmMemory == 0 {
			cfg.WasmMemory = defaultWasmMemory
		}
		if e.wasm, err = newWasmHost(cfg.WasmMemory); err != nil {
			return nil, err
		}
	}
	if adm.cfg.Policy == PolicyCPU {
		sample := cfg.CPU
		if sample == nil {
			var ps procStat
			ps.sample()
			sample = ps.sample
		}
		e.wg.Add(1)
		go e.sampleCPU(sample)
	}
	cfg.Metrics.engineGauges(e)
	return e, nil
}

// sampleCPU feeds admission the CPU use until Close.
func (e *Engine) sampleCPU(sample func() float64) {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.CPUInterval)
	defer t.Stop()
	for {
		e.adm.observeCPU(sample())
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
	}
}

// Close stops the CPU sampler and ends wasm tasks still running; Go
// tasks running go on to their ends.
func (e *Engine) Close() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
		if e.wasm != nil {
			e.wasm.close()
		}
	}
	e.wg.Wait()
}

func (e *Engine) now() time.Time { return e.cfg.Now() }

func (e *Engine) cpuUse() float64 {
	e.adm.mu.Lock()
	defer e.adm.mu.Unlock()
	return e.adm.cpu
}

// Cache returns the engine's offload cache (nil without one).
func (e *Engine) Cache() *Cache { return e.cache }

// Info describes the engine now.
func (e *Engine) Info() Info {
	return Info{
		HostNQN: e.cfg.HostNQN, Policy: e.adm.cfg.Policy, CPU: e.cpuUse(),
		Running: int(e.running.Load()), TokensFree: e.adm.free(e.now()), Tasks: e.cfg.Tasks.Names(),
	}
}

// AcquireToken gives client a token under PolicyTokens, or fails with
// ErrRejected when none is free for it.
func (e *Engine) AcquireToken(client string) (uint64, time.Time, error) {
	return e.adm.acquire(client, e.now())
}

// ReleaseToken takes a token back.
func (e *Engine) ReleaseToken(id uint64) { e.adm.release(id) }

// Run runs a task to its end, as the package's rules say: admitted or
// turned away (ErrRejected) before it touches anything, its I/O confined
// to its files, and over when Run returns.
func (e *Engine) Run(ctx context.Context, req Request) (Result, error) {
	task, err := e.lookup(ctx, &req)
	if err != nil {
		return Result{}, err
	}
	if err := e.validate(req.Files); err != nil {
		e.cfg.Metrics.task(req.Task, "error")
		return Result{}, err
	}
	if err := e.adm.admit(req.Client, req.Token, e.now()); err != nil {
		e.cfg.Metrics.task(req.Task, "rejected")
		return Result{}, err
	}
	e.running.Add(1)
	e.cfg.Metrics.runningDelta(1)
	defer func() {
		e.running.Add(-1)
		e.cfg.Metrics.runningDelta(-1)
	}()
	res, err := e.run(ctx, task, req)
	e.cfg.Metrics.io(res.Stats)
	switch {
	case errors.Is(err, ErrTaskEnded):
		e.cfg.Metrics.task(req.Task, "ended")
	case err != nil:
		e.cfg.Metrics.task(req.Task, "error")
	default:
		e.cfg.Metrics.task(req.Task, "ok")
		e.adm.ran(req.Client)
	}
	return res, err
}

// lookup returns req's task: its module compiled, or the task registered
// under its name. A wasm task is named "wasm" in metrics and errors,
// whatever name it was sent with: names of modules are the client's to
// choose, and metrics' labels must stay few.
func (e *Engine) lookup(ctx context.Context, req *Request) (Task, error) {
	if len(req.Module) == 0 {
		task, ok := e.cfg.Tasks.Lookup(req.Task)
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownTask, req.Task)
		}
		return task, nil
	}
	req.Task = "wasm"
	if e.wasm == nil {
		return nil, fmt.Errorf("%w: this engine runs no wasm tasks", ErrUnknownTask)
	}
	return e.wasm.task(ctx, req.Module)
}

// run runs an admitted task.
func (e *Engine) run(ctx context.Context, task Task, req Request) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.TaskTimeout)
	defer cancel()
	if e.cfg.BeforeTask != nil {
		if err := e.cfg.BeforeTask(ctx); err != nil {
			return Result{}, err
		}
	}
	env := &Env{
		ctx: ctx, files: req.Files, dev: e.cfg.Device, bs: e.bs, admit: e.cfg.Admit, cache: e.cache,
		pinned: map[pageKey]*page{}, written: make([]uint64, len(req.Files)),
	}
	type ret struct {
		out []byte
		err error
	}
	done := make(chan ret, 1)
	go func() {
		var r ret
		defer func() {
			if p := recover(); p != nil {
				r = ret{err: fmt.Errorf("offload: task %s panicked: %v", req.Task, p)}
			}
			done <- r
		}()
		r.out, r.err = task(ctx, env, req.Args)
	}()
	var r ret
	select {
	case r = <-done:
	case <-ctx.Done():
		r.err = fmt.Errorf("%w: task %s: %w", ErrTaskEnded, req.Task, context.Cause(ctx))
		go func() {
			<-done
			e.log.Info("offload: a task ended after its run did", "task", req.Task)
		}()
	}
	env.close() // from here the task touches nothing
	env.statMu.Lock()
	res := Result{Written: env.written, Stats: env.stats}
	env.statMu.Unlock()
	if r.err == nil && ctx.Err() != nil {
		r.err = fmt.Errorf("%w: task %s: %w", ErrTaskEnded, req.Task, context.Cause(ctx))
	}
	if r.err != nil {
		return res, r.err
	}
	if len(r.out) > MaxOutput {
		return res, fmt.Errorf("offload: task %s returned %d bytes, at most %d", req.Task, len(r.out), MaxOutput)
	}
	res.Output = r.out
	if res.Stats.BytesWritten > 0 {
		if err := e.cfg.Device.Flush(ctx); err != nil {
			return res, fmt.Errorf("offload: task %s: flushing its writes: %w", req.Task, err)
		}
	}
	return res, nil
}

// validate checks that the files' extents lie inside the device and
// cover their sizes.
func (e *Engine) validate(files []File) error {
	for i, f := range files {
		var blocks uint64
		for j, x := range f.Extents {
			if x.Blocks == 0 || x.LBA >= e.blocks || uint64(x.Blocks) > e.blocks-x.LBA {
				return fmt.Errorf("%w: file %d extent %d [%d, +%d) outside the device's %d blocks", ErrBadRequest, i, j, x.LBA, x.Blocks, e.blocks)
			}
			blocks += uint64(x.Blocks)
		}
		if f.Size > math.MaxUint64-e.bs || blocks < (f.Size+e.bs-1)/e.bs {
			return fmt.Errorf("%w: file %d: %d blocks of %d bytes hold less than its %d bytes", ErrBadRequest, i, blocks, e.bs, f.Size)
		}
	}
	return nil
}
