// Package ebpf is nearstore's eBPF function runtime for programs written
// for XRP and BPF-oF (ELF objects from `clang -target bpf -O2 -c`), run
// with λ-IO's sBPF rules — static checks for everything that can be known
// before a program runs, and run-time checks for the rest. It implements
// sandbox.Runtime (docs/ABI.md, "eBPF").
//
// A verified compute entry without BPF-to-BPF or helper calls is
// translated into a wasm function that makes the run-time checks below as
// code, and compiled to native code by wazero (wasmgen.go, wasmrun.go);
// everything else runs in an interpreter (interp.go) that makes the same
// checks. Pushdown entries are interpreted unless
// Options.TranslatePushdown is set: a step is too short for entering
// wazero to pay. Options.Interpreter interprets everything. The two engines give the
// same results and errors (FuzzTranslation); they differ only in where
// the instruction count is taken (see below).
//
// # Entry points
//
// The ELF object is decoded with github.com/cilium/ebpf (sections, symbols,
// relocations, instruction decoding). Its programs are, as libbpf has
// them, the functions in executable sections other than .text; functions
// in .text are subprograms, reached only by calls. Entry points are chosen
// among the programs as follows (entries in runtime.go):
//
//   - compute: the program named "compute" (nearstore/compute per
//     nearstore.h).
//   - pushdown: the program the caller names (LoadProgram; the module's ID
//     is then sandbox.ProgramID), else the program named "pushdown"
//     (nearstore/pushdown per nearstore.h), else the object's single other
//     program, whatever its section and name — libbpf's rule, so XRP's
//     SEC("prog") and BPF-KV's SEC("oliver_agg") load as written. An
//     object with several other programs and none named is refused, with
//     their names and sections: the caller must say which to run.
//
// A module with neither is refused. Every refusal names the section and
// program it is about and the rule broken, so the text can go back to the
// host as it is. BPF-to-BPF calls are linked into one
// flat instruction slice per entry, with call targets resolved to absolute
// indices. Maps, writable global data (.data, .bss), kfuncs, function
// pointers and unresolved symbols are refused with sandbox.ErrBadModule.
// Read-only data (.rodata*, e.g. constant tables) is accepted and mapped
// read-only.
//
// # Static rules (the verifier, at Load)
//
//   - at most 4096 instructions per entry (raw 8-byte slots, lddw counts 2);
//   - every opcode is one of ALU/ALU64 (including the v4 sdiv, smod, movsx
//     and bswap), JMP/JMP32 (no may_goto), LD imm64 (lddw, plain constants
//     only), LDX (B/H/W/DW, and the v4 sign-extending B/H/W), ST and STX
//     (B/H/W/DW). Legacy LD_ABS/LD_IND and atomics are refused;
//   - reserved fields are zero, registers are R0–R10 and nothing writes R10;
//   - jump targets lie inside the jumping function and never in the middle
//     of an lddw; call targets are instruction starts;
//   - the last instruction of every function is exit or an unconditional
//     jump (nothing falls off the end) and every function can reach an exit;
//   - calls go to another function of the program or to an allowed helper:
//     bpf_ktime_get_ns (5) and bpf_trace_printk (6, logged through slog at
//     debug level). Any other helper is refused, naming its id.
//
// # Run-time checks (both engines)
//
//   - every load and store is checked against the region map below, with
//     its permissions; anything else is sandbox.ErrMemory, naming the
//     instruction and address. Memory is only ever reached through that
//     check;
//   - division and modulo by zero follow the kernel (x/0 = 0, x%0 = x);
//     shift amounts are masked to the operand width;
//   - BPF-to-BPF calls nest at most 8 deep (each call gets a fresh 512-byte
//     frame and R6–R9 are restored on return); deeper is sandbox.ErrMemory;
//   - Limits.MaxInstructions executed instructions and Limits.MaxBackJumps
//     taken backward jumps per call, then sandbox.ErrTimeout. The
//     interpreter counts instructions per straight-line run at each control
//     transfer, the translation per basic block as it is entered, so the
//     count is exact to within the program's length; the clock
//     (Limits.Time and the context's deadline) is looked at about every
//     65536 instructions.
//   - bpf_trace_printk's format is read through the same region check.
//   - pushdown returns: a negative int32 is a *sandbox.FunctionError;
//     otherwise ctx->done, or the next reads up to the first size 0 (at
//     most 16, in total at most Limits.MaxStepBytes, else ErrMemory).
//     compute returns a length that must not exceed out_cap (ErrOutput).
//
// Instances are pooled per module. Acquire zeroes the scratch and the
// stack; Release clears the parts of data, input and output a call could
// have seen, so nothing leaks from one request to the next.
//
// Error messages name the instruction by its raw offset (in 8-byte slots)
// in the linked program; the entry function comes first, so for it the
// offset is the one llvm-objdump shows.
//
// # Region map
//
// Each region lives in its own 4 GiB slot of the 64-bit address space, so
// a pointer's top 32 bits select the region directly (no search) and the
// low 32 bits are the offset; addresses below 4 GiB (NULL and small
// scalars) are never mapped.
//
//	0x1_0000_0000  context, 360 bytes (struct bpf_xrp, 64-bit layout): read;
//	               writable only done, next_addr, size, next_file
//	0x2_0000_0000  data, data_len bytes: read-only
//	0x3_0000_0000  scratch, 4096 bytes: read/write
//	0x4_0000_0000  stack, 9 frames of 512 bytes: read/write; R10 is the top
//	               of the current frame (0x4_0000_1200 in the entry
//	               function). Only the current frame and its callers'
//	               frames are mapped, so a callee can use a caller's stack
//	               buffer passed as a pointer, but nothing beyond the
//	               current frame's 512 bytes below R10 nor above the entry
//	               frame's top is reachable.
//	0x5_0000_0000  compute input, in_len bytes: read-only
//	0x6_0000_0000  compute output, out_cap bytes: read/write
//	0x7_0000_0000  read-only data sections of the ELF object: read-only
package ebpf
