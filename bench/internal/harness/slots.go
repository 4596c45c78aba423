package harness

import "math/rand/v2"

// Slots picks the blocks one worker of an I/O benchmark touches in a
// region of n blocks. A random pattern draws them uniformly from [0, n);
// a sequential one walks worker i of workers through the region from the
// start of its own stripe, n*i/workers, wrapping at n, so that sequential
// workers start apart rather than all reading the same blocks.
type Slots struct {
	n, next int64
	rng     *rand.Rand // nil for a sequential pattern
}

// NewSlots returns worker i's picker (of workers) over n blocks; a random
// one draws from a generator seeded with (i+1, seed).
func NewSlots(n int64, i, workers int, random bool, seed uint64) *Slots {
	s := &Slots{n: n, next: n * int64(i) / int64(workers)}
	if random {
		s.rng = rand.New(rand.NewPCG(uint64(i)+1, seed))
	}
	return s
}

// Next is the next block's index, in [0, n).
func (s *Slots) Next() int64 {
	if s.rng != nil {
		return s.rng.Int64N(s.n)
	}
	slot := s.next
	s.next = (s.next + 1) % s.n
	return slot
}
