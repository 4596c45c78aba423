package ebpf

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/tetratelabs/wazero"

	"github.com/nearstore/nearstore/sandbox"
)

// Options configure a Runtime.
type Options struct {
	// Logger receives bpf_trace_printk output at debug level
	// (default slog.Default()).
	Logger *slog.Logger
	// Interpreter runs every program in the interpreter. By default a
	// compute entry without BPF-to-BPF or helper calls is translated to
	// wasm with the same checks and compiled by wazero (wasmgen.go).
	Interpreter bool
	// TranslatePushdown translates pushdown entries too. It is off by
	// default: a step runs a few hundred instructions, where entering
	// wazero costs more than interpreting them (bench func's chain at the
	// target: p50 24 µs translated against 20 µs interpreted per 7-step
	// lookup).
	TranslatePushdown bool
}

// Runtime loads eBPF ELF objects. It is safe for concurrent use.
type Runtime struct {
	log               *slog.Logger
	epoch             time.Time
	interpretOnly     bool
	translatePushdown bool

	// The wazero runtime for translated programs, made on first use.
	wOnce sync.Once
	w     wazero.Runtime
	wErr  error
}

var _ sandbox.Runtime = (*Runtime)(nil)

// NewRuntime returns an eBPF runtime.
func NewRuntime(opts Options) *Runtime {
	l := opts.Logger
	if l == nil {
		l = slog.Default()
	}
	return &Runtime{log: l, epoch: time.Now(), interpretOnly: opts.Interpreter, translatePushdown: opts.TranslatePushdown}
}

// Kind is sandbox.KindEBPF.
func (rt *Runtime) Kind() sandbox.Kind { return sandbox.KindEBPF }

// Close releases the compiled code of translated programs. Modules must
// not be used afterwards.
func (rt *Runtime) Close(ctx context.Context) error {
	rt.wOnce.Do(func() {}) // no runtime made after Close
	if rt.w != nil {
		return rt.w.Close(ctx)
	}
	return nil
}

var _ sandbox.ProgramLoader = (*Runtime)(nil)

// Load decodes an ELF object with cilium/ebpf, picks its entry points (see
// the package documentation), links and verifies them. Every call on the
// module obeys lim.
func (rt *Runtime) Load(ctx context.Context, obj []byte, lim sandbox.Limits) (sandbox.Module, error) {
	return rt.LoadProgram(ctx, obj, "", lim)
}

// LoadProgram is Load with the pushdown entry named: program is the
// function name of one of the object's programs, as libbpf's
// bpf_object__find_program_by_name takes it, and replaces the automatic
// choice. The module's ID is sandbox.ProgramID(obj, program).
func (rt *Runtime) LoadProgram(ctx context.Context, obj []byte, program string, lim sandbox.Limits) (m sandbox.Module, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(program) > sandbox.MaxProgramName {
		return nil, badf("program name of %d bytes, at most %d", len(program), sandbox.MaxProgramName)
	}
	defer func() {
		// cilium/ebpf is hardened against malformed ELF, but a panic on
		// hostile input must not take the target down.
		if r := recover(); r != nil {
			m, err = nil, badf("decoding the ELF object: %v", r)
		}
	}()
	if len(obj) < 4 || string(obj[:4]) != "\x7fELF" {
		return nil, badf("not an ELF object")
	}
	if err := checkSections(obj); err != nil {
		return nil, err
	}
	spec, err := cebpf.LoadCollectionSpecFromReader(bytes.NewReader(obj))
	if err != nil {
		return nil, badf("decoding the ELF object: %v", err)
	}
	rodata, resolve := rodataOf(spec)
	for name, ms := range spec.Maps {
		if _, ok := resolve(name); ok {
			continue
		}
		// Unused maps are harmless, but a module declaring them was
		// written for a kernel we are not; say so early.
		if strings.HasPrefix(name, ".data") || strings.HasPrefix(name, ".bss") {
			return nil, badf("section %q holds writable global data, which is not supported: keep state in scratch (or make it const)", name)
		}
		return nil, badf("the object defines map %q (%v): maps are not supported", name, ms.Type)
	}
	push, comp, err := entries(spec.Programs, program)
	if err != nil {
		return nil, err
	}
	mod := &module{id: sandbox.ProgramID(obj, program), lim: lim.WithDefaults(), rt: rt, rodata: rodata}
	if push != nil {
		if mod.pushdown, err = link(push.Name, push.SectionName, push.Instructions, resolve); err != nil {
			return nil, err
		}
	}
	if comp != nil {
		if mod.compute, err = link(comp.Name, comp.SectionName, comp.Instructions, resolve); err != nil {
			return nil, err
		}
	}
	if err := mod.compile(ctx); err != nil {
		return nil, err
	}
	return mod, nil
}

