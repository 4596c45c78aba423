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

// Options configure a Dispatcher.
type Options struct {
	Runtimes     []sandbox.Runtime // host-side runtimes for mode K (required)
	Limits       sandbox.Limits    // for host-side runs (zero: sandbox defaults)
	Metrics      *Metrics          // nil: none (Stats has the counts regardless)
	Cache        *Cache            // nil: NewCache(DefaultCacheSize, 0)
	ProfileEvery int               // n: every n requests per (file, function)... (default 200)
	ProfileFirst int               // k: ...the first k run on both sides and are measured (default 5)
	Logger       *slog.Logger
}

// Defaults of Options.
const (
	DefaultProfileEvery = 200
	DefaultProfileFirst = 5
)

// Stats are a dispatcher's cumulative counters and current models.
type Stats struct {
	Requests   uint64          // calls taken
	Ran        map[Mode]uint64 // where calls finally ran: Host, Target, Buffered (Auto never appears)
	Profiled   uint64          // profiled calls: reads run on both sides (or on each side in turn, after the host was picked and at rechecks), writes on each side in turn
	Races      uint64          // profiled reads run on both sides at once, the first to finish answering
	Rechecks   uint64          // profiles begun early because the model's pick changed
	Probations uint64          // switches of side that brought the next scheduled profile closer
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

// keyState is a key's profile schedule and measurements.
type keyState struct {
	mu    sync.Mutex
	count uint64 // requests, for the profile schedule (a recheck moves it on)
	est   estimator
	model Model
	stale bool // est changed since model was fitted
	// pick is the side the model picked for the last request outside a
	// profile since the last profile began (Auto: none yet); seen counts
	// every request, and rechecked is seen at the last recheck.
	pick            Mode
	seen, rechecked uint64
	// last is the side the model picked for the last request outside a
	// profile (Auto: none yet): the side a profile expects to win. near
	// says the model's two estimates for that request were within
	// raceMargin of each other.
	last Mode
	near bool
	// alone says the current profile's reads alternate sides, last's
	// first, rather than race (see profileRead); turn counts them.
	alone bool
	turn  uint64
	// rechecking says the current profile is a recheck's, whose first
	// pick after it decides whether the switch is on probation.
	rechecking bool
	// writeProfiles counts profiled writes, whose sides alternate.
	writeProfiles uint64
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
}

// input returns a buffer of n bytes for mode B's input, reused from an
// earlier call when one is large enough, as a buffered application
// reads request after request into the same buffer. A fresh buffer each
// call made B's cost its allocations: once the host cache had grown the
// heap, the collector let every buffer come from new memory, and a warm
// round of 1024 requests took 5.4 s instead of 0.9.
func (d *Dispatcher) input(n int) *[]byte {
	if p, ok := d.inputs.Get().(*[]byte); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n)
	return &b
}

// WaitProfiles waits until the losing sides of profiled calls that have
// already returned stop, or ctx ends. A profiled call returns when its
// faster side does; the slower one is cancelled and measured when it
// stops, which takes a moment more. A benchmark that times calls in one
// mode against another waits for this, so the leftover is charged to the
// calls that made it rather than to whatever runs next.
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
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	d := &Dispatcher{
		fsys:  fsys,
		opts:  opts,
		cache: opts.Cache,
		log:   opts.Logger,
		lim:   opts.Limits.WithDefaults(),
		bs:    int64(fsys.DeviceBlockSize()),
		fns:   make(map[sandbox.ID]*hostFunction),
		keys:  make(map[key]*keyState),
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

// Stats returns the dispatcher's counters and models.
func (d *Dispatcher) Stats() Stats {
	st := Stats{Requests: d.requests.Load(), Profiled: d.profiled.Load(), Races: d.races.Load(), Rechecks: d.rechecks.Load(), Probations: d.probations.Load(), Ran: make(map[Mode]uint64)}
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
		st.Models = append(st.Models, ModelStat{Ino: k.ino, Fn: k.fn, Model: d.modelLocked(ks), Samples: ks.est.samples})
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
		ks = &keyState{}
		d.keys[k] = ks
	}
	return ks
}

