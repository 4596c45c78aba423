// Package lambdabench is the λ experiment (bench lambda, and bench tpch,
// which runs TPC-H queries in the same environment): it runs an
// application's requests against a target in each mode the λ dispatcher
// chooses between and through the dispatcher itself, over loopback or an
// emulated link, and checks the dispatcher's bars.
package lambdabench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/lambda"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/volume"
)

// `bench lambda`: a λ-IO application over one offloadfs file in each of
// the four modes — B (buffered I/O through the host cache and native Go),
// K (the sandboxed function on the host, reading through the cache), T
// (the function at the target) and λ (the dispatcher picks per request)
// — with the host cache dropped and warmed to the same state before
// every run, the modes taking turns (ABCD DCBA …) so that a busy machine
// slows them alike, and every run's combined answer checked against the
// native reference over the whole file.

// Defaults and limits of a Config.
const (
	DefaultLambdaSize        = 64 << 20
	DefaultLambdaRequestSize = 1 << 20
	// MaxLambdaRequestSize keeps a request's output (grep's: up to its
	// input plus a byte) within the target's default output limit
	// (16 MiB), and its wasm instance's memory modest.
	MaxLambdaRequestSize = 8 << 20
)

// The bars.
const (
	// LambdaBarVsBest: λ's time at most this multiple of the better of K
	// and T, for every application, warm or cold.
	LambdaBarVsBest = 1.05
	// LambdaBarVsB: on a 10 Gb/s link with a cold cache, λ at least this
	// many times faster than B for stats64 and grep. Issue 6 asked 2×;
	// issue 25 raised it to 2.3× once B reached line rate, so that the
	// bar stays clear of the noise of a shared machine.
	LambdaBarVsB = 2.3
)

// Config configures Run.
type Config struct {
	// App is the application (Apps).
	App string
	// Size is the dataset's size in bytes (default 64 MiB), a multiple
	// of 4 KiB; for bitmap, the size of the bitmap the λ writes produce.
	Size int64
	// RequestSize is each λ request's size in bytes (default 1 MiB), a
	// multiple of 4 KiB up to MaxLambdaRequestSize.
	RequestSize int
	// Warm is the fraction of the file in the host cache when a run
	// starts (0: cold), the first part of the file or, with WarmRandom,
	// random pages.
	Warm       float64
	WarmRandom bool
	// Modes are the modes to run (default B, K, T, λ).
	Modes []lambda.Mode
	// Repeat is the runs per mode (default 3; medians are reported).
	Repeat int
	// Depth is the requests in flight (default 1: λ-IO's applications
	// issue synchronous reads).
	Depth int
	// Interleave, when positive, runs the modes together: each mode over
	// its own copy of the file, the requests in blocks of this many, each
	// block run in every mode in turn (ABCD, then DCBA), a mode's time
	// the sum of its blocks'. A busy spell of the machine then falls on
	// every mode alike instead of on whichever run it hit. Zero runs each
	// mode's whole run in turn.
	Interleave int
	// Runtime is where the function runs in modes K and T (and λ):
	// sandbox.KindWasm (default) or sandbox.KindEBPF.
	Runtime sandbox.Kind
	// ProfileEvery and ProfileFirst are the dispatcher's profiling
	// schedule in mode λ, n and k: of every n requests, the first k run
	// on both sides (0: lambda.DefaultProfileEvery and
	// DefaultProfileFirst). A large n shows what λ's periodic profiles
	// cost, against its routing alone.
	ProfileEvery, ProfileFirst int
	// ReadAhead is the dispatcher's lambda.Options.ReadAhead in mode λ:
	// how many ranges a sequential stream at the target keeps in flight
	// past the one called for (0: lambda.DefaultReadAhead; negative:
	// none).
	ReadAhead int
	// Seed makes the dataset (default 1).
	Seed uint64
	// Link is the --link rate: "" or "loopback", or a rate such as
	// "10gbit" for an emulated link (OpenLink).
	Link string
	// TargetExe runs the target as `TargetExe target serve` (the
	// nearstore binary); empty runs it in this process. ServerCPUs pins
	// that process.
	TargetExe, ServerCPUs string
	// Logger receives the libraries' events (default: discarded).
	Logger *slog.Logger
	// Progress, when set, is told what is about to happen.
	Progress func(stage string)
}

