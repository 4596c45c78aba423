package lambda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// Mode is where a λ call runs.
type Mode int

// Modes, in λ-IO's names: the dispatcher (λ), the sandboxed function on
// the host (K), at the target (T), and plain buffered I/O with native
// compute (B).
const (
	Auto     Mode = iota // "lambda": the dispatcher picks Host or Target per request
	Host                 // "K": read through the host cache, run the same sandboxed function on the host
	Target               // "T": run at the target (offloadfs File.LambdaRead/LambdaWrite)
	Buffered             // "B": plain buffered I/O through the cache and native Go compute on the host
)

// String returns λ-IO's name of the mode: "lambda", "K", "T" or "B".
func (m Mode) String() string {
	switch m {
	case Auto:
		return "lambda"
	case Host:
		return "K"
	case Target:
		return "T"
	case Buffered:
		return "B"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// ParseMode parses a mode: lambda, λ or auto; K or host; T or target; B
// or buffered (any case).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "lambda", "λ", "auto":
		return Auto, nil
	case "k", "host":
		return Host, nil
	case "t", "target":
		return Target, nil
	case "b", "buffered":
		return Buffered, nil
	}
	return 0, fmt.Errorf("lambda: unknown mode %q (want lambda, K, T or B): %w", s, iofs.ErrInvalid)
}

// ParseModes parses a comma-separated list of modes, such as "B,K,T,lambda".
func ParseModes(s string) ([]Mode, error) {
	var out []Mode
	for part := range strings.SplitSeq(s, ",") {
		m, err := ParseMode(part)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// Errors of the dispatcher.
var (
	// ErrNoNative: mode B for a function registered without a native
	// implementation.
	ErrNoNative = errors.New("lambda: function has no native implementation (mode B)")
	// ErrNotRegistered: a host-side mode for a function not registered
	// with the dispatcher (mode T and Auto send it to the target).
	ErrNotRegistered = errors.New("lambda: function not registered with the dispatcher")
)

// Function is one λ function: its module (wasm or eBPF), run at the target
// and in the host's sandbox, and its native Go twin for mode B.
type Function struct {
	Name   string
	Module []byte
	Native func(in, out []byte) (int, error) // nil: mode B is refused for it (ErrNoNative)
}

// ReadCall is one λ read: Fn's compute entry run on Params followed by
// File's bytes [Off, Off+N), its output at most OutCap bytes.
type ReadCall struct {
	File   *offloadfs.File
	Fn     sandbox.ID
	Off    int64
	N      int
	Params []byte
	OutCap int
}

// WriteCall is one λ write: Fn's compute entry run on Params followed by
// Data, its output written into File's bytes [Off, Off+N), which must be
// whole device blocks.
type WriteCall struct {
	File         *offloadfs.File
	Fn           sandbox.ID
	Off          int64
	N            int
	Params, Data []byte
}

// Options configure a Dispatcher.
type Options struct {
	Runtimes     []sandbox.Runtime // host-side runtimes for mode K (required)
	Limits       sandbox.Limits    // for host-side runs (zero: sandbox defaults)
	Metrics      *Metrics          // nil: none (Stats has the counts regardless)
	Cache        *Cache            // nil: NewCache(DefaultCacheSize, 0)
	ProfileEvery int               // n: every n requests per (file, function)... (default 200)
	ProfileFirst int               // k: ...the first k run on both sides and are measured (default 5)
	// ReadAhead is how many ranges a sequential stream of reads at the
	// target keeps in flight past the one called for (the policy's rule
	// 8; 0: DefaultReadAhead; negative: none).
	ReadAhead int
	Logger    *slog.Logger
}

// Defaults of Options.
const (
	DefaultProfileEvery = 200
	DefaultProfileFirst = 5
	DefaultReadAhead    = 2
)

// Stats are a dispatcher's cumulative counters and current models.
type Stats struct {
	Requests   uint64          // calls taken
	Ran        map[Mode]uint64 // where calls finally ran: Host, Target, Buffered (Auto never appears)
	Profiled   uint64          // profiled calls: reads run on both sides (or on each side in turn, after the host was picked and at rechecks), writes on each side in turn
	Races      uint64          // profiled reads run on both sides at once, the first to finish answering
	Rechecks   uint64          // profiles begun early because the model's pick changed
	Probations uint64          // switches of side that brought the next scheduled profile closer
	AheadSent  uint64          // reads sent to the target ahead of the call that continues a sequential stream
	AheadUsed  uint64          // calls answered by what was read ahead for them (counted in Ran where it ran: the target, or the host where the file system fell back)
	Models     []ModelStat     // per (file inode, function): the current fitted model
}

// ModelStat is one (file, function)'s fitted model and how many finished
// runs it rests on.
type ModelStat struct {
	Ino     uint64
	Fn      sandbox.ID
	Model   Model
	Samples int
}

// hostFunction is a registered function's host side.
type hostFunction struct {
	name   string
	mod    sandbox.Module
	native func(in, out []byte) (int, error)
}

// key names one (file, function) pair: the unit the profiler schedules
// and the model is fitted for.
type key struct {
	ino uint64
	fn  sandbox.ID
}

// keyState is a key's dispatch policy, under its lock, and the reads
// sent ahead for the key's next calls (the policy's rule 8), in order.
type keyState struct {
	mu    sync.Mutex
	p     policy
	ahead []*aheadRead
}

// takeAhead removes and returns the key's reads sent ahead.
func (ks *keyState) takeAhead() []*aheadRead {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	a := ks.ahead
	ks.ahead = nil
	return a
}

// putAhead makes a the key's reads sent ahead, in place of any others
// (whose results are then not used).
func (ks *keyState) putAhead(a []*aheadRead) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.ahead = a
}

// decide asks ks's policy how a request runs.
func (ks *keyState) decide(r request) decision {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.p.decide(r)
}

// observeRead feeds ks's policy a read's measurement (picked: see
// policy.observeRead).
func (ks *keyState) observeRead(s readSample, picked Mode) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.p.observeRead(s, picked)
}

