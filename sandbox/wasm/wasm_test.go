package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testmodules"
	"github.com/nearstore/nearstore/sandbox"
)

var le = binary.LittleEndian

func newRuntime(tb testing.TB, opts Options) *Runtime {
	tb.Helper()
	r, err := NewRuntime(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func readModule(tb testing.TB, name string) []byte {
	return testmodules.Read(tb, "testdata", name+".wasm")
}

func load(tb testing.TB, r *Runtime, name string, lim sandbox.Limits) *Module {
	tb.Helper()
	return loadBytes(tb, r, readModule(tb, name), lim)
}

// loadBytes loads a module. Unless a test sets Limits.Time, it gets 10s
// instead of the default 100ms: the test machine is shared, and a call
// descheduled for 100ms would fail a test that is not about time.
func loadBytes(tb testing.TB, r *Runtime, b []byte, lim sandbox.Limits) *Module {
	tb.Helper()
	if lim.Time == 0 {
		lim.Time = 10 * time.Second
	}
	m, err := r.Load(context.Background(), b, lim)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close(context.Background()) })
	return m.(*Module)
}

// record is one 16-byte chain record: { u64 next; u64 value; }.
func record(next, value uint64) []byte {
	return le.AppendUint64(le.AppendUint64(nil, next), value)
}

// execute plays the executor: it reads the start range from files, then
// steps until the function is done, reading what it asks for. It returns
// the number of steps.
func execute(ctx context.Context, inst sandbox.Instance, files [][]byte, file uint32, off, n uint64) (int, error) {
	reads := []sandbox.Next{{File: file, Offset: off, Len: n}}
	for steps := 1; steps <= 64; steps++ {
		total := 0
		for _, r := range reads {
			total += int(r.Len)
		}
		data, err := inst.Data(total)
		if err != nil {
			return steps, err
		}
		at := 0
		for _, r := range reads {
			at += copy(data[at:], files[r.File][r.Offset:r.Offset+r.Len])
		}
		done, next, err := inst.Step(ctx, reads[0].File, reads[0].Offset, total)
		if err != nil || done {
			return steps, err
		}
		reads = next
	}
	return 64, errors.New("too many steps")
}

// drive is execute through DriveSteps: the runtime runs the steps in one
// call and asks for the reads.
func drive(ctx context.Context, inst sandbox.Instance, files [][]byte, file uint32, off, n uint64) (int, error) {
	steps := 0
	err := inst.(sandbox.StepDriver).DriveSteps(ctx, []sandbox.Next{{File: file, Offset: off, Len: n}},
		func(reads []sandbox.Next) (uint32, uint64, int, error) {
			if steps++; steps > 64 {
				return 0, 0, 0, errors.New("too many steps")
			}
			total := 0
			for _, r := range reads {
				total += int(r.Len)
			}
			data, err := inst.Data(total)
			if err != nil {
				return 0, 0, 0, err
			}
			at := 0
			for _, r := range reads {
				at += copy(data[at:], files[r.File][r.Offset:r.Offset+r.Len])
			}
			return reads[0].File, reads[0].Offset, total, nil
		})
	return steps, err
}

// runners are the two ways of running a request's steps.
var runners = []struct {
	name string
	run  func(ctx context.Context, inst sandbox.Instance, files [][]byte, file uint32, off, n uint64) (int, error)
}{{"Step", execute}, {"DriveSteps", drive}}

// chainFiles builds file 0 as a chain 0 → 32 → 64 → fan-out to file 1 at
// 16 (two records, the second ending the chain), with values 1, 2, 3, 4, 5.
func chainFiles() [][]byte {
	f0 := make([]byte, 128)
	copy(f0[0:], record(32, 1))
	copy(f0[32:], record(64, 2))
	copy(f0[64:], record(16|1<<63, 3))
	f1 := make([]byte, 64)
	copy(f1[16:], record(999, 4)) // next ignored: not the last record
	copy(f1[32:], record(0, 5))
	return [][]byte{f0, f1}
}