func (c *Config) setDefaults() error {
	if c.Size == 0 {
		c.Size = DefaultLambdaSize
	}
	if c.RequestSize == 0 {
		c.RequestSize = DefaultLambdaRequestSize
	}
	if c.RequestSize > MaxLambdaRequestSize {
		return fmt.Errorf("bench: request size %d above %d", c.RequestSize, MaxLambdaRequestSize)
	}
	if c.Warm < 0 || c.Warm > 1 {
		return fmt.Errorf("bench: warm fraction %g: want 0 to 1", c.Warm)
	}
	if len(c.Modes) == 0 {
		c.Modes = []lambda.Mode{lambda.Buffered, lambda.Host, lambda.Target, lambda.Auto}
	}
	if c.Repeat == 0 {
		c.Repeat = 3
	}
	if c.Depth == 0 {
		c.Depth = 1
	}
	if c.Repeat < 0 || c.Depth < 0 || c.Depth > 64 || c.Interleave < 0 {
		return errors.New("bench: negative repeat or interleave, or depth outside 1 to 64")
	}
	if c.ProfileEvery < 0 || c.ProfileFirst < 0 {
		return fmt.Errorf("bench: profile schedule: first %d of every %d requests: want 0 (the default) or more", c.ProfileFirst, c.ProfileEvery)
	}
	if c.Runtime == 0 {
		c.Runtime = sandbox.KindWasm
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Report is what Run (or RunTPCH) measured.
type Report struct {
	Machine report.Machine `json:"machine"`
	// App is the application ("stats64", ...; "tpch_q6" for TPC-H) and
	// Function the λ function it calls.
	App      string `json:"app"`
	Function string `json:"function"`
	Runtime  string `json:"runtime"`
	// Target is "own process" or "this process"; Link says how the host
	// reaches it ("loopback", "10gbit (tc tbf …)", or a fallback and why)
	// and LinkShaped whether it really was shaped.
	Target     string `json:"target"`
	Link       string `json:"link"`
	LinkShaped bool   `json:"link_shaped"`
	LinkRate   string `json:"link_rate,omitempty"`
	// TPC-H only: the scale factor, the query and its rows.
	SF    float64 `json:"sf,omitempty"`
	Query string  `json:"query,omitempty"`
	Rows  int64   `json:"rows,omitempty"`
	// Size is the file's bytes each run processes (the bitmap's for λ
	// writes), in Requests requests of RequestSize, Depth in flight.
	Size        int64   `json:"size"`
	RequestSize int     `json:"request_size"`
	Requests    int     `json:"requests"`
	Depth       int     `json:"depth"`
	Warm        float64 `json:"warm"`
	WarmOrder   string  `json:"warm_order"`
	Repeat      int     `json:"repeat"`
	// Interleave is Config.Interleave (0: whole runs in turn).
	Interleave int `json:"interleave,omitempty"`
	// ProfileEvery and ProfileFirst are the dispatcher's schedule in
	// mode λ, after defaults: the first ProfileFirst of every
	// ProfileEvery requests were profiled.
	ProfileEvery int `json:"profile_every"`
	ProfileFirst int `json:"profile_first"`
	// ReadAhead is the dispatcher's read-ahead in mode λ, after defaults.
	ReadAhead int `json:"read_ahead"`
	// Answer is the native reference every run's combined answer equalled.
	Answer string `json:"answer"`
	// Modes has one entry per mode, in the order asked for.
	Modes []ModeResult `json:"modes"`
	// Bars are the two checks, computed from the medians.
	Bars []LambdaBar `json:"bars"`
	// Models are the dispatcher's fitted models at the end.
	Models []string `json:"models,omitempty"`
}

// ModeResult is one mode's runs and medians.
type ModeResult struct {
	Mode string      `json:"mode"`
	Runs []LambdaRun `json:"runs"`
	// Seconds is the median run's time, MBps the file's bytes over it.
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"`
	// VsB is B's median time over this mode's: the speedup over B (0
	// without B).
	VsB float64 `json:"vs_b,omitempty"`
	// Ran and Profiled are the median run's: where its calls ran and how
	// many were profiled (Dispatcher.Stats().Profiled).
	Ran      map[string]uint64 `json:"ran"`
	Profiled uint64            `json:"profiled"`
}

// LambdaRun is one timed run.
type LambdaRun struct {
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"`
	// Ran counts the run's calls by where they ran ("K" host, "T"
	// target, "B" buffered); Profiled those profiled, and Races the
	// profiled reads that ran on both sides at once.
	Ran      map[string]uint64 `json:"ran"`
	Profiled uint64            `json:"profiled"`
	Races    uint64            `json:"races"`
	// AheadSent counts the reads λ sent to the target ahead of the call
	// continuing a sequential stream, and AheadUsed the calls they
	// answered (lambda.Stats).
	AheadSent uint64 `json:"ahead_sent,omitempty"`
	AheadUsed uint64 `json:"ahead_used,omitempty"`
	// CacheHits and CacheMisses are the host cache's page counts.
	CacheHits   uint64 `json:"cache_hits"`
	CacheMisses uint64 `json:"cache_misses"`
}

// LambdaBar is one of the checks. Its JSON has the keys every
// bench's bars have (what, want, got, met) and says more: max, applies
// and note.
type LambdaBar struct {
	Name string `json:"what"`
	// Value is the measured ratio, Want the bar, Max whether Value must
	// stay at or below it (else at or above).
	Value float64 `json:"got"`
	Want  float64 `json:"want"`
	Max   bool    `json:"max"`
	// Applies says whether the issue sets this bar for this setup (the
	// speedup over B is asked for on a shaped 10 Gb/s link with a cold
	// cache, for stats64 and grep); Note says why not.
	Applies bool   `json:"applies"`
	Met     bool   `json:"met"`
	Note    string `json:"note,omitempty"`
}

// Verdict is PASS, MISS, or (for a bar that does not apply here) the
// same in lower case with "n/a".
func (b LambdaBar) Verdict() string {
	v := "MISS"
	if b.Met {
		v = "PASS"
	}
	if !b.Applies {
		return "n/a (" + strings.ToLower(v) + ")"
	}
	return v
}

// lambdaWork is what the runs of one benchmark do: the requests over a
// file and how their outputs are checked.
type lambdaWork struct {
	file   *offloadfs.File
	fn     sandbox.ID
	reqs   []lambdaReq
	write  bool
	params []byte
	outCap func(n int) int
	// inputs are a λ write's data, one per request.
	inputs [][]byte
	// bytes is what throughput counts.
	bytes int64
	// reference is the native reference answer.
	reference string
	// check combines a read run's outputs (in request order) and returns
	// the answer, or an error if it is not the reference.
	check func(outs [][]byte) (string, error)
	// scrub, before each write run, overwrites what the writes will
	// write, so that no run can pass on its predecessor's output.
	scrub func(ctx context.Context, f *offloadfs.File) error
	// verify, after each write run, checks the file against the
	// reference and returns the answer.
	verify func(ctx context.Context, f *offloadfs.File) (string, error)
}

// runOpts are a benchmark's run settings.
type runOpts struct {
	modes      []lambda.Mode
	repeat     int
	depth      int
	warm       float64
	warmRandom bool
	seed       uint64
	progress   func(stage string)
	interleave int // requests per block (Config.Interleave)
}

// Run runs the benchmark.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	app, err := lookupLambdaApp(cfg.App)
	if err != nil {
		return nil, err
	}
	reqs, err := planLambdaRequests(cfg.Size, cfg.RequestSize, lambdaBlock)
	if err != nil {
		return nil, err
	}
	copies := fileCopies(cfg.Interleave, cfg.Modes)
	e, rep, fn, err := cfg.start(ctx, copies*(cfg.Size+cfg.Size/8)+96<<20, copies*cfg.Size+64<<20, app.function)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	defer func() { err = e.targetFailure(err) }()
	rep.App, rep.Function = app.name, app.function
	rep.Size, rep.RequestSize, rep.Requests = cfg.Size, cfg.RequestSize, len(reqs)
	harness.Stage(cfg.Progress, "making the %s dataset (%s)", app.name, volume.FormatSize(cfg.Size))
	w, err := prepareLambdaApp(ctx, e, app, fn, reqs, cfg.Size, cfg.Seed)
	if err != nil {
		return nil, err
	}
	defer w.file.Close()
	rep.Answer = w.reference
	err = e.runModes(ctx, rep, w, cfg.runOpts())
	return rep, err
}

// start starts a run's environment (a namespace of volumeSize bytes, a
// host cache of cacheSize) and its report, and registers function. The
// caller closes e and adds e.targetFailure to its errors.
func (c *Config) start(ctx context.Context, volumeSize, cacheSize int64, function string) (_ *lambdaEnv, _ *Report, _ sandbox.ID, err error) {
	harness.Stage(c.Progress, "starting the target (link: %s)", linkLabel(c.Link))
	e, err := startLambdaEnv(ctx, lambdaEnvConfig{
		targetExe: c.TargetExe, serverCPUs: c.ServerCPUs, link: c.Link,
		volumeSize: volumeSize, cacheSize: cacheSize,
		requestSize: c.RequestSize, depth: c.Depth, logger: c.Logger,
		profileEvery: c.ProfileEvery, profileFirst: c.ProfileFirst, readAhead: c.ReadAhead,
	})
	if err != nil {
		return nil, nil, sandbox.ID{}, err
	}
	rep := newLambdaReport(e, c.Runtime, c.Repeat, c.Depth, c.Warm, c.WarmRandom)
	rep.Interleave = c.Interleave
	fn, err := e.register(ctx, function, c.Runtime)
	if err != nil {
		err = e.targetFailure(err)
		e.Close()
		return nil, nil, sandbox.ID{}, err
	}
	return e, rep, fn, nil
}

// runOpts are c's run settings.
func (c *Config) runOpts() runOpts {
	return runOpts{
		modes: c.Modes, repeat: c.Repeat, depth: c.Depth, warm: c.Warm, warmRandom: c.WarmRandom,
		seed: c.Seed, progress: c.Progress, interleave: c.Interleave,
	}
}

// linkLabel names a --link value for progress messages.
func linkLabel(rate string) string {
	if rate == "" {
		return "loopback"
	}
	return rate
}

func newLambdaReport(e *lambdaEnv, kind sandbox.Kind, repeat, depth int, warm float64, random bool) *Report {
	order := "sequential"
	if random {
		order = "random"
	}
	every, first := e.disp.ProfileSchedule()
	return &Report{
		Machine: report.DescribeMachine(), Runtime: kind.String(), Target: e.where,
		Link: e.link.String(), LinkShaped: e.link.Shaped(), LinkRate: e.link.Rate(),
		Depth: depth, Warm: warm, WarmOrder: order, Repeat: repeat,
		ProfileEvery: every, ProfileFirst: first, ReadAhead: e.disp.ReadAhead(),
	}
}

// prepareLambdaApp writes the application's file (for bitmap, the file
// its writes go into), syncs the target's extent maps, computes the
// native reference and returns the work.
func prepareLambdaApp(ctx context.Context, e *lambdaEnv, app *lambdaApp, fn sandbox.ID, reqs []lambdaReq, size int64, seed uint64) (_ *lambdaWork, err error) {
	f, err := e.fsys.Create(app.name)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	data := app.generate(size, seed)
	w := &lambdaWork{file: f, fn: fn, reqs: reqs, write: app.write, params: app.params, outCap: app.outCap, bytes: size}
	if app.write {
		w.inputs = encodeBitmapRequests(data, reqs)
		ref, err := bitmapReference(w.inputs)
		if err != nil {
			return nil, fmt.Errorf("bench: bitmap reference: %w", err)
		}
		if i := firstDiff(ref, data); i >= 0 {
			return nil, fmt.Errorf("bench: the native expansion of the requests differs from the bitmap at byte %d", i)
		}
		sum := sha256.Sum256(ref)
		w.reference = fmt.Sprintf("%s bitmap, sha256 %s", volume.FormatSize(size), hex.EncodeToString(sum[:8]))
		w.scrub = func(ctx context.Context, f *offloadfs.File) error { return scrubFile(f, size) }
		w.verify = func(ctx context.Context, f *offloadfs.File) (string, error) {
			if err := e.cache.Drop(ctx); err != nil {
				return "", fmt.Errorf("dropping the cache: %w", err)
			}
			got := make([]byte, size)
			if _, err := f.ReadAt(got, 0); err != nil && !errors.Is(err, io.EOF) {
				return "", fmt.Errorf("reading the file back: %w", err)
			}
			if i := firstDiff(got, ref); i >= 0 {
				return "", fmt.Errorf("the file differs from the native expansion at byte %d (%#02x, want %#02x)", i, got[i], ref[i])
			}
			return w.reference, nil
		}
		// The writes go into space the file has (λ-IO's fallocated
		// output file).
		if err := scrubFile(f, size); err != nil {
			return nil, err
		}
	} else {
		if err := writeFile(f, data); err != nil {
			return nil, err
		}
		// The reference reads the file back, so it checks what the
		// target holds, not what was meant to be written.
		data = nil
		back := make([]byte, size)
		if _, err := f.ReadAt(back, 0); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("bench: reading the file back: %w", err)
		}
		if w.reference, err = app.reference(back); err != nil {
			return nil, fmt.Errorf("bench: %s native reference: %w", app.name, err)
		}
		w.check = func(outs [][]byte) (string, error) {
			c := app.newCombiner()
			for i, q := range reqs {
				if err := c.add(q.off, q.n, outs[i]); err != nil {
					return "", err
				}
			}
			got := c.result()
			if got != w.reference {
				return got, fmt.Errorf("combined answer %q differs from the native reference %q", got, w.reference)
			}
			return got, nil
		}
	}
	if err := e.fsys.SyncRemote(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return w, nil
}

// writeFile writes data to f from offset 0 in 8 MiB pieces.
func writeFile(f *offloadfs.File, data []byte) error {
	for off := 0; off < len(data); off += 8 << 20 {
		if _, err := f.WriteAt(data[off:min(off+8<<20, len(data))], int64(off)); err != nil {
			return fmt.Errorf("bench: writing the file: %w", err)
		}
	}
	return nil
}

// scrubFile writes 0x5a over [0, size) of f, straight to the device: a
// byte the bitmap's alternating runs of 1 to 1024 bits make only by
// chance, so a request whose output never reached the file shows.
func scrubFile(f *offloadfs.File, size int64) error {
	buf := make([]byte, min(size, 8<<20))
	for i := range buf {
		buf[i] = 0x5a
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
			return fmt.Errorf("bench: scrubbing the output file: %w", err)
		}
	}
	return nil
}