// entries picks an object's entry points among its programs, which are,
// as libbpf has them, the functions in executable sections other than
// .text (cilium/ebpf lists exactly those; functions in .text are
// subprograms, reached only by calls). The rules, in order:
//
//  1. compute is the program named "compute" (nearstore.h's NS_COMPUTE).
//  2. If the caller named a program, it is the pushdown entry; it must
//     exist and must not be the compute entry.
//  3. Otherwise the program named "pushdown" (NS_PUSHDOWN) is.
//  4. Otherwise, if exactly one program is left besides compute, it is the
//     pushdown entry, whatever its section and name: libbpf's rule for an
//     object's single program, which takes XRP's SEC("prog") and BPF-KV's
//     SEC("oliver_agg") as they are written. With several left, the
//     caller must name one: guessing would run the wrong code.
//
// An object with neither entry is refused. Every refusal names the rule
// and the programs it saw, with their sections.
func entries(progs map[string]*cebpf.ProgramSpec, named string) (push, comp *cebpf.ProgramSpec, err error) {
	comp = progs["compute"]
	var rest []*cebpf.ProgramSpec
	for name, ps := range progs {
		if name != "compute" {
			rest = append(rest, ps)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Name < rest[j].Name })
	switch {
	case named != "":
		push = progs[named]
		switch {
		case push == nil:
			return nil, nil, badf("no program named %q: the object's programs are %s", named, listPrograms(progs))
		case push == comp:
			return nil, nil, badf("program %q is the compute entry; a named program is the pushdown entry", named)
		}
	case progs["pushdown"] != nil:
		push = progs["pushdown"]
	case len(rest) == 1:
		push = rest[0]
	case len(rest) > 1:
		return nil, nil, badf("%d programs could be the pushdown entry (%s) and none is named pushdown: name the one to load", len(rest), listPrograms(progs))
	}
	if push == nil && comp == nil {
		return nil, nil, badf("no entry point: the object has no program, i.e. no function in an executable section other than .text " +
			"(functions in .text are only subprograms); put the entry in its own section, e.g. SEC(\"prog\") or nearstore.h's NS_PUSHDOWN")
	}
	return push, comp, nil
}

// listPrograms names progs with their sections, in name order, for error
// messages: "get" (section "oliver_agg"), ...
func listPrograms(progs map[string]*cebpf.ProgramSpec) string {
	if len(progs) == 0 {
		return "none"
	}
	names := make([]string, 0, len(progs))
	for name := range progs {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		names[i] = fmt.Sprintf("%q (section %q)", name, progs[name].SectionName)
	}
	return strings.Join(names, ", ")
}

// checkSections refuses an object whose section headers point outside it,
// before cilium/ebpf reads them: a corrupt size would otherwise make the
// decoder allocate (transiently) far more than the object's size.
func checkSections(b []byte) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return badf("decoding the ELF object: %v", err)
	}
	n := uint64(len(b))
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL {
			continue
		}
		if s.Offset > n || s.FileSize > n-s.Offset {
			return badf("decoding the ELF object: section %q (%d bytes at %d) lies outside the %d-byte object", s.Name, s.FileSize, s.Offset, n)
		}
	}
	return nil
}