// schedule counts a request of ks and says whether to profile it: the
// first ProfileFirst of every ProfileEvery, and every request until a
// run has finished and been measured. Otherwise it returns the model.
func (d *Dispatcher) schedule(ks *keyState) (profile bool, m Model) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	i := ks.count
	ks.count++
	ks.seen++
	every := uint64(d.opts.ProfileEvery)
	if i%every == 0 {
		ks.pick = Auto
		ks.alone, ks.turn = ks.last == Host || (ks.last == Target && ks.near), 0
	}
	if i > 0 && i%every == 0 {
		// A new profile. A side the model did not pick since the last
		// one has only old samples: they are dropped, so the side rests
		// on what this profile measures. Kept, they stayed until
		// profiles pushed them out of the window k at a time: a slow
		// spell of the target (a few requests) once kept 431 of 1024
		// reads on the host, 1.5x as slow, across several profiles. The
		// picked side keeps its samples: they are recent, and measured
		// alone, where a profile measures both sides competing.
		ks.est.forgetUnpicked()
		ks.stale = true
	}
	if i%every < uint64(d.opts.ProfileFirst) || ks.est.samples == 0 {
		return true, Model{}
	}
	return false, d.modelLocked(ks)
}

// recheck is told the side the model picked for a request outside a
// profile, and says whether to profile the request instead: when the
// pick changes between profiles, the request that would switch sides
// starts a new profile, in which the side being left has lost its
// samples. A switch between profiles comes from the picked side's own
// runs getting slower, measured alone, against the other side's older
// samples from the last profile; on a shared machine that is mostly a
// slow spell, which a profile measures on both sides anew. Without
// this, with every read cached (stats64: host 0.7 ms, target 1.0), a
// spell sent the rest of the profile period's reads to the target, up to
// 671 of 1024 in a round. A recheck comes at most once every
// ProfileEvery requests, so a key whose sides really are a toss-up
// costs at most twice the profiles.
//
// The first pick after a profile is a switch too when it leaves the side
// picked before the profile (last): a profile has only two or three
// samples a side, and a slow spell covering one side's turns moved the
// whole period (traced once, every read cached: host turns of 1.8 and
// 3.1 ms sent the period's other 206 reads to the slower target). The
// recheck confirms the switch with a second profile, in which the side
// being left is measured afresh, before the period follows it.
//
// A switch made without a recheck (one came less than ProfileEvery
// requests ago), or confirmed by a recheck's profile, is on probation:
// the next profile comes at most a quarter period later instead of up to
// a whole one. A slow spell can outlast both profiles, and until the next
// profile nothing measures the side left (the picked side's runs only
// move its own estimate): with every read cached, rounds sent 207-419 of
// 1024 reads to the target, 1.2x as slow as the host. A real change
// costs a profile more.
func (d *Dispatcher) recheck(ks *keyState, pick Mode, near bool) bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	every := uint64(d.opts.ProfileEvery)
	leaving, held := ks.pick, false
	if leaving == Auto {
		leaving = ks.last
		if ks.rechecking {
			// The first pick after a recheck's profile: did the switch
			// hold?
			ks.rechecking = false
			held = pick == ks.last
		}
	}
	ks.pick, ks.last, ks.near = pick, pick, near
	if leaving == Auto {
		// A key's first pick is confirmed as a switch is, the side not
		// picked measured afresh: the first profile includes the
		// target's first run on the file, which can be many times
		// slower than its next (traced: 5.3 ms against 0.6-1.0), and a
		// host that won those races kept a whole first period (knn
		// cold: 206 and 209 of 1024 reads on the slower host in a
		// first round).
		leaving = otherSide(pick)
	}
	switched := leaving != pick
	if !switched || (ks.rechecked > 0 && ks.seen-ks.rechecked < every) {
		if switched || held {
			// Probation: the side left is measured again a quarter
			// period on.
			next := (ks.count/every + 1) * every
			if next-every/4 > ks.count {
				ks.count = next - every/4
				d.probations.Add(1)
			}
		}
		return false
	}
	ks.rechecked = ks.seen
	d.rechecks.Add(1)
	// This request begins a profile period; the requests after it are
	// its next ProfileFirst-1. Its reads alternate sides, pick's first
	// (profileRead).
	ks.count = (ks.count/every+1)*every + 1
	ks.pick, ks.rechecking = Auto, true
	ks.alone, ks.turn = true, 0
	ks.est.forget(leaving)
	ks.est.hostRuns, ks.est.targetRuns = 0, 0
	ks.stale = true
	return true
}

