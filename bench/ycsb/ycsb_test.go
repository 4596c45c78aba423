package ycsb

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

func TestKey(t *testing.T) {
	seen := map[string]bool{}
	for i := uint64(0); i < 10000; i++ {
		k := Key(i)
		if len(k) != KeyLen || string(k[:4]) != "user" {
			t.Fatalf("Key(%d) = %q", i, k)
		}
		if seen[string(k)] {
			t.Fatalf("Key(%d) = %q repeats", i, k)
		}
		seen[string(k)] = true
	}
}

// TestZipfianSkew: item 0 is the most popular, by far, every item drawn
// is in range, and scrambling keeps the range.
func TestZipfianSkew(t *testing.T) {
	const n = 1000
	z := NewZipfian(n, Theta)
	r := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, n)
	for i := 0; i < 100000; i++ {
		v := z.Rank(r)
		if v >= n {
			t.Fatalf("rank %d out of [0, %d)", v, n)
		}
		counts[v]++
		if s := (Scrambled{z}).Next(r); s >= n {
			t.Fatalf("scrambled %d out of [0, %d)", s, n)
		}
	}
	if counts[0] < 10*counts[n/2]+1 || counts[0] < counts[1] {
		t.Fatalf("no skew: counts[0]=%d counts[1]=%d counts[%d]=%d", counts[0], counts[1], n/2, counts[n/2])
	}
}

// TestLatest: the newest record is the likeliest, and nothing past the
// count is ever chosen, as the count grows.
func TestLatest(t *testing.T) {
	var c atomic.Uint64
	c.Store(100)
	l := Latest{Z: NewZipfian(100, Theta), Count: &c}
	r := rand.New(rand.NewPCG(3, 4))
	newest := 0
	for i := 0; i < 10000; i++ {
		if i%100 == 0 {
			c.Add(1)
		}
		v := l.Next(r)
		if v >= c.Load() {
			t.Fatalf("chose %d of %d records", v, c.Load())
		}
		if v == c.Load()-1 {
			newest++
		}
	}
	if newest < 1000 {
		t.Fatalf("newest record chosen %d of 10000 times", newest)
	}
}

// TestWorkloadMix: each core workload's proportions sum to 1 and Choose
// follows them.
func TestWorkloadMix(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, w := range Core() {
		if s := w.Read + w.Update + w.Insert + w.Scan + w.RMW; s < 0.999 || s > 1.001 {
			t.Fatalf("%s: proportions sum to %v", w.Name, s)
		}
		counts := map[Op]float64{}
		const n = 20000
		for i := 0; i < n; i++ {
			counts[w.Choose(r)]++
		}
		for op, want := range map[Op]float64{Read: w.Read, Update: w.Update, Insert: w.Insert, Scan: w.Scan, ReadModifyWrite: w.RMW} {
			if got := counts[op] / n; got < want-0.02 || got > want+0.02 {
				t.Fatalf("%s: %v at %.3f, want %.2f", w.Name, op, got, want)
			}
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		err  bool
	}{
		{"A,C", "AC", false},
		{"a, f ,b", "AFB", false},
		{"all", "ABCDEF", false},
		{"G", "", true},
		{"A,A", "", true},
		{"", "", true},
	} {
		ws, err := Parse(tc.in)
		if (err != nil) != tc.err {
			t.Fatalf("Parse(%q): %v", tc.in, err)
		}
		got := ""
		for _, w := range ws {
			got += w.Name
		}
		if got != tc.want {
			t.Fatalf("Parse(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestScanLen: scan lengths cover exactly [MinScanLen, MaxScanLen], the
// minimum defaulting to 1; equal bounds fix the length.
func TestScanLen(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		w      Workload
		lo, hi int
	}{{E, 1, 100}, {Workload{MinScanLen: 100, MaxScanLen: 100}, 100, 100}, {Workload{MinScanLen: 5, MaxScanLen: 8}, 5, 8}, {Workload{}, 1, 1}} {
		seen := map[int]bool{}
		for i := 0; i < 20000; i++ {
			n := tc.w.ScanLen(r)
			if n < tc.lo || n > tc.hi {
				t.Fatalf("%+v: scan of %d, want [%d, %d]", tc.w, n, tc.lo, tc.hi)
			}
			seen[n] = true
		}
		if len(seen) != tc.hi-tc.lo+1 {
			t.Fatalf("%+v: %d distinct lengths, want %d", tc.w, len(seen), tc.hi-tc.lo+1)
		}
	}
}

func TestSplitEvenShares(t *testing.T) {
	if s := Split(1); len(s) != 0 {
		t.Fatalf("Split(1) = %q", s)
	}
	const n, records = 4, 20000
	split := Split(n)
	if len(split) != n-1 {
		t.Fatalf("%d splits", len(split))
	}
	count := make([]int, n)
	for i := range uint64(records) {
		k := Key(i)
		j := 0
		for j < len(split) && string(k) >= string(split[j]) {
			j++
		}
		count[j]++
	}
	for j, c := range count {
		if c < records/n*9/10 || c > records/n*11/10 {
			t.Errorf("range %d holds %d of %d records: %v", j, c, records, count)
		}
	}
}
