package target

import (
	"math/bits"
	"sync"
)

// bufPool recycles data buffers in power-of-two size classes from 4 KiB to
// 16 MiB, so a busy queue does not turn every command into garbage.
//
// sync.Pool holds interfaces, and a slice does not fit in one without an
// allocation, so the classes hold *[]byte. get hands out the slice and
// keeps its emptied holder in holders; put reuses one, so that in the steady
// state neither allocates.
type bufPool struct {
	classes [13]sync.Pool
	holders sync.Pool // of *[]byte, set to nil
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

// put returns a buffer from get; nil is ignored.
func (p *bufPool) put(b []byte) {
	if b == nil {
		return
	}
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