// modelLocked returns ks's model, fitting it again if measurements came
// in. Callers hold ks.mu.
func (d *Dispatcher) modelLocked(ks *keyState) Model {
	if ks.stale || ks.est.samples == 0 {
		ks.model = ks.est.fit(d.cache.missCost(), d.cache.writeBackCost())
		ks.stale = false
	}
	return ks.model
}

// record adds a measurement to ks.
func (ks *keyState) record(add func(e *estimator)) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	add(&ks.est)
	ks.stale = true
}

// pathErr is the error for a bad call on f.
func pathErr(op string, f *offloadfs.File, err error) error {
	return &iofs.PathError{Op: op, Path: f.Name(), Err: err}
}

// Read runs fn on params followed by the file's bytes [off, off+n) in mode
// (Auto decides), returning the function's output as res.Output. The
// output and error are the same in every mode: a range past the file's
// end fails with pushdown.ErrOutsideFile, a function's error code comes
// as a *sandbox.FunctionError (and res.Code). The result's work counters
// count the side's own reads (the cache's misses on the host).
func (d *Dispatcher) Read(ctx context.Context, mode Mode, f *offloadfs.File, fn sandbox.ID, off int64, n int, params []byte, outCap int) (pushdown.Result, error) {
	if err := d.enter(); err != nil {
		return pushdown.Result{}, err
	}
	defer d.bg.Done()
	d.requests.Add(1)
	res, ran, err := d.read(ctx, mode, f, fn, off, n, params, outCap)
	d.count(opRead, mode, ran)
	return res, err
}

// read is Read, also returning where the call ran (Auto: nowhere).
func (d *Dispatcher) read(ctx context.Context, mode Mode, f *offloadfs.File, fn sandbox.ID, off int64, n int, params []byte, outCap int) (pushdown.Result, Mode, error) {
	const op = "lambda read"
	if off < 0 || n < 0 || uint64(n) > math.MaxUint32 || outCap < 0 {
		return pushdown.Result{}, Auto, pathErr(op, f, fmt.Errorf("%w: range [%d, +%d), output %d", iofs.ErrInvalid, off, n, outCap))
	}
	switch mode {
	case Target:
		res, s, err := d.targetRead(ctx, f, fn, off, n, params, outCap, true)
		d.feedRead(f, fn, s)
		return res, s.ranAt, err
	case Host, Buffered:
		hf, err := d.hostFunctionFor(fn, mode)
		if err != nil {
			return pushdown.Result{}, Auto, err
		}
		if mode == Buffered {
			return d.bufferedRead(ctx, hf, f, off, n, params, outCap)
		}
		res, s, err := d.hostRead(ctx, hf, f, off, n, params, outCap, false)
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
		res, s, err := d.targetRead(ctx, f, fn, off, n, params, outCap, true)
		return res, s.ranAt, err
	}
	ks := d.state(f.Ino(), fn)
	profile, m := d.schedule(ks)
	if profile {
		return d.profileRead(ctx, ks, hf, f, fn, off, n, params, outCap)
	}
	host, target := m.Read(int64(n), d.cache.Cached(f, off, int64(n)))
	if d.recheck(ks, pickOf(host, target), closeCall(host, target)) {
		return d.profileRead(ctx, ks, hf, f, fn, off, n, params, outCap)
	}
	if host < target {
		res, s, err := d.hostRead(ctx, hf, f, off, n, params, outCap, false)
		ks.record(func(e *estimator) { e.addRead(s); e.picked(Host) })
		return res, s.ranAt, err
	}
	res, s, err := d.targetRead(ctx, f, fn, off, n, params, outCap, true)
	ks.record(func(e *estimator) { e.addRead(s); e.picked(Target) })
	return res, s.ranAt, err
}

