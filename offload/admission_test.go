package offload

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 1},
		{[]float64{0, 0}, 1},
		{[]float64{5, 5}, 1},
		{[]float64{1, 0}, 0.5},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{1, 2, 3}, 36.0 / 42},
	} {
		if got := Jain(c.xs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// TestCPUPolicy: the decision follows the last sample, on either side of
// the threshold.
func TestCPUPolicy(t *testing.T) {
	a, err := newAdmission(Admission{Policy: PolicyCPU, CPUThreshold: 0.7})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	for _, c := range []struct {
		cpu   float64
		admit bool
	}{{0, true}, {0.7, true}, {0.71, false}, {1, false}, {0.3, true}} {
		a.observeCPU(c.cpu)
		err := a.admit("c", 0, now)
		if (err == nil) != c.admit || err != nil && !errors.Is(err, ErrRejected) {
			t.Errorf("cpu %v: %v, want admit %v", c.cpu, err, c.admit)
		}
	}
	for _, bad := range []float64{0, -1, 1.5} {
		if _, err := newAdmission(Admission{Policy: PolicyCPU, CPUThreshold: bad}); err == nil {
			t.Errorf("threshold %v accepted", bad)
		}
	}
}

// TestTokenPolicy: a task runs only under a token its client holds; a
// client gets no more than its fair share while others ask; a token not
// given back is reclaimed when it expires.
func TestTokenPolicy(t *testing.T) {
	ttl := 10 * time.Second
	a, err := newAdmission(Admission{Policy: PolicyTokens, Tokens: 2, TokenTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	if err := a.admit("a", 0, now); !errors.Is(err, ErrRejected) {
		t.Fatalf("no token: %v", err)
	}
	ta, _, err := a.acquire("a", now)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.admit("a", ta, now); err != nil {
		t.Fatalf("under its token: %v", err)
	}
	if err := a.admit("b", ta, now); !errors.Is(err, ErrRejected) {
		t.Fatalf("under another client's token: %v", err)
	}
	// b asks: two active clients, one token each.
	tb, _, err := a.acquire("b", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.acquire("a", now); !errors.Is(err, ErrRejected) {
		t.Fatalf("a second token for a while b is active: %v", err)
	}
	if got := a.free(now); got != 0 {
		t.Fatalf("%d tokens free, want 0", got)
	}
	a.release(tb)
	if got := a.free(now); got != 1 {
		t.Fatalf("%d tokens free after a release, want 1", got)
	}
	// a never gives its token back: it expires.
	later := now.Add(ttl)
	if err := a.admit("a", ta, later); !errors.Is(err, ErrRejected) {
		t.Fatalf("under an expired token: %v", err)
	}
	if got := a.free(later); got != 2 {
		t.Fatalf("%d tokens free after expiry, want 2", got)
	}
	// b alone now (a's interest expired with its TTL): both tokens.
	much := later.Add(ttl + time.Second)
	for range 2 {
		if _, _, err := a.acquire("b", much); err != nil {
			t.Fatalf("b alone: %v", err)
		}
	}
}

func TestCacheKeysAndPins(t *testing.T) {
	c := NewCache(3 * 100)
	k := func(version, tag, idx uint64) pageKey { return pageKey{ino: 7, version: version, tag: tag, index: idx} }
	data := func(b byte) []byte {
		d := make([]byte, 100)
		d[0] = b
		return d
	}
	p := c.add(k(1, 1, 0), data(1))
	if p == nil {
		t.Fatal("not cached")
	}
	// Another version or tag of the same page is a miss, never the old bytes.
	for _, other := range []pageKey{k(2, 1, 0), k(1, 2, 0), {ino: 8, version: 1, tag: 1}} {
		if got := c.get(other); got != nil {
			t.Fatalf("%+v served the page of %+v", other, p.key)
		}
	}
	// Pinned pages are never evicted: with the budget full of pinned
	// pages a new one is not cached.
	c.add(k(1, 1, 1), data(2))
	c.add(k(1, 1, 2), data(3))
	if got := c.add(k(1, 1, 3), data(4)); got != nil {
		t.Fatal("cached past the budget while every page is pinned")
	}
	c.unpin(p)
	if got := c.add(k(1, 1, 3), data(4)); got == nil {
		t.Fatal("not cached with an unpinned page to evict")
	}
	if c.get(k(1, 1, 0)) != nil {
		t.Fatal("the unpinned page was not the one evicted")
	}
	if got := c.get(k(1, 1, 1)); got == nil || got.data[0] != 2 {
		t.Fatal("a pinned page was evicted")
	}
	if st := c.Stats(); st.Bytes > st.Budget || st.Evictions != 1 {
		t.Fatalf("stats %+v", st)
	}
}
