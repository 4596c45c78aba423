package ebpf

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/nearstore/nearstore/sandbox"
)

// instance owns one request's memory: the context, scratch, data, stack,
// and compute input and output, all Go byte slices mapped into the
// program's address space by its machine.
type instance struct {
	machine
	m        *module
	ctx      [ctxSize]byte
	scratch  [sandbox.ScratchSize]byte
	data     []byte
	input    []byte
	output   []byte
	dataHigh int // high-water marks of what a call could see, cleared on Release
	inHigh   int
	outHigh  int
	released bool

	// wp and wc run the pushdown and compute entries when they were
	// translated to wasm (wasmrun.go); their buffers then live in those
	// instances' linear memory. wDataLen is the largest Data asked for.
	wp, wc   *wasmInst
	wDataLen int
	cc       callCtx
	// resultLen is the result length the last finished step set.
	resultLen int
	// next holds the reads the last step asked for: Step's result, valid
	// until the instance's next Step or Release, so a step allocates none.
	next [sandbox.MaxFanout]sandbox.Next
}

var _ sandbox.Instance = (*instance)(nil)

var _ sandbox.Yielder = (*instance)(nil)

// Yields reports whether the entry is interpreted, calling the context's
// sandbox.Yield every 64 Ki instructions; a translated one runs in wazero.
func (in *instance) Yields(compute bool) bool {
	if compute {
		return in.wc == nil
	}
	return in.wp == nil
}

// Data returns the n-byte buffer the next Step sees as the block(s) read.
func (in *instance) Data(n int) ([]byte, error) {
	if n < 0 || n > in.m.lim.MaxStepBytes {
		return nil, fmt.Errorf("%w: data of %d bytes, at most %d per step", sandbox.ErrMemory, n, in.m.lim.MaxStepBytes)
	}
	if w := in.wp; w != nil {
		in.wDataLen = max(in.wDataLen, n)
		return w.view()[w.t.dynOff:][:n:n], nil
	}
	if n > len(in.data) {
		in.data = make([]byte, grow(len(in.data), n, in.m.lim.MaxStepBytes))
	}
	return in.data[:n], nil
}

// ResultLen returns the result length the last finished step set.
func (in *instance) ResultLen() int { return in.resultLen }

// Scratch returns the request's scratch buffer.
func (in *instance) Scratch() []byte {
	if w := in.wp; w != nil {
		return w.view()[memScratch : memScratch+sandbox.ScratchSize]
	}
	return in.scratch[:]
}

// Input returns the n-byte compute input buffer.
func (in *instance) Input(n int) ([]byte, error) {
	if n < 0 || n > in.m.lim.MemoryBytes {
		return nil, fmt.Errorf("%w: input of %d bytes, at most %d", sandbox.ErrMemory, n, in.m.lim.MemoryBytes)
	}
	if w := in.wc; w != nil {
		// Output follows input: growing the input moves it (its
		// contents are then lost), so call Input first.
		if uint32(n) > w.inCap {
			if err := w.ensure(uint64(w.t.dynOff) + uint64(n)); err != nil {
				return nil, err
			}
			w.inCap = uint32(n)
			w.outCap = 0
		}
		return w.view()[w.t.dynOff:][:n:n], nil
	}
	if n > len(in.input) {
		in.input = make([]byte, grow(len(in.input), n, in.m.lim.MemoryBytes))
	}
	return in.input[:n], nil
}

// Output returns the n-byte compute output buffer.
func (in *instance) Output(n int) ([]byte, error) {
	if n < 0 || n > in.m.lim.MaxOutput {
		return nil, fmt.Errorf("%w: output buffer of %d bytes, at most %d", sandbox.ErrOutput, n, in.m.lim.MaxOutput)
	}
	if w := in.wc; w != nil {
		if uint32(n) > w.outCap {
			if err := w.ensure(uint64(w.outOff()) + uint64(n)); err != nil {
				return nil, err
			}
			w.outCap = uint32(n)
		}
		return w.view()[w.outOff():][:n:n], nil
	}
	if n > len(in.output) {
		in.output = make([]byte, grow(len(in.output), n, in.m.lim.MaxOutput))
	}
	return in.output[:n], nil
}

// grow picks a new buffer size of at least n, doubling old, capped at max.
func grow(old, n, limit int) int {
	return min(max(n, 2*old), limit)
}

// stepCtx writes the struct bpf_xrp a pushdown step sees into c (ctxSize
// bytes, wherever the engine keeps it): every field zero but the data and
// scratch pointers and the step's file, data length and offset, and
// returns c. Both engines, the interpreter and the translation, start a
// step with it.
func stepCtx(c []byte, curFile uint32, curOffset uint64, n int) []byte {
	clear(c)
	le := binary.LittleEndian
	le.PutUint64(c[ctxData:], dataAddr)
	le.PutUint64(c[ctxScratch:], scratchAddr)
	le.PutUint32(c[ctxCurFile:], curFile)
	le.PutUint32(c[ctxDataLen:], uint32(n))
	le.PutUint64(c[ctxCurAddr:], curOffset)
	return c
}

