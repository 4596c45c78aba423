package lambda

import "time"

// The dispatch policy decides, per (file, function) key, which side runs
// each λ call and which calls are profiled. It is a pure state machine,
// as etcd raft's Node is: the dispatcher tells it of a call (a request:
// its size and how much of its range the cache holds), runs what it
// decides, and feeds back what the run measured (observeRead,
// observeWrite). It does no I/O, reads no clock and takes no lock (the
// dispatcher holds its key's), so its rules are tested as tables of
// requests and samples (policy_test.go).
//
// The rules, each with its reason (the measurements that found them are
// in docs/BENCHMARKS.md and the commit messages):
//
//  1. Schedule. Of every `every` requests of a key, the first `first` are
//     profiled, and so is every request until a run has been measured.
//     A profile measures the side the model does not pick, which
//     otherwise has no new samples.
//  2. Forget the unpicked side. At each scheduled profile, a side that
//     ran no picked request since the last one loses its samples, so it
//     rests on what this profile measures; the picked side keeps its
//     own, which are recent and were measured alone. (A write's profile
//     drops both sides' samples: rule 7.)
//  3. Pick. Outside a profile the side the model predicts faster runs,
//     alone, and its run counts as the pick's.
//  4. Recheck a switch. When the pick changes between profiles, the call
//     that would switch sides starts a new profile period instead, in
//     which the side being left has lost its samples: a switch between
//     profiles comes from the picked side's own runs getting slower,
//     measured alone, against the other side's older samples, which on
//     a shared machine is mostly a slow spell. The first pick after a
//     profile counts as a switch when it leaves the side picked before
//     it (a profile has two or three samples a side, and one slow spell
//     can cover one side's turns), and so does a key's first pick (its
//     first profile includes the target's first run on the file, which
//     can be many times slower than the next). At most one recheck per
//     `every` requests, so a key whose sides are a toss-up costs at most
//     twice the profiles.
//  5. Probation. A switch taken without a recheck (the limit) or
//     confirmed by one brings the next profile to at most a quarter
//     period away: a slow spell can outlast both profiles, and until the
//     next one nothing measures the side left.
//  6. How a profiled read runs. It races both sides (the first to finish
//     answers) only where the host is expected to lose by far: the model
//     last picked the target with the host's estimate at least
//     raceMargin times the target's, or, before a key's first pick, less
//     than aloneCached of the range is cached. Then only the profile's
//     first read races and the rest run on the target alone: a race
//     slows the target's run by what the host's takes of the CPUs and
//     the link, and one race is enough to find a host that has become
//     faster. Elsewhere the profile's reads alternate sides, the expected
//     winner first, each run alone: a losing target run cannot be
//     stopped and would hold the CPUs the host's next requests need, and
//     where the sides are close a race measures the host at its worst. A
//     recheck's reads alternate too, the new pick first.
//  7. How a profiled write runs, and what a write's pick rests on. A
//     write cannot run on both sides, its output being written once, so
//     a key's profiled writes alternate sides, target first (counted
//     across profiles), each measured alone. A write's pick rests on its
//     last profile alone: each write profile (scheduled, or a recheck's)
//     starts with both sides' time samples dropped, and a write run as
//     the pick feeds the model its output ratio only. Runs a call apart
//     see the same load on the shared machine, so a profile's alternating
//     runs compare the sides as they are; a picked side's later runs,
//     against the other side's two or three from the profile, compare two
//     moments' loads instead, and a slow spell over the picked side's
//     runs can switch a write to the side that is slower under any load
//     (rule 4's recheck, two or three runs a side, does not reliably
//     undo it). A side that gets slower, like one that gets faster, is
//     seen at the next profile.
//  8. Read ahead. A read picked for the target that continues the key's
//     last read (it starts where that one ended) keeps the next `ahead`
//     ranges of the same size in flight at the target too: the target
//     reads the next range from its volume while the function runs on
//     this one, and the round trips overlap the work. At one request in
//     flight a cold read at the target is otherwise a chain of round
//     trip, volume read and function, one after the other, each leaving
//     the target's other CPU idle. Not into a scheduled profile (its
//     reads may not run at the target), nor past the file's end. A read
//     served from what was read ahead feeds no time to the model: it
//     overlapped others, so its time is not what a run alone costs, and
//     the model compares runs alone (a profile's, and the first of a
//     stream); it still counts as a pick of the target for rule 2.
type policy struct {
	sched schedule
	// ahead is how many ranges a stream keeps in flight past the one
	// called for (rule 8; 0: none).
	ahead int
	est   estimator
	model Model // fitted from est; stale says est changed since
	stale bool

	// count numbers requests for the schedule (rule 1; rechecks and
	// probations move it on); seen numbers every request, and rechecked
	// is seen at the last recheck (rule 4's limit).
	count, seen, rechecked uint64
	// pick is the side picked for the last request outside a profile
	// since the last profile began (Auto: none yet). last is the side
	// picked for the last request outside any profile (Auto: none yet),
	// the side a profile expects to win; near says the model's two
	// estimates for that request were within raceMargin of each other.
	pick, last Mode
	near       bool
	// alone says the current profile's reads alternate sides, last's
	// first (rule 6), and turn counts its reads.
	alone bool
	turn  uint64
	// rechecking says the current profile is a recheck's: the first pick
	// after it says whether the switch held (rule 5).
	rechecking bool
	// writeTurns counts profiled writes, whose sides alternate (rule 7).
	writeTurns uint64
	// next is where the key's last read ended, and streaming says there
	// was one (rule 8).
	next      int64
	streaming bool
}

