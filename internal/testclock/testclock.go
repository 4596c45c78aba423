// Package testclock is a clock a test moves by hand, for code that takes
// its time from an injected Now (leases, grants), so a test can step past
// an expiry without sleeping.
package testclock

import (
	"sync"
	"time"
)

// Clock reads as the time it was started at plus every Advance so far.
// It is safe for concurrent use: the code under test reads it from its
// own goroutines while the test advances it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock reading start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time; pass the method value where a
// func() time.Time is wanted.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