// runModes runs every mode opts.repeat times, the order of the modes
// alternating between runs (ABCD DCBA …), or, with opts.interleave, in
// rounds of interleaved blocks (runRound), and fills in the report's
// medians and bars.
func (e *lambdaEnv) runModes(ctx context.Context, rep *Report, w *lambdaWork, opts runOpts) error {
	res := make([]ModeResult, len(opts.modes))
	for i, m := range opts.modes {
		res[i].Mode = m.String()
	}
	// λ's model is the one reported: with interleaving, that of λ's own
	// copy of the file.
	modelFile := w.file
	var works []*lambdaWork
	if opts.interleave > 0 {
		works = make([]*lambdaWork, len(opts.modes))
		for i, m := range opts.modes {
			if i == 0 {
				works[i] = w
			} else {
				harness.Stage(opts.progress, "%s: copying the file for mode %s", rep.App, m)
				tw, err := w.twin(ctx, e.fsys, fmt.Sprintf("%s.%s", w.file.Name(), m))
				if err != nil {
					return err
				}
				defer tw.file.Close()
				works[i] = tw
			}
			if m == lambda.Auto {
				modelFile = works[i].file
			}
		}
	}
	for r := range opts.repeat {
		if works != nil {
			harness.Stage(opts.progress, "%s: round %d of %d, the modes interleaved in blocks of %d requests", rep.App, r+1, opts.repeat, opts.interleave)
			runs, err := e.runRound(ctx, works, opts.modes, opts.interleave, opts, opts.seed+uint64(r))
			if err != nil {
				return fmt.Errorf("bench: %s, round %d: %w", rep.App, r+1, err)
			}
			for i := range runs {
				res[i].Runs = append(res[i].Runs, runs[i])
			}
			continue
		}
		order := make([]int, len(opts.modes))
		for i := range order {
			order[i] = i
		}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			m := opts.modes[i]
			harness.Stage(opts.progress, "%s: mode %s, run %d of %d", rep.App, m, r+1, opts.repeat)
			run, err := e.runOnce(ctx, w, m, opts, opts.seed+uint64(r))
			if err != nil {
				return fmt.Errorf("bench: %s, run %d: %w", rep.App, r+1, err)
			}
			res[i].Runs = append(res[i].Runs, run)
		}
	}
	for i := range res {
		summarizeLambdaMode(&res[i], w.bytes)
	}
	if b := slices.IndexFunc(res, func(x ModeResult) bool { return x.Mode == lambda.Buffered.String() }); b >= 0 {
		for i := range res {
			res[i].VsB = res[b].Seconds / res[i].Seconds
		}
	}
	rep.Modes = res
	rep.Bars = lambdaBars(rep)
	for _, m := range e.disp.Stats().Models {
		if m.Fn != w.fn || m.Ino != modelFile.Ino() {
			continue
		}
		rep.Models = append(rep.Models, fmt.Sprintf("%s (%d samples)", formatModel(m.Model), m.Samples))
	}
	return nil
}

