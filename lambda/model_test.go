package lambda

import (
	"math"
	"testing"
	"time"
)

const (
	kb = 1e3
	mb = 1e6
	gb = 1e9
)

func TestModelRead(t *testing.T) {
	m := Model{StorageBW: 2 * gb, NetworkBW: 1 * gb, HostBW: 4 * gb, OutputRatio: 0.5, TargetRatio: 0.5}
	for _, tc := range []struct {
		name         string
		m            Model
		n            int64
		c            float64
		host, target time.Duration
	}{
		// host = (1-c)n/S + (1-c)n/N + n/H; target = n/S + n/(αH) + rn/N
		{"cold", m, 1e9, 0, 500*time.Millisecond + time.Second + 250*time.Millisecond, 500*time.Millisecond + 500*time.Millisecond + 500*time.Millisecond},
		{"warm", m, 1e9, 1, 250 * time.Millisecond, 1500 * time.Millisecond},
		{"half", m, 1e9, 0.5, 250*time.Millisecond + 500*time.Millisecond + 250*time.Millisecond, 1500 * time.Millisecond},
		{"cached out of range", m, 1e9, 2, 250 * time.Millisecond, 1500 * time.Millisecond},
		{"empty", m, 0, 0, 0, 0},
		{"unmeasured parts cost nothing", Model{NetworkBW: 1 * gb, OutputRatio: 0.1}, 1e9, 0, time.Second, 100 * time.Millisecond},
		{"α 0 counts as 1", Model{HostBW: 1 * gb}, 1e9, 1, time.Second, time.Second},
	} {
		h, tg := tc.m.Read(tc.n, tc.c)
		if !near(h, tc.host) || !near(tg, tc.target) {
			t.Errorf("%s: Read = %v, %v; want %v, %v", tc.name, h, tg, tc.host, tc.target)
		}
	}
}

func TestModelWrite(t *testing.T) {
	for _, tc := range []struct {
		name         string
		m            Model
		n            int64
		host, target time.Duration
	}{
		// host = n/H + rn/N + rn/S; target = n/N + n/(αH) + rn/S
		{"expanding", Model{StorageBW: 1 * gb, NetworkBW: 1 * gb, HostBW: 1 * gb, OutputRatio: 4, TargetRatio: 0.5}, 1e8,
			100*time.Millisecond + 400*time.Millisecond + 400*time.Millisecond, 100*time.Millisecond + 200*time.Millisecond + 400*time.Millisecond},
		{"shrinking", Model{StorageBW: 1 * gb, NetworkBW: 500 * mb, HostBW: 2 * gb, OutputRatio: 0.25, TargetRatio: 1}, 1e9,
			500*time.Millisecond + 500*time.Millisecond + 250*time.Millisecond, 2*time.Second + 500*time.Millisecond + 250*time.Millisecond},
		{"saturates", Model{HostBW: 1e-12}, 1e9, math.MaxInt64, math.MaxInt64},
	} {
		h, tg := tc.m.Write(tc.n)
		if !near(h, tc.host) || !near(tg, tc.target) {
			t.Errorf("%s: Write = %v, %v; want %v, %v", tc.name, h, tg, tc.host, tc.target)
		}
	}
}

func near(a, b time.Duration) bool {
	d := math.Abs(float64(a - b))
	return d <= 1e-6*math.Abs(float64(b))+1
}

func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) }

