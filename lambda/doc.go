// Package lambda is λ-IO's host side for offloadfs: a host block cache,
// λ-IO's execution-time model, and a dispatcher that runs each λ read or
// write where the model says it finishes sooner — on the host, reading
// through the cache and running the same sandboxed function (mode K), or
// at the target next to the data (mode T, offloadfs File.LambdaRead and
// LambdaWrite). Mode B, plain buffered I/O through the cache with the
// function's native Go twin, is the baseline λ-IO compares with. The
// dependency runs one way: offloadfs offers the mechanisms (a λ call at
// the target, which it runs on the host itself when the target lacks the
// file's current map), and callers that want the choice made call
// Dispatcher.Read and Write.
//
// # The model
//
// λ-IO §3.4 prices a λ read of n bytes, a fraction c of them in the host
// cache, as
//
//	host   = (1−c)·n/S + (1−c)·n/N + n/H
//	target = n/S + n/(α·H) + r·n/N
//
// with S the target's media bandwidth, N the network's, H the host's
// compute bandwidth for the function, α the target's compute speed
// relative to the host's and r the output's size per input byte; a λ
// write of n input bytes as host = n/H + r·n/N + r·n/S and target = n/N +
// n/(α·H) + r·n/S. The parameters are fitted per (file, function) from
// runs: a host run measures its cache misses' read time (1/S + 1/N per
// missed byte) and its compute (1/H); a target run measures its whole
// time and, in the result's TargetMicros, the target's own time (1/(α·H)
// per byte), which leaves n/S + r·n/N for the rest; with r far enough
// from 1 the two I/O equations give S and N apart, otherwise the measured
// per-byte I/O cost is split evenly between them. Either way the target's
// compute term takes up what the split leaves of the target's measured
// time, so both sides' predictions match what was measured and the split
// only changes how the parameters read. Every parameter is a trimmed mean of its last few
// samples, and the cache keeps its own per-byte miss cost, so a model
// profiled with everything cached can still price a cold read. A request
// goes to the side the model predicts faster, at its range's current
// cached fraction (Cache.Cached, a popcount).
//
// # Profiling
//
// Of every ProfileEvery requests per (file, function), the first
// ProfileFirst are profiled (and every request until one run has been
// measured). Where the model last picked the target by a wide margin
// (or has not picked yet, and the range is mostly uncached), a profiled
// read runs on both sides at once, and the first to
// finish answers (both compute the same bytes from the same bytes). A
// losing host run is cancelled through its context at that moment rather
// than awaited: it still yields a censored measurement — its elapsed
// time is a lower bound on its cost, and a host run that finished its
// reads but not its compute gives an exact read rate — and the call costs
// no more than the faster side plus the slower side's interference until
// it stops. A losing target run cannot be stopped (the target does not
// abort a function it is running), so it is measured when it ends.
// After a wide pick of the target only a profile's first read races and
// the rest run on the target alone: a race slows the target's run by
// what the host's takes of the CPUs and the link, and one race is enough
// to find a host that has become the faster side. Where
// the model last picked the host, that target run is the expected loser,
// and k of them in a row queue behind each other on the CPUs the host's
// next requests need; so those profiles' reads alternate sides instead,
// host first, each the real read, run and measured alone. So do a key's
// first profile where the range is mostly cached, and profiles after
// the model picked the target by less than 1.5x (target first): where
// the sides are close, a race measures the host at its worst, its
// compute sharing the CPUs with the target's and a lost run counted at
// the winner's time, and once the target was picked every later race
// kept it there. A write cannot run on both sides, its output being
// written once, so a profile's writes always alternate sides, target
// first. (Running the host's
// compute alongside the target's write, as profiled writes once did,
// slowed the target's write more than the host's compute, so whichever
// side was picked after a profile looked the faster from then on.) The
// host's estimate for a write is its compute, the cost of putting the
// output in the cache, and the output's write-back at the cache's
// measured cost.
//
// Between profiles the picked side's runs, measured alone, keep its
// estimate current, while the other side's rests on the last profile. A
// slow spell of the picked side could then move requests to the other
// side for the rest of the period. So when the pick for a read changes
// between profiles, that read begins a new profile period (a recheck),
// in which the side being left is measured afresh, each read alternating
// sides, the new pick first, so that both are measured alone; at most
// one recheck every ProfileEvery requests. The first pick after a
// profile is rechecked the same way when it leaves the side picked
// before the profile: a profile has two or three samples a side, and a
// slow spell covering one side's turns would otherwise move the whole
// period, so a second profile confirms the switch first. A key's first
// pick is confirmed the same way, the side not picked measured afresh:
// the first profile includes the target's first run on the file, which
// can be many times slower than its next. Writes are rechecked the same
// way. Calls in modes K and T bypass the model but
// feed it.
//
// # Consistency
//
// The cache is write-back, so before a λ read runs at the target the
// dirty pages in its range are written back, and after a λ write at the
// target the pages in its range are dropped (the partly overlapped dirty
// ones written back before it was sent). Host-side writes (K, B) go
// through the cache like any write.
package lambda