// Step runs the pushdown entry on the first n bytes of Data. The reads it
// returns are valid until the instance's next Step or Release.
func (in *instance) Step(ctx context.Context, curFile uint32, curOffset uint64, n int) (bool, []sandbox.Next, error) {
	p := in.m.pushdown
	if p == nil {
		return false, nil, fmt.Errorf("%w: the module has no pushdown entry", sandbox.ErrNoEntry)
	}
	if w := in.wp; w != nil {
		return in.stepWasm(ctx, w, curFile, curOffset, n)
	}
	if n < 0 || n > len(in.data) || n > in.m.lim.MaxStepBytes {
		return false, nil, fmt.Errorf("%w: step over %d bytes of data, but Data gave %d", sandbox.ErrMemory, n, len(in.data))
	}
	in.dataHigh = max(in.dataHigh, n)
	c := stepCtx(in.ctx[:], curFile, curOffset, n)
	in.regions[regionData].buf = in.data[:n]
	in.regions[regionInput].buf = nil
	in.regions[regionOutput].buf = nil

	r0, err := in.run(ctx, p, &in.m.lim, [5]uint64{ctxAddr})
	if err != nil {
		return false, nil, err
	}
	return in.stepResult(r0, c)
}

// stepResult reads what a step that returned r0 asked for from its
// context c.
func (in *instance) stepResult(r0 uint64, c []byte) (bool, []sandbox.Next, error) {
	le := binary.LittleEndian
	if code := int32(r0); code < 0 {
		return false, nil, &sandbox.FunctionError{Code: code}
	}
	if le.Uint32(c[ctxDone:]) != 0 {
		n, err := sandbox.ResultLen(le.Uint64(c[ctxSizeField:]))
		if err != nil {
			return false, nil, err
		}
		in.resultLen = n
		return true, nil, nil
	}
	next := in.next[:0]
	var total uint64
	limit := uint64(in.m.lim.MaxStepBytes)
	for i := range sandbox.MaxFanout {
		size := le.Uint64(c[ctxSizeField+8*i:])
		if size == 0 {
			break
		}
		if size > limit || total+size > limit {
			return false, nil, fmt.Errorf("%w: the step asks to read more than %d bytes (next read %d is %d bytes)", sandbox.ErrStep, limit, i, size)
		}
		total += size
		next = append(next, sandbox.Next{
			File:   le.Uint32(c[ctxNextFile+4*i:]),
			Offset: le.Uint64(c[ctxNextAddr+8*i:]),
			Len:    size,
		})
	}
	return false, next[:len(next):len(next)], nil
}

// Compute runs compute(input[:inLen], output[:outCap]).
func (in *instance) Compute(ctx context.Context, inLen, outCap int) (int, error) {
	p := in.m.compute
	if p == nil {
		return 0, fmt.Errorf("%w: the module has no compute entry", sandbox.ErrNoEntry)
	}
	if inLen < 0 {
		return 0, fmt.Errorf("%w: compute over %d input bytes", sandbox.ErrMemory, inLen)
	}
	var r0 uint64
	var err error
	if w := in.wc; w != nil {
		if inLen > int(w.inCap) {
			return 0, fmt.Errorf("%w: compute over %d input bytes, but Input gave %d", sandbox.ErrMemory, inLen, w.inCap)
		}
		if outCap < 0 || outCap > int(w.outCap) {
			return 0, fmt.Errorf("%w: compute into %d output bytes, but Output gave %d", sandbox.ErrOutput, outCap, w.outCap)
		}
		in.inHigh = max(in.inHigh, inLen)
		in.outHigh = max(in.outHigh, outCap)
		r0, err = in.computeWasm(ctx, w, inLen, outCap)
	} else {
		if inLen > len(in.input) {
			return 0, fmt.Errorf("%w: compute over %d input bytes, but Input gave %d", sandbox.ErrMemory, inLen, len(in.input))
		}
		if outCap < 0 || outCap > len(in.output) {
			return 0, fmt.Errorf("%w: compute into %d output bytes, but Output gave %d", sandbox.ErrOutput, outCap, len(in.output))
		}
		in.inHigh = max(in.inHigh, inLen)
		in.outHigh = max(in.outHigh, outCap)
		in.regions[regionData].buf = nil
		in.regions[regionInput].buf = in.input[:inLen]
		in.regions[regionOutput].buf = in.output[:outCap]
		r0, err = in.run(ctx, p, &in.m.lim, [5]uint64{inputAddr, uint64(inLen), outputAddr, uint64(outCap)})
	}
	if err != nil {
		return 0, err
	}
	ret := int32(r0)
	if ret < 0 {
		return 0, &sandbox.FunctionError{Code: ret}
	}
	if int(ret) > outCap {
		return 0, fmt.Errorf("%w: compute returned length %d, but the output buffer holds %d", sandbox.ErrOutput, ret, outCap)
	}
	return int(ret), nil
}

// Release clears what the request could have seen and returns the
// instance to its module's pool. Calling it twice is harmless.
func (in *instance) Release() {
	if in.released {
		return
	}
	in.released = true
	if w := in.wp; w != nil {
		clear(w.view()[w.t.dynOff:][:in.dataHigh])
	} else {
		clear(in.data[:in.dataHigh])
	}
	if w := in.wc; w != nil {
		b := w.view()
		clear(b[w.t.dynOff:][:in.inHigh])
		clear(b[w.outOff():][:in.outHigh])
	} else {
		clear(in.input[:in.inHigh])
		clear(in.output[:in.outHigh])
	}
	in.dataHigh, in.inHigh, in.outHigh, in.wDataLen = 0, 0, 0, 0
	in.m.release(in)
}