// schedule is the profiling schedule: of every every requests per key,
// the first first are profiled (first ≤ every, every > 0).
type schedule struct {
	every, first uint64
}

// A profile's reads race only where the host is expected to lose by a
// wide margin (rule 6): where the model last picked the target with the
// host's estimate at least raceMargin times the target's, or, before the
// key's first pick, where less than aloneCached of the range is cached.
// Alone, a host turn costs at most raceMargin-1 of a target read more.
const (
	raceMargin  = 1.5
	aloneCached = 0.9
)

// request is what the policy is told of a call in mode Auto.
type request struct {
	write bool
	// n is the input's size: the range read, or the data written.
	n int64
	// cached is the fraction of a read's range in the host cache.
	cached float64
	// missCost and writeBackCost are the cache's recent seconds per byte
	// of miss reads and write-backs (0: none), which price a side the
	// key's own runs never measured (estimator.fit).
	missCost, writeBackCost float64
	// off is where a read starts, and size the file's size: a read ahead
	// must end within it (rule 8). The caller gives size 0 where the
	// file's bytes can change without it knowing (another host holds a
	// grant on it), and then nothing is read ahead.
	off, size int64
}

// action is how a call runs.
type action int

const (
	runHost   action = iota // on the host alone
	runTarget               // at the target alone
	runRace                 // a read on both sides at once, the first to finish answering
)

// decision is the policy's answer to a request.
type decision struct {
	action action
	// profiled says the call is a profile's: its run does not count as
	// the pick's (Stats.Profiled).
	profiled bool
	// recheck says the call began a recheck's profile (Stats.Rechecks);
	// probation that the next profile was brought closer (Stats.Probations).
	recheck, probation bool
	// ahead is how many of the ranges after this read's, [off+n,
	// off+2n), [off+2n, off+3n) and on, are to be in flight at the
	// target, read ahead for the key's next reads (rule 8).
	ahead int
}

// side is the side a decision runs alone on (Host or Target; Auto for a
// race).
func (d decision) side() Mode {
	switch d.action {
	case runHost:
		return Host
	case runTarget:
		return Target
	}
	return Auto
}

// picked is the side whose pick the call's run counts for (Auto: none,
// a profile's run).
func (d decision) picked() Mode {
	if d.profiled {
		return Auto
	}
	return d.side()
}

// runOn is the decision to run alone on side (Host or Target).
func runOn(side Mode) action {
	if side == Host {
		return runHost
	}
	return runTarget
}

// decide counts a request and says how it runs.
func (p *policy) decide(r request) decision {
	d := p.route(r)
	if !r.write {
		d.ahead = p.readAhead(r, d)
	}
	return d
}

// readAhead says how many ranges after a read decided d are to be in
// flight (rule 8), and notes where it ends.
func (p *policy) readAhead(r request, d decision) int {
	continues := p.streaming && r.off == p.next
	p.next, p.streaming = r.off+r.n, true
	if !continues || d.action != runTarget || d.profiled || r.n <= 0 || p.est.samples == 0 {
		return 0
	}
	// Whole ranges before the file's end, and requests before the next
	// scheduled profile (scheduled has counted this one).
	left := max(r.size-r.off-r.n, 0) / r.n
	i, every := p.count%p.sched.every, p.sched.every
	if i < p.sched.first {
		return 0
	}
	return int(min(int64(p.ahead), left, int64(every-i)))
}

