package functions_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// Modes of testdata/hostile.c.
const (
	modeOK      = 0
	modeLoop    = 1
	modeOOB     = 2
	modeHuge    = 3
	modeBadFile = 4
	modePastEnd = 5
	modeForever = 6
	modeStall   = 7
	modeFail    = 8
	modeBomb    = 9
	modeFill    = 10
	modeTrap    = 11
)

// hostileFail is the code MODE_FAIL returns.
const hostileFail = -1000

// hostileScratch is a pushdown's initial scratch for hostile.c.
func hostileScratch(mode uint32, arg uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, mode)
	b = binary.LittleEndian.AppendUint32(b, 0)
	return binary.LittleEndian.AppendUint64(b, arg)
}

// hostileInput is a compute's parameters for hostile.c.
func hostileInput(mode uint32) []byte {
	return binary.LittleEndian.AppendUint64(nil, uint64(mode))
}

// hostileFiles is the file table of every hostile request: file 0 in two
// extents out of order, ending 100 bytes short of its last block; file 1
// one extent. Nothing else on the namespace may be read or written.
var hostileFiles = []pushdown.File{
	{Size: 8*bs - 100, Extents: []pushdown.Extent{{LBA: 3000, Blocks: 4}, {LBA: 2000, Blocks: 4}}},
	{Size: 2 * bs, Extents: []pushdown.Extent{{LBA: 6000, Blocks: 2}}},
}

// fillRange is the one λ write range the hostile tests let succeed: blocks
// 2 to 5 of file 0, across its extent boundary.
var fillRange = host.Start{Offset: 2 * bs, Length: 4 * bs}

// outcome is what a hostile call must come back with: a status, or a
// function error with a code.
type outcome struct {
	status nvme.Status
	code   int32 // with nvme.StatusFunctionError: the code
}

func (o outcome) String() string {
	if o.status == nvme.StatusFunctionError {
		return fmt.Sprintf("FunctionError %d", o.code)
	}
	return o.status.String()
}

// checkOutcome fails unless err is the outcome wanted, as a caller sees
// it with errors.As and errors.Is.
func checkOutcome(t testing.TB, what string, err error, want outcome) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want %v", what, want)
		return
	}
	if !errors.Is(err, &nvme.StatusError{Status: want.status}) {
		t.Errorf("%s: %v, want %v", what, err, want)
		return
	}
	if want.status == nvme.StatusFunctionError {
		var fe *host.FunctionError
		if !errors.As(err, &fe) || fe.Code != want.code || !errors.Is(err, sandbox.ErrFunction) {
			t.Errorf("%s: %v, want a *host.FunctionError with code %d", what, err, want.code)
		}
	}
	t.Logf("%s: %v", what, err)
}

// hostileCall is one hostile request.
type hostileCall struct {
	name string
	wasm bool // applies to wasm modules
	ebpf bool // applies to eBPF modules
	run  func(ctx context.Context, ns *host.Namespace, fn sandbox.ID) error
	want outcome // the same for both runtimes
}

func pushdownCall(mode uint32, arg uint64, start host.Start) func(context.Context, *host.Namespace, sandbox.ID) error {
	return func(ctx context.Context, ns *host.Namespace, fn sandbox.ID) error {
		_, err := ns.Pushdown(ctx, fn, hostileFiles, start, hostileScratch(mode, arg))
		return err
	}
}

func lambdaReadCall(mode uint32, start host.Start, outCap int) func(context.Context, *host.Namespace, sandbox.ID) error {
	return func(ctx context.Context, ns *host.Namespace, fn sandbox.ID) error {
		_, err := ns.LambdaRead(ctx, fn, hostileFiles, start, hostileInput(mode), outCap)
		return err
	}
}

func lambdaWriteCall(mode uint32, start host.Start) func(context.Context, *host.Namespace, sandbox.ID) error {
	return func(ctx context.Context, ns *host.Namespace, fn sandbox.ID) error {
		_, err := ns.LambdaWrite(ctx, fn, hostileFiles, start, hostileInput(mode), []byte("some input"))
		return err
	}
}

var block0 = host.Start{Length: bs}

