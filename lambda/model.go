package lambda

import (
	"math"
	"slices"
	"time"
)

// Model is λ-IO's execution-time model (§3.4). Bandwidths are in bytes per
// second. A zero (or negative) bandwidth is a part that was not measured
// and costs nothing in the predictions; a zero TargetRatio counts as 1
// (the target computes as fast as the host).
type Model struct {
	StorageBW   float64 // the target reading/writing its media
	NetworkBW   float64 // host <-> target
	HostBW      float64 // the host computing the function
	OutputRatio float64 // r: output bytes per input byte
	TargetRatio float64 // α: target compute bandwidth / host compute bandwidth
}

// per returns the seconds bytes take at bw bytes/s (0 for an unmeasured
// bandwidth).
func per(bytes, bw float64) float64 {
	if bw <= 0 || math.IsInf(bw, 1) {
		return 0
	}
	return bytes / bw
}

// duration converts seconds to a Duration, saturating.
func duration(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

func (m Model) alpha() float64 {
	if m.TargetRatio <= 0 {
		return 1
	}
	return m.TargetRatio
}

// Read predicts a λ read of n bytes of which the fraction cached is in
// the host cache: on the host, the uncached bytes come from the media
// and over the network and all n are computed on; at the target, all n
// come from the media, are computed on at α times the host's speed, and
// the output (r·n) crosses the network.
//
//	host   = (1−c)·n/S + (1−c)·n/N + n/H
//	target = n/S + n/(α·H) + r·n/N
func (m Model) Read(n int64, cached float64) (host, target time.Duration) {
	x := float64(n)
	c := min(max(cached, 0), 1)
	h := per((1-c)*x, m.StorageBW) + per((1-c)*x, m.NetworkBW) + per(x, m.HostBW)
	t := per(x, m.StorageBW) + per(x, m.alpha()*m.HostBW) + per(m.OutputRatio*x, m.NetworkBW)
	return duration(h), duration(t)
}

// Write predicts a λ write of n input bytes: on the host, the input is
// computed on and the output (r·n) crosses the network to the media; at
// the target, the input crosses the network, is computed on there, and
// the output goes to the media.
//
//	host   = n/H + r·n/N + r·n/S
//	target = n/N + n/(α·H) + r·n/S
func (m Model) Write(n int64) (host, target time.Duration) {
	x := float64(n)
	out := m.OutputRatio * x
	h := per(x, m.HostBW) + per(out, m.NetworkBW) + per(out, m.StorageBW)
	t := per(x, m.NetworkBW) + per(x, m.alpha()*m.HostBW) + per(out, m.StorageBW)
	return duration(h), duration(t)
}

// window is the last few values of one measured quantity.
type window struct {
	v []float64
}

// windowSize is k of "the trimmed mean of the last k samples".
const windowSize = 16

func (w *window) add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
		return
	}
	if len(w.v) == windowSize {
		copy(w.v, w.v[1:])
		w.v = w.v[:windowSize-1]
	}
	w.v = append(w.v, x)
}

// mean is the trimmed mean: with five or more values the top and bottom
// fifth are dropped, so one disturbed run (a GC pause, the other side of
// a profile competing for the CPU) does not move the model. ok is false
// with no values.
func (w *window) mean() (float64, bool) {
	if len(w.v) == 0 {
		return 0, false
	}
	s := slices.Clone(w.v)
	slices.Sort(s)
	if len(s) >= 5 {
		k := len(s) / 5
		s = s[k : len(s)-k]
	}
	var sum float64
	for _, x := range s {
		sum += x
	}
	return sum / float64(len(s)), true
}

// estimator collects one (file, function)'s measurements, all per byte
// of input (seconds per byte), and fits a Model to them. Exact
// measurements come from runs that finished; censored ones from runs
// cancelled because the other side of a profile finished first, whose
// elapsed time is a lower bound on what they would have taken.
//
// A censored measurement goes into the same window as the exact ones, as
// if its bound were its value, rather than raising the estimate to the
// bound: a bound says that one run, slowed by the other side of its
// profile, was at least that slow; the side's later runs alone (once it
// is picked) say how fast it is now, and the window's recency lets them
// outweigh it. A side never measured but as a loser keeps the bound, so
// it is never estimated faster than the side that beat it.
type estimator struct {
	ratio    window // r: output bytes per input byte
	hostIO   window // host: seconds per uncached byte read (1/S + 1/N)
	hostCPU  window // host: seconds per input byte apart from misses (1/H)
	tgtCPU   window // target: its own seconds per input byte, from the result's target time
	tgtTotal window // target read: whole seconds per byte seen by the host
	wrTotal  window // target write: whole seconds per input byte (1/N + 1/(αH) + r/S)
	samples  int    // exact measurements taken
	// hostRuns and targetRuns count the runs of each side outside
	// profiles since the last forgetUnpicked: the side the model picked.
	hostRuns, targetRuns int
	writes               bool // the function is used for λ writes
}