// route counts a request and says where it runs.
func (p *policy) route(r request) decision {
	if p.scheduled(r.write) {
		return p.profileTurn(r, decision{profiled: true})
	}
	m := p.fitted(r.missCost, r.writeBackCost)
	var host, target time.Duration
	near := false
	if r.write {
		host, target = m.Write(r.n)
	} else {
		host, target = m.Read(r.n, r.cached)
		near = closeCall(host, target)
	}
	pick := pickOf(host, target)
	d := p.recheck(pick, near, r.write)
	if d.recheck {
		d.profiled = true
		return p.profileTurn(r, d)
	}
	d.action = runOn(pick)
	return d
}

// scheduled counts a request (a write if write) and says whether the
// schedule profiles it (rules 1, 2 and 7).
func (p *policy) scheduled(write bool) bool {
	i := p.count
	p.count++
	p.seen++
	every := p.sched.every
	if i%every == 0 {
		p.pick = Auto
		p.alone, p.turn = p.last == Host || (p.last == Target && p.near), 0
	}
	if i > 0 && i%every == 0 {
		if write {
			p.forgetBoth()
		} else {
			p.est.forgetUnpicked()
		}
		p.stale = true
	}
	return i%every < p.sched.first || p.est.samples == 0
}

// recheck is told the side the model picked for a request (a write if
// write) outside a profile, and says whether that request begins a
// recheck's profile instead (rule 4) or put the key on probation (rule 5).
func (p *policy) recheck(pick Mode, near, write bool) decision {
	var d decision
	every := p.sched.every
	leaving, held := p.pick, false
	if leaving == Auto {
		leaving = p.last
		if p.rechecking {
			// The first pick after a recheck's profile: did the switch
			// hold?
			p.rechecking = false
			held = pick == p.last
		}
	}
	p.pick, p.last, p.near = pick, pick, near
	if leaving == Auto {
		// A key's first pick: confirmed as a switch is.
		leaving = otherSide(pick)
	}
	switched := leaving != pick
	if !switched || (p.rechecked > 0 && p.seen-p.rechecked < every) {
		if switched || held {
			next := (p.count/every + 1) * every
			if next-every/4 > p.count {
				p.count = next - every/4
				d.probation = true
			}
		}
		return d
	}
	// This request begins a profile period; the requests after it are
	// its next first-1.
	p.rechecked = p.seen
	p.count = (p.count/every+1)*every + 1
	p.pick, p.rechecking = Auto, true
	p.alone, p.turn = true, 0
	if write {
		p.forgetBoth()
	} else {
		p.est.forget(leaving)
		p.est.hostRuns, p.est.targetRuns = 0, 0
	}
	p.stale = true
	d.recheck = true
	return d
}

// profileTurn says how a profiled call runs (rules 6 and 7).
func (p *policy) profileTurn(r request, d decision) decision {
	if r.write {
		side := Target
		if p.writeTurns%2 == 1 {
			side = Host
		}
		p.writeTurns++
		d.action = runOn(side)
		return d
	}
	alone, turn, lead := p.alone, p.turn, p.last
	if lead == Auto && r.cached >= aloneCached {
		alone, lead = true, Host
	}
	p.turn++
	switch {
	case alone:
		side := lead
		if turn%2 == 1 {
			side = otherSide(lead)
		}
		d.action = runOn(side)
	case lead == Target && turn > 0:
		// The target picked by a wide margin: one race probes the host.
		d.action = runTarget
	default:
		d.action = runRace
	}
	return d
}

// observeRead feeds a λ read's measurement to the model; picked is the
// side whose pick it ran as (Auto: a profile's run), which keeps that
// side's samples at the next profile (rule 2).
func (p *policy) observeRead(s readSample, picked Mode) {
	p.est.addRead(s)
	p.est.picked(picked)
	p.stale = true
}

// observeWrite feeds a finished λ write on side (Host or Target) of n
// input bytes and out output bytes that took took; picked says it ran as
// the pick, whose time the model does not take (rule 7).
func (p *policy) observeWrite(side Mode, n, out int64, took time.Duration, picked bool) {
	switch {
	case picked:
		p.est.addWriteRatio(n, out)
	case side == Host:
		p.est.addWriteHost(n, out, took, true)
	default:
		p.est.addWriteTarget(n, out, took, true)
	}
	p.stale = true
}

// forgetBoth drops both sides' time samples, as a write's profile does
// (rule 7).
func (p *policy) forgetBoth() {
	p.est.forget(Host)
	p.est.forget(Target)
	p.est.hostRuns, p.est.targetRuns = 0, 0
}

// fitted returns the key's model, fitting it again if measurements came
// in since it was last fitted.
func (p *policy) fitted(missCost, writeBackCost float64) Model {
	if p.stale || p.est.samples == 0 {
		p.model = p.est.fit(missCost, writeBackCost)
		p.stale = false
	}
	return p.model
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
