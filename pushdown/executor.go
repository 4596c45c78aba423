package pushdown

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nearstore/nearstore/sandbox"
)

// Errors the executor returns; each wraps into what the caller sees.
var (
	// ErrOutsideFile: a read or write outside the request's file table, or
	// past a file's end.
	ErrOutsideFile = errors.New("pushdown: access outside the request's files")
	// ErrBadExtent: an extent outside the device, or a map shorter than its
	// file.
	ErrBadExtent = errors.New("pushdown: extent outside the device")
	// ErrStepLimit: the function asked for more steps than allowed.
	ErrStepLimit = errors.New("pushdown: step limit reached")
	// ErrStepSize: one step asked for more bytes than allowed.
	ErrStepSize = errors.New("pushdown: step reads too much")
	// ErrNoProgress: a step neither finished nor asked for a read.
	ErrNoProgress = errors.New("pushdown: function neither finished nor asked for more")
	// ErrStale: the target does not hold the extent-map version a file
	// names.
	ErrStale = errors.New("pushdown: stale extent map version")
)

// Device is the block device requests run against: a namespace's backend
// at the target, or the namespace itself on a host.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	BlockSize() int
}

// Executor runs requests under limits. It does not look at extent-map
// versions: whoever holds the maps resolves a request's files against them
// first (ResolveFiles; the target does so per host in target/extentmaps.go),
// and the executor runs on the files it is given.
type Executor struct {
	Limits sandbox.Limits
}

// span is a run of device bytes.
type span struct{ off, n int64 }

// check validates a request's file table against the device: every extent
// inside it, every map covering its file's size.
func (e *Executor) check(dev Device, req *Request) error {
	blocks := uint64(dev.Size()) / uint64(dev.BlockSize())
	for i := range req.Files {
		if err := CheckMap(&req.Files[i], blocks, dev.BlockSize()); err != nil {
			return fmt.Errorf("file %d: %w", i, err)
		}
	}
	return nil
}

// walkRange calls fn with each device span (byte offset, length) of
// [off, off+n) of file fi, in file order, refusing any byte outside the
// file before it calls fn at all.
func walkRange(files []File, fi uint32, off, n uint64, bs int64, fn func(at, k int64) error) error {
	if int(fi) >= len(files) {
		return fmt.Errorf("%w: file %d of %d", ErrOutsideFile, fi, len(files))
	}
	f := &files[fi]
	if off > f.Size || n > f.Size-off {
		return fmt.Errorf("%w: bytes [%d, +%d) of file %d, which has %d", ErrOutsideFile, off, n, fi, f.Size)
	}
	pos := uint64(0)
	for _, x := range f.Extents {
		if n == 0 {
			break
		}
		xlen := uint64(x.Blocks) * uint64(bs)
		if off < pos+xlen {
			in := off - pos
			k := min(xlen-in, n)
			if err := fn(int64(x.LBA)*bs+int64(in), int64(k)); err != nil {
				return err
			}
			off += k
			n -= k
		}
		pos += xlen
	}
	return nil
}

