// Package sandbox is the one interface nearstore's function runtimes share.
// A function is a small module a host ships to the storage node (or runs
// itself); it never does I/O and never blocks. Two entry shapes exist
// (docs/ABI.md has the byte layouts):
//
//   - a pushdown step (XRP / BPF-oF): called with the block(s) just read and
//     a scratch buffer, it answers done, resubmit (the next file, offset and
//     length, written into its context), or an error. The caller owns the
//     I/O and loops.
//   - compute (λ-IO): compute(input, output) returns the output length.
//
// Runtimes: sandbox/wasm (wazero, compiled to native code) and sandbox/ebpf
// (an interpreter with λ-IO's sBPF rules). Both enforce Limits on every call
// and report violations as errors wrapping the sentinels below, so callers
// can tell a hostile function from a broken runtime.
package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Kind is a module's format.
type Kind uint8

// Module kinds; the values travel on the wire (docs/PROTOCOL.md).
const (
	KindWasm Kind = 1
	KindEBPF Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindWasm:
		return "wasm"
	case KindEBPF:
		return "ebpf"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// DetectKind tells a module's kind from its magic bytes.
func DetectKind(module []byte) (Kind, error) {
	switch {
	case len(module) >= 4 && string(module[:4]) == "\x00asm":
		return KindWasm, nil
	case len(module) >= 4 && string(module[:4]) == "\x7fELF":
		return KindEBPF, nil
	}
	return 0, fmt.Errorf("%w: neither a wasm module nor an ELF object", ErrBadModule)
}

// ID identifies a module: the SHA-256 of its bytes.
type ID [32]byte

// IDOf returns the ID of a module.
func IDOf(module []byte) ID { return sha256.Sum256(module) }

func (id ID) String() string { return hex.EncodeToString(id[:]) }

// MaxProgramName is the longest program name a module's loader may be
// given (ProgramLoader), in bytes.
const MaxProgramName = 255

// programIDTag starts the bytes ProgramID hashes. No loadable module
// starts with it (DetectKind wants wasm's or ELF's magic bytes first), so
// a ProgramID never equals the IDOf of a module.
const programIDTag = "nearstore program\x00"

// ProgramID identifies the function made of the program named program in
// module: the SHA-256 of programIDTag, the name's length (4 bytes,
// little-endian), the name, then the module. The name is part of the identity because one
// object holding several programs gives a different function for each;
// an empty name is the module's default choice, IDOf(module).
func ProgramID(module []byte, program string) ID {
	if program == "" {
		return IDOf(module)
	}
	h := sha256.New()
	h.Write([]byte(programIDTag))
	h.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(program))))
	h.Write([]byte(program))
	h.Write(module)
	var id ID
	h.Sum(id[:0])
	return id
}

// ParseID parses the hex form String returns.
func ParseID(s string) (ID, error) {
	var id ID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("sandbox: function ID %q is not 64 hex digits", s)
	}
	copy(id[:], b)
	return id, nil
}

// Limits bound every call into a function. Zero fields take the defaults.
type Limits struct {
	// MemoryBytes caps a wasm instance's linear memory (default 16 MiB).
	MemoryBytes int
	// Time caps one call's wall time (default 100 ms); a runaway loop is
	// interrupted.
	Time time.Duration
	// StackBytes caps a wasm call's call stack (default 1 MiB), as the
	// runtime bounds it: every frame counted at an upper bound of its
	// size (sandbox/wasm, stack.go), so it bounds the call depth too. A
	// call that would go deeper fails with ErrMemory. The eBPF runtime's
	// stack is fixed (512 bytes a frame, 8 nested calls).
	StackBytes int
	// MaxOutput caps a compute call's output (default 16 MiB).
	MaxOutput int
	// MaxSteps caps the steps (one read plus one call each) of a pushdown
	// request, so the resubmissions are MaxSteps-1 (default 64).
	MaxSteps int
	// MaxStepBytes caps the bytes one step may ask to read (default 64 KiB).
	MaxStepBytes int
	// MaxInstructions caps eBPF instructions executed per call (default
	// 1<<24); MaxBackJumps caps taken backward jumps (default 1<<20).
	MaxInstructions uint64
	MaxBackJumps    uint64
}

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = 16 << 20
	}
	if l.Time <= 0 {
		l.Time = 100 * time.Millisecond
	}
	if l.StackBytes <= 0 {
		l.StackBytes = 1 << 20
	}
	if l.MaxOutput <= 0 {
		l.MaxOutput = 16 << 20
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = 64
	}
	if l.MaxStepBytes <= 0 {
		l.MaxStepBytes = 64 << 10
	}
	if l.MaxInstructions == 0 {
		l.MaxInstructions = 1 << 24
	}
	if l.MaxBackJumps == 0 {
		l.MaxBackJumps = 1 << 20
	}
	return l
}