// fileCopies is how many copies of the dataset a run needs: one per mode
// when the modes are interleaved, else one.
func fileCopies(interleave int, modes []lambda.Mode) int64 {
	if interleave > 0 {
		return int64(max(len(modes), 1))
	}
	return 1
}

// twin returns w over a file of its own, name: for a read, a copy of w's
// file; for a write, a scrubbed file of the same size. Interleaved modes
// each run over their own file, so that one mode's reads and writes
// through the host cache never warm or dirty another's pages, and each
// mode's model in the dispatcher is fed by its own calls only.
func (w *lambdaWork) twin(ctx context.Context, fsys *offloadfs.FS, name string) (_ *lambdaWork, err error) {
	f, err := fsys.Create(name)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if w.write {
		err = w.scrub(ctx, f)
	} else {
		err = copyFile(f, w.file, w.bytes)
	}
	if err != nil {
		return nil, err
	}
	if err := fsys.SyncRemote(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	t := *w
	t.file = f
	return &t, nil
}

// copyFile copies the first n bytes of src to dst, 8 MiB at a time.
func copyFile(dst, src *offloadfs.File, n int64) error {
	buf := make([]byte, min(n, 8<<20))
	for off := int64(0); off < n; off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), n-off)]
		if _, err := src.ReadAt(p, off); err != nil {
			return fmt.Errorf("bench: copying %s: %w", src.Name(), err)
		}
		if _, err := dst.WriteAt(p, off); err != nil {
			return fmt.Errorf("bench: copying %s: %w", src.Name(), err)
		}
	}
	return nil
}