// hostileCalls are the misbehaving requests TestHostile sends, with what
// each must come back as.
var hostileCalls = []hostileCall{
	// Pushdown.
	{name: "pushdown: out-of-bounds pointer", wasm: true, ebpf: true,
		run: pushdownCall(modeOOB, 0, block0), want: outcome{status: nvme.StatusFunctionMemory}},
	{name: "pushdown: 128 KiB in one step", wasm: true, ebpf: true,
		run: pushdownCall(modeHuge, 0, block0), want: outcome{status: nvme.StatusStepLimit}},
	{name: "pushdown: resubmit to a file not in the table", wasm: true, ebpf: true,
		run: pushdownCall(modeBadFile, 0, block0), want: outcome{status: nvme.StatusOutsideFile}},
	{name: "pushdown: resubmit past the file's end", wasm: true, ebpf: true,
		run: pushdownCall(modePastEnd, 8*bs-100-511, block0), want: outcome{status: nvme.StatusOutsideFile}},
	{name: "pushdown: resubmit at the file's end", wasm: true, ebpf: true,
		run: pushdownCall(modePastEnd, 8*bs-100, block0), want: outcome{status: nvme.StatusOutsideFile}},
	{name: "pushdown: resubmit at 2^64-256", wasm: true, ebpf: true,
		run: pushdownCall(modePastEnd, 1<<64-256, block0), want: outcome{status: nvme.StatusOutsideFile}},
	{name: "pushdown: resubmit forever", wasm: true, ebpf: true,
		run: pushdownCall(modeForever, 0, block0), want: outcome{status: nvme.StatusStepLimit}},
	{name: "pushdown: neither done nor a read", wasm: true, ebpf: true,
		run: pushdownCall(modeStall, 0, block0), want: outcome{status: nvme.StatusStepLimit}},
	{name: "pushdown: error code", wasm: true, ebpf: true,
		run: pushdownCall(modeFail, 0, block0), want: outcome{status: nvme.StatusFunctionError, code: hostileFail}},
	{name: "pushdown: memory bomb", wasm: true,
		run: pushdownCall(modeBomb, 0, block0), want: outcome{status: nvme.StatusFunctionMemory}},
	{name: "pushdown: start past the file's end", wasm: true, ebpf: true,
		run: pushdownCall(modeOK, 0, host.Start{Offset: 7 * bs, Length: bs}), want: outcome{status: nvme.StatusOutsideFile}},
	{name: "pushdown: start in a file not in the table", wasm: true, ebpf: true,
		run: pushdownCall(modeOK, 0, host.Start{File: 2, Length: bs}), want: outcome{status: nvme.StatusBadFunctionRequest}},
	{name: "pushdown: extent outside the namespace", wasm: true, ebpf: true,
		run: func(ctx context.Context, ns *host.Namespace, fn sandbox.ID) error {
			files := []pushdown.File{{Size: 2 * bs, Extents: []pushdown.Extent{{LBA: nsSize/bs - 1, Blocks: 2}}}}
			_, err := ns.Pushdown(ctx, fn, files, block0, hostileScratch(modeOK, 0))
			return err
		}, want: outcome{status: nvme.StatusOutsideFile}},
	{name: "pushdown: scratch over 4 KiB", wasm: true, ebpf: true,
		run: func(ctx context.Context, ns *host.Namespace, fn sandbox.ID) error {
			_, err := ns.Pushdown(ctx, fn, hostileFiles, block0, make([]byte, sandbox.ScratchSize+1))
			return err
		}, want: outcome{status: nvme.StatusBadFunctionRequest}},
	// λ read.
	{name: "λ read: out-of-bounds pointer", wasm: true, ebpf: true,
		run: lambdaReadCall(modeOOB, block0, 64), want: outcome{status: nvme.StatusFunctionMemory}},
	{name: "λ read: output longer than its buffer", wasm: true, ebpf: true,
		run: lambdaReadCall(modeHuge, block0, 64), want: outcome{status: nvme.StatusFunctionOutput}},
	{name: "λ read: error code", wasm: true, ebpf: true,
		run: lambdaReadCall(modeFail, block0, 64), want: outcome{status: nvme.StatusFunctionError, code: hostileFail}},
	{name: "λ read: memory bomb", wasm: true,
		run: lambdaReadCall(modeBomb, block0, 64), want: outcome{status: nvme.StatusFunctionMemory}},
	{name: "λ read: trap", wasm: true,
		run: lambdaReadCall(modeTrap, block0, 64), want: outcome{status: nvme.StatusFunctionError, code: 0}},
	{name: "pushdown: trap", wasm: true,
		run: pushdownCall(modeTrap, 0, block0), want: outcome{status: nvme.StatusFunctionError, code: 0}},
	{name: "λ read: range past the file's end", wasm: true, ebpf: true,
		run: lambdaReadCall(modeOK, host.Start{Offset: bs, Length: 7 * bs}, 8*bs), want: outcome{status: nvme.StatusOutsideFile}},
	{name: "λ read: 4 GiB range", wasm: true, ebpf: true,
		run: lambdaReadCall(modeOK, host.Start{Length: 1<<32 - 1}, 64), want: outcome{status: nvme.StatusOutsideFile}},
	// λ write: none of these may write anything.
	{name: "λ write: output longer than the range", wasm: true, ebpf: true,
		run: lambdaWriteCall(modeHuge, fillRange), want: outcome{status: nvme.StatusFunctionOutput}},
	{name: "λ write: error code", wasm: true, ebpf: true,
		run: lambdaWriteCall(modeFail, fillRange), want: outcome{status: nvme.StatusFunctionError, code: hostileFail}},
	{name: "λ write: out-of-bounds pointer", wasm: true, ebpf: true,
		run: lambdaWriteCall(modeOOB, fillRange), want: outcome{status: nvme.StatusFunctionMemory}},
	{name: "λ write: range past the file's end", wasm: true, ebpf: true,
		run: lambdaWriteCall(modeFill, host.Start{Offset: 4 * bs, Length: 4 * bs}), want: outcome{status: nvme.StatusOutsideFile}},
	{name: "λ write: range in file 1 past its end", wasm: true, ebpf: true,
		run: func(ctx context.Context, ns *host.Namespace, fn sandbox.ID) error {
			_, err := ns.LambdaWrite(ctx, fn, hostileFiles, host.Start{File: 1, Offset: bs, Length: 2 * bs}, hostileInput(modeFill), nil)
			return err
		}, want: outcome{status: nvme.StatusOutsideFile}},
	{name: "λ write: unaligned range", wasm: true, ebpf: true,
		run: lambdaWriteCall(modeFill, host.Start{Offset: 100, Length: bs}), want: outcome{status: nvme.StatusBadFunctionRequest}},
}