// Errors a runtime wraps so callers can classify failures with errors.Is.
var (
	// ErrBadModule: the module is malformed, fails verification, or lacks
	// the entry point asked for.
	ErrBadModule = errors.New("sandbox: bad module")
	// ErrTimeout: the call ran past Limits.Time (or the instruction or
	// backward-jump budget of an eBPF program).
	ErrTimeout = errors.New("sandbox: function ran too long")
	// ErrMemory: an out-of-bounds access, or more memory than allowed.
	ErrMemory = errors.New("sandbox: memory access out of bounds or over limit")
	// ErrOutput: output larger than its buffer or Limits.MaxOutput.
	ErrOutput = errors.New("sandbox: output too large")
	// ErrFunction: the function itself returned an error code (see
	// FunctionError for the code).
	ErrFunction = errors.New("sandbox: function returned an error")
	// ErrNoEntry: the module has no entry point of the shape called.
	ErrNoEntry = errors.New("sandbox: module has no such entry point")
	// ErrStep: a pushdown step broke the step protocol: it asked to read
	// more than Limits.MaxStepBytes, or returned with neither done set nor
	// a read asked for. Both runtimes report it the same way, so the
	// target answers Step Limit whichever ran the function.
	ErrStep = errors.New("sandbox: bad pushdown step")
)

// FunctionError carries the negative code a function returned.
type FunctionError struct{ Code int32 }

func (e *FunctionError) Error() string {
	return fmt.Sprintf("sandbox: function returned error %d", e.Code)
}

// Unwrap makes errors.Is(err, ErrFunction) hold.
func (e *FunctionError) Unwrap() error { return ErrFunction }

// MaxFanout is how many next reads one pushdown step may ask for.
const MaxFanout = 16

// ScratchSize is the size of a pushdown request's scratch buffer.
const ScratchSize = 4096

// ResultLen checks the size[0] a pushdown step left in its context with
// done set and returns the finished request's result length: size0 bytes
// of the scratch (1 to ScratchSize), or all of it when size0 is 0
// (docs/ABI.md, "Pushdown semantics"). A function that asks for a short
// result keeps the bytes it does not need off the wire.
func ResultLen(size0 uint64) (int, error) {
	if size0 > ScratchSize {
		return 0, fmt.Errorf("%w: the step finished with a %d-byte result, the scratch has %d", ErrStep, size0, ScratchSize)
	}
	if size0 == 0 {
		return ScratchSize, nil
	}
	return int(size0), nil
}

// Next is one read a step asks for: Len bytes at Offset of file File (an
// index into the request's file table).
type Next struct {
	File   uint32
	Offset uint64
	Len    uint64
}

// Module is a loaded, verified, compiled function. It is safe for
// concurrent use: each request acquires its own Instance, and runtimes pool
// instances so that acquiring is cheap.
type Module interface {
	ID() ID
	Kind() Kind
	// HasPushdown and HasCompute report which entry points exist.
	HasPushdown() bool
	HasCompute() bool
	// Acquire returns an instance for one request. Its scratch is zeroed,
	// and its memory holds nothing another tenant's request left in it
	// (WithTenant): an instance that ran for one tenant is never handed to
	// another.
	Acquire(ctx context.Context) (Instance, error)
	// Close releases the module and its pooled instances.
	Close(ctx context.Context) error
}

// Instance runs one request's calls, one at a time. Its buffers live inside
// the sandbox's own memory (a wasm instance's linear memory, an eBPF
// program's regions), so the caller reads blocks straight into them and no
// copy is made. A buffer stays valid until the next call that returns one,
// or Release.
type Instance interface {
	// Data returns the n-byte buffer the next Step sees as the block(s)
	// just read; n is at most Limits.MaxStepBytes.
	Data(n int) ([]byte, error)
	// ResultLen is the length of a finished pushdown request's result,
	// the first ResultLen bytes of Scratch: ScratchSize unless the step
	// that set done also set a shorter length (see the package function
	// ResultLen). Valid after a Step or DriveSteps that finished.
	ResultLen() int
	// Scratch returns the request's ScratchSize-byte scratch, which persists
	// across Steps.
	Scratch() []byte
	// Step calls the pushdown entry with the first n bytes of Data, which
	// came from file curFile at curOffset. It returns whether the function
	// is done and, if not, the reads it asks for next (at most MaxFanout,
	// each within Limits.MaxStepBytes in total). An error that is not a
	// *FunctionError means the function broke a rule.
	Step(ctx context.Context, curFile uint32, curOffset uint64, n int) (done bool, next []Next, err error)
	// Input and Output return the compute entry's buffers.
	Input(n int) ([]byte, error)
	Output(n int) ([]byte, error)
	// Compute calls compute(input[:inLen], output[:outCap]) and returns the
	// output length, at most outCap.
	Compute(ctx context.Context, inLen, outCap int) (int, error)
	// Release returns the instance to its module's pool.
	Release()
}