// readSample is one finished or cancelled run of a λ read.
type readSample struct {
	n   int64 // input bytes
	out int64 // output bytes (-1: unknown)

	// The host side (K): bytes missed in the cache and the time their
	// reads took; the compute time; done false for a cancelled run, whose
	// times are lower bounds (a phase not reached has zero time).
	host      bool
	ranAt     Mode // where the run happened (Auto: it did not run)
	readDone  bool // the host's reads finished
	missBytes int64
	missTime  time.Duration
	// splitReads says the misses were read in pieces (a profiled run),
	// so missTime is not what the host's I/O costs.
	splitReads bool
	computed   bool // the compute ran to the end
	compute    time.Duration
	done       bool

	// The target side (T): the whole time seen by the host and the
	// target's own time (0: unknown).
	total        time.Duration
	targetMicros uint32
}

// forgetUnpicked drops the time measurements of a side that ran no
// request outside profiles since the last call (its samples are all
// older than that profile), and starts counting again. The output
// ratio, a property of the function and its data, stays.
func (e *estimator) forgetUnpicked() {
	if e.hostRuns == 0 {
		e.forget(Host)
	}
	if e.targetRuns == 0 {
		e.forget(Target)
	}
	e.hostRuns, e.targetRuns = 0, 0
}

// forget drops side's time measurements (Host or Target).
func (e *estimator) forget(side Mode) {
	switch side {
	case Host:
		e.hostIO.v, e.hostCPU.v = e.hostIO.v[:0], e.hostCPU.v[:0]
	case Target:
		e.tgtCPU.v, e.tgtTotal.v, e.wrTotal.v = e.tgtCPU.v[:0], e.tgtTotal.v[:0], e.wrTotal.v[:0]
	}
}

// picked counts a run of side (Host or Target) outside a profile.
func (e *estimator) picked(side Mode) {
	switch side {
	case Host:
		e.hostRuns++
	case Target:
		e.targetRuns++
	}
}

// addRead records a λ read measurement.
func (e *estimator) addRead(s readSample) {
	if s.n <= 0 {
		return
	}
	x := float64(s.n)
	if s.out >= 0 && s.done {
		e.ratio.add(float64(s.out) / x)
	}
	if s.host {
		if s.missBytes > 0 && !s.splitReads {
			// The reads that finished, each whole: exact even in a
			// cancelled run.
			e.hostIO.add(s.missTime.Seconds() / float64(s.missBytes))
		}
		if s.computed || s.compute > 0 {
			e.hostCPU.add(s.compute.Seconds() / x)
		}
		if s.done {
			e.samples++
		}
		return
	}
	e.tgtTotal.add(s.total.Seconds() / x)
	if !s.done {
		return
	}
	e.samples++
	tc := time.Duration(s.targetMicros) * time.Microsecond
	if s.targetMicros > 0 {
		e.tgtCPU.add(tc.Seconds() / x)
	}
}

// addWriteHost records the host's compute for a λ write of n input bytes
// (done false: cancelled, a lower bound), with its output length.
func (e *estimator) addWriteHost(n, out int64, compute time.Duration, done bool) {
	e.addWrite(&e.hostCPU, n, out, compute, done)
}

// addWriteTarget records a λ write run at the target.
func (e *estimator) addWriteTarget(n, out int64, total time.Duration, done bool) {
	e.addWrite(&e.wrTotal, n, out, total, done)
}

// addWriteRatio records the output ratio of a λ write of n input bytes
// that ran to the end, and not its time.
func (e *estimator) addWriteRatio(n, out int64) {
	if n <= 0 {
		return
	}
	e.writes = true
	e.ratio.add(float64(out) / float64(n))
}

