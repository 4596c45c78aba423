package target

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// bufPool recycles data buffers in power-of-two size classes from 4 KiB to
// 16 MiB, so a busy queue does not turn every command into garbage.
//
// sync.Pool holds interfaces, and a slice does not fit in one without an
// allocation, so the classes hold *[]byte. get hands out the slice and
// keeps its emptied holder in holders; put reuses one, so that in the steady
// state neither allocates.
//
// It also keeps the target's own account of the command buffers hosts
// hold: inUse is the bytes handed out by get and not yet given back by
// put, peak the most inUse has been. Every buffer a host can make the
// target allocate for a command (in-capsule data, H2C data, results) comes
// from here, so these two bound what any host sends or asks for.
type bufPool struct {
	classes [13]sync.Pool
	holders sync.Pool // of *[]byte, set to nil

	inUse, peak atomic.Int64
	// metrics, if set, is told of every change of inUse.
	metrics *Metrics
}

const minBufShift = 12

func class(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBufShift
}

// get returns a buffer of at least n bytes.
func (p *bufPool) get(n int) []byte {
	b := p.take(n)
	p.account(int64(cap(b)))
	return b
}

func (p *bufPool) take(n int) []byte {
	c := class(n)
	if c >= len(p.classes) {
		return make([]byte, n)
	}
	if h, ok := p.classes[c].Get().(*[]byte); ok {
		b := (*h)[:cap(*h)]
		*h = nil // the holder must not keep the buffer alive
		p.holders.Put(h)
		return b
	}
	return make([]byte, 1<<(c+minBufShift))
}

// account adds d bytes to inUse and raises peak to match.
func (p *bufPool) account(d int64) {
	n := p.inUse.Add(d)
	for {
		pk := p.peak.Load()
		if n <= pk || p.peak.CompareAndSwap(pk, n) {
			break
		}
	}
	p.metrics.buffers(n, p.peak.Load())
}

// put returns a buffer from get; nil is ignored.
func (p *bufPool) put(b []byte) {
	if b == nil {
		return
	}
	p.account(-int64(cap(b)))
	c := class(cap(b))
	if c >= len(p.classes) || cap(b) != 1<<(c+minBufShift) {
		return
	}
	h, ok := p.holders.Get().(*[]byte)
	if !ok {
		h = new([]byte)
	}
	*h = b[:cap(b)]
	p.classes[c].Put(h)
}
