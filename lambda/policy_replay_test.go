package lambda

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// oldKey is the dispatcher's per-key state and its decision code for
// reads as they were at b2f5681, before the policy was pulled out of the
// dispatcher, transcribed with the I/O left out: the reference
// TestPolicyReplay checks the policy against. It pins the read rules as
// they were: a change that means to change one deletes this file along
// with it, and says so. The write rules were taken out of it when rule 7
// changed what a write's pick rests on; policy_test.go's tables pin them.
type oldKey struct {
	count                uint64
	est                  estimator
	model                Model
	stale                bool
	pick                 Mode
	seen, rechecked      uint64
	last                 Mode
	near                 bool
	alone                bool
	turn                 uint64
	rechecking           bool
	every, first         uint64
	rechecks, probations int
}

func (ks *oldKey) modelLocked(miss, wb float64) Model {
	if ks.stale || ks.est.samples == 0 {
		ks.model = ks.est.fit(miss, wb)
		ks.stale = false
	}
	return ks.model
}

func (ks *oldKey) schedule(miss, wb float64) (bool, Model) {
	i := ks.count
	ks.count++
	ks.seen++
	every := ks.every
	if i%every == 0 {
		ks.pick = Auto
		ks.alone, ks.turn = ks.last == Host || (ks.last == Target && ks.near), 0
	}
	if i > 0 && i%every == 0 {
		ks.est.forgetUnpicked()
		ks.stale = true
	}
	if i%every < ks.first || ks.est.samples == 0 {
		return true, Model{}
	}
	return false, ks.modelLocked(miss, wb)
}

func (ks *oldKey) recheck(pick Mode, near bool) bool {
	every := ks.every
	leaving, held := ks.pick, false
	if leaving == Auto {
		leaving = ks.last
		if ks.rechecking {
			ks.rechecking = false
			held = pick == ks.last
		}
	}
	ks.pick, ks.last, ks.near = pick, pick, near
	if leaving == Auto {
		leaving = otherSide(pick)
	}
	switched := leaving != pick
	if !switched || (ks.rechecked > 0 && ks.seen-ks.rechecked < every) {
		if switched || held {
			next := (ks.count/every + 1) * every
			if next-every/4 > ks.count {
				ks.count = next - every/4
				ks.probations++
			}
		}
		return false
	}
	ks.rechecked = ks.seen
	ks.rechecks++
	ks.count = (ks.count/every+1)*every + 1
	ks.pick, ks.rechecking = Auto, true
	ks.alone, ks.turn = true, 0
	ks.est.forget(leaving)
	ks.est.hostRuns, ks.est.targetRuns = 0, 0
	ks.stale = true
	return true
}

// profileRead is the old profileRead's choice: a side alone, or Auto for
// a race.
func (ks *oldKey) profileRead(cached float64) Mode {
	alone, turn, lead := ks.alone, ks.turn, ks.last
	if lead == Auto && cached >= aloneCached {
		alone, lead = true, Host
	}
	ks.turn++
	if alone {
		side := lead
		if turn%2 == 1 {
			side = otherSide(lead)
		}
		return side
	}
	if lead == Target && turn > 0 {
		return Target
	}
	return Auto
}

// read is the old read's Auto path: where the read runs (Auto: a race),
// and whether it was profiled.
func (ks *oldKey) read(n int64, cached, miss, wb float64) (Mode, bool) {
	profile, m := ks.schedule(miss, wb)
	if profile {
		return ks.profileRead(cached), true
	}
	host, target := m.Read(n, cached)
	if ks.recheck(pickOf(host, target), closeCall(host, target)) {
		return ks.profileRead(cached), true
	}
	return pickOf(host, target), false
}

// TestPolicyReplay feeds the same random sequences of read requests and
// measurements to the policy and to the dispatcher's decision code as it
// was before the policy was pulled out (oldKey), and checks they decide
// the same at every step: where each call runs, whether it is profiled,
// and the counts of rechecks and probations. The measurements swing
// widely, so picks change often and every read rule fires. A key that is
// only read never takes the write rules' paths (the policy's write
// handling is all behind request.write and observeWrite), so this pins
// read-only keys whatever the write rules are.
func TestPolicyReplay(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 17))
		every := uint64(2 + rng.IntN(40))
		first := uint64(1 + rng.IntN(int(min(every, 6))))
		old := &oldKey{every: every, first: first}
		p := &policy{sched: schedule{every: every, first: first}}
		var rechecks, probations int
		for i := range 600 {
			miss := []float64{0, 1e-9, 3e-9}[rng.IntN(3)]
			wb := []float64{0, 1e-9}[rng.IntN(2)]
			n := int64(1+rng.IntN(4)) << 18
			cached := []float64{0, 0.5, 0.9, 1}[rng.IntN(4)]
			want, wantProfiled := old.read(n, cached, miss, wb)
			d := p.decide(request{n: n, cached: cached, missCost: miss, writeBackCost: wb})
			if d.recheck {
				rechecks++
			}
			if d.probation {
				probations++
			}
			where := fmt.Sprintf("seed %d (every %d, first %d), request %d", seed, every, first, i)
			if d.side() != want || d.profiled != wantProfiled || (d.action == runRace) != (want == Auto) {
				t.Fatalf("%s: decided %v (action %d), profiled %v; before: %v, profiled %v", where, d.side(), d.action, d.profiled, want, wantProfiled)
			}
			if rechecks != old.rechecks || probations != old.probations {
				t.Fatalf("%s: %d rechecks, %d probations; before: %d and %d", where, rechecks, probations, old.rechecks, old.probations)
			}
			// Measure the run(s), as the dispatcher would, into both.
			scale := []float64{0.3, 1, 3}[rng.IntN(3)]
			hostCPU := time.Duration(float64(n) * (0.5 + rng.Float64()) * scale)
			tgt := time.Duration(float64(n) * (0.5 + rng.Float64()) / scale)
			feedRead := func(s readSample, picked Mode) {
				p.observeRead(s, picked)
				old.est.addRead(s)
				old.est.picked(picked)
				old.stale = true
			}
			hostSample := readSample{n: n, out: n / 100, host: true, ranAt: Host, readDone: true, missBytes: int64((1 - cached) * float64(n)), missTime: time.Duration((1 - cached) * float64(n)), computed: true, compute: hostCPU, done: true}
			tgtSample := readSample{n: n, out: n / 100, ranAt: Target, total: tgt, targetMicros: uint32(tgt / 2 / time.Microsecond), done: true}
			if rng.IntN(10) == 0 {
				tgtSample.done, tgtSample.targetMicros = false, 0 // cancelled: a bound
			}
			switch {
			case want == Auto:
				feedRead(hostSample, Auto)
				feedRead(tgtSample, Auto)
			default:
				s := hostSample
				if want == Target {
					s = tgtSample
				}
				picked := want
				if wantProfiled {
					picked = Auto
				}
				feedRead(s, picked)
			}
			if rng.IntN(20) == 0 {
				// A call in mode K or T feeds the model as its side's pick.
				feedRead(hostSample, Host)
			}
		}
		if old.rechecks == 0 && every < 20 {
			t.Logf("seed %d: no recheck", seed)
		}
	}
}
