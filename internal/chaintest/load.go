// Package chaintest is the checked write load of the replicated cluster's
// tests (kv/chain's in-process ones and tests/chain's processes): writers
// that record every write the cluster acknowledged, so a test can read
// each back after killing, adding or moving things under them.
package chaintest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Writer is what the load writes through: a chain.Client or chain.Router.
type Writer interface {
	Put(ctx context.Context, key, value []byte) error
}

// Load writes from two goroutines: new keys (key(w, i) for writer w's
// i-th write) and, every fourth write, an overwrite of one of the
// writer's acknowledged keys. It records each key's last acknowledged
// value, and calls check (if not nil) with every fifth acknowledged
// write right after its acknowledgement. A key whose write failed is
// never written again and not recorded (the write may or may not have
// happened).
type Load struct {
	stop  atomic.Bool
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[string]string
	n     atomic.Int64
	fails atomic.Int64
}

// Start starts the load; each Put may retry for up to a minute.
func Start(w Writer, key func(writer, i int) string, check func(key, value string)) *Load {
	l := &Load{acked: map[string]string{}}
	for wr := range 2 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			var mine []string
			for i := 0; !l.stop.Load(); i++ {
				k := key(wr, i)
				if i%4 == 3 && len(mine) > 0 {
					k = mine[rand.IntN(len(mine))]
				}
				v := fmt.Sprintf("v%d-%d", wr, i)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := w.Put(ctx, []byte(k), []byte(v))
				cancel()
				l.mu.Lock()
				if err != nil {
					l.fails.Add(1)
					delete(l.acked, k)
					mine = slices.DeleteFunc(mine, func(x string) bool { return x == k })
				} else {
					if _, ok := l.acked[k]; !ok {
						mine = append(mine, k)
					}
					l.acked[k] = v
					l.n.Add(1)
				}
				l.mu.Unlock()
				if err == nil && check != nil && i%5 == 0 {
					check(k, v)
				}
			}
		}()
	}
	return l
}

// Acked is the number of writes acknowledged so far.
func (l *Load) Acked() int64 { return l.n.Load() }

// Fails is the number of writes that failed so far.
func (l *Load) Fails() int64 { return l.fails.Load() }

// WaitAcked waits (two minutes at most) until n writes were acknowledged.
func (l *Load) WaitAcked(t testing.TB, n int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for l.n.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d writes acknowledged, want %d", l.n.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Finish stops the writers and returns each key's last acknowledged
// value.
func (l *Load) Finish() map[string]string {
	l.stop.Store(true)
	l.wg.Wait()
	return l.acked
}
