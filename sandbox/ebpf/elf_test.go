package ebpf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/sandbox"
)

const chainMagic = 0x314e49414843534e

// chainBlock encodes a block of testdata/xrp_chain.c.
func chainBlock(nextOff uint64, nextFile, flags uint32, value, auxOff uint64) []byte {
	b := make([]byte, 512)
	le := binary.LittleEndian
	le.PutUint64(b[0:], chainMagic)
	le.PutUint64(b[8:], nextOff)
	le.PutUint32(b[16:], nextFile)
	le.PutUint32(b[20:], flags)
	le.PutUint64(b[24:], value)
	le.PutUint64(b[32:], auxOff)
	return b
}

// runPushdown drives a pushdown the way the executor does: read, step,
// follow the next reads, until done. It returns the scratch and the steps.
func runPushdown(t testing.TB, m sandbox.Module, files [][]byte, start sandbox.Next) ([]byte, int, error) {
	t.Helper()
	ctx := context.Background()
	in, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	next := []sandbox.Next{start}
	for steps := 1; ; steps++ {
		if steps > 64 {
			t.Fatal("too many steps")
		}
		var total uint64
		for _, nx := range next {
			total += nx.Len
		}
		buf, err := in.Data(int(total))
		if err != nil {
			return nil, steps, err
		}
		at := buf
		for _, nx := range next {
			copy(at[:nx.Len], files[nx.File][nx.Offset:nx.Offset+nx.Len])
			at = at[nx.Len:]
		}
		done, more, err := in.Step(ctx, next[0].File, next[0].Offset, int(total))
		if err != nil {
			return nil, steps, err
		}
		if done {
			return append([]byte(nil), in.Scratch()...), steps, nil
		}
		if len(more) == 0 {
			t.Fatal("no progress")
		}
		next = more
	}
}

func chainFiles() [][]byte {
	f0 := make([]byte, 4096)
	f1 := make([]byte, 4096)
	// f0@0 -> f1@1024 (fan-out: also f0@2048) -> f0@1536 -> end
	copy(f0[0:], chainBlock(1024, 1, 0, 10, 0))
	copy(f1[1024:], chainBlock(1536, 0, 1, 20, 2048))
	copy(f0[2048:], chainBlock(0, 0, 0, 500, 0))
	copy(f0[1536:], chainBlock(^uint64(0), 0, 0, 30, 0))
	return [][]byte{f0, f1}
}

func TestXRPChain(t *testing.T) {
	m := loadObj(t, "xrp_chain.o", sandbox.Limits{})
	if !m.HasPushdown() || m.HasCompute() {
		t.Fatalf("entries: pushdown %v compute %v", m.HasPushdown(), m.HasCompute())
	}
	scratch, steps, err := runPushdown(t, m, chainFiles(), sandbox.Next{File: 0, Offset: 0, Len: 512})
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	hops, sum, aux, last := le.Uint64(scratch[0:]), le.Uint64(scratch[8:]), le.Uint64(scratch[16:]), le.Uint64(scratch[24:])
	// mix(v, hops) = 3v + hops, hops counted before the step.
	wantSum := uint64(3*10+0) + (3*20 + 1) + (3*30 + 2)
	if steps != 3 || hops != 3 || sum != wantSum || aux != 500 || last != 0 {
		t.Errorf("steps %d hops %d sum %d aux %d last %d; want 3 3 %d 500 0", steps, hops, sum, aux, last, wantSum)
	}
}

func TestXRPChainStepDetails(t *testing.T) {
	m := loadObj(t, "xrp_chain.o", sandbox.Limits{})
	ctx := context.Background()
	in, _ := m.Acquire(ctx)
	defer in.Release()
	files := chainFiles()
	buf, _ := in.Data(512)
	copy(buf, files[1][1024:1536])
	done, next, err := in.Step(ctx, 1, 1024, 512)
	if err != nil || done {
		t.Fatalf("done %v err %v", done, err)
	}
	want := []sandbox.Next{{File: 0, Offset: 1536, Len: 512}, {File: 0, Offset: 2048, Len: 512}}
	if len(next) != 2 || next[0] != want[0] || next[1] != want[1] {
		t.Errorf("next %+v, want %+v", next, want)
	}
	// A bad block: the function's own error code.
	buf, _ = in.Data(512)
	clear(buf)
	_, _, err = in.Step(ctx, 0, 0, 512)
	var fe *sandbox.FunctionError
	if !errors.As(err, &fe) || fe.Code != -22 || !errors.Is(err, sandbox.ErrFunction) {
		t.Errorf("bad magic: %v, want function error -22", err)
	}
	// Short data: the program checks data_len itself.
	if _, _, err = in.Step(ctx, 0, 0, 100); !errors.As(err, &fe) {
		t.Errorf("short data: %v", err)
	}
	// Scratch is zeroed by Acquire.
	in.Scratch()[0] = 1
	in.Release()
	in2, _ := m.Acquire(ctx)
	defer in2.Release()
	if !bytes.Equal(in2.Scratch(), make([]byte, sandbox.ScratchSize)) {
		t.Error("Acquire did not zero scratch")
	}
}

