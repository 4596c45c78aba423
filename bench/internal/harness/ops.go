package harness

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
)

// Ops is a timed run of a fixed number of operations spread over
// goroutines, each taking the next operation number as it finishes the
// last (a closed loop, one operation in flight per goroutine).
type Ops struct {
	// Threads goroutines issue the N operations, numbered 0 to N-1.
	Threads int
	N       uint64
	// Op does operation i with its goroutine's r: goroutine t's r is
	// PCG(t, Seed), so a run's choices repeat from run to run.
	Op   func(i uint64, r *rand.Rand) error
	Seed uint64
	// Progress, if set, is called with the operations started so far
	// every Every (default 2 s) while the run lasts.
	Progress func(done uint64)
	Every    time.Duration
}

// RunOps runs o and returns the operations' latencies and the run's
// wall time. A goroutine stops at its first failed operation; the run
// ends when every goroutine has stopped, and the failures are joined.
func RunOps(ctx context.Context, o Ops) (*hist.Histogram, time.Duration, error) {
	var next atomic.Uint64
	if o.Progress != nil {
		every := o.Every
		if every <= 0 {
			every = 2 * time.Second
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					o.Progress(min(next.Load(), o.N))
				}
			}
		}()
	}
	threads := max(o.Threads, 1)
	hists := hist.NewSet(threads)
	errs := make([]error, threads)
	var wg sync.WaitGroup
	start := time.Now()
	for t := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(t), o.Seed))
			for {
				i := next.Add(1) - 1
				if i >= o.N || ctx.Err() != nil {
					return
				}
				s := time.Now()
				if err := o.Op(i, r); err != nil {
					errs[t] = err
					return
				}
				hists[t].Record(time.Since(s))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	return hist.Merged(hists), el, errors.Join(append(errs, ctx.Err())...)
}