// rodataOf lays out the object's read-only data sections (.rodata*) in the
// rodata region and returns them with a resolver from section name to
// virtual address. Writable data (.data, .bss) and maps do not resolve.
func rodataOf(spec *cebpf.CollectionSpec) ([]byte, rodataRef) {
	var names []string
	for name, ms := range spec.Maps {
		if strings.HasPrefix(name, ".rodata") && ms.Type == cebpf.Array && ms.MaxEntries == 1 && ms.ValueSize <= 1<<20 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, func(string) (uint64, bool) { return 0, false }
	}
	sort.Strings(names)
	var blob []byte
	at := make(map[string]uint64, len(names))
	for _, name := range names {
		ms := spec.Maps[name]
		for len(blob)%8 != 0 {
			blob = append(blob, 0)
		}
		at[name] = rodataAddr + uint64(len(blob))
		start := len(blob)
		blob = append(blob, make([]byte, ms.ValueSize)...)
		if len(ms.Contents) == 1 {
			if b, ok := ms.Contents[0].Value.([]byte); ok {
				copy(blob[start:], b)
			}
		}
	}
	return blob, func(name string) (uint64, bool) {
		a, ok := at[name]
		return a, ok
	}
}

// loadInstructions builds a module from instructions assembled with the
// asm package, bypassing ELF: entry is "pushdown" or "compute". Tests use
// it; Load is the public path.
func (rt *Runtime) loadInstructions(insns asm.Instructions, entry string, lim sandbox.Limits) (*module, error) {
	mod := &module{id: sandbox.ID{}, lim: lim.WithDefaults(), rt: rt}
	p, err := link(entry, "", insns, nil)
	if err != nil {
		return nil, err
	}
	switch entry {
	case "pushdown":
		mod.pushdown = p
	case "compute":
		mod.compute = p
	default:
		return nil, fmt.Errorf("loadInstructions: entry %q", entry)
	}
	if err := mod.compile(context.Background()); err != nil {
		return nil, err
	}
	return mod, nil
}

// compile translates and compiles the entries that can be (wasmgen.go).
func (m *module) compile(ctx context.Context) error {
	var err error
	if m.pushT, err = m.compileProgram(ctx, m.pushdown, false); err != nil {
		return err
	}
	if m.compT, err = m.compileProgram(ctx, m.compute, true); err != nil {
		return err
	}
	return nil
}

// module is a loaded, verified program; it is immutable except for its
// pool and closed flag, so it is safe for concurrent use.
type module struct {
	id       sandbox.ID
	lim      sandbox.Limits
	rt       *Runtime
	pushdown *program
	compute  *program
	rodata   []byte
	closed   atomic.Bool

	// pushT and compT are the entries translated to wasm, or nil.
	pushT, compT *translated

	// Idle instances: up to maxIdle in free, kept for good, the rest in
	// pool until the GC drops them (an instance's wasm module instances
	// are closed then: newWasmInstance). A pushdown runs one goroutine per
	// request at the target, so hundreds can be in flight; a translated
	// instance costs tens of microseconds to make, so the free list is
	// long enough that a GC does not make them all again.
	mu   sync.Mutex
	free []*instance
	pool sync.Pool
}

// maxIdle is how many idle instances a module keeps for good, and
// keepBytes the most buffer memory one of them may hold: one that grew
// for a large compute input or output goes to the GC-managed pool, so that
// a burst of large requests does not pin maxIdle times their memory.
const (
	maxIdle   = 256
	keepBytes = 1 << 20
)

// memBytes is the memory an instance's buffers hold.
func (in *instance) memBytes() int {
	n := len(in.data) + len(in.input) + len(in.output)
	for _, w := range []*wasmInst{in.wp, in.wc} {
		if w != nil {
			n += int(w.mem.Size())
		}
	}
	return n
}