// StepReader fills a pushdown step's data: given the reads the last step
// asked for (or the request's start), it reads them, in order, into the
// instance's Data buffer and returns the step's arguments: the first
// read's file and offset, and the bytes read in all.
type StepReader func(next []Next) (curFile uint32, curOffset uint64, n int, err error)

// StepDriver is an Instance that can run a whole pushdown request's steps
// itself, calling back for the reads between steps. A runtime whose
// per-call cost is high implements it to enter its sandbox once per
// request rather than once per step.
type StepDriver interface {
	// DriveSteps calls read(first), then runs steps, calling read with
	// the reads each step asks for, until a step sets done (it returns
	// nil) or fails. It obeys the same rules and returns the same errors
	// as a loop of Step calls would; an error from read is returned as it
	// is. The next slices passed to read are valid only during the call.
	DriveSteps(ctx context.Context, first []Next, read StepReader) error
}

// tenantKey is the context key of WithTenant.
type tenantKey struct{}

// WithTenant returns ctx marking the requests it carries as tenant's (a
// target uses the host NQN). Module.Acquire never gives a tenant an
// instance whose memory another tenant's requests have used: a function's
// linear memory, stack, heap, scratch, input and output of one host are
// never seen by another's request.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantOf returns the tenant WithTenant set on ctx, "" if none.
func TenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// Runtime loads modules of one kind.
type Runtime interface {
	Kind() Kind
	// Load verifies and compiles a module; every call on it obeys lim.
	Load(ctx context.Context, module []byte, lim Limits) (Module, error)
	Close(ctx context.Context) error
}

// ProgramLoader is a Runtime whose modules may hold several programs (an
// eBPF object, as libbpf reads one), so that the caller may have to say
// which is the pushdown entry. The module's ID is ProgramID(module,
// program). program "" is Load; a name longer than MaxProgramName, or one
// the module does not define, is ErrBadModule.
type ProgramLoader interface {
	LoadProgram(ctx context.Context, module []byte, program string, lim Limits) (Module, error)
}

// Prepare acquires an instance of m with in copied to its input and room
// for outCap bytes of output, ready for Instance.Compute(ctx, len(in),
// outCap); the caller releases it. Compute is Prepare and one call;
// benchmarks prepare once and call in their loop.
func Prepare(ctx context.Context, m Module, in []byte, outCap int) (Instance, error) {
	inst, err := m.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	ib, err := inst.Input(len(in))
	if err == nil {
		copy(ib, in)
		_, err = inst.Output(outCap)
	}
	if err != nil {
		inst.Release()
		return nil, err
	}
	return inst, nil
}

// Compute runs m's compute entry on in and returns its output, copying
// through a fresh instance: the convenient form for hosts and tests.
func Compute(ctx context.Context, m Module, in []byte, outCap int) ([]byte, error) {
	inst, err := Prepare(ctx, m, in, outCap)
	if err != nil {
		return nil, err
	}
	defer inst.Release()
	n, err := inst.Compute(ctx, len(in), outCap)
	if err != nil {
		return nil, err
	}
	ob, err := inst.Output(outCap)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), ob[:n]...), nil
}

// Yield is how a long call lets its caller's scheduler run others: a
// runtime that can pause a call calls it at bounded intervals (the eBPF
// interpreter every 64 Ki instructions), and it returns how long the call
// was paused, which does not count against Limits.Time, or an error that
// ends the call (the caller's context ended while it waited). A yield
// that finds no reason to pause returns at once.
type Yield func(ctx context.Context) (paused time.Duration, err error)

// yieldKey is the context key of WithYield.
type yieldKey struct{}

// WithYield returns ctx carrying y for the calls it is passed to.
func WithYield(ctx context.Context, y Yield) context.Context {
	return context.WithValue(ctx, yieldKey{}, y)
}

// YieldContext is ctx carrying a Yield, as WithYield's is, for a caller
// that passes one Yield to many calls: it keeps one and points it at each
// call's context instead of allocating a context per call. Set Context
// (the parent) and Yield before a call; the call must not keep it past
// its return, and it serves one call at a time.
type YieldContext struct {
	context.Context
	Yield Yield
}

// Value returns c's Yield for WithYield's key, the parent's value for
// any other.
func (c *YieldContext) Value(key any) any {
	if _, ok := key.(yieldKey); ok {
		return c.Yield
	}
	return c.Context.Value(key)
}

// YieldOf returns the Yield WithYield set on ctx, nil if none.
func YieldOf(ctx context.Context) Yield {
	y, _ := ctx.Value(yieldKey{}).(Yield)
	return y
}

// Yielder is an Instance some of whose calls run as Go code that calls
// the context's Yield at bounded intervals (the eBPF interpreter): Go
// preempts such code, and it offers its CPU back itself, so a scheduler
// need not hold a CPU slot before such a call starts, only once it
// yields (a short call then costs the scheduler nothing). Its Data,
// Input and Output run no function code.
type Yielder interface {
	// Yields reports it for calls of the compute entry (compute set) or
	// of the pushdown entry.
	Yields(compute bool) bool
}
