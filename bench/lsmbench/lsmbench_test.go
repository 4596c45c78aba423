package lsmbench

import (
	"sync"
	"testing"
)

// TestInserterAcked: acked counts only records with every one below it
// inserted, however the inserts finish.
func TestInserterAcked(t *testing.T) {
	in := newInserter(10)
	for _, tc := range []struct {
		done  uint64
		acked uint64
	}{{11, 10}, {12, 10}, {10, 13}, {14, 13}, {13, 15}} {
		in.done(tc.done)
		if got := in.acked.Load(); got != tc.acked {
			t.Fatalf("after %d: acked %d, want %d", tc.done, got, tc.acked)
		}
	}
	in = newInserter(0)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				in.done(in.next.Add(1) - 1)
			}
		}()
	}
	wg.Wait()
	if got := in.acked.Load(); got != 4000 {
		t.Fatalf("acked %d of 4000", got)
	}
}