// TestHostile sends hostile functions over the wire, in both runtimes:
// out-of-bounds pointers, oversized steps and outputs, resubmissions to
// files the request does not name and past files' ends, endless
// resubmission, memory bombs, broken requests. Each comes back to the
// caller as the status docs/PROTOCOL.md names (a *host.FunctionError for
// the function's own codes); meanwhile a second host does verified I/O and
// λ reads without a single failure; and the target reads nothing outside
// the request's files and writes nothing at all, except the one λ write
// the test lets succeed. Malformed modules are refused at Function Load,
// and unloading works on functions in use and fails on unknown ones.
func TestHostile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: sandbox.Limits{Time: 10 * time.Second, MemoryBytes: 4 << 20}})
	vol := e.vols[0]
	stamp(t, vol, 0, nsSize)
	bg := e.startBackground()
	ctx := context.Background()
	var allowed []access
	for _, f := range hostileFiles {
		allowed = append(allowed, fileSpans(f)...)
	}
	filled := fileRangeSpans(hostileFiles[0], int64(fillRange.Offset), int64(fillRange.Length))

	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			fn := e.loadBytes(hostileModule(t, kind))
			for _, c := range hostileCalls {
				if kind == sandbox.KindWasm && !c.wasm || kind == sandbox.KindEBPF && !c.ebpf {
					continue
				}
				vol.record()
				err := c.run(ctx, e.ns, fn)
				checkOutcome(t, c.name, err, c.want)
				for _, a := range vol.accesses() {
					if a.write {
						t.Errorf("%s: wrote %d bytes at %d", c.name, a.n, a.off)
					} else if !within(a, allowed) {
						t.Errorf("%s: read %d bytes at %d, outside the request's files", c.name, a.n, a.off)
					}
				}
				bg.progress()
			}

			// The module still works after all that, and a λ write that
			// behaves writes its range and nothing else.
			if _, err := e.ns.Pushdown(ctx, fn, hostileFiles, block0, hostileScratch(modeOK, 0)); err != nil {
				t.Fatalf("a good pushdown after the hostile ones: %v", err)
			}
			vol.record()
			n, err := e.ns.LambdaWrite(ctx, fn, hostileFiles, fillRange, hostileInput(modeFill), nil)
			if err != nil || n != int(fillRange.Length) {
				t.Fatalf("a good λ write: %d bytes, %v", n, err)
			}
			for _, a := range vol.accesses() {
				if !a.write || !within(a, filled) {
					t.Errorf("good λ write: accessed %d bytes at %d (write %v), outside its range", a.n, a.off, a.write)
				}
			}
			got := readFile(t, vol, hostileFiles[0])[fillRange.Offset:][:fillRange.Length]
			for i, b := range got {
				if b != 0xa5 {
					t.Fatalf("byte %d of the λ write's range is %#x, want 0xa5", i, b)
				}
			}
		})
	}

	t.Run("load", func(t *testing.T) {
		// Malformed modules the host sends (their magic bytes pass its
		// check): each refused with Function Rejected, nothing loaded.
		hostile := readTestdata(t, "hostile.wasm")
		rejected := map[sandbox.ID]string{}
		for name, mod := range map[string][]byte{
			"wasm garbage":           []byte("\x00asm\x01\x00\x00\x00garbage"),
			"wasm truncated":         hostile[:len(hostile)/2],
			"wasm huge memory":       readTestdata(t, "bigmem.wasm"),
			"wasm import":            readTestdata(t, "import.wasm"),
			"ELF garbage":            []byte("\x7fELF\x02\x01\x01garbage"),
			"ELF truncated":          readTestdata(t, "hostile.o")[:300],
			"eBPF disallowed helper": readTestdata(t, "badhelper.o"),
		} {
			_, err := e.ctrl.LoadFunction(ctx, mod)
			checkOutcome(t, name, err, outcome{status: nvme.StatusFunctionRejected})
			rejected[sandbox.IDOf(mod)] = name
			bg.progress()
		}
		// Straight to the wire: a module of no known kind, and modules
		// declared as the other kind.
		for name, c := range map[string]struct {
			kind uint32
			mod  []byte
		}{
			"unknown kind detected":   {0, []byte("neither wasm nor ELF")},
			"kind 7":                  {7, readTestdata(t, "import.wasm")},
			"kind 7, already loaded":  {7, readTestdata(t, "hostile.wasm")},
			"ELF declared as wasm":    {uint32(sandbox.KindWasm), readTestdata(t, "badhelper.o")},
			"wasm declared as an ELF": {uint32(sandbox.KindEBPF), readTestdata(t, "import.wasm")},
		} {
			cmd := nvme.Command{Opcode: nvme.AdminFunctionLoad, CDW10: c.kind, CDW11: uint32(len(c.mod))}
			_, err := e.ctrl.Admin(ctx, &cmd, c.mod, nil)
			checkOutcome(t, name, err, outcome{status: nvme.StatusFunctionRejected})
			if name != "kind 7, already loaded" {
				rejected[sandbox.IDOf(c.mod)] = name
			}
		}
		// A module the host can tell is neither: refused before sending.
		if _, err := e.ctrl.LoadFunction(ctx, []byte("nope")); !errors.Is(err, sandbox.ErrBadModule) {
			t.Errorf("garbage: %v, want sandbox.ErrBadModule", err)
		}
		fs, err := e.ctrl.ListFunctions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if name, ok := rejected[f.ID]; ok {
				t.Errorf("%s: refused, yet listed as loaded", name)
			}
		}
	})

	t.Run("wrong entry", func(t *testing.T) {
		// A pushdown of a compute-only function, λ calls of a
		// pushdown-only one: refused without running anything.
		for _, kind := range kinds {
			stats, btree := e.load("stats64", kind), e.load("btree_lookup", kind)
			vol.record()
			_, err := e.ns.Pushdown(ctx, stats, hostileFiles, block0, nil)
			checkOutcome(t, "pushdown of stats64", err, outcome{status: nvme.StatusFunctionRejected})
			_, err = e.ns.LambdaRead(ctx, btree, hostileFiles, block0, nil, 64)
			checkOutcome(t, "λ read of btree_lookup", err, outcome{status: nvme.StatusFunctionRejected})
			_, err = e.ns.LambdaWrite(ctx, btree, hostileFiles, fillRange, nil, nil)
			checkOutcome(t, "λ write of btree_lookup", err, outcome{status: nvme.StatusFunctionRejected})
			if acc := vol.accesses(); len(acc) != 0 {
				t.Errorf("%v: refused calls touched the namespace: %v", kind, acc)
			}
		}
	})

	t.Run("unload", func(t *testing.T) {
		var unknown sandbox.ID
		unknown[0] = 1
		err := e.ctrl.UnloadFunction(ctx, unknown)
		checkOutcome(t, "unload an unknown ID", err, outcome{status: nvme.StatusFunctionNotFound})
		_, err = e.ns.Pushdown(ctx, unknown, hostileFiles, block0, nil)
		checkOutcome(t, "pushdown of an unknown ID", err, outcome{status: nvme.StatusFunctionNotFound})
		_, err = e.ns.LambdaRead(ctx, unknown, hostileFiles, block0, nil, 64)
		checkOutcome(t, "λ read of an unknown ID", err, outcome{status: nvme.StatusFunctionNotFound})
		_, err = e.ns.LambdaWrite(ctx, unknown, hostileFiles, fillRange, nil, nil)
		checkOutcome(t, "λ write of an unknown ID", err, outcome{status: nvme.StatusFunctionNotFound})

		for _, kind := range kinds {
			// Unload a function while a pushdown runs it: the pushdown is
			// held in its first read (file 1) until the unload is done.
			fn := e.loadBytes(hostileModule(t, kind))
			reading, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			vol.setGate(func(off, n int64) {
				if off == 6000*bs {
					once.Do(func() { close(reading) })
					<-release
				}
			})
			done := make(chan error, 1)
			go func() {
				// It resubmits the same block of file 1 until Step Limit.
				_, err := e.ns.Pushdown(ctx, fn, hostileFiles, host.Start{File: 1, Length: bs}, hostileScratch(modeForever, 0))
				done <- err
			}()
			<-reading
			if err := e.ctrl.UnloadFunction(ctx, fn); err != nil {
				t.Errorf("%v: unload while in use: %v", kind, err)
			}
			_, err := e.ns.Pushdown(ctx, fn, hostileFiles, block0, hostileScratch(modeOK, 0))
			checkOutcome(t, "pushdown after unload", err, outcome{status: nvme.StatusFunctionNotFound})
			close(release)
			vol.setGate(nil)
			// The request that was running finishes as it would have.
			checkOutcome(t, "the pushdown running during unload", <-done, outcome{status: nvme.StatusStepLimit})
			err = e.ctrl.UnloadFunction(ctx, fn)
			checkOutcome(t, "unload twice", err, outcome{status: nvme.StatusFunctionNotFound})
			// Loading it again works.
			fn = e.loadBytes(hostileModule(t, kind))
			if _, err := e.ns.Pushdown(ctx, fn, hostileFiles, block0, hostileScratch(modeOK, 0)); err != nil {
				t.Errorf("%v: pushdown after reloading: %v", kind, err)
			}
			bg.progress()
		}
	})

	bg.stop()
	checkStamp(t, vol, 0, nsSize, filled...)
}

