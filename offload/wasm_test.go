package offload_test

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	iofs "io/fs"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
)

// taskWasm is testdata/wasm/task.c built: args[0], a letter, picks what
// it does.
//
//go:embed testdata/wasm/task.wasm
var taskWasm []byte

// TestWasmTaskCopy: a wasm module sent with the request copies its
// inputs into its output on either kind of engine, as the Go copy task
// does, and the output is committed under its name.
func TestWasmTaskCopy(t *testing.T) {
	eachKind(t, func(t *testing.T, r *rig, c *offload.Client) {
		ctx := context.Background()
		a := r.write("a", 100_003, 1)
		b := r.write("b", 70_000, 2)
		res, err := r.fsys.OffloadModule(ctx, c, "wasm-copy", taskWasm, []offloadfs.OffloadFile{
			{In: r.open("a")}, {Out: "ab", Reserve: 1 << 20}, {In: r.open("b")},
		}, []byte("c"))
		if err != nil {
			t.Fatal(err)
		}
		want := append(append([]byte{}, a...), b...)
		if res.Local || len(res.Output) != 8 || binary.LittleEndian.Uint64(res.Output) != uint64(len(want)) {
			t.Fatalf("local %v, output %x; want %d bytes copied on the engine", res.Local, res.Output, len(want))
		}
		mustEqual(t, "ab", r.contents(r.fsys, "ab"), want)
		mustEqual(t, "a", r.contents(r.fsys, "a"), a)
		testfs.Fsck(t, r.fsys)
	})
}

// TestWasmTaskOutsideGrant: offload_read and offload_write refuse a wasm
// task what its grant does not cover — past a file's end, a write to an
// input, a file the request does not have, memory the module does not
// have — with a status the module sees, and nothing changes.
func TestWasmTaskOutsideGrant(t *testing.T) {
	eachKind(t, func(t *testing.T, r *rig, c *offload.Client) {
		ctx := context.Background()
		a := r.write("a", 5000, 1)
		for _, tc := range []struct {
			mode byte
			want offload.WasmErr
		}{{'r', offload.WasmOutsideGrant}, {'w', offload.WasmOutsideGrant}, {'f', offload.WasmOutsideGrant}, {'m', offload.WasmBadMemory}} {
			res, err := r.fsys.OffloadModule(ctx, c, "wasm-hostile", taskWasm, []offloadfs.OffloadFile{
				{In: r.open("a")}, {Out: "out", Reserve: 4096},
			}, []byte{tc.mode})
			if err != nil {
				t.Fatalf("mode %c: %v", tc.mode, err)
			}
			if got := offload.WasmErr(int32(binary.LittleEndian.Uint32(res.Output))); got != tc.want {
				t.Fatalf("mode %c: status %d, want %d", tc.mode, got, tc.want)
			}
		}
		mustEqual(t, "a", r.contents(r.fsys, "a"), a)
		if rep := testfs.Fsck(t, r.fsys); rep.Orphans != 0 {
			t.Fatalf("%d orphans", rep.Orphans)
		}
	})
}

// eachKind runs f on a fresh rig with an engine of each kind (default
// configuration) and its client.
func eachKind(t *testing.T, f func(t *testing.T, r *rig, c *offload.Client)) {
	for _, kind := range []engineKind{onPeer, inTarget} {
		t.Run(kind.String(), func(t *testing.T) {
			r := newRig(t)
			_, c := r.engine(kind, offload.Config{})
			f(t, r, c)
		})
	}
}

// TestWasmTaskNeverEnds: a module that loops forever is ended at the
// engine's task timeout, its output is never committed, and the engine
// runs the next task.
func TestWasmTaskNeverEnds(t *testing.T) {
	r := newRig(t)
	// Long enough for the copy after it on a loaded machine.
	_, c := r.engine(onPeer, offload.Config{TaskTimeout: 2 * time.Second})
	ctx := context.Background()
	r.write("a", 5000, 1)
	_, err := r.fsys.OffloadModule(ctx, c, "wasm-spin", taskWasm, []offloadfs.OffloadFile{
		{In: r.open("a")}, {Out: "spun", Reserve: 4096},
	}, []byte("s"))
	if !errors.Is(err, offload.ErrTaskEnded) {
		t.Fatalf("%v, want ErrTaskEnded", err)
	}
	if _, err := r.fsys.Stat("spun"); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("the output of a task that never ended exists: %v", err)
	}
	if _, err := r.fsys.OffloadModule(ctx, c, "wasm-copy", taskWasm, []offloadfs.OffloadFile{
		{In: r.open("a")}, {Out: "copied", Reserve: 8192},
	}, []byte("c")); err != nil {
		t.Fatalf("the next task: %v", err)
	}
	testfs.Fsck(t, r.fsys)
}

// TestWasmTaskBadModules: what is not a task module is refused before
// anything runs, and an engine configured without wasm refuses modules.
func TestWasmTaskBadModules(t *testing.T) {
	r := newRig(t)
	_, c := r.engine(onPeer, offload.Config{})
	ctx := context.Background()
	r.write("a", 10, 1)
	// A module importing WASI: (import "wasi_snapshot_preview1" "proc_exit" (func (param i32)))
	wasi := []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
		1, 5, 1, 0x60, 1, 0x7f, 0, // type: (i32) -> ()
		2, 36, 1, 22, 'w', 'a', 's', 'i', '_', 's', 'n', 'a', 'p', 's', 'h', 'o', 't', '_', 'p', 'r', 'e', 'v', 'i', 'e', 'w', '1',
		9, 'p', 'r', 'o', 'c', '_', 'e', 'x', 'i', 't', 0, 0}
	for name, m := range map[string][]byte{
		"not wasm":    []byte("not a module"),
		"empty wasm":  {0, 'a', 's', 'm', 1, 0, 0, 0},
		"wasi import": wasi, // refused for the import, though it lacks run too
	} {
		_, err := r.fsys.OffloadModule(ctx, c, "bad", m, []offloadfs.OffloadFile{{In: r.open("a")}}, []byte("c"))
		if !errors.Is(err, offload.ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	_, c2 := r.engine(onPeer, offload.Config{WasmMemory: -1})
	if _, err := r.fsys.OffloadModule(ctx, c2, "copy", taskWasm, []offloadfs.OffloadFile{{In: r.open("a")}}, []byte("c")); !errors.Is(err, offload.ErrUnknownTask) {
		t.Errorf("an engine without wasm: %v, want ErrUnknownTask", err)
	}
}