func formatModel(m lambda.Model) string {
	return fmt.Sprintf("storage %.0f MB/s, network %.0f MB/s, host compute %.0f MB/s, output ratio %.4f, target/host compute %.2f",
		m.StorageBW/1e6, m.NetworkBW/1e6, m.HostBW/1e6, m.OutputRatio, m.TargetRatio)
}

// summarizeLambdaMode sets the medians, and Ran and Profiled from the
// median run.
func summarizeLambdaMode(m *ModeResult, bytes int64) {
	if len(m.Runs) == 0 {
		return
	}
	idx := make([]int, len(m.Runs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case m.Runs[a].Seconds < m.Runs[b].Seconds:
			return -1
		case m.Runs[a].Seconds > m.Runs[b].Seconds:
			return 1
		}
		return 0
	})
	secs := make([]float64, len(m.Runs))
	for i, r := range m.Runs {
		secs[i] = r.Seconds
	}
	m.Seconds = report.Median(secs)
	m.MBps = float64(bytes) / m.Seconds / 1e6
	mid := m.Runs[idx[(len(idx)-1)/2]]
	m.Ran, m.Profiled = mid.Ran, mid.Profiled
}

// lambdaBars computes the two checks from the medians.
func lambdaBars(rep *Report) []LambdaBar {
	get := func(mode lambda.Mode) (ModeResult, bool) {
		i := slices.IndexFunc(rep.Modes, func(x ModeResult) bool { return x.Mode == mode.String() })
		if i < 0 {
			return ModeResult{}, false
		}
		return rep.Modes[i], true
	}
	var bars []LambdaBar
	l, okL := get(lambda.Auto)
	k, okK := get(lambda.Host)
	t, okT := get(lambda.Target)
	if okL && okK && okT {
		best := min(k.Seconds, t.Seconds)
		v := l.Seconds / best
		bars = append(bars, LambdaBar{
			Name: "λ time ÷ min(K, T) time", Value: v, Want: LambdaBarVsBest, Max: true,
			Applies: true, Met: v <= LambdaBarVsBest,
		})
	}
	b, okB := get(lambda.Buffered)
	if okL && okB {
		v := b.Seconds / l.Seconds
		bar := LambdaBar{Name: "λ speedup over B", Value: v, Want: LambdaBarVsB, Met: v >= LambdaBarVsB}
		var why []string
		if !rep.LinkShaped || rep.LinkRate != "10gbit" {
			why = append(why, "on a shaped 10gbit link")
		}
		if rep.Warm != 0 {
			why = append(why, "with a cold cache")
		}
		if rep.App != "stats64" && rep.App != "grep" {
			why = append(why, "for stats64 and grep")
		}
		bar.Applies = len(why) == 0
		if !bar.Applies {
			bar.Note = "this goal applies only " + strings.Join(why, ", ")
		}
		bars = append(bars, bar)
	}
	return bars
}

