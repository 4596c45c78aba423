package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// FunctionInfo describes a function loaded on a target.
type FunctionInfo struct {
	ID          sandbox.ID
	Kind        sandbox.Kind
	HasPushdown bool
	HasCompute  bool
	Size        int
	Calls       uint64
}

// LoadFunction ships a module (wasm or an eBPF ELF object) to the target,
// which verifies and compiles it. It returns the function's ID, the SHA-256
// of the module; loading the same module again is harmless.
func (c *Controller) LoadFunction(ctx context.Context, module []byte) (sandbox.ID, error) {
	return c.LoadProgram(ctx, module, "")
}

// LoadProgram loads the program named program of module (an eBPF object
// holding several; "" is LoadFunction) and returns its function ID,
// sandbox.ProgramID(module, program). A target whose runtime for the
// module takes no program names refuses it (Function Rejected).
func (c *Controller) LoadProgram(ctx context.Context, module []byte, program string) (sandbox.ID, error) {
	if len(program) > sandbox.MaxProgramName {
		return sandbox.ID{}, fmt.Errorf("host: load function: program name of %d bytes (at most %d)", len(program), sandbox.MaxProgramName)
	}
	kind, err := sandbox.DetectKind(module)
	if err != nil {
		return sandbox.ID{}, err
	}
	// CDW12 bits 7:0: the name's length; the data is the module then
	// the name.
	cmd := nvme.Command{Opcode: nvme.AdminFunctionLoad, CDW10: uint32(kind), CDW11: uint32(len(module)), CDW12: uint32(len(program))}
	data := module
	if program != "" {
		data = append(slices.Clip(module), program...)
	}
	id := sandbox.ProgramID(module, program)
	if _, err := c.Admin(ctx, &cmd, data, nil); err != nil {
		if reason := c.refusalReason(ctx, err, id); reason != "" {
			return sandbox.ID{}, &RefusedError{Err: fmt.Errorf("host: load function: %w", err), Reason: reason}
		}
		return sandbox.ID{}, fmt.Errorf("host: load function: %w", err)
	}
	return id, nil
}

// RefusedError is a Function Load the target refused, with the reason
// its Function Load Refusals log gives. Err is the command's error, the
// *nvme.StatusError within it.
type RefusedError struct {
	Err    error
	Reason string
}

func (e *RefusedError) Error() string { return e.Err.Error() + ": " + e.Reason }
func (e *RefusedError) Unwrap() error { return e.Err }

// refusalReason returns why the target refused the Function Load of id
// with err: the reason in the newest entry for id of its Function Load
// Refusals log (nvme.LogFunctionRefusals). It returns "" for any other
// error, and when the target has no such log (an older one) or no entry
// for id, so that the caller keeps the bare error.
func (c *Controller) refusalReason(ctx context.Context, err error, id sandbox.ID) string {
	var se *nvme.StatusError
	if !errors.As(err, &se) {
		return ""
	}
	if code := se.Status &^ nvme.DNR; code != nvme.StatusFunctionRejected && code != nvme.StatusMetadataLimit {
		return ""
	}
	page := make([]byte, nvme.RefusalLogSize)
	if c.GetLogPage(ctx, nvme.LogFunctionRefusals, 0, page, 0) != nil {
		return ""
	}
	rs, derr := nvme.UnmarshalFunctionRefusals(page)
	if derr != nil {
		return ""
	}
	for _, r := range rs { // newest first
		if r.ID == id {
			return r.Reason
		}
	}
	return ""
}

// UnloadFunction removes a function from the target.
func (c *Controller) UnloadFunction(ctx context.Context, id sandbox.ID) error {
	cmd := nvme.Command{Opcode: nvme.AdminFunctionUnload}
	if _, err := c.Admin(ctx, &cmd, id[:], nil); err != nil {
		return fmt.Errorf("host: unload function %s: %w", id, err)
	}
	return nil
}

// ListFunctions lists the functions loaded on the target.
func (c *Controller) ListFunctions(ctx context.Context) ([]FunctionInfo, error) {
	const maxEntries = 256
	buf := make([]byte, 16+48*maxEntries)
	cmd := nvme.Command{Opcode: nvme.AdminFunctionList, CDW10: maxEntries}
	if _, err := c.Admin(ctx, &cmd, nil, buf); err != nil {
		return nil, fmt.Errorf("host: list functions: %w", err)
	}
	n := min(int(binary.LittleEndian.Uint32(buf)), maxEntries)
	out := make([]FunctionInfo, n)
	for i := range out {
		e := buf[16+48*i:]
		copy(out[i].ID[:], e[:32])
		out[i].Kind = sandbox.Kind(e[32])
		out[i].HasPushdown = e[33]&1 != 0
		out[i].HasCompute = e[33]&2 != 0
		out[i].Size = int(binary.LittleEndian.Uint32(e[36:]))
		out[i].Calls = binary.LittleEndian.Uint64(e[40:])
	}
	return out, nil
}

