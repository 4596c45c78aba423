// Package nsfunc lets nearstore functions be written in Go. A function is a
// reactor module built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o f.wasm ./f
//
// whose main package imports nsfunc and exports pushdown and/or compute
// through go:wasmexport, passing the raw ABI arguments to Pushdown or
// Compute here:
//
//	//go:wasmexport compute
//	func compute(in, inLen, out, outCap uint32) int32 {
//		return nsfunc.Compute(in, inLen, out, outCap, stats)
//	}
//
// Importing nsfunc also exports ns_alloc (and ns_free), which the runtime
// (sandbox/wasm) calls to place its buffers in the Go heap; docs/ABI.md has
// the rest of the contract. Buffers handed to a function are only valid
// during the call. Go functions run about 15× slower than C-built wasm, so
// the standard functions are written in C.
package nsfunc

import "encoding/binary"

// Error codes a function may return (functions/include/nearstore.h); any
// negative value is passed on to the caller.
const (
	EINVAL = -22 // malformed input
	ERANGE = -34 // output does not fit
	ENOENT = -2  // key not found
)

// MaxFanout is how many reads one pushdown step may ask for, and
// ScratchSize the size of a request's scratch buffer.
const (
	MaxFanout   = 16
	ScratchSize = 4096
)

// Byte offsets of struct bpf_xrp in wasm32 (docs/ABI.md).
const (
	offData     = 0
	offDone     = 4
	offNextAddr = 8
	offSize     = 136
	offScratch  = 264
	offNextFile = 268
	offCurFile  = 332
	offDataLen  = 336
	offCurAddr  = 344
	ctxSize     = 352
)

// Ctx is one pushdown step's view of struct bpf_xrp.
type Ctx struct {
	// Data holds the block(s) just read; Scratch persists across steps and
	// is the request's result.
	Data, Scratch []byte
	// CurFile and CurAddr say where Data came from: a file-table index and
	// a byte offset in that file.
	CurFile uint32
	CurAddr uint64

	raw   []byte // the struct itself, in linear memory
	nexts int
}

// Done marks the request complete; the result is Scratch.
func (c *Ctx) Done() { binary.LittleEndian.PutUint32(c.raw[offDone:], 1) }

// Next asks for n bytes at offset off of file (a file-table index) to be
// read and passed, concatenated in call order, to the next step. It
// reports false, and asks for nothing, if MaxFanout reads were already
// asked for or n is 0.
func (c *Ctx) Next(file uint32, off, n uint64) bool {
	if c.nexts >= MaxFanout || n == 0 {
		return false
	}
	i := c.nexts
	binary.LittleEndian.PutUint64(c.raw[offNextAddr+8*i:], off)
	binary.LittleEndian.PutUint64(c.raw[offSize+8*i:], n)
	binary.LittleEndian.PutUint32(c.raw[offNextFile+4*i:], file)
	c.nexts++
	return true
}

// Pushdown runs f as a pushdown step on the context at ctxPtr (the
// argument of the exported pushdown function) and returns f's result. It
// returns EINVAL if the context does not point into buffers the runtime
// obtained from ns_alloc.
func Pushdown(ctxPtr uint32, f func(*Ctx) int32) int32 {
	raw := lookup(ctxPtr, ctxSize)
	if raw == nil {
		return EINVAL
	}
	le := binary.LittleEndian
	data := lookup(le.Uint32(raw[offData:]), le.Uint32(raw[offDataLen:]))
	scratch := lookup(le.Uint32(raw[offScratch:]), ScratchSize)
	if data == nil || scratch == nil {
		return EINVAL
	}
	c := &Ctx{
		Data:    data,
		Scratch: scratch,
		CurFile: le.Uint32(raw[offCurFile:]),
		CurAddr: le.Uint64(raw[offCurAddr:]),
		raw:     raw,
	}
	return f(c)
}

// Compute runs f as the compute entry on the buffers the exported compute
// function was given and returns f's result: the output length (at most
// len(out)) or a negative error code. It returns EINVAL if the buffers are
// not ones the runtime obtained from ns_alloc.
func Compute(in, inLen, out, outCap uint32, f func(in, out []byte) int32) int32 {
	ib := lookup(in, inLen)
	ob := lookup(out, outCap)
	if ib == nil || ob == nil {
		return EINVAL
	}
	return f(ib, ob)
}
