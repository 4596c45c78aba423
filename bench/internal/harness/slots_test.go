package harness

import (
	"slices"
	"testing"
)

// TestSlotsSequential: sequential workers start at their own stripe and
// wrap at the region's end.
func TestSlotsSequential(t *testing.T) {
	for _, tc := range []struct {
		n          int64
		i, workers int
		want       []int64
	}{
		{n: 5, i: 0, workers: 1, want: []int64{0, 1, 2, 3, 4, 0, 1}},
		{n: 10, i: 1, workers: 2, want: []int64{5, 6, 7, 8, 9, 0}},
		{n: 7, i: 2, workers: 3, want: []int64{4, 5, 6, 0}},
	} {
		s := NewSlots(tc.n, tc.i, tc.workers, false, 1)
		got := make([]int64, len(tc.want))
		for k := range got {
			got[k] = s.Next()
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("n %d worker %d of %d: %v, want %v", tc.n, tc.i, tc.workers, got, tc.want)
		}
	}
}

// TestSlotsRandom: random picks stay in the region, reach all of it, and
// repeat for the same worker and seed.
func TestSlotsRandom(t *testing.T) {
	const n = 16
	a, b := NewSlots(n, 3, 4, true, 42), NewSlots(n, 3, 4, true, 42)
	seen := make(map[int64]bool)
	for range 1000 {
		x := a.Next()
		if x < 0 || x >= n {
			t.Fatalf("slot %d outside [0, %d)", x, n)
		}
		if y := b.Next(); y != x {
			t.Fatalf("same worker and seed: %d then %d", x, y)
		}
		seen[x] = true
	}
	if len(seen) != n {
		t.Errorf("1000 picks reached %d of %d slots", len(seen), n)
	}
}