// observeWrite feeds ks's policy a finished write's measurement.
func (ks *keyState) observeWrite(side Mode, n, out int64, took time.Duration, picked bool) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.p.observeWrite(side, n, out, took, picked)
}

// Dispatcher runs λ reads and writes on the host or at the target (see
// the package documentation). It is safe for concurrent use.
type Dispatcher struct {
	fsys  *offloadfs.FS
	opts  Options
	cache *Cache
	log   *slog.Logger
	lim   sandbox.Limits
	bs    int64
	// schedule is every key's profiling schedule (Options.ProfileEvery
	// and ProfileFirst).
	schedule schedule

	mu     sync.Mutex
	fns    map[sandbox.ID]*hostFunction
	keys   map[key]*keyState
	closed bool

	requests, profiled, races, rechecks, probations atomic.Uint64
	ran                                             [4]atomic.Uint64 // by Mode
	// bg counts the calls in progress and the losing sides of profiles
	// still finishing, which may outlive their calls; Close waits for
	// them. Every Add happens under mu with closed false, or while the
	// caller's own count is held, so none races with Close's Wait.
	bg sync.WaitGroup
	// losers counts, under mu, the losing sides of profiles whose calls
	// have returned; idle is closed (and replaced) when it drops to zero.
	losers int
	idle   chan struct{}
	// inputs holds mode B's input buffers (*[]byte) between calls.
	inputs sync.Pool
	// aheadCtx runs the reads sent ahead, which outlive the calls that
	// send them; Close cancels it (stopAhead).
	aheadCtx  context.Context
	stopAhead context.CancelFunc
	// aheadSent and aheadUsed count the reads sent ahead and those whose
	// result answered a call (Stats).
	aheadSent, aheadUsed atomic.Uint64
}

// input returns a buffer of n bytes for mode B's input, reused from an
// earlier call when one is large enough, as a buffered application
// reads request after request into the same buffer, so that B's cost is
// its I/O and compute rather than its allocations (with a large host
// cache on the heap, fresh buffers each call came from new memory every
// time; docs/BENCHMARKS.md, "B's first round").
func (d *Dispatcher) input(n int) *[]byte {
	if p, ok := d.inputs.Get().(*[]byte); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n)
	return &b
}

// WaitProfiles waits until the losing sides of profiled calls that have
// already returned stop, and the reads sent ahead finish, or ctx ends. A
// profiled call returns when its faster side does; the slower one is
// cancelled and measured when it stops, which takes a moment more; and a
// call that continues a sequential stream at the target may have sent
// the next range ahead (the policy's rule 8). A benchmark that times
// calls in one mode against another waits for this, so the leftover is
// charged to the calls that made it rather than to whatever runs next.
func (d *Dispatcher) WaitProfiles(ctx context.Context) error {
	d.mu.Lock()
	if d.losers == 0 {
		d.mu.Unlock()
		return nil
	}
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	idle := d.idle
	d.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loserStart counts in a profile's side that may outlive its call
// (Close and WaitProfiles wait for it); loserDone counts it out. The
// caller holds its own call's count, so the Add cannot race Close.
func (d *Dispatcher) loserStart() {
	d.bg.Add(1)
	d.mu.Lock()
	d.losers++
	d.mu.Unlock()
}

// loserDone counts a profile's losing side out.
func (d *Dispatcher) loserDone() {
	defer d.bg.Done()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.losers--; d.losers == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
}

// enter counts a call in (Close waits for it), or refuses it after Close.
func (d *Dispatcher) enter() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("lambda: dispatcher: %w", iofs.ErrClosed)
	}
	d.bg.Add(1)
	return nil
}