// TestHostileLoop: functions that never return, in pushdown, λ read and
// λ write, in both runtimes, on a target whose time limit is short. Each
// call fails with Function Timeout; the module keeps working afterwards;
// a second host's verified I/O goes on throughout; nothing is written.
func TestHostileLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: sandbox.Limits{Time: 200 * time.Millisecond}})
	vol := e.vols[0]
	stamp(t, vol, 0, nsSize)
	bg := e.startBackground()
	ctx := context.Background()
	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			fn := e.loadBytes(hostileModule(t, kind))
			for i := range 2 {
				for _, c := range []hostileCall{
					{name: "pushdown", run: pushdownCall(modeLoop, 0, block0)},
					{name: "λ read", run: lambdaReadCall(modeLoop, block0, 64)},
					{name: "λ write", run: lambdaWriteCall(modeLoop, fillRange)},
				} {
					err := c.run(ctx, e.ns, fn)
					checkOutcome(t, fmt.Sprintf("%s, round %d", c.name, i), err, outcome{status: nvme.StatusFunctionTimeout})
					bg.progress()
				}
			}
			if _, err := e.ns.Pushdown(ctx, fn, hostileFiles, block0, hostileScratch(modeOK, 0)); err != nil {
				t.Errorf("a good pushdown after the loops: %v", err)
			}
			res, err := e.ns.LambdaRead(ctx, fn, hostileFiles, block0, hostileInput(modeOK), bs)
			if err != nil || len(res.Output) != bs {
				t.Errorf("a good λ read after the loops: %d bytes, %v", len(res.Output), err)
			}
		})
	}
	bg.stop()
	checkStamp(t, vol, 0, nsSize)
}
