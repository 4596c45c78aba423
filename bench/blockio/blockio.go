// Package blockio is the block I/O experiment (bench blockio): queues of
// random reads or writes against a namespace, and the comparison of
// nearstore with nbdkit driven by fio, repeated and summarized by median,
// as a table, Markdown or a chart.
package blockio

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/host"
)

// Config describes a block I/O workload.
type Config struct {
	// Pattern is randread, randwrite, read or write.
	Pattern string
	// BlockSize is the transfer size in bytes, a multiple of the device's
	// block size.
	BlockSize int
	// QueueDepth is the number of commands kept in flight on each queue.
	QueueDepth int
	// Queues is the number of I/O queues driven, one goroutine each.
	Queues int
	// Duration is how long to run.
	Duration time.Duration
	// Region bounds the bytes touched from the start of the device
	// (default: all of it).
	Region int64
	// Progress, when set, is called about five times a second with the
	// time elapsed and the operations completed so far.
	Progress func(elapsed time.Duration, ops int64)
}

// Result is what a block I/O run measured. Latencies are from
// submission to completion, in microseconds.
type Result struct {
	System     string  `json:"system"`
	Pattern    string  `json:"rw"`
	BlockSize  int     `json:"bs"`
	QueueDepth int     `json:"qd"`
	Queues     int     `json:"queues"`
	Seconds    float64 `json:"seconds"`
	Ops        int64   `json:"ops"`
	IOPS       float64 `json:"iops"`
	MBps       float64 `json:"mb_per_s"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	P999us     float64 `json:"p999_us"`
	Errors     int64   `json:"errors"`
	// ClientCPUus and ServerCPUus are the CPU time (user + system) per
	// operation of the driving process and of the serving one, where known
	// (0: not measured). A system whose two ends share a process
	// (pingpong) has it all in ClientCPUus.
	ClientCPUus float64 `json:"client_cpu_us_per_op,omitempty"`
	ServerCPUus float64 `json:"server_cpu_us_per_op,omitempty"`
}

func (c *Config) check(ns *host.Namespace) error {
	switch c.Pattern {
	case "randread", "randwrite", "read", "write":
	default:
		return fmt.Errorf("bench: pattern %q: want randread, randwrite, read or write", c.Pattern)
	}
	bs := ns.BlockSize()
	if c.BlockSize <= 0 || c.BlockSize%bs != 0 {
		return fmt.Errorf("bench: block size %d is not a multiple of the device's %d", c.BlockSize, bs)
	}
	if max := ns.MaxTransfer(); c.BlockSize > max {
		return fmt.Errorf("bench: block size %d is more than the target's largest transfer (MDTS) of %d bytes", c.BlockSize, max)
	}
	if c.QueueDepth <= 0 || c.Queues <= 0 || c.Duration <= 0 {
		return fmt.Errorf("bench: queue depth, queues and duration must be positive")
	}
	if c.Region <= 0 || c.Region > ns.Size() {
		c.Region = ns.Size()
	}
	if c.Region < int64(c.BlockSize) {
		return fmt.Errorf("bench: region of %d bytes is smaller than a transfer", c.Region)
	}
	return nil
}

// Run drives ns with the workload and reports throughput and latency.
// Each queue gets one goroutine that keeps QueueDepth commands in flight
// through the asynchronous API, as fio's libaio engine does with one job
// per queue.
func Run(ctx context.Context, ns *host.Namespace, cfg Config) (Result, error) {
	if err := cfg.check(ns); err != nil {
		return Result{}, err
	}
	var cnt blockIOCounts
	hists := hist.NewSet(cfg.Queues)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.Now().Add(cfg.Duration)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < cfg.Queues; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			runQueue(runCtx, ns.Queue(i), cfg, i, deadline, hists[i], &cnt)
		}(i)
	}
	if cfg.Progress != nil {
		t := time.NewTicker(200 * time.Millisecond)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
	loop:
		for {
			select {
			case <-t.C:
				cfg.Progress(time.Since(start), cnt.ops.Load())
			case <-done:
				break loop
			}
		}
		t.Stop()
		cfg.Progress(time.Since(start), cnt.ops.Load())
	} else {
		wg.Wait()
	}
	elapsed := min(time.Since(start), cfg.Duration)
	if ctx.Err() != nil {
		elapsed = time.Since(start)
	}
	res := newResult("nearstore", cfg, elapsed, cnt.ops.Load(), hists)
	res.Errors = cnt.errs.Load()
	if err := ctx.Err(); err != nil {
		// Interrupted: what completed is still a measurement, and
		// commands cut off by the interrupt are not failures.
		return res, err
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("bench: %d commands failed (the first: %v)", res.Errors, *cnt.first.Load())
	}
	return res, nil
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// newResult states n operations of cfg done in elapsed, with the latencies
// the queues' histograms recorded.
func newResult(system string, cfg Config, elapsed time.Duration, n int64, hists []*hist.Histogram) Result {
	h := hist.Merged(hists)
	return Result{
		System: system, Pattern: cfg.Pattern, BlockSize: cfg.BlockSize,
		QueueDepth: cfg.QueueDepth, Queues: cfg.Queues,
		Seconds: elapsed.Seconds(), Ops: n,
		IOPS:   float64(n) / elapsed.Seconds(),
		MBps:   float64(n) * float64(cfg.BlockSize) / elapsed.Seconds() / 1e6,
		P50us:  us(h.Quantile(0.50)),
		P99us:  us(h.Quantile(0.99)),
		P999us: us(h.Quantile(0.999)),
	}
}

// blockIOCounts are the queues' shared counters.
type blockIOCounts struct {
	ops, errs atomic.Int64
	first     atomic.Pointer[error] // the first failure, to name a cause
}

func (c *blockIOCounts) fail(err error) {
	c.errs.Add(1)
	c.first.CompareAndSwap(nil, &err)
}

// runQueue keeps cfg.QueueDepth commands in flight on one queue until the
// deadline, then waits for the stragglers. Only commands completed by the
// deadline count. It works as an event loop run by the queue's reader: each
// completion is delivered to a callback on the reader goroutine
// (host.Call.OnDone), which accounts for it and submits its replacement;
// the reader sends every replacement of one burst of completions in one
// write before it waits for the target again. So at queue depth 1 a round
// trip wakes one goroutine on this side, as a bare ping-pong does.
func runQueue(ctx context.Context, q *host.Namespace, cfg Config, idx int, deadline time.Time,
	h *hist.Histogram, cnt *blockIOCounts) {
	bs := int64(cfg.BlockSize)
	lbaShift := int64(q.BlockSize())
	slots := cfg.Region / bs
	write := cfg.Pattern == "write" || cfg.Pattern == "randwrite"
	random := cfg.Pattern[0] == 'r' && cfg.Pattern != "read"
	// Sequential patterns give each queue its own stripe of the region.
	pick := harness.NewSlots(slots, idx, cfg.Queues, random, uint64(time.Now().UnixNano()))

	// The loop's state is touched by whichever goroutine delivers a call:
	// mostly the queue's reader, also this one (failed submissions), a
	// context's or a failing connection's.
	var (
		mu         sync.Mutex
		started    = make(map[*host.Call]time.Time, cfg.QueueDepth)
		inflight   int  // added and not yet reaped
		submitting bool // a goroutine is in flush's loop
		finished   = make(chan struct{})
	)
	// Two batches, so that one is filled while the other is submitted.
	batch, spare := q.NewBatch(), q.NewBatch()
	add := func(buf []byte) { // with mu held
		lba := uint64(pick.Next() * bs / lbaShift)
		var c *host.Call
		t := time.Now()
		if write {
			c = batch.WriteBlocks(buf, lba, nil)
		} else {
			c = batch.ReadBlocks(buf, lba, nil)
		}
		started[c] = t
		inflight++
	}
	// flush submits what add queued. A call that fails at once is
	// delivered during Submit, on this goroutine; its reap finds
	// submitting set and leaves its replacement to this loop.
	flush := func() {
		mu.Lock()
		if submitting {
			mu.Unlock()
			return
		}
		submitting = true
		for batch.Len() > 0 {
			b := batch
			batch, spare = spare, b
			mu.Unlock()
			b.Submit(ctx)
			mu.Lock()
		}
		submitting = false
		mu.Unlock()
	}
	// reap accounts for one completion and queues its replacement, unless
	// the run is over or failing.
	reap := func(c *host.Call) {
		now := time.Now()
		mu.Lock()
		t0 := started[c]
		delete(started, c)
		inflight--
		again := now.Before(deadline) && ctx.Err() == nil
		if c.Err != nil {
			if ctx.Err() == nil {
				cnt.fail(c.Err)
			}
			again = false
		} else if now.Before(deadline) {
			cnt.ops.Add(1)
			h.Record(now.Sub(t0))
		}
		if again {
			buf := c.In
			if write {
				buf = c.Out
			}
			add(buf)
		}
		if inflight == 0 {
			close(finished)
		}
		mu.Unlock()
		if again {
			flush()
		}
	}
	batch.OnDone, spare.OnDone = reap, reap
	mu.Lock()
	for i := 0; i < cfg.QueueDepth; i++ {
		b := make([]byte, bs)
		if write {
			_, _ = rand.Read(b)
		}
		add(b)
	}
	mu.Unlock()
	flush()
	<-finished
}