// New makes a dispatcher for fsys. Calls that want dispatch go through
// its Read and Write; the file system's own File.LambdaRead and
// LambdaWrite are its mode T and do not come back here.
func New(ctx context.Context, fsys *offloadfs.FS, opts Options) (*Dispatcher, error) {
	if fsys == nil {
		return nil, fmt.Errorf("lambda: no file system: %w", iofs.ErrInvalid)
	}
	if len(opts.Runtimes) == 0 {
		return nil, fmt.Errorf("lambda: no host runtimes (Options.Runtimes): %w", iofs.ErrInvalid)
	}
	if opts.Cache == nil {
		opts.Cache = NewCache(DefaultCacheSize, 0)
	}
	if opts.ProfileEvery <= 0 {
		opts.ProfileEvery = DefaultProfileEvery
	}
	if opts.ProfileFirst <= 0 {
		opts.ProfileFirst = DefaultProfileFirst
	}
	opts.ProfileFirst = min(opts.ProfileFirst, opts.ProfileEvery)
	switch {
	case opts.ReadAhead == 0:
		opts.ReadAhead = DefaultReadAhead
	case opts.ReadAhead < 0:
		opts.ReadAhead = 0
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	aheadCtx, stopAhead := context.WithCancel(context.WithoutCancel(ctx))
	d := &Dispatcher{
		aheadCtx: aheadCtx, stopAhead: stopAhead,
		fsys:     fsys,
		opts:     opts,
		cache:    opts.Cache,
		log:      opts.Logger,
		lim:      opts.Limits.WithDefaults(),
		bs:       int64(fsys.DeviceBlockSize()),
		schedule: schedule{every: uint64(opts.ProfileEvery), first: uint64(opts.ProfileFirst)},
		fns:      make(map[sandbox.ID]*hostFunction),
		keys:     make(map[key]*keyState),
	}
	return d, nil
}

// Register loads fn into the host runtime of its kind (for mode K) and at
// the target (fsys.RegisterFunction, which also gives the file system its
// own host fallback), and returns its ID. Registering a function again
// loads it at the target again, which is how to restore a restarted
// target's functions.
func (d *Dispatcher) Register(ctx context.Context, fn Function) (sandbox.ID, error) {
	kind, err := sandbox.DetectKind(fn.Module)
	if err != nil {
		return sandbox.ID{}, fmt.Errorf("lambda: register %s: %w", fn.Name, err)
	}
	id := sandbox.IDOf(fn.Module)
	d.mu.Lock()
	closed, have := d.closed, d.fns[id] != nil
	d.mu.Unlock()
	if closed {
		return id, fmt.Errorf("lambda: register %s: %w", fn.Name, iofs.ErrClosed)
	}
	if !have {
		var rt sandbox.Runtime
		for _, r := range d.opts.Runtimes {
			if r.Kind() == kind {
				rt = r
				break
			}
		}
		if rt == nil {
			return id, fmt.Errorf("lambda: register %s: no %s runtime on the host (Options.Runtimes): %w", fn.Name, kind, iofs.ErrInvalid)
		}
		mod, err := rt.Load(ctx, fn.Module, d.opts.Limits)
		if err != nil {
			return id, fmt.Errorf("lambda: register %s on the host: %w", fn.Name, err)
		}
		if !mod.HasCompute() {
			_ = mod.Close(ctx)
			return id, fmt.Errorf("lambda: register %s: %w: no compute entry", fn.Name, sandbox.ErrNoEntry)
		}
		// One instance now, so the first measured run does not pay for
		// instantiating the module.
		if inst, err := mod.Acquire(ctx); err == nil {
			inst.Release()
		}
		hf := &hostFunction{name: fn.Name, mod: mod, native: fn.Native}
		d.mu.Lock()
		if d.fns[id] == nil && !d.closed {
			d.fns[id] = hf
			hf = nil
		}
		d.mu.Unlock()
		if hf != nil {
			_ = hf.mod.Close(ctx)
		}
	}
	if _, err := d.fsys.RegisterFunction(ctx, fn.Module); err != nil {
		return id, fmt.Errorf("lambda: register %s: %w", fn.Name, err)
	}
	return id, nil
}

// Cache returns the dispatcher's host cache.
func (d *Dispatcher) Cache() *Cache { return d.cache }

// ProfileSchedule returns the profiling schedule in use, after defaults:
// of every n requests per (file, function), the first k are profiled.
func (d *Dispatcher) ProfileSchedule() (n, k int) {
	return d.opts.ProfileEvery, d.opts.ProfileFirst
}

// ReadAhead returns how many ranges a sequential stream of reads at the
// target keeps in flight past the one called for (Options.ReadAhead,
// after defaults).
func (d *Dispatcher) ReadAhead() int { return d.opts.ReadAhead }

// Stats returns the dispatcher's counters and models.
func (d *Dispatcher) Stats() Stats {
	st := Stats{Requests: d.requests.Load(), Profiled: d.profiled.Load(), Races: d.races.Load(), Rechecks: d.rechecks.Load(), Probations: d.probations.Load(),
		AheadSent: d.aheadSent.Load(), AheadUsed: d.aheadUsed.Load(), Ran: make(map[Mode]uint64)}
	for _, m := range []Mode{Host, Target, Buffered} {
		if v := d.ran[m].Load(); v > 0 {
			st.Ran[m] = v
		}
	}
	d.mu.Lock()
	keys := make(map[key]*keyState, len(d.keys))
	for k, ks := range d.keys {
		keys[k] = ks
	}
	d.mu.Unlock()
	for k, ks := range keys {
		ks.mu.Lock()
		miss, wb := d.cache.costs()
		st.Models = append(st.Models, ModelStat{Ino: k.ino, Fn: k.fn, Model: ks.p.fitted(miss, wb), Samples: ks.p.est.samples})
		ks.mu.Unlock()
	}
	sort.Slice(st.Models, func(i, j int) bool {
		a, b := st.Models[i], st.Models[j]
		if a.Ino != b.Ino {
			return a.Ino < b.Ino
		}
		return bytes.Compare(a.Fn[:], b.Fn[:]) < 0
	})
	return st
}

// Close refuses further calls, waits for the calls in progress and the
// profiling runs still finishing, and releases the host modules. It does
// not flush or close the cache, whose files are the caller's.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.stopAhead()
	d.bg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for id, hf := range d.fns {
		errs = append(errs, hf.mod.Close(ctx))
		delete(d.fns, id)
	}
	return errors.Join(errs...)
}

// function returns fn's host side (nil: not registered), or ErrClosed.
func (d *Dispatcher) function(fn sandbox.ID) (*hostFunction, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("lambda: dispatcher: %w", iofs.ErrClosed)
	}
	return d.fns[fn], nil
}