func (m *module) ID() sandbox.ID     { return m.id }
func (m *module) Kind() sandbox.Kind { return sandbox.KindEBPF }
func (m *module) HasPushdown() bool  { return m.pushdown != nil }
func (m *module) HasCompute() bool   { return m.compute != nil }

// Close marks the module closed and releases its compiled code; idle
// instances are closed as the GC drops them.
func (m *module) Close(ctx context.Context) error {
	m.closed.Store(true)
	m.mu.Lock()
	m.free = nil
	m.mu.Unlock()
	for _, t := range []*translated{m.pushT, m.compT} {
		if t != nil {
			_ = t.compiled.Close(ctx)
		}
	}
	return nil
}

// release takes an idle instance back.
func (m *module) release(in *instance) {
	if m.closed.Load() {
		return
	}
	m.mu.Lock()
	if len(m.free) < maxIdle && in.memBytes() <= keepBytes {
		m.free = append(m.free, in)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.pool.Put(in)
}

func (m *module) Acquire(ctx context.Context) (sandbox.Instance, error) {
	if m.closed.Load() {
		return nil, errors.New("ebpf: module is closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var in *instance
	m.mu.Lock()
	if n := len(m.free); n > 0 {
		in = m.free[n-1]
		m.free[n-1] = nil
		m.free = m.free[:n-1]
	}
	m.mu.Unlock()
	if in == nil {
		in, _ = m.pool.Get().(*instance)
	}
	if in == nil {
		var err error
		if in, err = m.newWasmInstance(ctx); err != nil {
			return nil, err
		}
	}
	clear(in.scratch[:])
	// The frames no run reached are zero still.
	clear(in.stack[(maxDepth-in.stackHigh)*frameSize:])
	in.stackHigh = 0
	for _, w := range []*wasmInst{in.wp, in.wc} {
		if w != nil {
			b := w.view()
			clear(b[memScratch : memScratch+sandbox.ScratchSize])
			clear(b[memStack : memStack+frameSize])
		}
	}
	in.released = false
	return in, nil
}

// newWasmInstance is newInstance with the translated entries
// instantiated; they are closed when the GC drops the instance.
func (m *module) newWasmInstance(ctx context.Context) (*instance, error) {
	in := m.newInstance()
	var ws []*wasmInst
	for _, e := range []struct {
		t  *translated
		p  *program
		to **wasmInst
	}{{m.pushT, m.pushdown, &in.wp}, {m.compT, m.compute, &in.wc}} {
		if e.t == nil {
			continue
		}
		w, err := m.instantiate(ctx, e.t, e.p)
		if err != nil {
			for _, w := range ws {
				w.close()
			}
			return nil, err
		}
		*e.to = w
		ws = append(ws, w)
	}
	if len(ws) > 0 {
		runtime.AddCleanup(in, func(ws []*wasmInst) {
			for _, w := range ws {
				w.close()
			}
		}, ws)
	}
	return in, nil
}

func (m *module) newInstance() *instance {
	in := &instance{m: m}
	in.log = m.rt.log
	in.epoch = m.rt.epoch
	in.regions[regionCtx] = region{base: ctxAddr, buf: in.ctx[:], perm: permCtx}
	in.regions[regionData] = region{base: dataAddr, perm: permRO}
	in.regions[regionScratch] = region{base: scratchAddr, buf: in.scratch[:], perm: permRW}
	in.regions[regionStack] = region{base: stackAddr, perm: permRW}
	in.regions[regionInput] = region{base: inputAddr, perm: permRO}
	in.regions[regionOutput] = region{base: outputAddr, perm: permRW}
	in.regions[regionRodata] = region{base: rodataAddr, buf: m.rodata, perm: permRO}
	in.setStack(0)
	return in
}
