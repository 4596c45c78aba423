// Package wasm is nearstore's fast function runtime: WebAssembly modules
// run by wazero, compiled to native code (the interpreter is used only
// where wazero has no compiler). It implements sandbox.Runtime for the ABI
// in docs/ABI.md.
//
// # Modules
//
// Load accepts a module that exports its memory as "memory" and at least
// one of pushdown (i32) -> i32 and compute (i32, i32, i32, i32) -> i32,
// with exactly those types. It may import only functions of
// wasi_snapshot_preview1, which the Runtime provides once, for Go-built
// functions, with no files, arguments, environment or network, output
// discarded and wazero's deterministic clocks and random source. A C module
// exports __heap_base (an i32 global); a Go module (GOOS=wasip1
// GOARCH=wasm, -buildmode=c-shared, functions/go/nsfunc) exports ns_alloc
// (i32) -> i32 and optionally ns_free (i32) -> (), and its _initialize is
// run when each instance is made. Anything else is refused with
// sandbox.ErrBadModule. Load instantiates the module once, so a start
// function that traps or never returns is refused too.
//
// # Memory layout
//
// Each instance has its own linear memory, and every buffer the caller
// sees (Data, Scratch, Input, Output) is a slice aliasing it: the caller
// reads volume blocks straight into the function's memory and nothing is
// copied. A slice stays valid until linear memory grows (which moves it),
// so take a fresh one after each call, as the sandbox.Instance contract
// says. For a C module the buffers are laid out from __heap_base upwards,
// 16-byte aligned:
//
//	__heap_base → struct bpf_xrp (352 bytes, wasm32 layout of docs/ABI.md)
//	              scratch (4096 bytes)
//	              data (MaxStepBytes reserved; memory grows as Data asks)
//	              compute input (as large as Input was asked for)
//	              compute output
//
// (the pushdown part only if the module exports pushdown). A Go module is
// asked once per instance, through ns_alloc, for the context, scratch and
// a MaxStepBytes data buffer; input and output buffers are asked for as
// needed, rounded up to a power of two, and a replaced one is given back
// to ns_free.
//
// # Pooling
//
// Instantiating costs tens of microseconds for a C module and milliseconds
// for a Go one, so each Module keeps a free list of idle instances
// (Options.PoolSize), and spare ones past it until the GC drops them (a
// target may run hundreds of pushdowns at once, one goroutine each).
// Acquire takes one (or makes one) and zeroes its
// scratch; Release puts it back. An instance whose call failed in any way
// other than a negative return code (a trap, a timeout, a failed
// ns_alloc) is closed instead: wazero closes an instance whose deadline
// passed, and a trap may leave the function's memory inconsistent. The
// function's own globals and memory otherwise persist from one request to
// the next, as in any pooled runtime.
//
// # Limits
//
//   - Memory: Load rewrites the module's memory section so that its
//     maximum is at most Limits.MemoryBytes; memory.grow past it fails in
//     the guest (returns -1), and buffers that would not fit give
//     sandbox.ErrMemory. A module whose initial memory is over the limit is
//     refused. One wazero runtime thus serves modules with different limits.
//
//   - Time: every call runs under a context deadline of Limits.Time, and
//     the runtime is configured to close on context done, so a runaway loop
//     is interrupted (sandbox.ErrTimeout) and its instance discarded.
//     DriveSteps (sandbox.StepDriver), which the executor uses, runs a
//     whole pushdown request in one call into wazero, so that a step costs
//     a call from compiled code to the host rather than a call into wazero
//     with its context and watcher goroutine (steprun.go); each step's
//     function code still gets Limits.Time, and the reads between steps do
//     not count against it.
//
//   - Output: a compute result longer than out_cap or Limits.MaxOutput is
//     sandbox.ErrOutput; Output refuses buffers over MaxOutput.
//
//   - Step size: the reads one step asks for may total at most
//     Limits.MaxStepBytes (sandbox.ErrStep). Steps per request are counted by the
//     caller (the executor).
//
//   - Module shape: before wazero decodes a module, Load checks that every
//     declared count fits in its section, bounds locals (50000 per
//     function), tables (2^17 entries) and module size (64 MiB), and drops
//     custom sections, since wazero sizes allocations from declared counts.
//
// Known limits: the call stack is bounded by wazero (about 400 MB), not by
// Limits.MemoryBytes, so a runaway recursion costs the host that much
// transiently before it traps. Interruptibility costs an interrupt check
// (an indirect call) on every loop back-edge; tight loops in functions
// should be unrolled (see testdata/stats64.c).
//
// Traps map to sandbox.ErrMemory (out-of-bounds access, call stack
// overflow) or ErrTrap (anything else); a negative return is a
// *sandbox.FunctionError.
package wasm