// mapRange turns [off, off+n) of file fi into device spans, refusing any
// byte outside the file.
func mapRange(files []File, fi uint32, off, n uint64, bs int64) ([]span, error) {
	var out []span
	err := walkRange(files, fi, off, n, bs, func(at, k int64) error {
		out = append(out, span{off: at, n: k})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readInto reads file bytes into dst, counting device reads, without
// collecting the spans first.
func readInto(dev Device, files []File, nx sandbox.Next, dst []byte, st *Result) error {
	return walkRange(files, nx.File, nx.Offset, nx.Len, int64(dev.BlockSize()), func(at, k int64) error {
		if _, err := dev.ReadAt(dst[:k], at); err != nil {
			return fmt.Errorf("pushdown: read %d bytes at %d: %w", k, at, err)
		}
		dst = dst[k:]
		st.Reads++
		st.BytesRead += uint64(k)
		return nil
	})
}

// Stepper is a pushdown function ready to run one request's steps: what
// the executor needs of it. A sandbox.Instance is one (Pushdown acquires it
// from its module); so is a function compiled into this process
// (functions.RunPushdown runs one over in-memory files), so that both run
// under the same step rules. A Stepper that is also a sandbox.StepDriver
// drives its steps itself.
type Stepper interface {
	// Scratch returns the request's sandbox.ScratchSize-byte scratch,
	// which persists across steps.
	Scratch() []byte
	// ResultLen is how many bytes of the scratch a finished request
	// returns (sandbox.Instance.ResultLen).
	ResultLen() int
	// Data returns the n-byte buffer the next Step sees as the block(s)
	// just read.
	Data(n int) ([]byte, error)
	// Step runs one step on the first n bytes of Data, read from curFile
	// at curOffset: done, or the reads it asks for next.
	Step(ctx context.Context, curFile uint32, curOffset uint64, n int) (done bool, next []sandbox.Next, err error)
}

// Pushdown runs a pushdown request on an instance of m; see RunSteps.
func (e *Executor) Pushdown(ctx context.Context, dev Device, m sandbox.Module, req *Request) (Result, error) {
	return e.PushdownInto(ctx, dev, m, req, nil)
}

// PushdownInto is Pushdown with the result's output appended to out[:0]:
// into out's memory when it has the capacity (a target's response
// buffer), so that the output is copied once, out of the sandbox.
func (e *Executor) PushdownInto(ctx context.Context, dev Device, m sandbox.Module, req *Request, out []byte) (Result, error) {
	if !m.HasPushdown() {
		return Result{}, fmt.Errorf("%w: %s has no pushdown entry", sandbox.ErrNoEntry, m.ID())
	}
	if err := e.checkPushdown(dev, req); err != nil {
		return Result{}, err
	}
	inst, err := m.Acquire(ctx)
	if err != nil {
		return Result{}, err
	}
	defer inst.Release()
	return e.runSteps(ctx, dev, inst, req, out)
}

// RunSteps runs a pushdown request on s: it copies the request's
// parameters to the start of s's scratch, reads the start range, calls the
// function, reads what each step asks for and calls it again, until the
// function is done. Every read stays inside the request's files, every
// step within the limits' MaxSteps and MaxStepBytes. The result's output
// is the scratch, or as much of it as the function's last step asked to
// return (sandbox.ResultLen). Work done is counted in the result even when
// an error ends the request.
func (e *Executor) RunSteps(ctx context.Context, dev Device, s Stepper, req *Request) (Result, error) {
	if err := e.checkPushdown(dev, req); err != nil {
		return Result{}, err
	}
	return e.runSteps(ctx, dev, s, req, nil)
}

// checkPushdown checks a pushdown request before an instance is taken for
// it.
func (e *Executor) checkPushdown(dev Device, req *Request) error {
	if err := e.check(dev, req); err != nil {
		return err
	}
	if len(req.Params) > sandbox.ScratchSize {
		return fmt.Errorf("%w: %d bytes of scratch, at most %d", ErrMalformed, len(req.Params), sandbox.ScratchSize)
	}
	return nil
}

// stepRun is one request's run through its steps: what the reads
// between steps need, in one object reused from request to request
// (stepRuns), with its read method bound once, so that a request's steps
// allocate nothing of their own.
type stepRun struct {
	ctx  context.Context
	dev  Device
	inst Stepper
	req  *Request
	lim  sandbox.Limits
	res  Result
	// start is the first step's read; readFn is read, bound.
	start  [1]sandbox.Next
	readFn sandbox.StepReader
}

var stepRuns = sync.Pool{New: func() any {
	r := new(stepRun)
	r.readFn = r.read
	return r
}}

// read checks and reads one step's data into the sandbox.
func (r *stepRun) read(next []sandbox.Next) (uint32, uint64, int, error) {
	// The function's runtime stops a call when ctx ends; between calls,
	// the reads stop here.
	if err := r.ctx.Err(); err != nil {
		return 0, 0, 0, fmt.Errorf("pushdown: %w", err)
	}
	if int(r.res.Steps) >= r.lim.MaxSteps {
		return 0, 0, 0, fmt.Errorf("%w: %d steps", ErrStepLimit, r.res.Steps)
	}
	var total uint64
	for _, nx := range next {
		total += nx.Len
	}
	if total > uint64(r.lim.MaxStepBytes) {
		return 0, 0, 0, fmt.Errorf("%w: %d bytes, at most %d", ErrStepSize, total, r.lim.MaxStepBytes)
	}
	buf, err := r.inst.Data(int(total))
	if err != nil {
		return 0, 0, 0, err
	}
	at := buf
	for _, nx := range next {
		if err := readInto(r.dev, r.req.Files, nx, at[:nx.Len], &r.res); err != nil {
			return 0, 0, 0, err
		}
		at = at[nx.Len:]
	}
	// The step runs next: count it even if it fails.
	r.res.Steps++
	return next[0].File, next[0].Offset, int(total), nil
}

// runSteps is RunSteps on a checked request, its output appended to
// out[:0].
func (e *Executor) runSteps(ctx context.Context, dev Device, inst Stepper, req *Request, out []byte) (Result, error) {
	r := stepRuns.Get().(*stepRun)
	defer func() {
		readFn := r.readFn
		*r = stepRun{readFn: readFn}
		stepRuns.Put(r)
	}()
	r.ctx, r.dev, r.inst, r.req, r.lim = ctx, dev, inst, req, e.Limits.WithDefaults()
	copy(inst.Scratch(), req.Params)
	r.start[0] = sandbox.Next{File: req.StartFile, Offset: req.StartOffset, Len: uint64(req.StartLength)}
	var err error
	if d, ok := inst.(sandbox.StepDriver); ok {
		err = d.DriveSteps(ctx, r.start[:], r.readFn)
	} else {
		err = stepLoop(ctx, inst, r.start[:], r.readFn)
	}
	res := r.res
	if err != nil {
		var fe *sandbox.FunctionError
		if errors.As(err, &fe) {
			res.Code = fe.Code
			res.Output = append(out[:0], inst.Scratch()...)
		}
		return res, err
	}
	res.Done = true
	res.Output = append(out[:0], inst.Scratch()[:inst.ResultLen()]...)
	return res, nil
}

// stepLoop runs a request's steps through Step, for instances that do not
// drive them themselves: read, step, until a step is done or fails.
func stepLoop(ctx context.Context, inst Stepper, next []sandbox.Next, read sandbox.StepReader) error {
	for {
		f, off, n, err := read(next)
		if err != nil {
			return err
		}
		done, more, err := inst.Step(ctx, f, off, n)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if len(more) == 0 {
			return ErrNoProgress
		}
		next = more
	}
}

// LambdaRead runs a λ read: the function's input is the request's
// parameters followed by the start range of the start file, read straight
// into the sandbox; the result's output is what compute wrote, at most
// outCap bytes.
func (e *Executor) LambdaRead(ctx context.Context, dev Device, m sandbox.Module, req *Request, outCap int) (Result, error) {
	var res Result
	lim := e.Limits.WithDefaults()
	if !m.HasCompute() {
		return res, fmt.Errorf("%w: %s has no compute entry", sandbox.ErrNoEntry, m.ID())
	}
	if err := e.check(dev, req); err != nil {
		return res, err
	}
	// Refuse a range outside the file before sizing the sandbox's input
	// by it.
	start := sandbox.Next{File: req.StartFile, Offset: req.StartOffset, Len: uint64(req.StartLength)}
	if _, err := mapRange(req.Files, start.File, start.Offset, start.Len, int64(dev.BlockSize())); err != nil {
		return res, err
	}
	outCap = min(outCap, lim.MaxOutput)
	inst, err := m.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer inst.Release()
	in, err := inst.Input(len(req.Params) + int(req.StartLength))
	if err != nil {
		return res, err
	}
	n := copy(in, req.Params)
	if err := readInto(dev, req.Files, start, in[n:], &res); err != nil {
		return res, err
	}
	if _, err := inst.Output(outCap); err != nil {
		return res, err
	}
	return e.compute(ctx, inst, len(in), outCap, res)
}

func (e *Executor) compute(ctx context.Context, inst sandbox.Instance, inLen, outCap int, res Result) (Result, error) {
	k, err := inst.Compute(ctx, inLen, outCap)
	res.Steps = 1
	if err != nil {
		var fe *sandbox.FunctionError
		if errors.As(err, &fe) {
			res.Code = fe.Code
		}
		return res, err
	}
	out, err := inst.Output(outCap)
	if err != nil {
		return res, err
	}
	res.Done = true
	res.Output = append([]byte(nil), out[:k]...)
	return res, nil
}

// LambdaWrite runs a λ write: compute runs on the parameters followed by
// the request's data, and its output is written to the start range of the
// start file — never beyond it. The range must be block aligned; an output
// shorter than the range is padded with zeroes to a whole block. The
// result's output is empty; Reads counts nothing and BytesRead stays 0, and
// the bytes written are returned.
func (e *Executor) LambdaWrite(ctx context.Context, dev Device, m sandbox.Module, req *Request) (Result, int64, error) {
	var res Result
	if !m.HasCompute() {
		return res, 0, fmt.Errorf("%w: %s has no compute entry", sandbox.ErrNoEntry, m.ID())
	}
	if err := e.check(dev, req); err != nil {
		return res, 0, err
	}
	bs := uint64(dev.BlockSize())
	if req.StartOffset%bs != 0 || uint64(req.StartLength)%bs != 0 {
		return res, 0, fmt.Errorf("%w: λ write range [%d, +%d) is not block aligned", ErrMalformed, req.StartOffset, req.StartLength)
	}
	// Check the whole range before running anything.
	if _, err := mapRange(req.Files, req.StartFile, req.StartOffset, uint64(req.StartLength), int64(bs)); err != nil {
		return res, 0, err
	}
	inst, err := m.Acquire(ctx)
	if err != nil {
		return res, 0, err
	}
	defer inst.Release()
	in, err := inst.Input(len(req.Params) + len(req.Data))
	if err != nil {
		return res, 0, err
	}
	copy(in[copy(in, req.Params):], req.Data)
	outCap := int(req.StartLength)
	if _, err := inst.Output(outCap); err != nil {
		return res, 0, err
	}
	k, err := inst.Compute(ctx, len(in), outCap)
	res.Steps = 1
	if err != nil {
		var fe *sandbox.FunctionError
		if errors.As(err, &fe) {
			res.Code = fe.Code
		}
		return res, 0, err
	}
	out, err := inst.Output(outCap)
	if err != nil {
		return res, 0, err
	}
	n := (uint64(k) + bs - 1) / bs * bs
	clear(out[k:n])
	spans, err := mapRange(req.Files, req.StartFile, req.StartOffset, n, int64(bs))
	if err != nil {
		return res, 0, err
	}
	src := out[:n]
	for _, s := range spans {
		if _, err := dev.WriteAt(src[:s.n], s.off); err != nil {
			return res, 0, fmt.Errorf("pushdown: write %d bytes at %d: %w", s.n, s.off, err)
		}
		src = src[s.n:]
	}
	res.Done = true
	return res, int64(k), nil
}

// Raw returns a file table entry covering a whole device: one file, one
// extent (more past 2^32 blocks), version 0 — how pushdown works on a raw
// namespace.
func Raw(size int64, blockSize int) File {
	f := File{Size: uint64(size)}
	const maxBlocks = 1<<32 - 1
	for lba, left := uint64(0), uint64(size)/uint64(blockSize); left > 0; {
		k := min(left, maxBlocks)
		f.Extents = append(f.Extents, Extent{LBA: lba, Blocks: uint32(k)})
		lba += k
		left -= k
	}
	return f
}
