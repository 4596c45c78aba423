// Package hist holds Histogram, a fixed-memory, allocation-free latency
// histogram that every benchmark records its operations in.
package hist

import (
	"math/bits"
	"time"
)

// Histogram records latencies with about 0.2% relative precision from 1 ns
// to hours, in fixed memory: values below 1024 ns each have a bucket; above,
// every power of two is split into 512 linear sub-buckets. Recording is a
// few instructions and allocation free, so it can sit on an I/O hot path.
// A Histogram is not safe for concurrent use: give each worker its own and
// Merge them.
type Histogram struct {
	counts []uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const (
	histLinear = 1024
	histSub    = 512
	histBits   = 9 // log2(histSub)
)

// New returns an empty histogram.
func New() *Histogram {
	return &Histogram{counts: make([]uint64, histLinear+55*histSub)}
}

func histIndex(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	e := bits.Len64(v) - histBits - 1 // v>>e is in [512, 1023]
	return histLinear + (e-1)*histSub + int(v>>e) - histSub
}

// histValue is the lower bound of a bucket.
func histValue(i int) uint64 {
	if i < histLinear {
		return uint64(i)
	}
	i -= histLinear
	e := i/histSub + 1
	return uint64(histSub+i%histSub) << e
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

// Merge adds o's observations to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// NewSet returns n empty histograms, one for each worker of a run to
// record into alone (a Histogram is not safe for concurrent use); Merged
// combines them once the workers are done.
func NewSet(n int) []*Histogram {
	hs := make([]*Histogram, n)
	for i := range hs {
		hs[i] = New()
	}
	return hs
}

// Merged returns a new histogram holding every observation of hs.
func Merged(hs []*Histogram) *Histogram {
	h := New()
	for _, x := range hs {
		h.Merge(x)
	}
	return h
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Mean returns the mean observation.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the q-quantile (0 < q ≤ 1), to the histogram's
// precision, rounded up to the top of its bucket.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = max(min(rank, h.n), 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			// The bucket's highest value, so a quantile is never
			// understated; capped by the largest value seen.
			return min(time.Duration(histValue(i+1)-1), h.max)
		}
	}
	return h.max
}