// hostFunctionFor returns fn's host side for a host mode.
func (d *Dispatcher) hostFunctionFor(fn sandbox.ID, mode Mode) (*hostFunction, error) {
	hf, err := d.function(fn)
	if err != nil {
		return nil, err
	}
	if hf == nil {
		return nil, fmt.Errorf("lambda: mode %v: function %s: %w", mode, fn, ErrNotRegistered)
	}
	if mode == Buffered && hf.native == nil {
		return nil, fmt.Errorf("lambda: function %s: %w", hf.name, ErrNoNative)
	}
	return hf, nil
}

// state returns a key's state, creating it.
func (d *Dispatcher) state(ino uint64, fn sandbox.ID) *keyState {
	k := key{ino, fn}
	d.mu.Lock()
	defer d.mu.Unlock()
	ks := d.keys[k]
	if ks == nil {
		ks = &keyState{p: policy{sched: d.schedule, ahead: d.opts.ReadAhead}}
		d.keys[k] = ks
	}
	return ks
}

// pathErr is the error for a bad call on f.
func pathErr(op string, f *offloadfs.File, err error) error {
	return &iofs.PathError{Op: op, Path: f.Name(), Err: err}
}

// Read runs the λ read c in mode (Auto decides), returning the function's output as res.Output. The
// output and error are the same in every mode: a range past the file's
// end fails with pushdown.ErrOutsideFile, a function's error code comes
// as a *sandbox.FunctionError (and res.Code). The result's work counters
// count the side's own reads (the cache's misses on the host).
func (d *Dispatcher) Read(ctx context.Context, mode Mode, c ReadCall) (pushdown.Result, error) {

	if err := d.enter(); err != nil {
		return pushdown.Result{}, err
	}
	defer d.bg.Done()
	d.requests.Add(1)
	res, ran, err := d.read(ctx, mode, c)
	d.count(opRead, mode, ran)
	return res, err
}

// read is Read, also returning where the call ran (Auto: nowhere).
func (d *Dispatcher) read(ctx context.Context, mode Mode, c ReadCall) (pushdown.Result, Mode, error) {
	f, fn, off, n, outCap := c.File, c.Fn, c.Off, c.N, c.OutCap
	const op = "lambda read"
	if off < 0 || n < 0 || uint64(n) > math.MaxUint32 || outCap < 0 {
		return pushdown.Result{}, Auto, pathErr(op, f, fmt.Errorf("%w: range [%d, +%d), output %d", iofs.ErrInvalid, off, n, outCap))
	}
	switch mode {
	case Target:
		res, s, err := d.targetRead(ctx, c, true)
		d.feedRead(f, fn, s)
		return res, s.ranAt, err
	case Host, Buffered:
		hf, err := d.hostFunctionFor(fn, mode)
		if err != nil {
			return pushdown.Result{}, Auto, err
		}
		if mode == Buffered {
			return d.bufferedRead(ctx, hf, c)
		}
		res, s, err := d.hostRead(ctx, hf, c, false)
		d.feedRead(f, fn, s)
		return res, s.ranAt, err
	case Auto:
	default:
		return pushdown.Result{}, Auto, pathErr(op, f, fmt.Errorf("%w: %v", iofs.ErrInvalid, mode))
	}
	hf, err := d.function(fn)
	if err != nil {
		return pushdown.Result{}, Auto, err
	}
	if hf == nil {
		// Only the target can run it (or say it does not know it).
		res, s, err := d.targetRead(ctx, c, true)
		return res, s.ranAt, err
	}
	ks := d.state(f.Ino(), fn)
	miss, wb := d.cache.costs()
	gen := f.Generation()
	size := int64(gen.Size)
	if gen.Granted {
		size = 0 // nothing read ahead (request.size)
	}
	dec := ks.decide(request{n: int64(n), cached: d.cache.Cached(f, off, int64(n)), missCost: miss, writeBackCost: wb, off: off, size: size})
	d.counted(opRead, dec)
	// What was read ahead answers only the call it was read for, run at
	// the target as the pick.
	pending := ks.takeAhead()
	if dec.action == runRace {
		return d.raceRead(ctx, ks, hf, c)
	}
	if dec.side() == Host {
		res, s, err := d.hostRead(ctx, hf, c, false)
		ks.observeRead(s, dec.picked())
		return res, s.ranAt, err
	}
	if err := d.cache.Flush(ctx, f, off, int64(n)); err != nil {
		return pushdown.Result{}, Auto, err
	}
	var next []*aheadRead // reads ahead still to come, in order
	if len(pending) > 0 && !dec.profiled && pending[0].answers(c, f.Generation()) {
		next = d.sendAhead(ctx, c, pending[1:], dec.ahead)
		ks.putAhead(next)
		res, ran, used, err := d.awaitAhead(ctx, pending[0])
		if used || err != nil {
			// The run overlapped others: no time to fit (rule 8).
			ks.observeRead(readSample{}, Target)
			return res, ran, err
		}
		// It failed: the call runs as any other.
	}
	res, s, err := d.targetRead(ctx, c, false)
	ks.observeRead(s, dec.picked())
	if dec.ahead > 0 && next == nil && err == nil {
		// The first of a stream: what follows goes once it is done, so
		// that it does not get ahead of it at the target.
		ks.putAhead(d.sendAhead(ctx, c, nil, dec.ahead))
	}
	return res, s.ranAt, err
}