func TestXRPProgSection(t *testing.T) {
	m := loadObj(t, "xrp_prog.o", sandbox.Limits{})
	if !m.HasPushdown() {
		t.Fatal("SEC(\"prog\") program not taken as pushdown")
	}
	scratch, _, err := runPushdown(t, m, [][]byte{make([]byte, 4096)}, sandbox.Next{Len: 1234})
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint64(scratch); got != 1234 {
		t.Errorf("data_len seen %d, want 1234", got)
	}
}

func stats64Native(in []byte) [4]uint64 {
	n := len(in) / 8
	var sum, mx uint64
	mn := ^uint64(0)
	for i := range n {
		x := binary.LittleEndian.Uint64(in[8*i:])
		sum += x
		mn = min(mn, x)
		mx = max(mx, x)
	}
	if n == 0 {
		mn = 0
	}
	return [4]uint64{uint64(n), sum, mn, mx}
}

func TestStats64(t *testing.T) {
	m := loadObj(t, "stats64.o", sandbox.Limits{})
	if !m.HasCompute() || m.HasPushdown() {
		t.Fatal("entries")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 7, 8, 9, 1000, 1 << 20} {
		in := make([]byte, size)
		for i := range in {
			in[i] = byte(rng.Uint32())
		}
		out, err := sandbox.Compute(context.Background(), m, in, 64)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		want := stats64Native(in)
		if len(out) != 32 {
			t.Fatalf("size %d: output %d bytes", size, len(out))
		}
		for i := range 4 {
			if got := binary.LittleEndian.Uint64(out[8*i:]); got != want[i] {
				t.Errorf("size %d: field %d = %d, want %d", size, i, got, want[i])
			}
		}
	}
	// Output too small: the function says so.
	_, err := sandbox.Compute(context.Background(), m, make([]byte, 64), 16)
	var fe *sandbox.FunctionError
	if !errors.As(err, &fe) || fe.Code != -34 {
		t.Errorf("small output: %v, want function error -34", err)
	}
}

func TestCallsAndRodata(t *testing.T) {
	m := loadObj(t, "calls.o", sandbox.Limits{})
	table := [8]uint64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000}
	for x := uint64(1); x < 16; x++ {
		var buf [16]uint64
		var s uint64
		n := x & 15
		for i := uint64(0); i < n && i < 16; i++ {
			buf[i] = table[(i+n)&7] + i + n
			s += buf[i]
		}
		want := s + buf[0]
		out, err := sandbox.Compute(context.Background(), m, []byte{byte(x)}, 8)
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint64(out); got != want {
			t.Errorf("x=%d: got %d, want %d", x, got, want)
		}
	}
}

func TestHelpers(t *testing.T) {
	var logs bytes.Buffer
	rt := NewRuntime(Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	m, err := rt.Load(context.Background(), readObj(t, "trace.o"), sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	scratch, _, err := runPushdown(t, m, [][]byte{make([]byte, 4096)}, sandbox.Next{Offset: 77, Len: 16})
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint64(scratch) == 0 {
		t.Error("bpf_ktime_get_ns returned 0")
	}
	if s := logs.String(); !strings.Contains(s, "step at %llu, %u bytes") || !strings.Contains(s, "77") {
		t.Errorf("trace_printk log: %q", s)
	}
}

func TestBadELF(t *testing.T) {
	rt := NewRuntime(Options{})
	ctx := context.Background()
	for _, tc := range []struct{ file, want string }{
		{"bad_helper.o", "helper 14"},
		{"bad_map.o", "map"},
		{"bad_global.o", ".bss"},
	} {
		_, err := rt.Load(ctx, readObj(t, tc.file), sandbox.Limits{})
		if !errors.Is(err, sandbox.ErrBadModule) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrBadModule mentioning %q", tc.file, err, tc.want)
		}
	}
	good := readObj(t, "xrp_chain.o")
	for name, b := range map[string][]byte{
		"empty":     nil,
		"not elf":   []byte("\x00asm\x01\x00\x00\x00"),
		"magic":     []byte("\x7fELF"),
		"truncated": good[:len(good)/2],
		"garbage":   append([]byte("\x7fELF\x02\x01\x01"), bytes.Repeat([]byte{0xff}, 200)...),
	} {
		if _, err := rt.Load(ctx, b, sandbox.Limits{}); !errors.Is(err, sandbox.ErrBadModule) {
			t.Errorf("%s: %v, want ErrBadModule", name, err)
		}
	}
	// Corrupt the section contents (instructions) of a good object.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		b := bytes.Clone(good)
		for range 8 {
			b[rng.IntN(len(b))] = byte(rng.Uint32())
		}
		m, err := rt.Load(ctx, b, sandbox.Limits{})
		if err == nil {
			m.Close(ctx)
		} else if !errors.Is(err, sandbox.ErrBadModule) {
			t.Fatalf("corrupt object: %v, want ErrBadModule", err)
		}
	}
}
