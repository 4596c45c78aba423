package target

import "testing"

func TestBufPool(t *testing.T) {
	var p bufPool
	for _, n := range []int{1, 4096, 4097, 64 << 10, 16 << 20} {
		b := p.get(n)
		if len(b) < n || len(b) != cap(b) {
			t.Fatalf("get(%d): len %d cap %d", n, len(b), cap(b))
		}
		p.put(b)
	}
	p.put(nil)
	p.put(make([]byte, 5000)) // not a class size: dropped, not pooled
	if b := p.get(5000); cap(b) != 8192 {
		t.Fatalf("get(5000) returned a buffer of cap %d, want 8192", cap(b))
	}
	p.put(make([]byte, 32<<20)) // beyond the largest class
}

// TestBufPoolNoAllocs: recycling a buffer allocates nothing. (The race
// detector makes sync.Pool drop a share of what it is given, hence the
// margin; without the fix, every put allocated a holder.)
func TestBufPoolNoAllocs(t *testing.T) {
	var p bufPool
	p.put(p.get(4096))
	allocs := testing.AllocsPerRun(1000, func() { p.put(p.get(4096)) })
	if allocs >= 0.9 {
		t.Fatalf("%.2f allocations per get and put", allocs)
	}
	t.Logf("%.2f allocations per get and put", allocs)
}

// TestBufPoolAccounting: the pool counts what it hands out until it comes
// back, and remembers the most it ever had out.
func TestBufPoolAccounting(t *testing.T) {
	var p bufPool
	a, b := p.get(100), p.get(5000)
	if got := p.inUse.Load(); got != 4096+8192 {
		t.Fatalf("in use %d, want %d", got, 4096+8192)
	}
	p.put(a)
	p.put(b)
	big := p.get(20 << 20) // beyond the classes: allocated, still counted
	p.put(big)
	if got := p.inUse.Load(); got != 0 {
		t.Fatalf("in use %d after everything came back", got)
	}
	if got := p.peak.Load(); got != 20<<20 {
		t.Fatalf("peak %d, want %d", got, 20<<20)
	}
}