// aheadRead is a λ read sent to the target ahead of the call expected to
// ask for it (the policy's rule 8). Its fields other than call and gen
// are written before done is closed.
type aheadRead struct {
	call ReadCall // Params its own copy
	// gen is the file's Generation after the range's dirty pages were
	// written back, before the read was sent.
	gen  offloadfs.Generation
	done chan struct{}
	res  pushdown.Result
	ran  Mode
	err  error
}

// answers says whether a's result is c's, with the file now at gen:
// the same function, range, parameters and output limit of the same
// file, and no change to the file since a was sent (a nil a answers
// nothing).
func (a *aheadRead) answers(c ReadCall, gen offloadfs.Generation) bool {
	if a == nil {
		return false
	}
	x := a.call
	return x.File == c.File && x.Fn == c.Fn && x.Off == c.Off && x.N == c.N && x.OutCap == c.OutCap &&
		bytes.Equal(x.Params, c.Params) && gen == a.gen && !gen.Granted
}

// sendAhead returns the reads to keep in flight after c's call: sent,
// the ones already in flight for the ranges after c's, and up to k in all,
// each range of c's size sent to the target after writing back the
// cache's dirty pages there. Each runs under the dispatcher's own context
// (Close stops it) and is waited for as a profile's losing side is
// (WaitProfiles, Close); the caller holds its call's count, so the count
// cannot race Close.
func (d *Dispatcher) sendAhead(ctx context.Context, c ReadCall, sent []*aheadRead, k int) []*aheadRead {
	out := slices.Clone(sent)
	c.Params = bytes.Clone(c.Params)
	c.Off += int64(len(out)+1) * int64(c.N)
	for ; len(out) < k; c.Off += int64(c.N) {
		if err := d.cache.Flush(ctx, c.File, c.Off, int64(c.N)); err != nil {
			break // the call for it writes them back itself, and fails as it must
		}
		a := &aheadRead{call: c, gen: c.File.Generation(), done: make(chan struct{})}
		d.aheadSent.Add(1)
		d.loserStart()
		go func(c ReadCall) {
			defer d.loserDone()
			defer close(a.done)
			var s readSample
			a.res, s, a.err = d.targetRead(d.aheadCtx, c, false)
			a.ran = s.ranAt
		}(c)
		out = append(out, a)
	}
	return out
}

// awaitAhead waits for a read sent ahead. used says its result answers
// the call; otherwise, with err nil, it failed and the call runs on its
// own. err is ctx's when the caller gave up first.
func (d *Dispatcher) awaitAhead(ctx context.Context, a *aheadRead) (res pushdown.Result, ran Mode, used bool, err error) {
	select {
	case <-a.done:
	case <-ctx.Done():
		return pushdown.Result{}, Auto, false, ctx.Err()
	}
	if a.err != nil {
		return pushdown.Result{}, Auto, false, nil
	}
	d.aheadUsed.Add(1)
	return a.res, a.ran, true, nil
}

// counted counts a decision's profile, race, recheck and probation in
// Stats and the metrics.
func (d *Dispatcher) counted(op string, dec decision) {
	if dec.profiled {
		d.profiled.Add(1)
		d.opts.Metrics.profile(op)
	}
	if dec.action == runRace {
		d.races.Add(1)
	}
	if dec.recheck {
		d.rechecks.Add(1)
	}
	if dec.probation {
		d.probations.Add(1)
	}
}

// feedRead adds a K or T run's measurement to its key's model.
func (d *Dispatcher) feedRead(f *offloadfs.File, fn sandbox.ID, s readSample) {
	if s.n <= 0 {
		return
	}
	d.state(f.Ino(), fn).observeRead(s, s.ranAt)
}

// checkRange refuses a host-side read of bytes outside the file, with the
// error the target gives.
func checkRange(f *offloadfs.File, off int64, n int) error {
	size, err := fileSize(f)
	if err != nil {
		return err
	}
	if off > size || int64(n) > size-off {
		return pathErr("lambda read", f, fmt.Errorf("%w: bytes [%d, +%d) of a %d-byte file", pushdown.ErrOutsideFile, off, n, size))
	}
	return nil
}

// readThroughCache fills p with the file's bytes at off, through the cache.
//
// With maxRun > 0 no single read of missing pages is longer than maxRun
// bytes, so a cancellation takes effect within that much more I/O.
func (d *Dispatcher) readThroughCache(ctx context.Context, f *offloadfs.File, p []byte, off int64, maxRun int64) (readStats, error) {
	k, rs, err := d.cache.readAt(ctx, f, p, off, maxRun)
	if err != nil && !errors.Is(err, io.EOF) {
		return rs, err
	}
	if k < len(p) {
		// The file shrank since the range was checked.
		return rs, pathErr("lambda read", f, fmt.Errorf("%w: bytes [%d, +%d) past the file's end", pushdown.ErrOutsideFile, off, len(p)))
	}
	return rs, nil
}

// functionResult fills a result's code from a function's error.
func functionResult(res *pushdown.Result, err error) {
	var fe *sandbox.FunctionError
	if errors.As(err, &fe) {
		res.Code = fe.Code
	}
}