// runOnce makes one timed run of mode over w alone: a round of one
// mode whose one block is every request.
func (e *lambdaEnv) runOnce(ctx context.Context, w *lambdaWork, mode lambda.Mode, opts runOpts, seed uint64) (LambdaRun, error) {
	runs, err := e.runRound(ctx, []*lambdaWork{w}, []lambda.Mode{mode}, len(w.reqs), opts, seed)
	if err != nil {
		return LambdaRun{}, err
	}
	return runs[0], nil
}

// runRequests runs requests [lo, hi) of w in mode, depth in flight,
// keeping each read's output in outs (indexed like w.reqs), and then
// waits for what the dispatcher's profiles left running (λ's leftovers
// are λ's cost, not the next run's).
func (e *lambdaEnv) runRequests(ctx context.Context, w *lambdaWork, mode lambda.Mode, depth, lo, hi int, outs [][]byte) error {
	err := forEachRequest(ctx, hi-lo, depth, func(ctx context.Context, j int) error {
		i := lo + j
		q := w.reqs[i]
		if w.write {
			k, err := e.disp.Write(ctx, mode, lambda.WriteCall{File: w.file, Fn: w.fn, Off: q.off, N: q.n, Params: w.params, Data: w.inputs[i]})
			if err != nil {
				return fmt.Errorf("λ write [%d, +%d): %w", q.off, q.n, err)
			}
			if k != w.outCap(q.n) {
				return fmt.Errorf("λ write [%d, +%d): the function wrote %d bytes, want %d", q.off, q.n, k, w.outCap(q.n))
			}
			return nil
		}
		// An output past one transfer fails the request (NS_ERANGE) in
		// every mode alike; the datasets' outputs are far smaller.
		res, err := e.disp.Read(ctx, mode, lambda.ReadCall{File: w.file, Fn: w.fn, Off: q.off, N: q.n, Params: w.params, OutCap: min(w.outCap(q.n), e.maxOut)})
		if err != nil {
			return fmt.Errorf("λ read [%d, +%d): %w", q.off, q.n, err)
		}
		if res.Code < 0 {
			return fmt.Errorf("λ read [%d, +%d): the function returned %d", q.off, q.n, res.Code)
		}
		outs[i] = res.Output
		return nil
	})
	if err != nil {
		return err
	}
	return e.disp.WaitProfiles(ctx)
}