// Start names where a request begins: Length bytes at Offset of file File
// (an index into the request's file table).
type Start struct {
	File   uint32
	Offset uint64
	Length uint32
}

// FunctionError is returned when a function ran and failed on its own:
// it returned a negative code, or (Code 0) it trapped. The result's work
// counters are filled in.
type FunctionError struct {
	Code   int32
	Result pushdown.Result
	// status is the command's Function Error status.
	status error
}

func (e *FunctionError) Error() string {
	if e.Code == 0 {
		return "host: the function failed without an error code (it trapped)"
	}
	return fmt.Sprintf("host: function returned %d", e.Code)
}

// Unwrap lets errors.Is(err, sandbox.ErrFunction) hold, and errors.As find
// the command's *nvme.StatusError (Function Error).
func (e *FunctionError) Unwrap() []error {
	if e.status == nil {
		return []error{sandbox.ErrFunction}
	}
	return []error{sandbox.ErrFunction, e.status}
}

// RawFile returns a file-table entry covering the whole namespace, for
// functions run on raw namespaces.
func (ns *Namespace) RawFile() pushdown.File { return pushdown.Raw(ns.Size(), ns.BlockSize()) }

// Pushdown runs a pushdown request at the target in one command: the
// target reads start, calls the function, follows the reads it asks for
// and returns the final scratch. scratch (at most 4096 bytes) initialises
// the function's scratch.
//
// A file with ID 0 is raw namespace space, read through the extents given.
// A file with an inode ID runs on the map this host put for exactly that
// version (PutExtentMaps): send no extents to use the held map, or send
// the held map itself; anything else fails with Outside File. If the
// target does not hold the version, the error matches ErrStaleExtentMap.
// The same holds for LambdaRead and LambdaWrite.
func (ns *Namespace) Pushdown(ctx context.Context, fn sandbox.ID, files []pushdown.File, start Start, scratch []byte) (pushdown.Result, error) {
	return ns.PushdownInto(ctx, fn, files, start, scratch, nil)
}

// PushdownInto is Pushdown with the result's Output copied into buf's
// array, as append(buf[:0], ...) would: it aliases buf when it fits (a
// whole scratch, sandbox.ScratchSize bytes, always does), so a caller
// that reuses buf allocates nothing for results. With buf nil it is
// Pushdown, whose Output is the caller's own.
func (ns *Namespace) PushdownInto(ctx context.Context, fn sandbox.ID, files []pushdown.File, start Start, scratch, buf []byte) (pushdown.Result, error) {
	req := pushdown.Request{Function: fn, Files: files, StartFile: start.File, StartOffset: start.Offset, StartLength: start.Length, Params: scratch}
	return ns.functionCall(ctx, nvme.IOPushdownRead, &req, pushdownInCap, buf)
}

// LambdaRead runs fn's compute on params followed by the start range's
// bytes at the target and returns its output (at most outCap bytes).
func (ns *Namespace) LambdaRead(ctx context.Context, fn sandbox.ID, files []pushdown.File, start Start, params []byte, outCap int) (pushdown.Result, error) {
	req := pushdown.Request{Function: fn, Files: files, StartFile: start.File, StartOffset: start.Offset, StartLength: start.Length, Params: params}
	return ns.functionCall(ctx, nvme.IOLambdaRead, &req, pushdown.ResultSize+outCap, nil)
}

// LambdaWrite runs fn's compute on params followed by data at the target
// and writes its output into the start range (block aligned), returning the
// output's length.
func (ns *Namespace) LambdaWrite(ctx context.Context, fn sandbox.ID, files []pushdown.File, start Start, params, data []byte) (int, error) {
	req := pushdown.Request{Function: fn, Files: files, StartFile: start.File, StartOffset: start.Offset, StartLength: start.Length, Params: params, Data: data}
	cmd := nvme.Command{Opcode: nvme.IOLambdaWrite}
	cpl, err := ns.IO(ctx, &cmd, req.Marshal(), nil)
	if err != nil {
		_, err = failedResult(cpl, err, "λ write")
		return 0, err
	}
	return int(cpl.DW0), nil
}