// hostRead runs a λ read in mode K: the range read through the cache
// straight into the sandbox instance's input, after the parameters, and
// the compute entry run on it.
//
// Its measurement separates the cache misses' reads from the rest, and
// the rest (the compute, and the copies and sandbox set-up around it) is
// what the model's host compute term stands for: what a host run costs
// beyond its misses.
func (d *Dispatcher) hostRead(ctx context.Context, hf *hostFunction, c ReadCall, profiled bool) (res pushdown.Result, s readSample, err error) {
	f, off, n, params, outCap := c.File, c.Off, c.N, c.Params, c.OutCap
	s = readSample{n: int64(n), out: -1, host: true}
	if err := checkRange(f, off, n); err != nil {
		return res, s, err
	}
	s.ranAt = Host
	began := time.Now()
	defer func() {
		if s.readDone {
			s.compute = max(time.Since(began)-s.missTime, time.Nanosecond)
		}
	}()
	outCap = min(outCap, d.lim.MaxOutput)
	inst, err := hf.mod.Acquire(ctx)
	if err != nil {
		return res, s, err
	}
	defer inst.Release()
	in, err := inst.Input(len(params) + n)
	if err != nil {
		return res, s, err
	}
	copy(in, params)
	var maxRun int64
	if profiled {
		maxRun = profileReadMax
	}
	rs, err := d.readThroughCache(ctx, f, in[len(params):], off, maxRun)
	s.missBytes, s.missTime, s.splitReads = rs.missBytes, rs.missTime, profiled
	res.Reads, res.BytesRead = uint32(rs.reads), uint64(rs.missBytes)
	if err != nil {
		return res, s, err
	}
	s.readDone = true
	if err := ctx.Err(); err != nil {
		return res, s, err
	}
	if _, err := inst.Output(outCap); err != nil {
		return res, s, err
	}
	k, err := inst.Compute(ctx, len(params)+n, outCap)
	res.Steps = 1
	if err != nil {
		functionResult(&res, err)
		if ctx.Err() == nil {
			// The function failed on its own: the run is finished.
			s.computed, s.done = true, true
		}
		return res, s, err
	}
	out, err := inst.Output(outCap)
	if err != nil {
		return res, s, err
	}
	res.Done = true
	res.Output = bytes.Clone(out[:k])
	s.computed, s.done, s.out = true, true, int64(k)
	return res, s, nil
}

// bufferedRead runs a λ read in mode B: the range read through the cache
// into a Go buffer and the function's native twin run on it.
func (d *Dispatcher) bufferedRead(ctx context.Context, hf *hostFunction, c ReadCall) (pushdown.Result, Mode, error) {
	f, off, n, params, outCap := c.File, c.Off, c.N, c.Params, c.OutCap
	var res pushdown.Result
	if err := checkRange(f, off, n); err != nil {
		return res, Auto, err
	}
	buf := d.input(len(params) + n)
	defer d.inputs.Put(buf)
	in := *buf
	copy(in, params)
	rs, err := d.readThroughCache(ctx, f, in[len(params):], off, 0)
	res.Reads, res.BytesRead = uint32(rs.reads), uint64(rs.missBytes)
	if err != nil {
		return res, Buffered, err
	}
	out := make([]byte, min(outCap, d.lim.MaxOutput))
	k, err := hf.native(in, out)
	res.Steps = 1
	if err != nil {
		functionResult(&res, err)
		return res, Buffered, err
	}
	if k < 0 || k > len(out) {
		return res, Buffered, fmt.Errorf("lambda: %s: native output of %d bytes, buffer of %d: %w", hf.name, k, len(out), sandbox.ErrOutput)
	}
	res.Done = true
	res.Output = out[:k]
	return res, Buffered, nil
}

// targetRead runs a λ read in mode T, after writing back the cache's
// dirty pages in the range (flush false: the caller did).
func (d *Dispatcher) targetRead(ctx context.Context, c ReadCall, flush bool) (pushdown.Result, readSample, error) {
	f, fn, off, n, params, outCap := c.File, c.Fn, c.Off, c.N, c.Params, c.OutCap
	s := readSample{n: int64(n), out: -1}
	if flush {
		if err := d.cache.Flush(ctx, f, off, int64(n)); err != nil {
			return pushdown.Result{}, s, err
		}
	}
	began := time.Now()
	res, err := f.LambdaRead(ctx, fn, off, n, params, outCap)
	s.total = time.Since(began)
	s.targetMicros = res.TargetMicros
	s.ranAt = Target
	switch {
	case err == nil && res.TargetMicros == 0:
		// The file system ran it on the host (the target lacked the
		// file's current map): not a measurement of the target.
		s.ranAt = Host
		s.n = 0
	case err == nil:
		s.done, s.out = true, int64(len(res.Output))
	case ctx.Err() != nil:
		// Cancelled: s.total is a lower bound.
	default:
		s.n = 0 // failed: no measurement
	}
	return res, s, err
}

// profileReadMax caps each read of a profiled host run's cache misses.
// The host run of a profile that the target wins is cancelled, but a
// read already sent runs to its end, competing with the next requests
// for the target and the link: reading at most this much at a time keeps
// a lost profile's leftover work small. Split reads cost more per byte, so
// their time does not feed the model's I/O cost (readSample.splitReads);
// unsplit K runs and the cache's own misses do.
const profileReadMax = 256 << 10

// outcome is one side of a profiled read.
type outcome struct {
	side    Mode
	res     pushdown.Result
	s       readSample
	err     error
	elapsed time.Duration // from the start of the profile to the side's end
}