// count adds to run what the dispatcher and the cache counted between
// two snapshots.
func (run *LambdaRun) count(s0, s1 lambda.Stats, c0, c1 lambda.CacheStats) {
	run.Profiled += s1.Profiled - s0.Profiled
	run.Races += s1.Races - s0.Races
	run.AheadSent += s1.AheadSent - s0.AheadSent
	run.AheadUsed += s1.AheadUsed - s0.AheadUsed
	run.CacheHits += c1.Hits - c0.Hits
	run.CacheMisses += c1.Misses - c0.Misses
	for m, n := range s1.Ran {
		if d := n - s0.Ran[m]; d > 0 {
			run.Ran[m.String()] += d
		}
	}
}

// runRound makes one timed run of every mode at once, interleaved: each
// mode over its own file (works[i] for modes[i]); first, untimed, the
// cache dropped, the write outputs scrubbed and every file warmed alike;
// then the requests in blocks of block, each block run in every mode in
// turn (ABCD, then DCBA for the next block), timed per mode; for writes,
// each mode's flush of what the cache holds dirty of its file, timed;
// then every mode's answer checked. One mode with one block of every
// request is a plain run (runOnce).
func (e *lambdaEnv) runRound(ctx context.Context, works []*lambdaWork, modes []lambda.Mode, block int, opts runOpts, seed uint64) ([]LambdaRun, error) {
	if err := e.cache.Drop(ctx); err != nil {
		return nil, fmt.Errorf("dropping the cache: %w", err)
	}
	for _, w := range works {
		if w.scrub != nil {
			if err := w.scrub(ctx, w.file); err != nil {
				return nil, err
			}
		}
		if opts.warm > 0 {
			if err := e.cache.Warm(ctx, w.file, opts.warm, opts.warmRandom, seed); err != nil {
				return nil, fmt.Errorf("warming the cache: %w", err)
			}
		}
	}
	settle()
	n := len(works)
	runs := make([]LambdaRun, n)
	took := make([]time.Duration, n)
	outs := make([][][]byte, n)
	order := make([]int, n)
	for i := range n {
		runs[i].Ran = map[string]uint64{}
		outs[i] = make([][]byte, len(works[i].reqs))
		order[i] = i
	}
	reqs := len(works[0].reqs)
	for lo := 0; lo < reqs; lo += block {
		hi := min(lo+block, reqs)
		for _, i := range order {
			s0, c0 := e.disp.Stats(), e.cache.Stats()
			start := time.Now()
			err := e.runRequests(ctx, works[i], modes[i], opts.depth, lo, hi, outs[i])
			took[i] += time.Since(start)
			if err != nil {
				return nil, fmt.Errorf("mode %s: %w", modes[i], err)
			}
			runs[i].count(s0, e.disp.Stats(), c0, e.cache.Stats())
		}
		slices.Reverse(order)
	}
	for i, w := range works {
		if !w.write {
			continue
		}
		start := time.Now()
		err := e.cache.Flush(ctx, w.file, 0, -1)
		took[i] += time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("mode %s: flushing the cache: %w", modes[i], err)
		}
	}
	for i, w := range works {
		runs[i].Seconds = took[i].Seconds()
		runs[i].MBps = float64(w.bytes) / took[i].Seconds() / 1e6
		var err error
		if w.write {
			_, err = w.verify(ctx, w.file)
		} else {
			_, err = w.check(outs[i])
		}
		if err != nil {
			return nil, fmt.Errorf("mode %s: wrong answer: %w", modes[i], err)
		}
	}
	return runs, nil
}

