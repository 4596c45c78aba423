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
// # Profiling and dispatch
//
// Where each call runs is decided by a pure policy per (file, function)
// (policy.go, which states its rules and why): fed each call's size and
// cached fraction, it says whether the call runs on the host, at the
// target, or is profiled, and how; fed each run's measurements, it keeps
// the model. The dispatcher (dispatch.go) does the I/O it decides.
//
// Of every ProfileEvery requests per (file, function), the first
// ProfileFirst are profiled, and every request until one run has been
// measured. A profiled read races both sides, the first to finish
// answering, only where the host is expected to lose by far (and then
// only a profile's first read); elsewhere a profile's reads alternate
// sides, each run alone, as a profile's writes always do, since a write's
// output is written once. A losing host run is cancelled through its
// context and yields a censored measurement: its elapsed time is a lower
// bound on its cost, and a host run that finished its reads but not its
// compute gives an exact read rate. A losing target run cannot be
// stopped (the target does not abort a function it is running), so it is
// measured when it ends (WaitProfiles waits for it).
//
// Between profiles the picked side's runs keep its estimate current while
// the other side's rests on the last profile, so a slow spell of the
// picked side could move the rest of the period. A change of pick between
// profiles therefore begins a new profile period (a recheck) in which the
// side being left is measured afresh; a key's first pick, and a first
// pick after a profile that leaves the side picked before it, are
// confirmed the same way; and a switch brings the next profile within a
// quarter period (probation). A write's pick rests on its last profile
// alone, whose alternating runs see the same load: a write profile
// measures both sides afresh, and a picked write feeds the model only
// its output ratio. Calls in modes K and T bypass the policy's
// decisions but feed its model. The host's estimate for a write is its
// compute, the cost of putting the output in the cache, and the output's
// write-back at the cache's measured cost.
//
// # Reading ahead
//
// A read picked for the target that starts where the key's last read
// ended sends the next range of the same size to the target as well, so
// that a sequential stream has two reads in flight: the target reads
// the next range from its volume while the function runs on this one,
// and one read's round trip overlaps the other's work. The next call is
// answered from it only if it asks for exactly that range with the same
// function, parameters and output limit, runs at the target as the pick,
// and the file has not changed since it was sent (File.Generation, taken
// after the range's dirty cache pages were written back; never for a
// file another host holds a grant on). Otherwise its result is dropped.
// Mode T calls do not read ahead: mode T is the mechanism as λ-IO
// measures it, one call at a time.
//
// # Consistency
//
// The cache is write-back, so before a λ read runs at the target the
// dirty pages in its range are written back, and after a λ write at the
// target the pages in its range are dropped (the partly overlapped dirty
// ones written back before it was sent). Host-side writes (K, B) go
// through the cache like any write.
package lambda