// censored returns the measurement of a profile's loser. Unless it
// finished anyway, what it shows is a lower bound, and the time from the
// profile's start to the loser's end is the best one: it was not done
// when the winner was (whatever delayed its start), and only stopped
// after. So the loser is never estimated faster than the winner was.
func (o outcome) censored() readSample {
	s := o.s
	if s.done {
		return s
	}
	if s.host {
		if s.readDone {
			s.compute = max(s.compute, o.elapsed-s.missTime)
		}
		return s
	}
	if s.n > 0 { // cancelled, not failed
		s.total = max(s.total, o.elapsed)
	}
	return s
}

// raceRead runs a profiled read on both sides at once (the policy's
// rule 6 says when); the first to finish answers, both computing the
// same bytes from the same bytes. A losing host run is cancelled and
// contributes a lower bound (or, if it finished anyway, a measurement);
// a losing target run cannot be stopped and is measured when it ends.
// The loser may outlive the call (WaitProfiles, Close).
func (d *Dispatcher) raceRead(ctx context.Context, ks *keyState, hf *hostFunction, c ReadCall) (pushdown.Result, Mode, error) {
	f, off, n := c.File, c.Off, c.N
	// The target must see what the host cache holds.
	if err := d.cache.Flush(ctx, f, off, int64(n)); err != nil {
		return pushdown.Result{}, Auto, err
	}
	// The loser may outlive this call: it gets its own copy of params.
	c.Params = bytes.Clone(c.Params)
	ch := make(chan outcome, 2)
	hctx, hcancel := context.WithCancel(ctx)
	tctx, tcancel := context.WithCancel(ctx)
	start := time.Now()
	d.bg.Add(2)
	go func() {
		defer d.bg.Done()
		res, s, err := d.hostRead(hctx, hf, c, true)
		ch <- outcome{Host, res, s, err, time.Since(start)}
	}()
	go func() {
		defer d.bg.Done()
		res, s, err := d.targetRead(tctx, c, false)
		ch <- outcome{Target, res, s, err, time.Since(start)}
	}()
	first := <-ch
	ks.observeRead(first.s, Auto)
	if first.err == nil || ctx.Err() != nil {
		// The other side is measured when it stops. A host run is
		// cancelled now. A target run is not: the target does not abort
		// a function it is running, so cancelling would only stop the
		// host waiting for the answer, and the target's time would be a
		// lower bound (about the host's, which won) where waiting gives
		// the real one.
		if first.side == Target || first.err != nil {
			hcancel()
		}
		d.loserStart()
		go func() {
			defer d.loserDone()
			second := <-ch
			hcancel()
			tcancel()
			ks.observeRead(second.censored(), Auto)
			d.logProfile(f, hf, first, second)
		}()
		return first.res, first.s.ranAt, first.err
	}
	// The first failed: the other side decides (a function's own error
	// fails both the same way).
	second := <-ch
	hcancel()
	tcancel()
	ks.observeRead(second.s, Auto)
	d.logProfile(f, hf, first, second)
	if second.err == nil {
		return second.res, second.s.ranAt, nil
	}
	return first.res, first.s.ranAt, first.err
}

// count counts a call in Ran and the metrics where its result came from
// (a profiled call counts once, for the side whose result it returns).
func (d *Dispatcher) count(op string, asked, ran Mode) {
	if ran != Auto {
		d.ran[ran].Add(1)
	}
	d.opts.Metrics.request(op, asked, ran)
}

func (d *Dispatcher) logProfile(f *offloadfs.File, hf *hostFunction, a, b outcome) {
	if !d.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	d.log.Debug("lambda: profiled a read", "file", f.Name(), "function", hf.name,
		"first", a.side.String(), "host_miss_bytes", a.s.missBytes+b.s.missBytes,
		"host_compute", a.s.compute+b.s.compute, "target_total", a.s.total+b.s.total)
}

// Write runs the λ write c in mode (Auto decides): the output, padded
// with zeroes to whole device blocks, goes at c.Off (same contract as
// offloadfs File.LambdaWrite: Off and N are multiples of the device
// block size, the output must fit in N; a range past the file's end
// extends it). It returns the output's length. On the host (modes K and
// B) the output goes through the cache, write-back; at the target, the
// cache's pages in the range are written back before and dropped after.
func (d *Dispatcher) Write(ctx context.Context, mode Mode, c WriteCall) (int, error) {

	if err := d.enter(); err != nil {
		return 0, err
	}
	defer d.bg.Done()
	d.requests.Add(1)
	k, ran, err := d.write(ctx, mode, c)
	d.count(opWrite, mode, ran)
	return k, err
}

// write is Write, also returning where the call ran (Auto: nowhere).
func (d *Dispatcher) write(ctx context.Context, mode Mode, c WriteCall) (int, Mode, error) {
	f, fn, off, n, data := c.File, c.Fn, c.Off, c.N, c.Data
	const op = "lambda write"
	if off < 0 || n <= 0 || uint64(n) > math.MaxUint32 || off%d.bs != 0 || int64(n)%d.bs != 0 {
		return 0, Auto, pathErr(op, f, fmt.Errorf("%w: range [%d, +%d) is not a non-empty run of whole %d-byte blocks", iofs.ErrInvalid, off, n, d.bs))
	}
	switch mode {
	case Target:
		return d.writeOn(ctx, d.state(f.Ino(), fn), Target, false, nil, c)
	case Host:
		hf, err := d.hostFunctionFor(fn, mode)
		if err != nil {
			return 0, Auto, err
		}
		return d.writeOn(ctx, d.state(f.Ino(), fn), Host, false, hf, c)
	case Buffered:
		hf, err := d.hostFunctionFor(fn, mode)
		if err != nil {
			return 0, Auto, err
		}
		k, _, err := d.hostWrite(ctx, Buffered, hf, c)
		return k, Buffered, err
	case Auto:
	default:
		return 0, Auto, pathErr(op, f, fmt.Errorf("%w: %v", iofs.ErrInvalid, mode))
	}
	hf, err := d.function(fn)
	if err != nil {
		return 0, Auto, err
	}
	if hf == nil {
		k, _, err := d.targetWrite(ctx, c)
		return k, Target, err
	}
	ks := d.state(f.Ino(), fn)
	miss, wb := d.cache.costs()
	dec := ks.decide(request{write: true, n: int64(len(data)), missCost: miss, writeBackCost: wb})
	d.counted(opWrite, dec)
	return d.writeOn(ctx, ks, dec.side(), !dec.profiled, hf, c)
}