// settle lets the previous run's leftovers finish before a timed run:
// this process's garbage is collected now (runtime.GC), and a moment
// passes for the target process's own collection, so neither happens in
// the next run's time. Without it, whichever mode followed a run that
// left much garbage paid for that run's clean-up. (Freed memory is not
// returned to the system: the next run would then pay for faulting it
// back in, which is no fairer.)
func settle() {
	runtime.GC()
	time.Sleep(settleTime)
}

// settleTime is settle's wait for the target process.
const settleTime = 300 * time.Millisecond

// forEachRequest calls do for 0..n-1, depth at a time, in order of
// issue; the first error stops the rest.
func forEachRequest(ctx context.Context, n, depth int, do func(ctx context.Context, i int) error) error {
	if depth <= 1 {
		for i := range n {
			if err := do(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(ctx, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// WriteTable prints the report: the setup, a table of the modes'
// medians, where λ's calls ran, and the bars.
func WriteTable(w io.Writer, r *Report) error {
	what := r.App
	if r.Query != "" {
		what = fmt.Sprintf("TPC-H %s at SF %g (%d LINEITEM rows)", r.Query, r.SF, r.Rows)
	}
	fmt.Fprintf(w, "%s: function %s in %s; %s in %d requests of %s, %d in flight; target: %s; link: %s\n",
		what, r.Function, r.Runtime, volume.FormatSize(r.Size), r.Requests, volume.FormatSize(int64(r.RequestSize)), r.Depth, r.Target, r.Link)
	cache := "cold cache"
	if r.Warm > 0 {
		cache = fmt.Sprintf("cache warmed to %.0f%% (%s)", 100*r.Warm, r.WarmOrder)
	}
	ref := "the native reference"
	if r.Query != "" {
		ref = "tpch.Evaluate's"
	}
	runs := fmt.Sprintf("medians of %d runs", r.Repeat)
	if r.Interleave > 0 {
		runs = fmt.Sprintf("medians of %d runs, the modes interleaved in blocks of %d requests, each over its own copy of the file", r.Repeat, r.Interleave)
	}
	if strings.Contains(strings.TrimRight(r.Answer, "\n"), "\n") {
		fmt.Fprintf(w, "%s; %s; answer (equal to %s in every run):\n%s\n\n", cache, runs, ref, tpchAnswerLines(r.Answer))
	} else {
		fmt.Fprintf(w, "%s; %s; answer (equal to %s in every run): %s\n\n", cache, runs, ref, strings.TrimSpace(r.Answer))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttime s\tMB/s\t× B\tran (median run)\truns (s)\t")
	for _, m := range r.Modes {
		runs := make([]string, len(m.Runs))
		for i, x := range m.Runs {
			runs[i] = fmt.Sprintf("%.3f", x.Seconds)
		}
		vs := "-"
		if m.VsB > 0 {
			vs = fmt.Sprintf("%.2f", m.VsB)
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%s\t%s\t%s\t\n", m.Mode, m.Seconds, m.MBps, vs, formatRan(m.Ran, m.Profiled), strings.Join(runs, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, b := range r.Bars {
		op := "≥"
		if b.Max {
			op = "≤"
		}
		fmt.Fprintf(w, "goal: %s = %.3f (want %s %.2f): %s", b.Name, b.Value, op, b.Want, b.Verdict())
		if b.Note != "" {
			fmt.Fprintf(w, " — %s", b.Note)
		}
		fmt.Fprintln(w)
	}
	if len(r.Models) > 0 && r.ProfileEvery > 0 {
		fmt.Fprintf(w, "dispatcher schedule: the first %d of every %d requests profiled; %d ranges read ahead of a sequential stream at the target\n", r.ProfileFirst, r.ProfileEvery, r.ReadAhead)
	}
	for _, m := range r.Models {
		fmt.Fprintf(w, "dispatcher model: %s\n", m)
	}
	return nil
}

// formatRan says where a run's calls ran: "T 64", "K 3 T 61 (profiled 5)".
func formatRan(ran map[string]uint64, profiled uint64) string {
	var parts []string
	for _, m := range []lambda.Mode{lambda.Buffered, lambda.Host, lambda.Target} {
		if n := ran[m.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", m, n))
		}
	}
	s := strings.Join(parts, " ")
	if profiled > 0 {
		s += fmt.Sprintf(" (profiled %d)", profiled)
	}
	return s
}
