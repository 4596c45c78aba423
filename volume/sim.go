package volume

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"
)

// SimParams is the performance model of a simulated SSD; the package
// documentation gives the formula. Zero latencies mean none; zero IOPS or
// Bandwidth mean unlimited.
type SimParams struct {
	// ReadLatency is the time an idle device takes to complete a read.
	ReadLatency time.Duration
	// WriteLatency is the time an idle device takes to complete a write,
	// WriteZeroes or Deallocate.
	WriteLatency time.Duration
	// IOPS is the rate at which the device admits commands, per second.
	IOPS float64
	// Bandwidth is the rate at which the device transfers data, in bytes
	// per second, shared by reads and writes.
	Bandwidth float64
}

// NANDParams returns the model of a datacenter NAND flash SSD as in the
// BPF-oF testbed: 90 µs reads, 700K IOPS, 3.2 GB/s. Writes take 20 µs because
// they complete once in the drive's power-protected DRAM cache.
func NANDParams() SimParams {
	return SimParams{
		ReadLatency:  90 * time.Microsecond,
		WriteLatency: 20 * time.Microsecond,
		IOPS:         700e3,
		Bandwidth:    3.2e9,
	}
}

// OptaneParams returns the model of an Optane (3D XPoint) SSD as in the
// BPF-oF testbed: 3 µs reads, 5M IOPS, 2.5 GB/s. XPoint writes in place with
// no erase, so writes take as long as reads.
func OptaneParams() SimParams {
	return SimParams{
		ReadLatency:  3 * time.Microsecond,
		WriteLatency: 3 * time.Microsecond,
		IOPS:         5e6,
		Bandwidth:    2.5e9,
	}
}

// validate rejects parameters the model cannot use.
func (p SimParams) validate() error {
	switch {
	case p.ReadLatency < 0 || p.WriteLatency < 0:
		return fmt.Errorf("negative latency")
	case p.IOPS < 0 || math.IsNaN(p.IOPS) || math.IsInf(p.IOPS, 0):
		return fmt.Errorf("IOPS %v is not a finite non-negative number", p.IOPS)
	case p.Bandwidth < 0 || math.IsNaN(p.Bandwidth) || math.IsInf(p.Bandwidth, 0):
		return fmt.Errorf("bandwidth %v is not a finite non-negative number", p.Bandwidth)
	}
	return nil
}

// simState is the state of the two token buckets: the earliest times, in
// nanoseconds since the volume opened, at which the next command may be
// admitted and the next byte transferred. float64 keeps fractional
// nanoseconds (1/700K s is 1428.57 ns) from accumulating rounding drift; at
// 2^53 ns (104 days) precision is still 1 ns.
type simState struct {
	nextCmd  float64
	nextByte float64
}

// simSchedule is the model as a pure function: it admits a command of n
// bytes arriving at now (ns) with the given idle latency, advances the
// buckets in st, and returns the completion time (ns).
func simSchedule(p SimParams, st *simState, now float64, n int64, latency time.Duration) float64 {
	admit := now
	if p.IOPS > 0 {
		admit = max(now, st.nextCmd)
		st.nextCmd = admit + 1e9/p.IOPS
	}
	xferEnd := admit
	if p.Bandwidth > 0 && n > 0 {
		xferEnd = max(admit, st.nextByte) + float64(n)*1e9/p.Bandwidth
		st.nextByte = xferEnd
	}
	service := xferEnd - now
	return now + max(float64(latency), service)
}

// simVolume is a mem volume behind the timing model.
type simVolume struct {
	mem    *memVolume
	params SimParams
	start  time.Time // monotonic origin of the model's clock

	mu sync.Mutex // guards st; held only to run simSchedule
	st simState

	// waiter parks commands until their completion times (simwait.go);
	// nil where the platform has no alarm, and commands wait on the
	// clock.
	waiter *deadlineWaiter
}

// cutProfile splits a sim spec body "nand:1GiB" into profile and size.
func cutProfile(body string) (profile, size string, ok bool) {
	return strings.Cut(body, ":")
}