// otherSide is Target for Host and Host for Target.
func otherSide(side Mode) Mode {
	if side == Host {
		return Target
	}
	return Host
}

// pickOf is the side the model picks given its two predictions.
func pickOf(host, target time.Duration) Mode {
	if host < target {
		return Host
	}
	return Target
}

// closeCall says the two predictions are within raceMargin of each other.
func closeCall(host, target time.Duration) bool {
	return max(host, target) < time.Duration(raceMargin*float64(min(host, target)))
}

// feedRead adds a K or T run's measurement to its key's model.
func (d *Dispatcher) feedRead(f *offloadfs.File, fn sandbox.ID, s readSample) {
	if s.n <= 0 {
		return
	}
	d.state(f.Ino(), fn).record(func(e *estimator) { e.addRead(s); e.picked(s.ranAt) })
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
func (d *Dispatcher) hostRead(ctx context.Context, hf *hostFunction, f *offloadfs.File, off int64, n int, params []byte, outCap int, profiled bool) (res pushdown.Result, s readSample, err error) {
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
func (d *Dispatcher) bufferedRead(ctx context.Context, hf *hostFunction, f *offloadfs.File, off int64, n int, params []byte, outCap int) (pushdown.Result, Mode, error) {
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
func (d *Dispatcher) targetRead(ctx context.Context, f *offloadfs.File, fn sandbox.ID, off int64, n int, params []byte, outCap int, flush bool) (pushdown.Result, readSample, error) {
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
// a lost profile's leftover work small (measured: a grep profile that
// the target won cost 1.0 ms more than a plain target request with whole
// 1 MiB misses, 0.45 ms with 256 KiB). Split reads cost more per byte, so
// their time does not feed the model's I/O cost (readSample.splitReads);
// unsplit K runs and the cache's own misses do.
const profileReadMax = 256 << 10

// A profile's reads race only where the host is expected to lose by a
// wide margin: where the model last picked the target with the host's
// estimate at least raceMargin times the target's, or, before the key's
// first pick, where less than aloneCached of the range is cached (the
// host must fetch it). Elsewhere they alternate sides, each run alone.
//
// A race where the sides are close measures the host at its worst: its
// compute shares the two CPUs with the target's, and a host run that
// loses counts with the winner's time as its lower bound. Once the
// target was picked, every later profile raced again, and with every
// read cached (where the host is 1.2-1.3x faster alone) whole rounds
// stayed on the target: stats32 sent 992 of 1024 reads there, knn 555.
// Alone, a host turn costs at most raceMargin-1 of a target read more.
const (
	raceMargin  = 1.5
	aloneCached = 0.9
)

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

// profileRead runs one read of a profile. Where the model last picked
// the target by a wide margin, or has not picked yet and the range is
// mostly uncached (raceMargin), the read runs on both sides at once and
// the first to finish answers. A losing host run is cancelled and
// contributes a lower bound (or, if it finished anyway, a measurement).
//
// Where the target was picked by a wide margin, only a profile's first
// read races; the rest run on the target alone. A race costs the target
// what the host's run takes of the two CPUs and the link while it
// computes, about half a target read (traced, grep cold: a raced read
// 0.74 ms against 0.55 alone, 0.09 ms more on the read after it), and
// there it buys little: a host that loses before its reads finish
// leaves no measurement, and one that loses after them leaves a bound
// at least the target's time. What the race is for is a host that has
// become the faster side (its range cached since, say): it wins, is
// measured exactly, and a recheck confirms the switch. One race a
// profile is enough for that.
//
// Where the model last picked the host (or has not picked yet, with the
// range mostly cached), the target is the expected loser, and a losing
// target run cannot be stopped: the target does not abort a function it
// is running, so the race would leave it running on the CPUs the host's
// next requests need, and k of them, one per profiled read, queue behind
// each other. Those reads alternate sides instead, host first (K, T, K,
// T, K with ProfileFirst 5), each run alone, as a profile's writes do
// (profileReadAlone). Where the model picked the target narrowly, they
// alternate too, target first: a race would measure the host at its
// worst.
//
// A recheck's reads alternate too, the new pick first: a recheck comes
// when the two sides' estimates cross, mostly in a slow spell, and a race
// then measured the side being left, slowed further by the race, as far
// slower than it was once the spell passed. Traced (stats64, 100% warm):
// a recheck to the target raced during a spell, three host runs lost at
// 3.1 to 6.3 ms, and the host's estimate, 2.7 ms against 0.7 alone, kept
// 593 of 1024 reads of the round on the slower target.
func (d *Dispatcher) profileRead(ctx context.Context, ks *keyState, hf *hostFunction, f *offloadfs.File, fn sandbox.ID, off int64, n int, params []byte, outCap int) (pushdown.Result, Mode, error) {
	d.profiled.Add(1)
	d.opts.Metrics.profile(opRead)
	cached := d.cache.Cached(f, off, int64(n))
	ks.mu.Lock()
	alone, turn, lead := ks.alone, ks.turn, ks.last
	if lead == Auto && cached >= aloneCached {
		alone, lead = true, Host
	}
	ks.turn++
	ks.mu.Unlock()
	if alone {
		side := lead
		if turn%2 == 1 {
			side = otherSide(lead)
		}
		return d.profileReadAlone(ctx, ks, side, hf, f, fn, off, n, params, outCap)
	}
	if lead == Target && turn > 0 {
		// The target picked by a wide margin: one race probes the host.
		return d.profileReadAlone(ctx, ks, Target, hf, f, fn, off, n, params, outCap)
	}
	d.races.Add(1)
	// The target must see what the host cache holds.
	if err := d.cache.Flush(ctx, f, off, int64(n)); err != nil {
		return pushdown.Result{}, Auto, err
	}
	// The loser may outlive this call: it gets its own copy of params.
	params = bytes.Clone(params)
	ch := make(chan outcome, 2)
	hctx, hcancel := context.WithCancel(ctx)
	tctx, tcancel := context.WithCancel(ctx)
	start := time.Now()
	d.bg.Add(2)
	go func() {
		defer d.bg.Done()
		res, s, err := d.hostRead(hctx, hf, f, off, n, params, outCap, true)
		ch <- outcome{Host, res, s, err, time.Since(start)}
	}()
	go func() {
		defer d.bg.Done()
		res, s, err := d.targetRead(tctx, f, fn, off, n, params, outCap, false)
		ch <- outcome{Target, res, s, err, time.Since(start)}
	}()
	first := <-ch
	ks.record(func(e *estimator) { e.addRead(first.s) })
	if first.err == nil || ctx.Err() != nil {
		// The other side is measured when it stops. A host run is
		// cancelled now. A target run is not: the target does not abort
		// a function it is running, so cancelling would only stop the
		// host waiting for the answer, and the target's time would be a
		// lower bound where waiting gives the real one. That bound is
		// about the host's time, since the host won, and kept the
		// target's estimate just above the host's: with every read
		// cached (stats64, host 0.7 ms, target 1.0), any slow spell of
		// the host sent reads to the target, 332 and 671 of 1024 in two
		// rounds of nine.
		if first.side == Target || first.err != nil {
			hcancel()
		}
		d.loserStart()
		go func() {
			defer d.loserDone()
			second := <-ch
			hcancel()
			tcancel()
			ks.record(func(e *estimator) { e.addRead(second.censored()) })
			d.logProfile(f, hf, first, second)
		}()
		return first.res, first.s.ranAt, first.err
	}
	// The first failed: the other side decides (a function's own error
	// fails both the same way).
	second := <-ch
	hcancel()
	tcancel()
	ks.record(func(e *estimator) { e.addRead(second.s) })
	d.logProfile(f, hf, first, second)
	if second.err == nil {
		return second.res, second.s.ranAt, nil
	}
	return first.res, first.s.ranAt, first.err
}

// profileReadAlone runs a read of a profile whose reads alternate sides
// on side (Host or Target) alone, measured as the picked side's runs are.
func (d *Dispatcher) profileReadAlone(ctx context.Context, ks *keyState, side Mode, hf *hostFunction, f *offloadfs.File, fn sandbox.ID, off int64, n int, params []byte, outCap int) (pushdown.Result, Mode, error) {
	var (
		res pushdown.Result
		s   readSample
		err error
	)
	if side == Host {
		res, s, err = d.hostRead(ctx, hf, f, off, n, params, outCap, false)
	} else {
		res, s, err = d.targetRead(ctx, f, fn, off, n, params, outCap, true)
	}
	ks.record(func(e *estimator) { e.addRead(s) })
	return res, s.ranAt, err
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

// Write runs fn on params followed by data and writes the output, padded
// with zeroes to whole device blocks, at off (same contract as
// offloadfs File.LambdaWrite: off and n are multiples of the device
// block size, the output must fit in n; a range past the file's end
// extends it). It returns the output's length. On the host (modes K and
// B) the output goes through the cache, write-back; at the target, the
// cache's pages in the range are written back before and dropped after.
func (d *Dispatcher) Write(ctx context.Context, mode Mode, f *offloadfs.File, fn sandbox.ID, off int64, n int, params, data []byte) (int, error) {
	if err := d.enter(); err != nil {
		return 0, err
	}
	defer d.bg.Done()
	d.requests.Add(1)
	k, ran, err := d.write(ctx, mode, f, fn, off, n, params, data)
	d.count(opWrite, mode, ran)
	return k, err
}

// write is Write, also returning where the call ran (Auto: nowhere).
func (d *Dispatcher) write(ctx context.Context, mode Mode, f *offloadfs.File, fn sandbox.ID, off int64, n int, params, data []byte) (int, Mode, error) {
	const op = "lambda write"
	if off < 0 || n <= 0 || uint64(n) > math.MaxUint32 || off%d.bs != 0 || int64(n)%d.bs != 0 {
		return 0, Auto, pathErr(op, f, fmt.Errorf("%w: range [%d, +%d) is not a non-empty run of whole %d-byte blocks", iofs.ErrInvalid, off, n, d.bs))
	}
	switch mode {
	case Target:
		return d.writeOn(ctx, d.state(f.Ino(), fn), Target, true, nil, f, fn, off, n, params, data)
	case Host:
		hf, err := d.hostFunctionFor(fn, mode)
		if err != nil {
			return 0, Auto, err
		}
		return d.writeOn(ctx, d.state(f.Ino(), fn), Host, true, hf, f, fn, off, n, params, data)
	case Buffered:
		hf, err := d.hostFunctionFor(fn, mode)
		if err != nil {
			return 0, Auto, err
		}
		k, _, err := d.hostWrite(ctx, Buffered, hf, f, off, n, params, data)
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
		k, _, err := d.targetWrite(ctx, f, fn, off, n, params, data)
		return k, Target, err
	}
	ks := d.state(f.Ino(), fn)
	profile, m := d.schedule(ks)
	if profile {
		return d.profileWrite(ctx, ks, hf, f, fn, off, n, params, data)
	}
	host, target := m.Write(int64(len(data)))
	// A switch between profiles is rechecked as a read's is: a slow spell
	// of the target's writes (bitmap, 100% warm: 3.8 ms against 2.7)
	// otherwise kept the rest of the period, 163 writes, on the host.
	pick := pickOf(host, target)
	if d.recheck(ks, pick, false) {
		return d.profileWrite(ctx, ks, hf, f, fn, off, n, params, data)
	}
	return d.writeOn(ctx, ks, pick, true, hf, f, fn, off, n, params, data)
}

// writeOn runs a λ write on side (Host, with hf, or Target) and feeds its
// time to ks's model; picked says it is a run of the side picked
// (outside a profile), which keeps that side's samples at the next one.
func (d *Dispatcher) writeOn(ctx context.Context, ks *keyState, side Mode, picked bool, hf *hostFunction, f *offloadfs.File, fn sandbox.ID, off int64, n int, params, data []byte) (int, Mode, error) {
	var (
		k    int
		took time.Duration
		err  error
	)
	if side == Host {
		k, took, err = d.hostWrite(ctx, Host, hf, f, off, n, params, data)
	} else {
		k, took, err = d.targetWrite(ctx, f, fn, off, n, params, data)
	}
	if err != nil {
		return k, side, err
	}
	x := int64(len(data))
	ks.record(func(e *estimator) {
		if side == Host {
			e.addWriteHost(x, int64(k), took, true)
		} else {
			e.addWriteTarget(x, int64(k), took, true)
		}
		if picked {
			e.picked(side)
		}
	})
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
func (d *Dispatcher) hostWrite(ctx context.Context, mode Mode, hf *hostFunction, f *offloadfs.File, off int64, n int, params, data []byte) (k int, took time.Duration, err error) {
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
func (d *Dispatcher) targetWrite(ctx context.Context, f *offloadfs.File, fn sandbox.ID, off int64, n int, params, data []byte) (int, time.Duration, error) {
	if err := d.cache.Flush(ctx, f, off, int64(n)); err != nil {
		return 0, 0, err
	}
	began := time.Now()
	k, err := f.LambdaWrite(ctx, fn, off, n, params, data)
	took := time.Since(began)
	d.cache.Invalidate(f, off, int64(n))
	return k, took, err
}

// profileWrite runs one of a profile's writes. A write cannot run on
// both sides as a read does, its output being written once, so a
// profile's writes alternate sides, target first (with ProfileFirst 5:
// T, K, T, K, T), each the real write, measured alone as the picked
// side's writes are. The host side's time is its compute and putting the
// output in the cache; the model prices the output's write-back apart.
//
// A profiled write once ran the target's write while the host computed
// the same output alongside, thrown away. Competing for the CPUs slowed
// the target's write more than the host's compute (bitmap, 1 GiB cold:
// 3.6 ms against 2.7 alone, the host's compute 2.8 against 2.7), so the
// side picked after a profile, measured alone from then on, looked faster
// than the other, measured competing, whichever it was: a slow spell that
// made the host the pick kept it there profile after profile (325 of 1024
// writes in one round to the host, 1.3x slower). Alternating also costs
// less: a profiled write costs what the slower side takes over the
// faster, where running both cost the host's whole compute on the CPUs
// the target's write needed.
func (d *Dispatcher) profileWrite(ctx context.Context, ks *keyState, hf *hostFunction, f *offloadfs.File, fn sandbox.ID, off int64, n int, params, data []byte) (int, Mode, error) {
	d.profiled.Add(1)
	d.opts.Metrics.profile(opWrite)
	ks.mu.Lock()
	turn := ks.writeProfiles
	ks.writeProfiles++
	ks.mu.Unlock()
	side := Target
	if turn%2 == 1 {
		side = Host
	}
	return d.writeOn(ctx, ks, side, false, hf, f, fn, off, n, params, data)
}
