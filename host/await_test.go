package host

import (
	"testing"
	"time"
)

// TestAwaiter receives a call that is already there, one that comes during
// the spin and one that comes after it, with and without spinning, one
// Awaiter through all of them (so through its backoff after misses).
func TestAwaiter(t *testing.T) {
	for _, spin := range []time.Duration{0, -time.Second, 50 * time.Microsecond, time.Second} {
		a := NewAwaiter(spin)
		for _, delay := range []time.Duration{-1, 0, 5 * time.Millisecond, -1} {
			done := make(chan *Call, 1)
			want := &Call{}
			if delay < 0 {
				done <- want
			} else {
				go func() {
					time.Sleep(delay)
					done <- want
				}()
			}
			if got := a.Await(done); got != want {
				t.Errorf("spin %v, delay %v: got %p, want %p", spin, delay, got, want)
			}
		}
	}
}
