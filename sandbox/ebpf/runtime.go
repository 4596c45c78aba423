package ebpf

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/nearstore/nearstore/sandbox"
)

// Options configure a Runtime.
type Options struct {
	// Logger receives bpf_trace_printk output at debug level
	// (default slog.Default()).
	Logger *slog.Logger
}

// Runtime loads eBPF ELF objects. It is safe for concurrent use.
type Runtime struct {
	log   *slog.Logger
	epoch time.Time
}

var _ sandbox.Runtime = (*Runtime)(nil)

// NewRuntime returns an eBPF runtime.
func NewRuntime(opts Options) *Runtime {
	l := opts.Logger
	if l == nil {
		l = slog.Default()
	}
	return &Runtime{log: l, epoch: time.Now()}
}

// Kind is sandbox.KindEBPF.
func (rt *Runtime) Kind() sandbox.Kind { return sandbox.KindEBPF }

// Close releases nothing: modules own their instances.
func (rt *Runtime) Close(context.Context) error { return nil }

// Load decodes an ELF object with cilium/ebpf, picks its entry points (see
// the package documentation), links and verifies them. Every call on the
// module obeys lim.
func (rt *Runtime) Load(ctx context.Context, obj []byte, lim sandbox.Limits) (m sandbox.Module, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
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
		if _, ok := resolve(name); !ok {
			// Unused maps are harmless, but a module declaring them was
			// written for a kernel we are not; say so early.
			return nil, badf("the object defines map %q (%v): maps are not supported", name, ms.Type)
		}
	}

	var push, comp *cebpf.ProgramSpec
	var progSec []*cebpf.ProgramSpec
	for name, ps := range spec.Programs {
		switch {
		case name == "pushdown":
			push = ps
		case name == "compute":
			comp = ps
		case ps.SectionName == "prog":
			progSec = append(progSec, ps)
		}
	}
	if push == nil && comp == nil {
		switch len(progSec) {
		case 0:
		case 1:
			push = progSec[0]
		default:
			names := make([]string, len(progSec))
			for i, ps := range progSec {
				names[i] = ps.Name
			}
			sort.Strings(names)
			return nil, badf("no function named pushdown or compute, and section \"prog\" has several programs (%s)", strings.Join(names, ", "))
		}
	}
	if push == nil && comp == nil {
		return nil, badf("no entry point: no function named pushdown or compute (nor an XRP SEC(\"prog\") program)")
	}
	mod := &module{id: sandbox.IDOf(obj), lim: lim.WithDefaults(), rt: rt, rodata: rodata}
	if push != nil {
		if mod.pushdown, err = link(push.Name, push.Instructions, resolve); err != nil {
			return nil, err
		}
	}
	if comp != nil {
		if mod.compute, err = link(comp.Name, comp.Instructions, resolve); err != nil {
			return nil, err
		}
	}
	mod.pool.New = func() any { return mod.newInstance() }
	return mod, nil
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
	p, err := link(entry, insns, nil)
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
	mod.pool.New = func() any { return mod.newInstance() }
	return mod, nil
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
	pool     sync.Pool
	closed   atomic.Bool
}

func (m *module) ID() sandbox.ID     { return m.id }
func (m *module) Kind() sandbox.Kind { return sandbox.KindEBPF }
func (m *module) HasPushdown() bool  { return m.pushdown != nil }
func (m *module) HasCompute() bool   { return m.compute != nil }
func (m *module) Close(context.Context) error {
	m.closed.Store(true)
	return nil
}

func (m *module) Acquire(ctx context.Context) (sandbox.Instance, error) {
	if m.closed.Load() {
		return nil, errors.New("ebpf: module is closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	in := m.pool.Get().(*instance)
	clear(in.scratch[:])
	clear(in.stack[:])
	in.released = false
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
