package volume

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestSimSchedule(t *testing.T) {
	const us = float64(time.Microsecond)
	// IOPS 1M: one command per µs. Bandwidth 1 GB/s: one byte per ns.
	p := SimParams{ReadLatency: 90 * time.Microsecond, WriteLatency: 20 * time.Microsecond, IOPS: 1e6, Bandwidth: 1e9}
	type step struct {
		now      float64
		n        int64
		lat      time.Duration
		want     float64
		wantNext simState
	}
	for _, tc := range []struct {
		name  string
		p     SimParams
		steps []step
	}{
		{"idle read takes the latency", p, []step{
			{0, 4096, p.ReadLatency, 90 * us, simState{1 * us, 4096}},
		}},
		{"concurrent reads overlap their latency", p, []step{
			{0, 4096, p.ReadLatency, 90 * us, simState{1 * us, 4096}},
			{0, 4096, p.ReadLatency, 90 * us, simState{2 * us, 8192}},
			{0, 4096, p.ReadLatency, 90 * us, simState{3 * us, 12288}},
		}},
		{"write latency", p, []step{
			{5 * us, 512, p.WriteLatency, 25 * us, simState{6 * us, 5*us + 512}},
		}},
		{"large transfer is bandwidth bound", p, []step{
			{0, 1e6, p.ReadLatency, 1e6, simState{1 * us, 1e6}},
			// The next one queues behind the first transfer.
			{10 * us, 4096, p.ReadLatency, 1e6 + 4096, simState{11 * us, 1e6 + 4096}},
		}},
		{"an idle gap does not bank tokens", p, []step{
			{0, 4096, p.ReadLatency, 90 * us, simState{1 * us, 4096}},
			{1e9, 4096, p.ReadLatency, 1e9 + 90*us, simState{1e9 + 1*us, 1e9 + 4096}},
			{1e9, 4096, p.ReadLatency, 1e9 + 90*us, simState{1e9 + 2*us, 1e9 + 8192}},
		}},
		{"IOPS bound when latency is small", SimParams{IOPS: 1e6}, []step{
			{0, 4096, 0, 0, simState{1 * us, 0}},
			{0, 4096, 0, 1 * us, simState{2 * us, 0}},
			{0, 4096, 0, 2 * us, simState{3 * us, 0}},
			{0.5 * us, 4096, 0, 3 * us, simState{4 * us, 0}},
		}},
		{"queueing beyond the latency", SimParams{ReadLatency: 2 * time.Microsecond, IOPS: 1e6}, []step{
			{0, 1, 2 * time.Microsecond, 2 * us, simState{1 * us, 0}},
			{0, 1, 2 * time.Microsecond, 2 * us, simState{2 * us, 0}},
			{0, 1, 2 * time.Microsecond, 2 * us, simState{3 * us, 0}},
			// Admitted at 3 µs, no transfer cost: service 3 µs > 2 µs.
			{0, 1, 2 * time.Microsecond, 3 * us, simState{4 * us, 0}},
		}},
		{"zero-byte commands use no bandwidth", p, []step{
			{0, 0, p.WriteLatency, 20 * us, simState{1 * us, 0}},
		}},
		{"unlimited model is pure latency", SimParams{ReadLatency: 3 * time.Microsecond}, []step{
			{7, 1 << 30, 3 * time.Microsecond, 7 + 3*us, simState{}},
			{7, 1 << 30, 3 * time.Microsecond, 7 + 3*us, simState{}},
		}},
	} {
		var st simState
		for i, s := range tc.steps {
			got := simSchedule(tc.p, &st, s.now, s.n, s.lat)
			if math.Abs(got-s.want) > 1e-6 || math.Abs(st.nextCmd-s.wantNext.nextCmd) > 1e-6 || math.Abs(st.nextByte-s.wantNext.nextByte) > 1e-6 {
				t.Errorf("%s: step %d: done %v state %+v; want %v %+v", tc.name, i, got, st, s.want, s.wantNext)
			}
		}
	}
}

func TestSimScheduleThroughput(t *testing.T) {
	// Saturated with 4 KiB reads, the model completes commands at the
	// lower of IOPS and Bandwidth/4096, whatever the latency.
	for _, p := range []SimParams{NANDParams(), OptaneParams()} {
		var st simState
		const n = 100000
		var last float64
		for range n {
			last = simSchedule(p, &st, 0, 4096, p.ReadLatency)
		}
		rate := n / (last - float64(p.ReadLatency)) * 1e9
		want := min(p.IOPS, p.Bandwidth/4096)
		if math.Abs(rate-want)/want > 0.01 {
			t.Errorf("%+v: saturated rate %.0f/s; want %.0f/s", p, rate, want)
		}
	}
}

