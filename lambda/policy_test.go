package lambda

import (
	"strings"
	"testing"
)

// fill gives both sides of p samples, the host's compute host and the
// target's whole time target seconds per byte, as runs measured alone
// would.
func (p *policy) fill(host, target float64) {
	for range windowSize {
		p.est.hostCPU.add(host)
		p.est.tgtTotal.add(target)
		p.est.tgtCPU.add(target / 2)
	}
	p.est.samples++
	p.stale = true
}

// actions decides n requests of p, runs each as the dispatcher would
// with the host computing host seconds per byte and the target taking
// target seconds per byte in all, feeds the measurements back, and
// spells the decisions out, one letter each: K or T for a pick run on the
// host or at the target, k or t for a profile's run alone, R for a
// profile's race; "+" after a letter marks a recheck.
func (p *policy) actions(r request, n int, host, target float64) string {
	var b strings.Builder
	for range n {
		d := p.decide(r)
		c := map[action]string{runHost: "K", runTarget: "T", runRace: "R"}[d.action]
		if d.profiled && d.action != runRace {
			c = strings.ToLower(c)
		}
		b.WriteString(c)
		if d.recheck {
			b.WriteString("+")
		}
		hs := readSample{n: r.n, out: 0, host: true, ranAt: Host, readDone: true, computed: true, done: true,
			compute: secs(host * float64(r.n))}
		ts := readSample{n: r.n, out: 0, ranAt: Target, done: true, total: secs(target * float64(r.n)),
			targetMicros: uint32(target * float64(r.n) / 2 * 1e6)}
		switch {
		case r.write && d.side() == Host:
			p.observeWrite(Host, r.n, 0, hs.compute, !d.profiled)
		case r.write:
			p.observeWrite(Target, r.n, 0, ts.total, !d.profiled)
		case d.action == runRace:
			p.observeRead(hs, Auto)
			p.observeRead(ts, Auto)
		case d.side() == Host:
			p.observeRead(hs, d.picked())
		default:
			p.observeRead(ts, d.picked())
		}
	}
	return b.String()
}