// addWrite records a λ write of n input bytes that took d into per, as
// seconds per input byte, and, when it ran to the end, its output ratio.
func (e *estimator) addWrite(per *window, n, out int64, d time.Duration, done bool) {
	if n <= 0 {
		return
	}
	x := float64(n)
	e.writes = true
	per.add(d.Seconds() / x)
	if done {
		e.ratio.add(float64(out) / x)
		e.samples++
	}
}

// alphaCap bounds α: a target compute too fast to see makes α 1000
// rather than infinite.
const alphaCap = 1000

// fit returns the model the measurements give. missCost and wbCost are
// the cache's own recent seconds per byte of miss reads and write-backs
// (0: none), used when this key's runs never missed: a model profiled with
// everything cached must still predict a cold read.
//
// The fit keeps both sides' predictions exact for what was measured: the
// host's per-missed-byte cost m = 1/S + 1/N and compute 1/H are taken as
// measured, and however m is split between S and N, the target's compute
// term absorbs whatever the split leaves of the target's measured whole
// time. So the split only decides how the parameters read, never which
// side a request goes to at the sizes profiled.
func (e *estimator) fit(missCost, wbCost float64) Model {
	r, _ := e.ratio.mean()

	// Compute: the host's from its runs, the target's from the result's
	// target time. Either alone stands for both (α = 1).
	h, hok := e.hostCPU.mean()
	tc, tok := e.tgtCPU.mean()
	switch {
	case !hok && tok:
		h = tc
	case hok && !tok:
		tc = h
	}

	// The host's I/O per missed byte: m = 1/S + 1/N, or for a write
	// function, per byte written back; without its own runs' misses, the
	// cache's recent costs.
	m, mok := e.hostIO.mean()
	if e.writes && !mok && wbCost > 0 {
		m, mok = wbCost, true
	}
	if !mok && missCost > 0 {
		m, mok = missCost, true
	}
	if !mok && wbCost > 0 {
		m, mok = wbCost, true
	}
	// The target read's whole time per byte, T = 1/S + 1/(αH) + r/N
	// (cancelled runs counting with their bounds).
	tt, ttok := e.tgtTotal.mean()

	var invS, invN float64
	switch {
	case mok && ttok && tok && math.Abs(r-1) >= 0.25:
		// Two equations, two unknowns: m = 1/S + 1/N and, with the
		// target's own time taken as its compute, y = T − 1/(αH) =
		// 1/S + r/N.
		y := tt - tc
		invN = (y - m) / (r - 1)
		invS = m - invN
		if invN <= 0 || invS <= 0 {
			// Inconsistent (noise, or a target time that includes its
			// media reads): split evenly, as below.
			invS, invN = m/2, m/2
		}
	case mok:
		// With r ≈ 1 (or no target run measured) the target's time
		// carries no information about how m splits between the media
		// and the network: split the measured per-byte I/O cost evenly.
		invS, invN = m/2, m/2
	case ttok:
		// Only the target measured: its time less its compute is
		// 1/S + r/N, with S = N.
		invS = max(tt-tc, 0) / (1 + r)
		invN = invS
	}

	// The target's compute is what its measured whole time leaves.
	if ttok {
		tc, tok = max(tt-invS-r*invN, 0), true
	} else if w, ok := e.wrTotal.mean(); ok {
		// A λ write at the target, w = 1/N + 1/(αH) + r/S, gives it for
		// a write-only function.
		if invS == 0 && invN == 0 {
			// Nothing else measured I/O: call the write's time all
			// I/O (1/N + r/S with S = N).
			invS = w / (1 + r)
			invN = invS
		}
		tc, tok = max(w-invN-r*invS, 0), true
	}

	mod := Model{OutputRatio: r}
	if invS > 0 {
		mod.StorageBW = 1 / invS
	}
	if invN > 0 {
		mod.NetworkBW = 1 / invN
	}
	switch {
	case h > 0:
		mod.HostBW = 1 / h
		switch {
		case tc > 0:
			mod.TargetRatio = min(h/tc, alphaCap)
		case tok:
			mod.TargetRatio = alphaCap // too fast to see
		default:
			mod.TargetRatio = 1
		}
	case tc > 0:
		mod.HostBW, mod.TargetRatio = 1/tc, 1
	}
	return mod
}