func checkChain(t *testing.T, m sandbox.Module) {
	t.Helper()
	ctx := context.Background()
	files := chainFiles()
	// The pooled instance is reused, by both ways of stepping in turn.
	for round := 0; round < 5; round++ {
		run := runners[round/2%2]
		inst, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s := inst.Scratch(); len(s) != sandbox.ScratchSize || !bytes.Equal(s, make([]byte, sandbox.ScratchSize)) {
			t.Fatalf("round %d: scratch not zeroed on Acquire", round)
		}
		steps, err := run.run(ctx, inst, files, 0, 0, 16)
		if err != nil {
			t.Fatalf("round %d (%s): %v", round, run.name, err)
		}
		s := inst.Scratch()
		got := []uint64{le.Uint64(s[0:]), le.Uint64(s[8:]), le.Uint64(s[16:]), le.Uint64(s[24:]), le.Uint64(s[32:])}
		want := []uint64{4, 15, 16, 1, 32} // steps, sum, last cur_addr, cur_file, data_len
		if steps != 4 || !slices.Equal(got, want) {
			t.Fatalf("round %d (%s): %d steps, scratch %v; want 4 steps, %v", round, run.name, steps, got, want)
		}
		inst.Release()
	}
}

func TestChainPushdown(t *testing.T) {
	r := newRuntime(t, Options{})
	m := load(t, r, "chain", sandbox.Limits{})
	if !m.HasPushdown() || m.HasCompute() || m.Kind() != sandbox.KindWasm {
		t.Fatalf("entries: pushdown %v compute %v", m.HasPushdown(), m.HasCompute())
	}
	if m.ID() != sandbox.IDOf(readModule(t, "chain")) {
		t.Error("ID is not the SHA-256 of the module")
	}
	checkChain(t, m)
}

func TestStepSemantics(t *testing.T) {
	r := newRuntime(t, Options{})
	m := load(t, r, "chain", sandbox.Limits{})
	ctx := context.Background()
	inst, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Release()

	// One step by hand: next, fan-out fields.
	d, _ := inst.Data(16)
	copy(d, record(7|1<<63, 10))
	done, next, err := inst.Step(ctx, 3, 4096, 16)
	if err != nil || done {
		t.Fatalf("Step: done %v err %v", done, err)
	}
	want := []sandbox.Next{{File: 1, Offset: 7, Len: 16}, {File: 1, Offset: 23, Len: 16}}
	if len(next) != 2 || next[0] != want[0] || next[1] != want[1] {
		t.Fatalf("next = %v, want %v", next, want)
	}
	// The fields are cleared before each step: a plain next asks for one read.
	d, _ = inst.Data(32)
	copy(d, record(0, 1))
	copy(d[16:], record(100, 1))
	done, next, err = inst.Step(ctx, 2, 0, 32)
	if err != nil || done || len(next) != 1 || next[0] != (sandbox.Next{File: 2, Offset: 100, Len: 16}) {
		t.Fatalf("second step: done %v next %v err %v", done, next, err)
	}
	if s := inst.Scratch(); le.Uint64(s[8:]) != 12 {
		t.Errorf("scratch sum %d, want 12", le.Uint64(s[8:]))
	}

	// A negative return is a FunctionError, and the instance survives it.
	d, _ = inst.Data(16)
	copy(d, record(0, 0xdeadbeef))
	_, _, err = inst.Step(ctx, 0, 0, 16)
	var fe *sandbox.FunctionError
	if !errors.As(err, &fe) || fe.Code != -1000 || !errors.Is(err, sandbox.ErrFunction) {
		t.Fatalf("error code: %v", err)
	}
	if _, _, err = inst.Step(ctx, 0, 0, 0); !errors.As(err, &fe) || fe.Code != -22 {
		t.Fatalf("empty data: %v, want EINVAL", err)
	}

	// Data is capped at MaxStepBytes; Step past Data is refused.
	if _, err := inst.Data(64<<10 + 1); !errors.Is(err, sandbox.ErrMemory) {
		t.Errorf("Data over MaxStepBytes: %v", err)
	}
	if _, _, err := inst.Step(ctx, 0, 0, 64<<10+1); err == nil {
		t.Error("Step over MaxStepBytes accepted")
	}
	// A pushdown-only module has no compute.
	if _, err := inst.Input(8); !errors.Is(err, sandbox.ErrNoEntry) {
		t.Errorf("Input on pushdown-only module: %v", err)
	}
	if _, err := inst.Compute(ctx, 0, 0); !errors.Is(err, sandbox.ErrNoEntry) {
		t.Errorf("Compute on pushdown-only module: %v", err)
	}
}

