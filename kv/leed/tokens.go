package leed

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// The token-based I/O engine (LEED's intra-JBOF execution, simplified to
// one device): every I/O costs tokens by its kind and size, as the
// device's cost curve says, and the I/Os in flight on a device may hold at
// most Capacity tokens between them. A device kept at its capacity runs at
// its best throughput; more in flight would only queue inside it and
// raise latency. What is left of the capacity is the device's credit,
// which the target returns to hosts for their flow control.

// CostPoint is one measured point of a device's cost curve: the cost in
// tokens of a read and of a write of Size bytes. One token is the cost of
// a 4 KiB read by convention.
type CostPoint struct {
	Size        int
	Read, Write float64
}

// CostCurve is a device's cost curve: points in ascending size; costs
// between two points are interpolated linearly and beyond the last grow
// in proportion to size.
type CostCurve []CostPoint

// Cost is the tokens an I/O of n bytes costs.
func (c CostCurve) Cost(write bool, n int) float64 {
	if len(c) == 0 {
		return 1
	}
	pick := func(p CostPoint) float64 {
		if write {
			return p.Write
		}
		return p.Read
	}
	i := sort.Search(len(c), func(i int) bool { return c[i].Size >= n })
	switch {
	case i == 0:
		return pick(c[0])
	case i == len(c):
		last := c[len(c)-1]
		return pick(last) * float64(n) / float64(last.Size)
	}
	lo, hi := c[i-1], c[i]
	f := float64(n-lo.Size) / float64(hi.Size-lo.Size)
	return pick(lo) + f*(pick(hi)-pick(lo))
}

// DeviceModel is what a cost curve is derived from: a device's idle
// latencies, command rate and bandwidth (volume.SimParams has them).
type DeviceModel struct {
	ReadLatency, WriteLatency time.Duration
	IOPS, Bandwidth           float64
}

// CurveFor derives the cost curve and capacity of a device from its model:
// an I/O costs the device time it occupies — the larger of its share of
// the command rate and its transfer time — in units of a 4 KiB read's;
// the capacity is the tokens in flight that keep the device busy (Little's
// law: its rate times a 4 KiB read's latency), and at least one.
func CurveFor(m DeviceModel) (CostCurve, float64) {
	occupy := func(n int) float64 {
		t := 0.0
		if m.IOPS > 0 {
			t = 1 / m.IOPS
		}
		if m.Bandwidth > 0 {
			t = max(t, float64(n)/m.Bandwidth)
		}
		return t
	}
	unit := occupy(4096)
	if unit == 0 {
		return nil, 1
	}
	var c CostCurve
	for n := 512; n <= 1<<20; n *= 2 {
		c = append(c, CostPoint{Size: n, Read: occupy(n) / unit, Write: occupy(n) / unit})
	}
	capacity := max(1, m.ReadLatency.Seconds()/unit)
	return c, capacity
}

// Engine admits a device's I/Os by cost. Safe for concurrent use.
type Engine struct {
	curve    CostCurve
	capacity float64

	mu       sync.Mutex
	inflight float64
	waiters  []chan struct{}
	admitted int64
	waited   int64
}

// NewEngine returns an engine for a device with the given curve and
// capacity in tokens (at least one I/O of any cost is always admitted
// when the device is idle, so capacity below one I/O's cost still runs).
func NewEngine(curve CostCurve, capacity float64) (*Engine, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("leed: engine capacity %v is not positive", capacity)
	}
	return &Engine{curve: curve, capacity: capacity}, nil
}

// Token is an admitted I/O's cost, handed back to Release.
type Token float64

// Acquire waits until an I/O of n bytes fits in the device's capacity, or
// ctx ends.
func (e *Engine) Acquire(ctx context.Context, write bool, n int) (Token, error) {
	cost := e.curve.Cost(write, n)
	for {
		e.mu.Lock()
		if e.inflight == 0 || e.inflight+cost <= e.capacity {
			e.inflight += cost
			e.admitted++
			e.mu.Unlock()
			return Token(cost), nil
		}
		ch := make(chan struct{})
		e.waiters = append(e.waiters, ch)
		e.waited++
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Release returns an I/O's tokens when it completes and wakes the waiters
// to try again.
func (e *Engine) Release(t Token) {
	e.mu.Lock()
	e.inflight -= float64(t)
	if e.inflight < 1e-9 {
		e.inflight = 0
	}
	ws := e.waiters
	e.waiters = nil
	e.mu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
}

// Credits is the device's unused capacity in whole tokens: how many more
// 4 KiB reads it would admit now.
func (e *Engine) Credits() uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return uint32(max(0, e.capacity-e.inflight))
}

// EngineStats are an engine's counters.
type EngineStats struct {
	Capacity, InFlight float64
	Admitted, Waited   int64
}

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return EngineStats{Capacity: e.capacity, InFlight: e.inflight, Admitted: e.admitted, Waited: e.waited}
}