// TestPolicySchedule: of every n requests the first k are profiled, and
// every request until a run was measured; with a pick that never changes
// (after the first pick's confirmation) nothing else is.
func TestPolicySchedule(t *testing.T) {
	p := &policy{sched: schedule{every: 10, first: 3}}
	warm := request{n: 1 << 20, cached: 1}
	for i := range 4 {
		if d := p.decide(warm); !d.profiled {
			t.Errorf("request %d with no run measured: not profiled", i)
		}
	}
	p = &policy{sched: schedule{every: 10, first: 3}, last: Host}
	p.fill(1e-9, 2e-9) // the host twice as fast
	// The first period's 3 profiled reads, host first; then the host,
	// already the last pick: no switch, no recheck, no probation.
	if got, want := p.actions(warm, 25, 1e-9, 2e-9), "ktk"+"KKKKKKK"+"ktk"+"KKKKKKK"+"ktk"+"KK"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestPolicyProfileReads: how a profile's reads run (rule 6), by what
// the model last picked and how far apart its estimates were, and how
// much of the range is cached before any pick.
func TestPolicyProfileReads(t *testing.T) {
	for _, tc := range []struct {
		name   string
		last   Mode
		near   bool
		cached float64
		want   string
	}{
		{"no pick yet, cached", Auto, false, 0.9, "ktkt"},
		{"no pick yet, uncached", Auto, false, 0.5, "RRRR"},
		{"host picked", Host, false, 0, "ktkt"},
		{"host picked narrowly", Host, true, 1, "ktkt"},
		{"target picked narrowly", Target, true, 0, "tktk"},
		{"target picked by far: one race", Target, false, 0, "Rttt"},
		{"target picked by far, cached", Target, false, 1, "Rttt"},
	} {
		p := &policy{sched: schedule{every: 10, first: 4}, last: tc.last, near: tc.near}
		p.est.samples = 1
		if got := p.actions(request{n: 1 << 20, cached: tc.cached}, 4, 1e-9, 1e-9); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestPolicyProfileWrites: a profile's writes alternate sides, target
// first, counted across profiles (rule 7).
func TestPolicyProfileWrites(t *testing.T) {
	p := &policy{sched: schedule{every: 4, first: 3}}
	p.fill(1e-9, 2e-9)
	p.last = Host
	w := request{write: true, n: 1 << 20}
	if got, want := p.actions(w, 8, 1e-9, 2e-9), "tkt"+"K"+"ktk"+"K"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}

// TestPolicyWritePickRestsOnProfile: a write's pick rests on its last
// profile's runs alone (rule 7). A target that gets slower in the
// period's picked runs does not switch the key to the host until the
// next profile measures both sides again; that profile's pick is then
// rechecked (rule 4), with both sides measured afresh once more.
func TestPolicyWritePickRestsOnProfile(t *testing.T) {
	p := &policy{sched: schedule{every: 10, first: 3}}
	w := request{write: true, n: 1 << 20}
	// The host 1.5x slower than the target: the first profile, the first
	// pick's recheck, probation, and the next two profiles.
	if got, want := p.actions(w, 23, 1.5e-9, 1e-9), "tkt"+"k+tk"+"TTT"+"tkt"+"TTTTTTT"+"ktk"+"T"; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// The target's picked runs now 5x slower than before: it stays
	// picked to the period's end.
	if got, want := p.actions(w, 6, 1.5e-9, 5e-9), "TTTTTT"; got != want {
		t.Fatalf("a slower target's picked runs: got %s, want %s", got, want)
	}
	// The next profile measures it, the switch to the host is rechecked,
	// and holds (on probation).
	if got, want := p.actions(w, 10, 1.5e-9, 5e-9), "tkt"+"k+tk"+"KKK"+"t"; got != want {
		t.Errorf("the next profile: got %s, want %s", got, want)
	}
}

// TestPolicyWriteProfileForgetsBoth: a write run as the pick feeds the
// model its output ratio only, and a write profile starts with both
// sides' time samples dropped, whichever side was picked (rule 7).
func TestPolicyWriteProfileForgetsBoth(t *testing.T) {
	p := &policy{sched: schedule{every: 10, first: 3}}
	w := request{write: true, n: 1 << 20}
	p.actions(w, 19, 1.5e-9, 1e-9) // up to the fourth period's profile
	host, target := len(p.est.hostCPU.v), len(p.est.wrTotal.v)
	p.observeWrite(Target, w.n, 2*w.n, secs(1e-9*float64(w.n)), true)
	if len(p.est.hostCPU.v) != host || len(p.est.wrTotal.v) != target || p.est.ratio.v[len(p.est.ratio.v)-1] != 2 {
		t.Errorf("a picked write: %d host, %d target time samples (before: %d, %d), last ratio %g; want the same counts and ratio 2",
			len(p.est.hostCPU.v), len(p.est.wrTotal.v), host, target, p.est.ratio.v[len(p.est.ratio.v)-1])
	}
	p.est.hostCPU.add(1e-9) // a read's or a forced run's host sample
	ratios := len(p.est.ratio.v)
	if d := p.decide(w); !d.profiled {
		t.Fatal("the fourth period's first request not profiled")
	}
	if len(p.est.hostCPU.v)+len(p.est.wrTotal.v) != 0 || len(p.est.ratio.v) != ratios {
		t.Errorf("at a write profile: %d host, %d target time samples, %d ratios (before: %d); want none, none, the same",
			len(p.est.hostCPU.v), len(p.est.wrTotal.v), len(p.est.ratio.v), ratios)
	}
}

// TestPolicyNear: the model's estimates within raceMargin of each other
// make the next profile alternate; farther apart, race.
func TestPolicyNear(t *testing.T) {
	for _, tc := range []struct {
		host float64 // host compute, s/B; the target takes 1 ns
		want string
	}{{1.2e-9, "tk"}, {3e-9, "Rt"}} {
		p := &policy{sched: schedule{every: 4, first: 2}, last: Target}
		p.fill(tc.host, 1e-9)
		// The first period is profiled; then the target, the last pick, runs.
		got := p.actions(request{n: 1 << 20, cached: 1}, 6, tc.host, 1e-9)
		if got[:4] != "Rt"+"TT" || got[4:] != tc.want {
			t.Errorf("host %g s/B: %s, want RtTT%s", tc.host, got, tc.want)
		}
	}
}

// TestPolicyForgetsUnpicked: at a scheduled profile, a side that ran no
// pick since the last one loses its samples; the picked side keeps its
// own (rule 2). The output ratio stays.
func TestPolicyForgetsUnpicked(t *testing.T) {
	p := &policy{sched: schedule{every: 4, first: 1}, last: Host}
	p.fill(1e-9, 2e-9)
	p.est.ratio.add(0.5)
	if got := p.actions(request{n: 1 << 20, cached: 1}, 4, 1e-9, 2e-9); got != "kKKK" {
		t.Fatalf("%s, want kKKK", got)
	}
	for range 3 {
		p.observeRead(readSample{n: 1 << 20, host: true, ranAt: Host, computed: true, compute: 1e6, done: true}, Host)
	}
	p.decide(request{n: 1 << 20, cached: 1}) // the next profile
	if len(p.est.hostCPU.v) == 0 || len(p.est.tgtTotal.v) != 0 || len(p.est.ratio.v) == 0 {
		t.Errorf("after a period on the host: %d host, %d target, %d ratio samples; want some, none, some",
			len(p.est.hostCPU.v), len(p.est.tgtTotal.v), len(p.est.ratio.v))
	}
}

// TestPolicyRecheck: a change of the model's pick between profiles
// profiles that request and starts a new profile period, with the side
// being left measured afresh; so do a key's first pick and a first pick
// after a profile that leaves the side picked before it (confirmations);
// at most once every `every` requests. A switch taken without one, or
// confirmed by one, brings the next profile within a quarter period.
func TestPolicyRecheck(t *testing.T) {
	p := &policy{sched: schedule{every: 10, first: 2}}
	p.est.samples = 1
	fill := func() {
		p.est.hostCPU.add(1e-9)
		p.est.tgtTotal.add(2e-9)
	}
	fill()
	const F, T = false, true
	steps := []struct {
		pick  Mode
		want  string // P: scheduled profile, R: recheck, else the side run
		alone bool   // the current profile's reads alternate sides
		fill  bool   // give both sides samples first
		why   string
	}{
		{Target, "P", F, F, "the key's first profile (no pick yet: a race)"},
		{Target, "P", F, F, "its second"},
		{Target, "R", T, F, "the key's first pick: confirmed by a recheck, alternating"},
		{Target, "P", T, F, "its second profile"},
		{Target, "T", T, F, "the pick held: on probation, the next profile 6 requests on"},
		{Target, "T", T, F, ""},
		{Target, "T", T, F, ""},
		{Target, "P", F, F, "the next profile: a race, as the target was the last pick"},
		{Target, "P", F, F, ""},
		{Target, "T", F, F, "the first pick after a profile, the last one's side: no switch"},
		{Host, "K", F, F, "a switch within 10 requests of the recheck: taken, on probation"},
		{Host, "K", F, F, ""},
		{Host, "K", F, F, ""},
		{Host, "P", T, F, "the next profile, alternating: the host was the last pick"},
		{Host, "P", T, F, ""},
		{Target, "R", T, T, "the first pick after it leaves the host: confirmed by a recheck"},
		{Target, "P", T, F, "the recheck's second profile"},
		{Host, "K", T, F, "the switch did not hold: back within 10 requests, on probation"},
		{Host, "K", T, F, ""},
		{Host, "K", T, F, ""},
		{Host, "P", T, F, "the next profile"},
		{Host, "P", T, F, ""},
		{Host, "K", T, F, "no switch, and no probation: the next profile a whole period on"},
		{Host, "K", T, F, ""},
		{Host, "K", T, F, ""},
		{Host, "K", T, F, ""},
		{Host, "K", T, F, ""},
		{Host, "K", T, F, ""},
		{Host, "K", T, F, ""},
		{Host, "K", T, F, ""},
		{Host, "P", T, F, "the next period"},
		{Host, "P", T, F, ""},
		{Host, "K", T, F, ""},
		{Host, "K", T, F, ""},
		{Target, "R", T, T, "a switch between profiles: a recheck, alternating"},
		{Target, "P", T, F, "its second profile"},
		{Target, "T", T, F, "the switch held: on probation"},
	}
	var rechecks, probations int
	for i, st := range steps {
		if st.fill {
			fill()
		}
		got := st.pick.String()
		if p.scheduled(false) {
			got = "P"
		} else if d := p.recheck(st.pick, false, false); d.recheck {
			got = "R"
			rechecks++
		} else if d.probation {
			probations++
		}
		if got != st.want || p.alone != st.alone {
			t.Errorf("request %d (%s): %s, alone %v; want %s, alone %v", i, st.why, got, p.alone, st.want, st.alone)
		}
		if i == 15 {
			// The recheck left the host: its samples are gone, the
			// target's stay.
			if len(p.est.hostCPU.v) != 0 || len(p.est.tgtTotal.v) == 0 {
				t.Errorf("after leaving the host: %d host, %d target samples, want 0 and some", len(p.est.hostCPU.v), len(p.est.tgtTotal.v))
			}
		}
	}
	if p.last != Target {
		t.Errorf("last pick %v, want T", p.last)
	}
	if rechecks != 3 || probations != 4 {
		t.Errorf("%d rechecks and %d probations, want 3 and 4", rechecks, probations)
	}
}

// TestPolicyRecheckOrder: a recheck's reads alternate sides, the new
// pick first; its writes go on alternating by the key's own count.
func TestPolicyRecheckOrder(t *testing.T) {
	for _, tc := range []struct {
		write      bool
		writeTurns uint64
		want       string
	}{{false, 0, "t+ktT"}, {true, 1, "k+tkT"}} {
		// The host picked since the last profile, no recheck for a
		// period; the target now faster by far.
		p := &policy{sched: schedule{every: 100, first: 3}, last: Host, pick: Host, count: 50, seen: 150, writeTurns: tc.writeTurns}
		p.fill(5e-9, 1e-9)
		p.est.wrTotal.add(1e-9)
		if got := p.actions(request{write: tc.write, n: 1 << 20, cached: 1}, 4, 5e-9, 1e-9); got != tc.want {
			t.Errorf("write %v: %s, want %s", tc.write, got, tc.want)
		}
	}
}

// TestPolicyReadAhead: a read picked for the target that starts where
// the key's last read ended keeps up to `ahead` ranges after it in
// flight, none past the file's end (nor without a size) or into the next
// scheduled profile; nothing else reads ahead (rule 8).
func TestPolicyReadAhead(t *testing.T) {
	const mb = 1 << 20
	type step struct {
		off, size int64
		write     bool
		want      string // the action's letter (as actions), then "a" for ahead
	}
	seq := func(offs ...int64) []step {
		out := make([]step, len(offs))
		for i, o := range offs {
			out[i] = step{off: o * mb, size: 16 * mb}
		}
		return out
	}
	for _, tc := range []struct {
		name         string
		ahead        int
		host, target float64 // s/B the runs take
		steps        []step
		want         string // one letter per decision, then an "a" per range ahead
	}{
		{"a stream at the target: from its second read", 1, 1e-8, 1e-9, seq(0, 1, 2, 3, 4, 5), "T Ta Ta Ta Ta Ta"},
		{"a stream picked for the host", 1, 1e-9, 1e-8, seq(0, 1, 2, 3), "K K K K"},
		{"not a stream", 1, 1e-8, 1e-9, seq(0, 2, 4, 3, 3), "T T T T T"},
		{"a stream broken and begun again", 1, 1e-8, 1e-9, seq(0, 1, 5, 6, 7), "T Ta T Ta Ta"},
		{"the next range past the end", 1, 1e-8, 1e-9, seq(13, 14, 15), "T Ta T"},
		{"no size given", 1, 1e-8, 1e-9, []step{{0, 0, false, ""}, {mb, 0, false, ""}, {2 * mb, 0, false, ""}}, "T T T"},
		{"the next request profiled (every 8)", 1, 1e-8, 1e-9, seq(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), "T Ta Ta Ta Ta Ta T R Ta Ta"},
		{"two ahead", 2, 1e-8, 1e-9, seq(0, 1, 2, 3), "T Taa Taa Taa"},
		{"two ahead, near the end", 2, 1e-8, 1e-9, seq(11, 12, 13, 14, 15), "T Taa Taa Ta T"},
		{"three ahead, into the next profile (every 8)", 3, 1e-8, 1e-9, seq(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), "T Taaa Taaa Taaa Taa Ta T R Taaa Taaa"},
		{"none", 0, 1e-8, 1e-9, seq(0, 1, 2), "T T T"},
		{"writes", 1, 1e-8, 1e-9, []step{{0, 16 * mb, true, ""}, {mb, 16 * mb, true, ""}, {2 * mb, 16 * mb, true, ""}}, "T T T"},
	} {
		// Past the key's first profile and pick, the target the last.
		p := &policy{sched: schedule{every: 8, first: 1}, ahead: tc.ahead, last: Target, pick: Target, count: 1, seen: 1, rechecked: 1}
		p.fill(tc.host, tc.target)
		p.est.wrTotal.add(tc.target)
		p.last, p.pick = pickOf(secs(tc.host), secs(tc.target)), Auto
		var got []string
		served := false // the last decision sent this request's range ahead
		for _, st := range tc.steps {
			r := request{write: st.write, n: mb, cached: 1, off: st.off, size: st.size}
			d := p.decide(r)
			c := map[action]string{runHost: "K", runTarget: "T", runRace: "R"}[d.action]
			if d.profiled && d.action != runRace {
				c = strings.ToLower(c)
			}
			c += strings.Repeat("a", d.ahead)
			got = append(got, c)
			// Feed the run back as the dispatcher would.
			switch {
			case st.write:
				p.observeWrite(d.side(), mb, 0, secs(tc.target*mb), !d.profiled)
			case d.action == runRace:
				p.observeRead(readSample{n: mb, host: true, ranAt: Host, readDone: true, computed: true, done: true, compute: secs(tc.host * mb)}, Auto)
				p.observeRead(readSample{n: mb, ranAt: Target, done: true, total: secs(tc.target * mb)}, Auto)
			case d.side() == Host:
				p.observeRead(readSample{n: mb, host: true, ranAt: Host, readDone: true, computed: true, done: true, compute: secs(tc.host * mb)}, d.picked())
			case served && d.action == runTarget && !d.profiled:
				// Served from what was read ahead: no time (rule 8).
				p.observeRead(readSample{}, Target)
			default:
				p.observeRead(readSample{n: mb, ranAt: Target, done: true, total: secs(tc.target * mb)}, d.picked())
			}
			served = d.ahead > 0
		}
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("%s:\n got  %s\n want %s", tc.name, s, tc.want)
		}
	}
}