func TestReleasedHandle(t *testing.T) {
	r := newRuntime(t, Options{})
	m := load(t, r, "chain", sandbox.Limits{})
	ctx := context.Background()
	inst, _ := m.Acquire(ctx)
	inst.Release()
	inst.Release() // harmless
	if _, err := inst.Data(16); err == nil {
		t.Error("Data after Release accepted")
	}
	if _, _, err := inst.Step(ctx, 0, 0, 16); err == nil {
		t.Error("Step after Release accepted")
	}
	if inst.Scratch() != nil {
		t.Error("Scratch after Release")
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctx); err == nil {
		t.Error("Acquire after Close accepted")
	}
}

// nativeStats is stats64 in Go, the reference.
func nativeStats(in []byte) []byte {
	var sum, lo, hi uint64
	lo = ^uint64(0)
	n := len(in) / 8
	for i := 0; i < n; i++ {
		x := le.Uint64(in[8*i:])
		sum += x
		lo = min(lo, x)
		hi = max(hi, x)
	}
	if n == 0 {
		lo = 0
	}
	out := le.AppendUint64(nil, uint64(n))
	out = le.AppendUint64(out, sum)
	out = le.AppendUint64(out, lo)
	return le.AppendUint64(out, hi)
}

func randomU64s(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, 0, 8*n)
	for i := 0; i < n; i++ {
		b = le.AppendUint64(b, rng.Uint64())
	}
	return b
}

func checkStats(t *testing.T, m sandbox.Module) {
	t.Helper()
	ctx := context.Background()
	for _, n := range []int{0, 1, 7, 1000, 1 << 17} { // up to 1 MiB
		in := randomU64s(n, uint64(n))
		out, err := sandbox.Compute(ctx, m, in, 64)
		if err != nil {
			t.Fatalf("%d values: %v", n, err)
		}
		if want := nativeStats(in); !bytes.Equal(out, want) {
			t.Fatalf("%d values: got %x, want %x", n, out, want)
		}
	}
	var fe *sandbox.FunctionError
	if _, err := sandbox.Compute(ctx, m, make([]byte, 12), 64); !errors.As(err, &fe) || fe.Code != -22 {
		t.Errorf("ragged input: %v, want EINVAL", err)
	}
	if _, err := sandbox.Compute(ctx, m, make([]byte, 16), 31); !errors.As(err, &fe) || fe.Code != -34 {
		t.Errorf("short output: %v, want ERANGE", err)
	}
}

