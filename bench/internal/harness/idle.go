package harness

import (
	"context"
	"fmt"
	"time"
)

// WaitIdle polls idle every 100 ms until it holds three times in a row (a
// finishing compaction may schedule the next one), or ten minutes pass.
func WaitIdle(ctx context.Context, idle func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for n := 0; n < 3; {
		if idle() {
			n++
		} else {
			n = 0
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for compactions to finish: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
