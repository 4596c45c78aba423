package ebpf

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/nearstore/nearstore/sandbox"
)

// TestRegionLengthNotCapacity sizes each variable buffer larger than the
// region a call maps (Data, Input and Output asked for 4096 bytes, the
// call given 16), so the buffer's capacity runs past the region's length.
// An access just inside the length must work and one just past it must
// fault: a bounds check against the capacity would let it through.
func TestRegionLengthNotCapacity(t *testing.T) {
	ctx := context.Background()
	const region, buffer = 16, 4096
	ldData := asm.LoadMem(r2, r1, ctxData, asm.DWord)

	t.Run("data", func(t *testing.T) {
		for _, tc := range []struct {
			off  int16
			size asm.Size
			ok   bool
		}{{region - 1, asm.Byte, true}, {region - 8, asm.DWord, true}, {region, asm.Byte, false}, {region - 4, asm.DWord, false}} {
			m := mustModule(t, prog(ldData, asm.LoadMem(r0, r2, tc.off, tc.size), asm.StoreImm(r1, ctxDone, 1, asm.Word), asm.Mov.Imm(r0, 0)), "pushdown", sandbox.Limits{})
			in, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := in.Data(buffer); err != nil {
				t.Fatal(err)
			}
			_, _, err = in.Step(ctx, 0, 0, region)
			checkRegionAccess(t, "data", int(tc.off), tc.size.Sizeof(), tc.ok, err)
			in.Release()
		}
	})
	compute := func(t *testing.T, name string, insns asm.Instructions, off, size int, ok bool) {
		t.Helper()
		m := mustModule(t, insns, "compute", sandbox.Limits{})
		in, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Release()
		if _, err := in.Input(buffer); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Output(buffer); err != nil {
			t.Fatal(err)
		}
		_, err = in.Compute(ctx, region, region)
		checkRegionAccess(t, name, off, size, ok, err)
	}
	t.Run("input", func(t *testing.T) {
		for _, off := range []int16{region - 1, region} {
			compute(t, "input", prog(asm.LoadMem(r0, r1, off, asm.Byte), asm.Mov.Imm(r0, 0)), int(off), 1, off < region)
		}
	})
	t.Run("output", func(t *testing.T) {
		for _, off := range []int16{region - 8, region - 7, region} {
			compute(t, "output", prog(asm.StoreMem(asm.R3, off, r1, asm.DWord), asm.Mov.Imm(r0, 0)), int(off), 8, off <= region-8)
		}
	})
	t.Run("machine", func(t *testing.T) {
		// The same for a region whose slice is handed to the machine
		// directly, with spare capacity behind it.
		for _, off := range []int16{region - 1, region, buffer - 1} {
			m := mustModule(t, prog(asm.LoadMem(r0, r1, off, asm.Byte)), "compute", sandbox.Limits{})
			in := m.newInstance()
			in.regions[regionInput].buf = make([]byte, region, buffer)
			_, err := in.run(ctx, m.compute, &m.lim, [5]uint64{inputAddr, region})
			checkRegionAccess(t, "input", int(off), 1, off < region, err)
		}
	})
}

func checkRegionAccess(t *testing.T, name string, off, size int, ok bool, err error) {
	t.Helper()
	if ok {
		if err != nil {
			t.Errorf("%s: %d bytes at +%d, inside the %d-byte region: %v", name, size, off, 16, err)
		}
		return
	}
	if !errors.Is(err, sandbox.ErrMemory) || !strings.Contains(err.Error(), name) {
		t.Errorf("%s: %d bytes at +%d, past the 16-byte region but inside its buffer: %v, want ErrMemory naming %s", name, size, off, err, name)
	}
}

// TestLargeInstanceIsSpare: an instance whose buffers grew past keepBytes
// for a large input is not kept for good, in either engine.
func TestLargeInstanceIsSpare(t *testing.T) {
	ctx := context.Background()
	for _, opts := range []Options{{}, {Interpreter: true}} {
		m, err := NewRuntime(opts).Load(ctx, readObj(t, "stats64.o"), sandbox.Limits{Time: testTime})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sandbox.Compute(ctx, m, make([]byte, 2<<20), 32); err != nil {
			t.Fatal(err)
		}
		if n := len(m.(*module).free); n != 0 {
			t.Errorf("interpreter %v: %d instances kept after a 2 MiB input, want 0", opts.Interpreter, n)
		}
		// Two at once: at most one is the large spare; the small one is
		// kept.
		a, _ := m.Acquire(ctx)
		b, _ := m.Acquire(ctx)
		a.Release()
		b.Release()
		if n := len(m.(*module).free); n < 1 {
			t.Errorf("interpreter %v: %d instances kept after small requests, want at least 1", opts.Interpreter, n)
		}
	}
}