func TestSimParams(t *testing.T) {
	custom := SimParams{ReadLatency: time.Millisecond, WriteLatency: 2 * time.Millisecond, IOPS: 10, Bandwidth: 1e6}
	for _, tc := range []struct {
		spec string
		opts []Option
		want SimParams
	}{
		{"sim:nand:1MiB", nil, NANDParams()},
		{"sim:optane:1MiB", nil, OptaneParams()},
		{"sim:nand:1MiB", []Option{WithSimParams(custom)}, custom},
		{"sim:optane:1MiB", []Option{WithSimParams(custom)}, custom},
		{"sim:nand:1MiB?iops=1k&read_lat=5us", []Option{WithSimParams(custom)},
			SimParams{ReadLatency: 5 * time.Microsecond, WriteLatency: 2 * time.Millisecond, IOPS: 1000, Bandwidth: 1e6}},
		{"sim:nand:1MiB?read_lat=90us&write_lat=20us&iops=700000&bw=3.2GB/s", nil, NANDParams()},
		{"sim:optane:1MiB?bw=2.5GiB/s&write_lat=10µs", nil,
			SimParams{ReadLatency: 3 * time.Microsecond, WriteLatency: 10 * time.Microsecond, IOPS: 5e6, Bandwidth: 2.5 * (1 << 30)}},
		{"sim:nand:1MiB?iops=0&bw=0&read_lat=0s&write_lat=0s", nil, SimParams{}},
	} {
		v, err := Open(tc.spec, tc.opts...)
		if err != nil {
			t.Errorf("Open(%q): %v", tc.spec, err)
			continue
		}
		if got := v.(*simVolume).params; got != tc.want {
			t.Errorf("Open(%q) params %+v; want %+v", tc.spec, got, tc.want)
		}
		v.Close()
	}
	_, err := Open("sim:nand:1MiB", WithSimParams(SimParams{IOPS: math.NaN()}))
	if !errors.Is(err, ErrBadSpec) {
		t.Errorf("NaN IOPS: %v; want ErrBadSpec", err)
	}
	// Options meant for sim volumes do not disturb the others.
	v, err := Open("mem:1MiB", WithSimParams(custom))
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
}

// newTestWaiter starts a waiter on this platform's alarm; the test is
// skipped where there is none. The caller closes it.
func newTestWaiter(t *testing.T) *deadlineWaiter {
	t.Helper()
	al, err := newAlarm()
	if err != nil {
		t.Skipf("no alarm here: %v", err)
	}
	return newDeadlineWaiter(al)
}

// waitNotEarly waits on w for deadline (arrived is the caller's reading of
// the clock, as a sim command's arrival) and reports whether it returned
// no earlier than deadline; an early return fails t, naming what waited.
func waitNotEarly(t *testing.T, w *deadlineWaiter, deadline, arrived time.Time, what string) bool {
	t.Helper()
	w.wait(deadline, arrived)
	if now := time.Now(); now.Before(deadline) {
		t.Errorf("%s returned %v early", what, deadline.Sub(now))
		return false
	}
	return true
}

// TestDeadlineWaiterNeverEarly parks many commands at once with deadlines
// in the past, now and the near future, in random order: every one must
// return, and none before its deadline. How late they are belongs to
// BenchmarkSimNAND.
func TestDeadlineWaiterNeverEarly(t *testing.T) {
	w := newTestWaiter(t)
	defer w.close()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 50 {
				d := time.Duration(rng.Int64N(int64(400*time.Microsecond))) - 50*time.Microsecond
				arrived := time.Now()
				deadline := arrived.Add(d)
				if !waitNotEarly(t, w, deadline, arrived, fmt.Sprintf("wait(%+v)", d)) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestDeadlineWaiterClose closes a waiter with commands parked: each
// still returns, not before its deadline, and waits after the close work
// on the clock.
func TestDeadlineWaiterClose(t *testing.T) {
	w := newTestWaiter(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrived := time.Now()
			deadline := arrived.Add(20 * time.Millisecond)
			waitNotEarly(t, w, deadline, arrived, "a parked wait after close")
		}()
	}
	time.Sleep(5 * time.Millisecond)
	w.close()
	wg.Wait()
	arrived := time.Now()
	deadline := arrived.Add(100 * time.Microsecond)
	waitNotEarly(t, w, deadline, arrived, "a wait after close")
}

// brokenAlarm is an alarm whose timer cannot be set, as a kernel timer
// never fails for valid arguments: no real part can stand in for it.
type brokenAlarm struct{ closed chan struct{} }

func (a *brokenAlarm) set(time.Duration) error { return errors.New("timer refused") }

func (a *brokenAlarm) wait() error {
	<-a.closed
	return errors.New("closed")
}

func (a *brokenAlarm) close() error {
	close(a.closed)
	return nil
}

// TestDeadlineWaiterAlarmFails parks commands on a waiter whose alarm
// cannot be set: each is released before its deadline passes, not due,
// and must still return no earlier than its deadline.
func TestDeadlineWaiterAlarmFails(t *testing.T) {
	w := newDeadlineWaiter(&brokenAlarm{closed: make(chan struct{})})
	defer w.close()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				arrived := time.Now()
				deadline := arrived.Add(time.Duration(50+g*10+i) * time.Microsecond)
				if !waitNotEarly(t, w, deadline, arrived, "a released wait") {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestDeadlineWaiterStaleNow hands waits a reading of the clock from well
// before the call, as a sim command's arrival is: they still return no
// earlier than their deadlines.
func TestDeadlineWaiterStaleNow(t *testing.T) {
	w := newTestWaiter(t)
	defer w.close()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				arrived := time.Now()
				deadline := arrived.Add(time.Duration(100+g+i) * time.Microsecond)
				time.Sleep(time.Duration(g%3) * 40 * time.Microsecond)
				if !waitNotEarly(t, w, deadline, arrived, "a wait on a stale arrival") {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestSimCloseWithReadsInFlight closes a sim volume while reads wait for
// their completion times: each finishes (with the data or ErrClosed).
func TestSimCloseWithReadsInFlight(t *testing.T) {
	v, err := Open("sim:nand:1MiB?read_lat=5ms")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			if _, err := v.ReadAt(buf, int64(i%256)*4096); err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("read: %v", err)
			}
		}()
	}
	time.Sleep(time.Millisecond)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}