// pushdownInCap is the buffer a Pushdown Read's result arrives in: the
// result header and a whole scratch.
const pushdownInCap = pushdown.ResultSize + sandbox.ScratchSize

// fnCall is what a function command uses besides its request: the Call,
// the request's encoding, and for a Pushdown Read the buffer its result
// arrives in. The controller recycles those of commands that completed
// while their context had not ended (fnCall.reusable), which no goroutine
// of the queue touches once they are delivered; the others are left to
// the collector, as a command that failed may have been abandoned with
// its data still to arrive, and a context's watch that fired may still
// be about to abandon it.
//
// A recycled result buffer is not cleared: a result is read only from
// the bytes the controller sent for it (Call.inEnd), and whatever else the
// buffer holds are results the same controller sent before.
type fnCall struct {
	call Call
	out  []byte
	in   [pushdownInCap]byte
}

// getFnCall returns a recycled fnCall or a new one.
func (c *Controller) getFnCall() *fnCall {
	if f, _ := c.fnCalls.Get().(*fnCall); f != nil {
		return f
	}
	return &fnCall{call: Call{Done: make(chan *Call, 1)}}
}

// reset readies f's Call for a new command, as Namespace.Go makes one.
func (f *fnCall) reset(ns *Namespace, cmd *nvme.Command, out, in []byte) *Call {
	c := &f.call
	c.Cmd, c.Out, c.In = *cmd, out, in
	c.Cmd.NSID = ns.st.nsid
	c.Completion, c.Err, c.OnDone = nvme.Completion{}, nil, nil
	c.q, c.ns = nil, ns.st
	c.state.Store(0)
	c.stopCtx, c.watch = nil, nil
	c.r2tEnd, c.xferErr, c.inEnd = 0, false, 0
	c.r2tBusy.Store(false)
	return c
}

// reusable reports whether f's command is over for every goroutine of the
// queue: it completed, no data sender holds it, and its context had not
// ended when it was delivered. The last is what keeps a watch off it: a
// watch abandons calls only after the context ends (context.AfterFunc),
// and a call delivered before that left the watch first (ctxWatch.drop,
// or an AfterFunc stopped before it ran), so no abandonment of it can
// still come and land on the fnCall's next command.
func (f *fnCall) reusable(ctx context.Context) bool {
	return f.call.Err == nil && ctx.Err() == nil && !f.call.outR2T
}

func (ns *Namespace) functionCall(ctx context.Context, opc uint8, req *pushdown.Request, inCap int, dst []byte) (pushdown.Result, error) {
	f := ns.c.getFnCall()
	var in []byte
	if inCap == pushdownInCap {
		in = f.in[:]
	} else {
		in = make([]byte, inCap)
	}
	f.out = req.AppendMarshal(f.out[:0])
	cmd := nvme.Command{Opcode: opc}
	call := ns.c.goCall(ctx, f.reset(ns, &cmd, f.out, in), ns.pin)
	<-call.Done
	cpl, err := call.Completion, call.Err
	if err != nil {
		what := "pushdown"
		if opc == nvme.IOLambdaRead {
			what = "λ read"
		}
		return failedResult(cpl, err, what)
	}
	var res pushdown.Result
	if err := res.Unmarshal(in[:call.inEnd]); err != nil {
		return res, fmt.Errorf("host: function result: %w", err)
	}
	switch {
	case dst != nil:
		res.Output = append(dst[:0], res.Output...)
	case inCap == pushdownInCap:
		res.Output = bytes.Clone(res.Output)
	}
	if f.reusable(ctx) {
		ns.c.fnCalls.Put(f)
	}
	return res, nil
}

// failedResult turns a failed function command into its error and the
// work counters its completion carries: DW0 the reads the target issued,
// DW1 the bytes they read or, for Function Error, the function's code,
// returned as a *FunctionError.
func failedResult(cpl nvme.Completion, err error, what string) (pushdown.Result, error) {
	res := pushdown.Result{Reads: cpl.DW0, BytesRead: uint64(cpl.DW1)}
	var se *nvme.StatusError
	if errors.As(err, &se) && se.Status.Code() == nvme.StatusFunctionError {
		res.Code, res.BytesRead = int32(cpl.DW1), 0
		return res, &FunctionError{Code: res.Code, Result: res, status: se}
	}
	return res, fmt.Errorf("host: %s: %w", what, err)
}