// secs is a duration of s seconds.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// TestFitRecovers: exact synthetic measurements of a host run and a
// target run give back the model's parameters; with r ≈ 1 the I/O cost is
// split evenly, the host's predictions stay exact.
func TestFitRecovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		m     Model
		split bool // r too close to 1 to tell S from N
	}{
		{"stats (r≈0)", Model{StorageBW: 4 * gb, NetworkBW: 1 * gb, HostBW: 2 * gb, OutputRatio: 32.0 / (64 << 20), TargetRatio: 0.5}, false},
		{"grep (r=0.1)", Model{StorageBW: 2 * gb, NetworkBW: 1.25 * gb, HostBW: 500 * mb, OutputRatio: 0.1, TargetRatio: 0.25}, false},
		{"expanding (r=3)", Model{StorageBW: 1 * gb, NetworkBW: 3 * gb, HostBW: 800 * mb, OutputRatio: 3, TargetRatio: 2}, false},
		{"copy (r=1)", Model{StorageBW: 2 * gb, NetworkBW: 1 * gb, HostBW: 1 * gb, OutputRatio: 1, TargetRatio: 0.5}, true},
	} {
		m := tc.m
		const n = 64 << 20
		const u = n / 2 // the host run found half of the range cached
		var e estimator
		for range 3 {
			e.addRead(readSample{
				n: n, out: int64(math.Round(m.OutputRatio * n)), host: true, ranAt: Host,
				readDone: true, missBytes: u, missTime: secs(u/m.StorageBW + u/m.NetworkBW),
				computed: true, compute: secs(n / m.HostBW), done: true,
			})
			tc := n / (m.TargetRatio * m.HostBW)
			e.addRead(readSample{
				n: n, out: int64(math.Round(m.OutputRatio * n)), ranAt: Target, done: true,
				total:        secs(n/m.StorageBW + tc + m.OutputRatio*n/m.NetworkBW),
				targetMicros: uint32(math.Round(tc * 1e6)),
			})
		}
		got := e.fit(0, 0)
		if !closeTo(got.HostBW, m.HostBW) || !closeTo(got.OutputRatio, m.OutputRatio) || math.Abs(got.TargetRatio-m.TargetRatio) > 1e-4*m.TargetRatio {
			t.Errorf("%s: fit %+v, want %+v", tc.name, got, m)
			continue
		}
		if tc.split {
			io := 1/m.StorageBW + 1/m.NetworkBW
			if !closeTo(got.StorageBW, 2/io) || !closeTo(got.NetworkBW, 2/io) {
				t.Errorf("%s: S, N = %v, %v; want the measured cost split evenly (%v each)", tc.name, got.StorageBW, got.NetworkBW, 2/io)
			}
		} else if math.Abs(got.StorageBW-m.StorageBW) > 1e-4*m.StorageBW || math.Abs(got.NetworkBW-m.NetworkBW) > 1e-4*m.NetworkBW {
			t.Errorf("%s: S, N = %v, %v; want %v, %v", tc.name, got.StorageBW, got.NetworkBW, m.StorageBW, m.NetworkBW)
		}
		// The host's predictions hold whatever the split.
		for _, c := range []float64{0, 0.5, 1} {
			wh, _ := m.Read(n, c)
			gh, _ := got.Read(n, c)
			if math.Abs(float64(gh-wh)) > 1e-4*float64(wh) {
				t.Errorf("%s: host prediction at c=%v: %v, want %v", tc.name, c, gh, wh)
			}
		}
	}
}

// TestFitFromCacheMissCost: a key whose host runs never missed borrows
// the cache's per-byte miss cost, so it can price a cold read.
func TestFitFromCacheMissCost(t *testing.T) {
	var e estimator
	const n = 1 << 20
	e.addRead(readSample{n: n, out: 32, host: true, ranAt: Host, readDone: true, computed: true, compute: secs(n / 1e9), done: true})
	if h, _ := e.fit(0, 0).Read(n, 0); !near(h, secs(n/1e9)) {
		t.Errorf("no miss cost known: cold host read %v, want the compute alone", h)
	}
	if h, _ := e.fit(4e-9, 0).Read(n, 0); !near(h, secs(n/1e9+n*4e-9)) {
		t.Errorf("with the cache's miss cost: cold host read %v, want %v", h, secs(n/1e9+n*4e-9))
	}
}