func TestComputeStats64(t *testing.T) {
	r := newRuntime(t, Options{})
	m := load(t, r, "stats64", sandbox.Limits{})
	if m.HasPushdown() || !m.HasCompute() {
		t.Fatal("entries")
	}
	checkStats(t, m)

	ctx := context.Background()
	inst, _ := m.Acquire(ctx)
	defer inst.Release()
	if inst.Scratch() != nil {
		t.Error("compute-only module has a scratch")
	}
	if _, err := inst.Data(16); !errors.Is(err, sandbox.ErrNoEntry) {
		t.Errorf("Data: %v", err)
	}
	if _, _, err := inst.Step(ctx, 0, 0, 0); !errors.Is(err, sandbox.ErrNoEntry) {
		t.Errorf("Step: %v", err)
	}
	if _, err := inst.Output(16<<20 + 1); !errors.Is(err, sandbox.ErrOutput) {
		t.Errorf("Output over MaxOutput: %v", err)
	}
	if _, err := inst.Compute(ctx, 8<<20, 32); err == nil {
		t.Error("Compute past the Input buffer accepted")
	}
	// Growing the input moves the output; both stay usable.
	in, _ := inst.Input(8)
	copy(in, le.AppendUint64(nil, 5))
	inst.Output(32)
	in, _ = inst.Input(16)
	copy(in, le.AppendUint64(le.AppendUint64(nil, 5), 6))
	out, _ := inst.Output(32)
	if n, err := inst.Compute(ctx, 16, 32); err != nil || n != 32 || le.Uint64(out[8:]) != 11 {
		t.Errorf("after moving: n %d err %v sum %d", n, err, le.Uint64(out[8:]))
	}
}

func TestMemoryLimit(t *testing.T) {
	r := newRuntime(t, Options{})
	ctx := context.Background()
	// Growing a page at a time copies memory each time wazero's buffer
	// runs out of capacity, so give the 16 MiB case time to get there.
	for _, c := range []struct {
		limit int
		pages uint64
	}{{1 << 20, 16}, {0, 256}, {3<<16 + 100, 3}} {
		m := load(t, r, "bomb", sandbox.Limits{MemoryBytes: c.limit, Time: 10 * time.Second})
		out, err := sandbox.Compute(ctx, m, nil, 8)
		if err != nil {
			t.Fatal(err)
		}
		if got := le.Uint64(out); got != c.pages {
			t.Errorf("limit %d: memory grew to %d pages, want %d", c.limit, got, c.pages)
		}
	}
	// Buffers past the limit.
	m := load(t, r, "stats64", sandbox.Limits{MemoryBytes: 1 << 20})
	inst, _ := m.Acquire(ctx)
	if _, err := inst.Input(2 << 20); !errors.Is(err, sandbox.ErrMemory) {
		t.Errorf("Input over the memory limit: %v", err)
	}
	inst.Release()
	// Initial memory over the limit, or no room for the pushdown buffers.
	if _, err := r.Load(ctx, readModule(t, "bigmem"), sandbox.Limits{}); !errors.Is(err, sandbox.ErrBadModule) {
		t.Errorf("bigmem: %v", err)
	}
	if _, err := r.Load(ctx, readModule(t, "chain"), sandbox.Limits{MemoryBytes: 2 << 16}); !errors.Is(err, sandbox.ErrMemory) {
		t.Errorf("chain in 128 KiB: %v", err)
	}
}

// stepWants runs one 16-byte pushdown step of m and fails t unless it
// fails with want.
func stepWants(t *testing.T, m sandbox.Module, want error) {
	t.Helper()
	ctx := context.Background()
	inst, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Release()
	if _, err := inst.Data(16); err != nil {
		t.Fatal(err)
	}
	if _, _, err := inst.Step(ctx, 0, 0, 16); !errors.Is(err, want) {
		t.Fatalf("pushdown: %v, want %v", err, want)
	}
}