// writeOn runs a λ write on side (Host, with hf, or Target) and feeds its
// measurement to ks's model; picked says it is a run of the side picked
// (outside a profile), whose time the model does not take (policy rule
// 7). A call in mode K or T is no pick: measured alone, its time feeds
// the model as a profile's run does.
func (d *Dispatcher) writeOn(ctx context.Context, ks *keyState, side Mode, picked bool, hf *hostFunction, c WriteCall) (int, Mode, error) {
	var (
		k    int
		took time.Duration
		err  error
	)
	if side == Host {
		k, took, err = d.hostWrite(ctx, Host, hf, c)
	} else {
		k, took, err = d.targetWrite(ctx, c)
	}
	if err != nil {
		return k, side, err
	}
	ks.observeWrite(side, int64(len(c.Data)), int64(k), took, picked)
	return k, side, nil
}

// hostCompute runs fn's compute entry (sandboxed, or native in mode B) on
// params followed by data with an output of at most outCap bytes, and
// returns the output and the compute's time.
func (d *Dispatcher) hostCompute(ctx context.Context, mode Mode, hf *hostFunction, params, data []byte, outCap int) ([]byte, time.Duration, error) {
	if mode == Buffered {
		buf := d.input(len(params) + len(data))
		defer d.inputs.Put(buf)
		in := *buf
		copy(in[copy(in, params):], data)
		out := make([]byte, outCap)
		began := time.Now()
		k, err := hf.native(in, out)
		took := time.Since(began)
		if err != nil {
			return nil, took, err
		}
		if k < 0 || k > outCap {
			return nil, took, fmt.Errorf("lambda: %s: native output of %d bytes, buffer of %d: %w", hf.name, k, outCap, sandbox.ErrOutput)
		}
		return out[:k], took, nil
	}
	inst, err := hf.mod.Acquire(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer inst.Release()
	in, err := inst.Input(len(params) + len(data))
	if err != nil {
		return nil, 0, err
	}
	copy(in[copy(in, params):], data)
	if _, err := inst.Output(outCap); err != nil {
		return nil, 0, err
	}
	began := time.Now()
	k, err := inst.Compute(ctx, len(params)+len(data), outCap)
	took := time.Since(began)
	if err != nil {
		return nil, took, err
	}
	out, err := inst.Output(outCap)
	if err != nil {
		return nil, took, err
	}
	return bytes.Clone(out[:k]), took, nil
}

// hostWrite runs a λ write on the host (mode K or B): compute, pad the
// output to whole device blocks, write it through the cache. took is the
// host's cost, all of the call but the write-backs of pages it evicted:
// the model prices writing the output back (r·n/N + r·n/S) apart.
func (d *Dispatcher) hostWrite(ctx context.Context, mode Mode, hf *hostFunction, c WriteCall) (k int, took time.Duration, err error) {
	f, off, n, params, data := c.File, c.Off, c.N, c.Params, c.Data
	began := time.Now()
	out, _, err := d.hostCompute(ctx, mode, hf, params, data, n)
	if err != nil {
		return 0, 0, pathErr("lambda write", f, err)
	}
	// As at the target: a range past the end grows the file to off+n,
	// whatever the output's length.
	size, err := fileSize(f)
	if err != nil {
		return 0, 0, err
	}
	if end := off + int64(n); end > size {
		if err := f.Truncate(end); err != nil {
			return 0, 0, err
		}
	}
	padded := (int64(len(out)) + d.bs - 1) / d.bs * d.bs
	buf := make([]byte, padded)
	copy(buf, out)
	_, wbTime, err := d.cache.writeAt(ctx, f, buf, off)
	if err != nil {
		return 0, 0, err
	}
	return len(out), max(time.Since(began)-wbTime, 0), nil
}

// targetWrite runs a λ write in mode T: the cache's dirty pages in the
// range are written back first (the partly overlapped ones must not be
// lost), and every cached page in the range is dropped after, since the
// target changed the bytes behind the cache.
func (d *Dispatcher) targetWrite(ctx context.Context, c WriteCall) (int, time.Duration, error) {
	f, fn, off, n, params, data := c.File, c.Fn, c.Off, c.N, c.Params, c.Data
	if err := d.cache.Flush(ctx, f, off, int64(n)); err != nil {
		return 0, 0, err
	}
	began := time.Now()
	k, err := f.LambdaWrite(ctx, fn, off, n, params, data)
	took := time.Since(began)
	d.cache.Invalidate(f, off, int64(n))
	return k, took, err
}