// openSim opens "sim:PROFILE:SIZE[?...]".
func openSim(s *spec, o *openOptions) (Volume, error) {
	if err := s.allow("bs", "read_lat", "write_lat", "iops", "bw"); err != nil {
		return nil, err
	}
	profile, _, ok := cutProfile(s.body)
	if !ok {
		return nil, s.errorf("want sim:nand:SIZE or sim:optane:SIZE")
	}
	var p SimParams
	switch profile {
	case "nand":
		p = NANDParams()
	case "optane":
		p = OptaneParams()
	default:
		return nil, s.errorf("unknown sim profile %q (want nand or optane)", profile)
	}
	if o.sim != nil {
		p = *o.sim
	}
	for _, lat := range []struct {
		key string
		d   *time.Duration
	}{{"read_lat", &p.ReadLatency}, {"write_lat", &p.WriteLatency}} {
		if v, ok := s.params[lat.key]; ok {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return nil, s.errorf("%s=%q is not a non-negative duration such as 90us", lat.key, v)
			}
			*lat.d = d
		}
	}
	if v, ok := s.params["iops"]; ok {
		r, err := parseRate(v)
		if err != nil {
			return nil, s.errorf("iops: %v", err)
		}
		p.IOPS = r
	}
	if v, ok := s.params["bw"]; ok {
		bw, err := parseBandwidth(v)
		if err != nil {
			return nil, s.errorf("bw: %v", err)
		}
		p.Bandwidth = bw
	}
	if err := p.validate(); err != nil {
		return nil, s.errorf("sim parameters: %v", err)
	}
	m, err := newMemFromSpec(s)
	if err != nil {
		return nil, err
	}
	v := &simVolume{mem: m, params: p, start: time.Now()}
	if al, err := newAlarm(); err == nil {
		v.waiter = newDeadlineWaiter(al)
	}
	return v, nil
}

// wait returns once the model's completion time done has passed; now is
// the command's arrival, from reserve.
func (v *simVolume) wait(done, now time.Time) {
	if v.waiter != nil {
		v.waiter.wait(done, now)
		return
	}
	waitUntil(done)
}

func (v *simVolume) Size() int64    { return v.mem.size }
func (v *simVolume) BlockSize() int { return v.mem.bs }
func (v *simVolume) String() string { return v.mem.spec }

// Instance names this volume's contents (see memVolume.Instance).
func (v *simVolume) Instance() string { return v.mem.instance }

// reserve runs the model for a command arriving now and returns when it
// completes and the clock's reading of now, which wait takes so that a
// command reads the clock once on its way in.
func (v *simVolume) reserve(n int64, latency time.Duration) (done, now time.Time) {
	now = time.Now()
	v.mu.Lock()
	d := simSchedule(v.params, &v.st, float64(now.Sub(v.start)), n, latency)
	v.mu.Unlock()
	return v.start.Add(time.Duration(math.Ceil(d))), now
}

// check fails fast, without charging the model, for commands the device
// would reject.
func (v *simVolume) check(off, n int64) error {
	return checkIO(&v.mem.closed, off, n, v.mem.size)
}

// ReadAt reads from RAM and then waits until the model says the read is done.
func (v *simVolume) ReadAt(p []byte, off int64) (int, error) {
	if err := v.check(off, int64(len(p))); err != nil {
		return 0, err
	}
	done, now := v.reserve(int64(len(p)), v.params.ReadLatency)
	n, err := v.mem.ReadAt(p, off)
	v.wait(done, now)
	return n, err
}

// WriteAt writes to RAM and then waits until the model says the write is
// done.
func (v *simVolume) WriteAt(p []byte, off int64) (int, error) {
	if err := v.check(off, int64(len(p))); err != nil {
		return 0, err
	}
	done, now := v.reserve(int64(len(p)), v.params.WriteLatency)
	n, err := v.mem.WriteAt(p, off)
	v.wait(done, now)
	return n, err
}

// WriteZeroes costs a command and the write latency but no transfer: the
// device zeroes internally.
func (v *simVolume) WriteZeroes(off, n int64) error {
	if err := v.check(off, n); err != nil {
		return err
	}
	done, now := v.reserve(0, v.params.WriteLatency)
	err := v.mem.WriteZeroes(off, n)
	v.wait(done, now)
	return err
}

// Deallocate is timed like WriteZeroes.
func (v *simVolume) Deallocate(off, n int64) error {
	if err := v.check(off, n); err != nil {
		return err
	}
	done, now := v.reserve(0, v.params.WriteLatency)
	err := v.mem.Deallocate(off, n)
	v.wait(done, now)
	return err
}

// Flush is free: the model has no volatile write cache to drain.
func (v *simVolume) Flush() error { return v.mem.Flush() }

// Close releases the RAM and stops the waiter; commands still waiting
// wait out their times on the clock.
func (v *simVolume) Close() error {
	err := v.mem.Close()
	if err == nil && v.waiter != nil {
		v.waiter.close()
	}
	return err
}

// spinThreshold is how close to a deadline waitUntil, the wait of
// platforms without an alarm (simwait.go), stops sleeping and spins. time.Sleep on Linux routinely wakes 50 µs or more late under load,
// so sleeping closer than this would blow microsecond-scale latencies.
const spinThreshold = 200 * time.Microsecond

// waitUntil returns at, or as soon as possible after, deadline: sleeping
// while far away, then yielding in a loop on the monotonic clock so other
// goroutines (including other simulated commands) keep running.
func waitUntil(deadline time.Time) {
	for {
		d := time.Until(deadline)
		if d <= 0 {
			return
		}
		if d > spinThreshold {
			time.Sleep(d - spinThreshold)
			continue
		}
		runtime.Gosched()
	}
}