func TestHostile(t *testing.T) {
	r := newRuntime(t, Options{InitTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	good := load(t, r, "stats64", sandbox.Limits{})

	t.Run("loop", func(t *testing.T) {
		lim := sandbox.Limits{Time: 50 * time.Millisecond}
		m := load(t, r, "loop", lim)
		for i := 0; i < 3; i++ {
			start := time.Now()
			_, err := sandbox.Compute(ctx, m, []byte{1}, 8)
			if el := time.Since(start); !errors.Is(err, sandbox.ErrTimeout) || el > time.Second {
				t.Fatalf("compute: %v after %v", err, el)
			}
			inst, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			inst.Data(16)
			start = time.Now()
			_, _, err = inst.Step(ctx, 0, 0, 16)
			if el := time.Since(start); !errors.Is(err, sandbox.ErrTimeout) || el > time.Second {
				t.Fatalf("pushdown: %v after %v", err, el)
			}
			// The instance is closed: it fails fast and is not pooled.
			if _, _, err := inst.Step(ctx, 0, 0, 16); err == nil {
				t.Fatal("a timed-out instance ran again")
			}
			inst.Release()
			if n := len(m.free); n != 0 {
				t.Fatalf("%d broken instances pooled", n)
			}
			// The runtime keeps serving.
			if _, err := sandbox.Compute(ctx, good, le.AppendUint64(nil, 1), 32); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("caller deadline", func(t *testing.T) {
		m := load(t, r, "loop", sandbox.Limits{Time: 10 * time.Second})
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err := sandbox.Compute(cctx, m, nil, 8)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sandbox.ErrTimeout) {
			t.Fatalf("caller's deadline: %v", err)
		}
	})
	t.Run("oob", func(t *testing.T) {
		m := load(t, r, "oob", sandbox.Limits{})
		if _, err := sandbox.Compute(ctx, m, nil, 8); !errors.Is(err, sandbox.ErrMemory) {
			t.Fatalf("compute: %v", err)
		}
		stepWants(t, m, sandbox.ErrMemory)
	})
	t.Run("recursion", func(t *testing.T) {
		m := load(t, r, "recurse", sandbox.Limits{Time: time.Second})
		_, err := sandbox.Compute(ctx, m, nil, 8)
		if !errors.Is(err, sandbox.ErrMemory) && !errors.Is(err, sandbox.ErrTimeout) {
			t.Fatalf("recursion: %v", err)
		}
		t.Log(err)
	})
	t.Run("hugeout", func(t *testing.T) {
		m := load(t, r, "hugeout", sandbox.Limits{})
		if _, err := sandbox.Compute(ctx, m, nil, 8); !errors.Is(err, sandbox.ErrOutput) {
			t.Fatalf("compute: %v", err)
		}
		stepWants(t, m, sandbox.ErrStep)
	})
	t.Run("misc", func(t *testing.T) {
		m := load(t, r, "misc", sandbox.Limits{})
		_, err := sandbox.Compute(ctx, m, nil, 8)
		if !errors.Is(err, ErrTrap) || !errors.Is(err, sandbox.ErrFunction) || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("compute: %v", err)
		}
		stepWants(t, m, sandbox.ErrStep)
	})
	t.Run("load", func(t *testing.T) {
		stats := readModule(t, "stats64")
		cases := map[string][]byte{
			"empty":     nil,
			"garbage":   []byte("definitely not wasm"),
			"magic":     []byte("\x00asm"),
			"version":   []byte("\x00asm\x02\x00\x00\x00"),
			"truncated": stats[:len(stats)/2],
			"elf":       []byte("\x7fELF\x02\x01\x01"),
			"bigsect":   append([]byte("\x00asm\x01\x00\x00\x00\x01"), 0xff, 0xff, 0xff, 0xff, 0x0f),
			"leb":       append([]byte("\x00asm\x01\x00\x00\x00\x01"), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
			// Declared counts wazero would allocate by: a few bytes
			// asking for gigabytes.
			"locals": []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00" +
				"\x0a\x0a\x01\x08\x01\xff\xff\xff\xff\x0f\x7f\x0b"),
			"table":   []byte("\x00asm\x01\x00\x00\x00\x04\x07\x01\x70\x00\x80\x80\x80\x40"),
			"params":  []byte("\x00asm\x01\x00\x00\x00\x01\x08\x01\x60\xff\xff\xff\xff\x0f\x00"),
			"data":    []byte("\x00asm\x01\x00\x00\x00\x0b\x07\x01\x01\xff\xff\xff\xff\x0f"),
			"globals": []byte("\x00asm\x01\x00\x00\x00\x06\x07\xc0\xc0\xc0\x30\xc0\xc0\x00"),
		}
		for _, name := range []string{"import", "importmem", "noentry", "nomem", "badsig", "noheap", "bigmem", "startloop"} {
			cases[name] = readModule(t, name)
		}
		for name, b := range cases {
			start := time.Now()
			_, err := r.Load(ctx, b, sandbox.Limits{})
			if !errors.Is(err, sandbox.ErrBadModule) {
				t.Errorf("%s: %v, want ErrBadModule", name, err)
				continue
			}
			if time.Since(start) > 2*time.Second {
				t.Errorf("%s: took %v", name, time.Since(start))
			}
			t.Logf("%s: %v", name, err)
		}
	})
	// Still serving after all that.
	checkStats(t, good)
}

func TestCacheDir(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		r := newRuntime(t, Options{CacheDir: dir})
		checkStats(t, load(t, r, "stats64", sandbox.Limits{}))
		r.Close(context.Background())
	}
	if ents, _ := os.ReadDir(dir); len(ents) == 0 {
		t.Error("nothing cached")
	}
	if d, err := DefaultCacheDir(); err != nil || !strings.HasSuffix(d, filepath.Join("nearstore", "wazero")) {
		t.Errorf("DefaultCacheDir = %q, %v", d, err)
	}
}

func TestInterpreter(t *testing.T) {
	r := newRuntime(t, Options{Interpreter: true})
	lim := sandbox.Limits{Time: 10 * time.Second} // 1 MiB interpreted, maybe under -race
	checkStats(t, load(t, r, "stats64", lim))
	checkChain(t, load(t, r, "chain", lim))
}

func TestConcurrent(t *testing.T) {
	r := newRuntime(t, Options{})
	stats := load(t, r, "stats64", sandbox.Limits{})
	chain := load(t, r, "chain", sandbox.Limits{})
	files := chainFiles()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				in := randomU64s(1+(g*200+i)%300, uint64(g*1000+i))
				out, err := sandbox.Compute(ctx, stats, in, 32)
				if err != nil || !bytes.Equal(out, nativeStats(in)) {
					errs <- errors.Join(err, errors.New("wrong stats"))
					return
				}
				inst, err := chain.Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				if _, err := runners[i%2].run(ctx, inst, files, 0, 0, 16); err != nil {
					errs <- err
					return
				}
				if sum := le.Uint64(inst.Scratch()[8:]); sum != 15 {
					errs <- errors.New("wrong chain sum")
					return
				}
				inst.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// buildGo builds a Go function (a main package directory) for wasip1 as a
// reactor.
func buildGo(tb testing.TB, dir string) []byte {
	tb.Helper()
	if testing.Short() {
		tb.Skip("building a Go wasm module takes seconds")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("no go command")
	}
	out := filepath.Join(tb.TempDir(), "f.wasm")
	cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", dir, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestGoStats64(t *testing.T) {
	b := buildGo(t, "../../functions/go/examples/stats64go")
	r := newRuntime(t, Options{})
	m := loadBytes(t, r, b, sandbox.Limits{})
	if !m.hasAlloc || !m.HasCompute() {
		t.Fatal("not loaded as a Go module with compute")
	}
	checkStats(t, m)
	// Same answers as the C module.
	c := load(t, r, "stats64", sandbox.Limits{})
	in := randomU64s(5000, 42)
	got, err := sandbox.Compute(context.Background(), m, in, 32)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sandbox.Compute(context.Background(), c, in, 32)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Go %x, C %x (%v)", got, want, err)
	}
}

func TestGoChain(t *testing.T) {
	b := buildGo(t, "testdata/gochain")
	r := newRuntime(t, Options{})
	checkChain(t, loadBytes(t, r, b, sandbox.Limits{}))
}

// A WASI command module (go build without -buildmode=c-shared) exits in
// _start, so it is refused with a hint.
func TestGoCommandRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go module")
	}
	dir := t.TempDir()
	// Not "cmd": go build refuses a module of that name (it is the
	// standard library's), which once made this test skip every time.
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/gocommand\ngo 1.24\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

//go:wasmexport compute
func compute(a, b, c, d uint32) int32 { return 0 }

func main() {}
`), 0o644)
	out := filepath.Join(dir, "f.wasm")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=-mod=mod")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	b, _ := os.ReadFile(out)
	r := newRuntime(t, Options{})
	_, err := r.Load(context.Background(), b, sandbox.Limits{})
	if !errors.Is(err, sandbox.ErrBadModule) || !strings.Contains(err.Error(), "c-shared") {
		t.Fatalf("command module: %v", err)
	}
}

func FuzzWasmLoad(f *testing.F) {
	ents, _ := filepath.Glob("testdata/*.wasm")
	for _, e := range ents {
		b, _ := os.ReadFile(e)
		f.Add(b)
	}
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	r := newRuntime(f, Options{InitTimeout: 20 * time.Millisecond})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := r.Load(ctx, b, sandbox.Limits{Time: 10 * time.Millisecond, MemoryBytes: 1 << 20})
		if err != nil {
			return
		}
		defer m.Close(ctx)
		if m.HasCompute() {
			sandbox.Compute(ctx, m, []byte{1, 2, 3, 4, 5, 6, 7, 8}, 64)
		}
		if m.HasPushdown() {
			inst, err := m.Acquire(ctx)
			if err != nil {
				return
			}
			if d, err := inst.Data(16); err == nil {
				copy(d, record(0, 1))
				inst.Step(ctx, 0, 0, 16)
			}
			inst.Release()
		}
	})
}

func BenchmarkComputeStats64_1MiB(b *testing.B) {
	in := randomU64s(1<<17, 1)
	b.Run("native", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			nativeStats(in)
		}
	})
	run := func(b *testing.B, mod []byte) {
		r := newRuntime(b, Options{})
		m := loadBytes(b, r, mod, sandbox.Limits{})
		ctx := context.Background()
		inst, err := sandbox.Prepare(ctx, m, in, 32)
		if err != nil {
			b.Fatal(err)
		}
		defer inst.Release()
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			if _, err := inst.Compute(ctx, len(in), 32); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("wasm-c", func(b *testing.B) { run(b, readModule(b, "stats64")) })
	b.Run("wasm-go", func(b *testing.B) { run(b, buildGo(b, "../../functions/go/examples/stats64go")) })
}

func BenchmarkPushdownStep(b *testing.B) {
	r := newRuntime(b, Options{})
	m := load(b, r, "chain", sandbox.Limits{})
	ctx := context.Background()
	b.Run("step", func(b *testing.B) {
		inst, _ := m.Acquire(ctx)
		defer inst.Release()
		d, _ := inst.Data(16)
		copy(d, record(32, 1))
		for b.Loop() {
			if _, _, err := inst.Step(ctx, 0, 0, 16); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A request of 7 steps as the executor runs it, driven by the runtime
	// (drive) and step by step (execute): ns/op is per request.
	f := make([]byte, 7*16)
	for i := range 6 {
		copy(f[16*i:], record(uint64(16*(i+1)), 1))
	}
	copy(f[16*6:], record(0, 1))
	files := [][]byte{f}
	for _, run := range []struct {
		name string
		run  func(ctx context.Context, inst sandbox.Instance, files [][]byte, file uint32, off, n uint64) (int, error)
	}{{"drive-7", drive}, {"step-7", execute}} {
		b.Run(run.name, func(b *testing.B) {
			for b.Loop() {
				inst, err := m.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if steps, err := run.run(ctx, inst, files, 0, 0, 16); err != nil || steps != 7 {
					b.Fatal(steps, err)
				}
				inst.Release()
			}
		})
	}
	b.Run("acquire-step-release", func(b *testing.B) {
		for b.Loop() {
			inst, err := m.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			d, _ := inst.Data(16)
			copy(d, record(0, 1))
			if _, _, err := inst.Step(ctx, 0, 0, 16); err != nil {
				b.Fatal(err)
			}
			inst.Release()
		}
	})
}
