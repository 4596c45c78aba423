package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites: writers and a reader share the buffer (the race
// detector checks the locking), and every write lands whole.
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	const writers, lines = 4, 100
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range lines {
				if n, err := b.Write([]byte("line\n")); n != 5 || err != nil {
					t.Errorf("Write = %d, %v", n, err)
				}
			}
		})
	}
	wg.Go(func() {
		for range lines {
			_ = b.String()
		}
	})
	wg.Wait()
	if got, want := b.String(), strings.Repeat("line\n", writers*lines); got != want {
		t.Errorf("buffer holds %d bytes, want %d", len(got), len(want))
	}
}
