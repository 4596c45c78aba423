package ebpf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/nearstore/nearstore/sandbox"
)

const guardLen = 64
const guardByte = 0xa5

// guarded returns an n-byte slice with guard bytes on both sides, and the
// whole backing array to check the guards with.
func guarded(n int) (buf, all []byte) {
	all = bytes.Repeat([]byte{guardByte}, guardLen+n+guardLen)
	clear(all[guardLen : guardLen+n])
	return all[guardLen : guardLen+n], all
}

func guardsIntact(all []byte) bool {
	for _, b := range all[:guardLen] {
		if b != guardByte {
			return false
		}
	}
	for _, b := range all[len(all)-guardLen:] {
		if b != guardByte {
			return false
		}
	}
	return true
}

func seedPrograms() []asm.Instructions {
	return []asm.Instructions{
		spin(),
		prog(asm.LoadMem(r0, r1, 0, asm.DWord)),
		prog(
			asm.LoadMem(r2, r1, ctxData, asm.DWord),
			asm.LoadMem(r0, r2, 0, asm.Byte),
			asm.StoreImm(r1, ctxDone, 1, asm.Word),
		),
		prog(
			asm.LoadMem(r2, r1, ctxScratch, asm.DWord),
			asm.StoreMem(r2, 8, r1, asm.DWord),
			asm.StoreMem(r10, -8, r2, asm.DWord),
			asm.LoadMem(r0, r10, -8, asm.DWord),
			asm.Mov.Imm(r0, 0),
		),
		{
			asm.Mov.Imm(r1, 3),
			asm.Call.Label("f"),
			asm.Return(),
			asm.Mul.Imm(r1, 7).WithSymbol("f"),
			asm.Mov.Reg(r0, r1),
			asm.Return(),
		},
	}
}

func marshal(t testing.TB, insns asm.Instructions) []byte {
	var b bytes.Buffer
	if err := asm.Instructions(append(asm.Instructions(nil), insns...)).Marshal(&b, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// fuzzLimits bound a fuzzed program's run: loops are expected, hangs
// are not.
func fuzzLimits() sandbox.Limits {
	return sandbox.Limits{MaxInstructions: 20000, MaxBackJumps: 2000, Time: time.Second}
}

// fuzzProgram decodes fuzzed bytes as eBPF instructions, dropping a
// partial last one; ok is false when they do not decode or hold none.
func fuzzProgram(code []byte) (insns asm.Instructions, ok bool) {
	code = code[:len(code)/8*8]
	insns, err := asm.AppendInstructions(nil, bytes.NewReader(code), binary.LittleEndian, "linux")
	return insns, err == nil && len(insns) > 0
}

// FuzzVerifierInterpreter feeds random instruction streams through the
// verifier and runs what it accepts with small budgets, in an instance
// whose regions are surrounded by guard bytes: nothing may panic, touch
// memory outside the regions, run past its budget, or fail with anything
// but the sandbox's sentinels.
func FuzzVerifierInterpreter(f *testing.F) {
	for _, p := range seedPrograms() {
		f.Add(marshal(f, p))
	}
	rt := NewRuntime(Options{})
	lim := fuzzLimits()
	f.Fuzz(func(t *testing.T, code []byte) {
		insns, ok := fuzzProgram(code)
		if !ok {
			return
		}
		for _, entry := range []string{"pushdown", "compute"} {
			m, err := rt.loadInstructions(insns, entry, lim)
			if err != nil {
				if !errors.Is(err, sandbox.ErrBadModule) {
					t.Fatalf("verifier: %v", err)
				}
				return
			}
			in := m.newInstance()
			ctxBuf, ctxAll := guarded(ctxSize)
			data, dataAll := guarded(100)
			scratch, scratchAll := guarded(sandbox.ScratchSize)
			input, inputAll := guarded(40)
			output, outputAll := guarded(24)
			in.regions[regionCtx].buf = ctxBuf
			in.regions[regionData].buf = data
			in.regions[regionScratch].buf = scratch
			in.regions[regionInput].buf = input
			in.regions[regionOutput].buf = output
			binary.LittleEndian.PutUint64(ctxBuf[ctxData:], dataAddr)
			binary.LittleEndian.PutUint64(ctxBuf[ctxScratch:], scratchAddr)
			binary.LittleEndian.PutUint32(ctxBuf[ctxDataLen:], 100)
			logBefore, epochBefore := in.log, in.epoch

			args := [5]uint64{ctxAddr}
			if entry == "compute" {
				args = [5]uint64{inputAddr, 40, outputAddr, 24}
			}
			start := time.Now()
			_, err = in.run(context.Background(), m.pushdown.orElse(m.compute), &m.lim, args)
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Fatalf("ran %v", d)
			}
			if err != nil && !errors.Is(err, sandbox.ErrMemory) && !errors.Is(err, sandbox.ErrTimeout) {
				t.Fatalf("run: %v", err)
			}
			if err != nil && strings.Contains(err.Error(), "internal error") {
				t.Fatalf("run: %v", err)
			}
			for name, all := range map[string][]byte{"ctx": ctxAll, "data": dataAll, "scratch": scratchAll, "input": inputAll, "output": outputAll} {
				if !guardsIntact(all) {
					t.Fatalf("guard bytes around %s changed", name)
				}
			}
			if !bytes.Equal(dataAll[guardLen:guardLen+100], make([]byte, 100)) || !bytes.Equal(input, make([]byte, 40)) {
				t.Fatal("a read-only region changed")
			}
			// The stack is an array inside the instance; its neighbours and
			// the instance's own (now unmapped) ctx and scratch stay as they
			// were.
			if in.log != logBefore || in.epoch != epochBefore || in.ctx != [ctxSize]byte{} || in.scratch != [sandbox.ScratchSize]byte{} {
				t.Fatal("memory outside the regions changed")
			}
		}
	})
}

// orElse returns p, or q if p is nil.
func (p *program) orElse(q *program) *program {
	if p != nil {
		return p
	}
	return q
}

// FuzzLoadELF feeds random bytes and program names (seeded with the test
// objects) to LoadProgram: it must never panic, and every failure must be
// ErrBadModule.
func FuzzLoadELF(f *testing.F) {
	for _, name := range []string{"xrp_chain.o", "stats64.o", "calls.o", "trace.o", "bad_map.o", "xrp_agg.o", "compute_xrp.o"} {
		f.Add(readObj(f, name), "")
	}
	f.Add(readObj(f, "xrp_two.o"), "get")
	f.Add(readObj(f, "xrp_two.o"), "compute")
	rt := NewRuntime(Options{})
	f.Fuzz(func(t *testing.T, b []byte, program string) {
		m, err := rt.LoadProgram(context.Background(), b, program, sandbox.Limits{MaxInstructions: 10000, MaxBackJumps: 1000})
		if err != nil {
			if !errors.Is(err, sandbox.ErrBadModule) {
				t.Fatalf("LoadProgram: %v", err)
			}
			return
		}
		defer m.Close(context.Background())
		if m.HasCompute() {
			out, err := sandbox.Compute(context.Background(), m, []byte("0123456789abcdef"), 64)
			if err == nil && len(out) > 64 {
				t.Fatal("output longer than out_cap")
			}
		}
	})
}