// TestFitCensored: a cancelled run's elapsed time is a lower bound: a
// model fitted without exact target runs predicts at least that.
func TestFitCensored(t *testing.T) {
	var e estimator
	const n = 1 << 20
	e.addRead(readSample{n: n, out: 32, host: true, ranAt: Host, readDone: true, missBytes: n, missTime: secs(1e-3), computed: true, compute: secs(1e-3), done: true})
	e.addRead(readSample{n: n, ranAt: Target, total: secs(50e-3)}) // cancelled after 50 ms
	_, tg := e.fit(0, 0).Read(n, 0)
	if tg < secs(50e-3)-time.Microsecond {
		t.Errorf("target prediction %v below the 50ms a cancelled run showed", tg)
	}
	// And a host run cancelled during its reads bounds the miss cost.
	var e2 estimator
	e2.addRead(readSample{n: n, out: 32, ranAt: Target, done: true, total: secs(2e-3), targetMicros: 1000})
	e2.addRead(readSample{n: n, host: true, ranAt: Host, missBytes: n / 4, missTime: secs(30e-3)})
	h, _ := e2.fit(0, 0).Read(n, 0)
	if h < secs(120e-3) {
		t.Errorf("host cold prediction %v below the bound the cancelled reads gave (120ms)", h)
	}
}

// TestDecisionFollowsModel: fed samples where the host is 10× faster with
// everything cached and the target 10× faster with nothing cached, the
// dispatcher picks the host at c=1 and the target at c=0.
func TestDecisionFollowsModel(t *testing.T) {
	const n = 8 << 20
	h := 1e-9     // host compute, s/byte
	tgt := 10 * h // target's whole time per byte: 10× the warm host's
	m := 10*tgt - h
	// cold host = m + h = 10 × target
	p := &policy{sched: schedule{every: 200, first: 5}}
	for range 5 {
		p.observeRead(readSample{n: n, out: 32, host: true, ranAt: Host, readDone: true,
			missBytes: n, missTime: secs(m * n), computed: true, compute: secs(h * n), done: true}, Auto)
		p.observeRead(readSample{n: n, out: 32, ranAt: Target, done: true,
			total: secs(tgt * n), targetMicros: uint32(math.Round(tgt * n / 2 * 1e6))}, Auto)
	}
	for i := range 5 {
		if !p.scheduled(false) {
			t.Fatalf("request %d not profiled", i)
		}
	}
	if p.scheduled(false) {
		t.Fatal("request 5 profiled")
	}
	model := p.fitted(0, 0)
	for _, tc := range []struct {
		c        float64
		wantHost bool
	}{{1, true}, {0.95, true}, {0, false}, {0.05, false}} {
		host, target := model.Read(n, tc.c)
		if (host < target) != tc.wantHost {
			t.Errorf("c=%v: host %v, target %v: want host=%v", tc.c, host, target, tc.wantHost)
		}
	}
	if host, target := model.Read(n, 1); math.Abs(float64(target)/float64(host)-10) > 0.01 {
		t.Errorf("c=1: target/host = %v, want 10", float64(target)/float64(host))
	}
	if host, target := model.Read(n, 0); math.Abs(float64(host)/float64(target)-10) > 0.01 {
		t.Errorf("c=0: host/target = %v, want 10", float64(host)/float64(target))
	}
}

func TestWindowTrimmedMean(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want float64
	}{
		{[]float64{2}, 2},
		{[]float64{1, 2, 3}, 2},
		{[]float64{1, 1, 1, 1, 100}, 1},    // one outlier of five dropped
		{[]float64{100, 2, 2, 2, 2, 0}, 2}, // both ends dropped
		{[]float64{-1, math.NaN(), 4}, 4},  // invalid values ignored
		{[]float64{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1}, // the last 16 only
	} {
		var w window
		for _, x := range tc.v {
			w.add(x)
		}
		if got, ok := w.mean(); !ok || got != tc.want {
			t.Errorf("%v: mean %v, %v; want %v", tc.v, got, ok, tc.want)
		}
	}
	var w window
	if _, ok := w.mean(); ok {
		t.Error("empty window has a mean")
	}
}

