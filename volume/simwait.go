package volume

import (
	"runtime"
	"sync"
	"time"
)

// A sim volume's commands wait for their modelled completion times in a
// deadlineWaiter: each waiting command parks on a channel, and one
// goroutine per volume wakes the commands whose deadlines have passed when
// an alarm — a kernel timer the Go runtime's network poller watches (a
// timerfd on Linux) — fires for the earliest deadline. A parked command
// costs no CPU until it is woken.
//
// Spinning on the clock, as waitUntil does, is accurate but burns a core
// per outstanding command; plain time.Sleep costs nothing but is late by
// up to a millisecond when the process is idle, because the runtime's
// poller sleeps in whole milliseconds for timers under one. A timerfd in
// the poller's epoll set wakes it at the timer's own precision (hrtimer,
// no slack), so waits are microsecond-accurate when the process is idle;
// when it is busy, the wake-up is as late as the poller's turn, the same
// delay network I/O sees. BenchmarkSimNAND reports the lateness and CPU.

// alarm is a one-shot timer that a goroutine can block on: set arms it to
// fire after d (re-arming replaces the previous setting), wait blocks
// until it has fired since the last wait (it may return spuriously), and
// close makes wait return an error.
type alarm interface {
	set(d time.Duration) error
	wait() error
	close() error
}

// waitEntry is one parked command. Its wake channel (capacity 1) gets
// true when the loop finds the deadline passed on the clock, false when
// the command is released without that (close, an alarm that cannot be
// set), and it must then wait out its deadline itself.
type waitEntry struct {
	deadline time.Time
	wake     chan bool
}

// waitHeap is a min-heap of parked commands by deadline, typed so that a
// push boxes nothing (container/heap's any would allocate per command).
type waitHeap []waitEntry

func (h *waitHeap) push(e waitEntry) {
	q := append(*h, e)
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].deadline.Before(q[p].deadline) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
	*h = q
}

// pop removes and returns the earliest entry; h must not be empty.
func (h *waitHeap) pop() waitEntry {
	q := *h
	e := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = waitEntry{}
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q[l].deadline.Before(q[m].deadline) {
			m = l
		}
		if r := l + 1; r < n && q[r].deadline.Before(q[m].deadline) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return e
}

// deadlineWaiter parks commands until their deadlines; see above. Its
// invariant: while q is not empty, either the loop is spinning, or the
// alarm is armed to fire no later than q's earliest deadline (armed holds
// when it will fire).
type deadlineWaiter struct {
	al   alarm
	done chan struct{}

	mu sync.Mutex
	q  waitHeap
	// free are wake channels (capacity 1, empty) to reuse: taken and
	// given back under mu, which a wait holds anyway (a sync.Pool cost
	// more, its per-P caches missing as commands move between Ps).
	free  []chan bool
	armed time.Time // when the alarm fires; zero when disarmed
	// spinning is set while the loop yields on the clock: it looks at
	// every new command itself, so none needs to arm the alarm.
	spinning bool
	closed   bool
}

// newDeadlineWaiter starts a waiter on al.
func newDeadlineWaiter(al alarm) *deadlineWaiter {
	w := &deadlineWaiter{al: al, done: make(chan struct{})}
	go w.loop()
	return w
}

// wait returns at or after deadline, never before. now is a reading of
// the clock taken before the call (the command's arrival): a deadline not
// after it has passed, and the wait returns without looking at the clock
// again.
func (w *deadlineWaiter) wait(deadline, now time.Time) {
	if !now.Before(deadline) {
		return
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		waitUntil(deadline)
		return
	}
	var ch chan bool
	if n := len(w.free); n > 0 {
		ch = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		ch = make(chan bool, 1)
	}
	w.q.push(waitEntry{deadline: deadline, wake: ch})
	if !w.spinning && (w.armed.IsZero() || deadline.Before(w.armed)) {
		// The clock afresh: a now from before the call would set the
		// alarm late by the time since.
		w.armLocked(deadline, time.Now())
	}
	w.mu.Unlock()
	due := <-ch
	w.mu.Lock()
	w.free = append(w.free, ch)
	w.mu.Unlock()
	// Released early: the model's time still holds.
	if !due {
		waitUntil(deadline)
	}
}

// armLocked arms the alarm for deadline; callers hold mu. A timer that
// cannot be set (it never fails for valid arguments) leaves the loop to
// spin through: armed stays zero so the next wait tries again.
func (w *deadlineWaiter) armLocked(deadline, now time.Time) {
	// A zero duration would disarm the timer: a deadline already passed
	// fires at once.
	if err := w.al.set(max(deadline.Sub(now), time.Nanosecond)); err != nil {
		w.armed = time.Time{}
		w.wakeAllLocked()
		return
	}
	w.armed = deadline
}

// wakeAllLocked releases every parked command, not due (each waits out
// its own deadline on the clock); callers hold mu.
func (w *deadlineWaiter) wakeAllLocked() {
	for i, e := range w.q {
		e.wake <- false
		w.q[i] = waitEntry{}
	}
	w.q = w.q[:0]
}

// spinWindow is the gap to the next completion below which the waiter's
// goroutine yields in a loop on the clock (runtime.Gosched) instead of
// arming the alarm and parking. Parking costs system calls (arming the
// timer, the poller's wait, reading the timer: about 10 µs of CPU per
// completion on the 2-CPU benchmark VM, more than yielding when the
// process has other work), so it is paid only across gaps where the
// process would otherwise be idle long enough to matter; a device with
// one command in flight at 90 µs never spins.
const spinWindow = 50 * time.Microsecond

// loop wakes the commands whose deadlines have passed each time the alarm
// fires, then, while the next deadline is within spinWindow, yields and
// wakes them as they come due; otherwise it re-arms the alarm for the
// earliest one left and parks.
func (w *deadlineWaiter) loop() {
	defer close(w.done)
	for {
		err := w.al.wait()
		w.mu.Lock()
		if err != nil {
			w.closed = true
		}
		for !w.closed {
			now := time.Now()
			for len(w.q) > 0 && !w.q[0].deadline.After(now) {
				e := w.q.pop()
				e.wake <- true
			}
			w.armed = time.Time{}
			if len(w.q) == 0 || w.q[0].deadline.Sub(now) > spinWindow {
				w.spinning = false
				if len(w.q) > 0 {
					w.armLocked(w.q[0].deadline, now)
				}
				break
			}
			w.spinning = true
			w.mu.Unlock()
			runtime.Gosched()
			w.mu.Lock()
		}
		if w.closed {
			w.spinning = false
			w.wakeAllLocked()
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// close stops the waiter: parked commands are released (and wait out
// their deadlines on the clock), later waits use the clock alone.
func (w *deadlineWaiter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	_ = w.al.close()
	<-w.done
}