// TestFitPredictsMeasured: whatever the split of the I/O cost (a target
// time that includes the target's media reads, measurements from which
// S and N cannot be told apart), the fitted model predicts both sides'
// measured times at the profiled size.
func TestFitPredictsMeasured(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		m                    Model
		targetTimeIncludesIO bool
	}{
		{"stats, target time = compute", Model{StorageBW: 4 * gb, NetworkBW: 1 * gb, HostBW: 2 * gb, OutputRatio: 1e-6, TargetRatio: 0.5}, false},
		{"stats, target time includes reads", Model{StorageBW: 4 * gb, NetworkBW: 1 * gb, HostBW: 2 * gb, OutputRatio: 1e-6, TargetRatio: 0.5}, true},
		{"grep, target time includes reads", Model{StorageBW: 500 * mb, NetworkBW: 1 * gb, HostBW: 300 * mb, OutputRatio: 0.3, TargetRatio: 0.3}, true},
		{"copy", Model{StorageBW: 2 * gb, NetworkBW: 1 * gb, HostBW: 1 * gb, OutputRatio: 1, TargetRatio: 0.5}, true},
	} {
		m := tc.m
		const n = 16 << 20
		wantHost, wantTarget := m.Read(n, 0)
		tcomp := n / (m.TargetRatio * m.HostBW)
		if tc.targetTimeIncludesIO {
			tcomp += n / m.StorageBW
		}
		var e estimator
		e.addRead(readSample{n: n, out: int64(m.OutputRatio * n), host: true, ranAt: Host, readDone: true,
			missBytes: n, missTime: secs(n/m.StorageBW + n/m.NetworkBW), computed: true, compute: secs(n / m.HostBW), done: true})
		e.addRead(readSample{n: n, out: int64(m.OutputRatio * n), ranAt: Target, done: true,
			total: wantTarget, targetMicros: uint32(math.Round(tcomp * 1e6))})
		gotHost, gotTarget := e.fit(0, 0).Read(n, 0)
		if math.Abs(float64(gotHost-wantHost)) > 1e-3*float64(wantHost) || math.Abs(float64(gotTarget-wantTarget)) > 1e-3*float64(wantTarget) {
			t.Errorf("%s: predicts host %v, target %v; measured %v, %v", tc.name, gotHost, gotTarget, wantHost, wantTarget)
		}
	}
}

// TestForgetUnpicked: at a profile, a side that ran nothing since the
// last one loses its (old) samples, so the fit rests on the new ones
// however many old ones said otherwise; a side that ran keeps its own.
func TestForgetUnpicked(t *testing.T) {
	const n = 1 << 20
	target := func(total time.Duration) readSample {
		return readSample{n: n, out: 32, ranAt: Target, done: true, total: total, targetMicros: uint32(total.Microseconds() * 9 / 10)}
	}
	host := func(compute time.Duration) readSample {
		return readSample{n: n, out: 32, host: true, ranAt: Host, readDone: true, computed: true, compute: compute, done: true}
	}
	var e estimator
	for range windowSize {
		e.addRead(target(10 * time.Millisecond)) // a slow spell of the target...
		e.addRead(host(3 * time.Millisecond))
		e.picked(Host) // ...after which the host was picked
	}
	e.forgetUnpicked()
	e.addRead(target(time.Millisecond)) // the new profile
	hostT, targetT := e.fit(0, 0).Read(n, 1)
	if targetT > 1100*time.Microsecond || targetT < 900*time.Microsecond {
		t.Errorf("target predicted %v after the profile, want about 1ms: the old samples were kept", targetT)
	}
	if hostT < 2900*time.Microsecond || hostT > 3100*time.Microsecond {
		t.Errorf("host predicted %v, want about 3ms: the picked side's samples were dropped", hostT)
	}
	if r, _ := e.ratio.mean(); r != 32.0/n {
		t.Errorf("output ratio %v forgotten, want %v", r, 32.0/n)
	}
	// Both sides picked in a period: nothing is dropped.
	e.picked(Host)
	e.picked(Target)
	before := len(e.hostCPU.v) + len(e.tgtTotal.v)
	e.forgetUnpicked()
	if after := len(e.hostCPU.v) + len(e.tgtTotal.v); after != before {
		t.Errorf("%d samples after a period with both sides picked, want %d", after, before)
	}
}
