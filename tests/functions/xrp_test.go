package functions_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/volume"
)

// buildBPF compiles the C source src (in testdata) with clang -target bpf
// and the given flags, and returns the object. It skips the test when
// clang is not installed: CI has it (make test runs functions-check, which
// installs it, before the tests).
func buildBPF(t *testing.T, src string, flags ...string) []byte {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skipf("clang not found (%v): this test builds %s from C at test time; "+
			"install clang (make functions-check does, apt-get install clang) to run it", err, src)
	}
	out := filepath.Join(t.TempDir(), "prog.o")
	args := append([]string{"-target", "bpf", "-c", "-o", out, filepath.Join("testdata", src)}, flags...)
	if b, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		t.Fatalf("clang %v: %v\n%s", args, err, b)
	}
	obj, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// The layout of testdata/xrp_bpfkv_get.c's request in scratch: BPF-KV's
// struct ScatterGatherQuery.
const (
	sgKeys      = 32
	sgRoot      = 0
	sgNKeys     = 24
	sgKeysOff   = 32
	sgValuesOff = 288
	sgValueSize = 65 // struct MaybeValue {char found; u8 value[64]}
	fileMask    = 1 << 63
)

// bpfkvOneFile lays a B+-tree out as BPF-KV does for XRP: index and
// values in one file. It builds the tree with functions.BuildBTreeFanout
// (root at 0, nodes top-down) and appends the value log after the index,
// so a leaf's pointer is the value's offset in the same file, with
// BPF-KV's FILE_MASK bit set as BPF-KV writes it.
func bpfkvOneFile(t *testing.T, keys []uint64, fanout int) []byte {
	t.Helper()
	index, values := functions.BuildBTreeFanout(keys, functions.DefaultValueSize, fanout)
	file := slices.Clone(index)
	for off := 0; off < len(index); off += functions.NodeSize {
		n, err := functions.ParseNode(index[off:])
		if err != nil {
			t.Fatal(err)
		}
		if n.Type != functions.NodeLeaf {
			continue
		}
		for i, k := range n.Key {
			if k != functions.KeyNone {
				n.Ptr[i] = (uint64(len(index)) + n.Ptr[i]) | fileMask
			}
		}
		node, _ := n.AppendBinary(nil)
		copy(file[off:], node)
	}
	file = append(file, values...)
	for len(file)%functions.NodeSize != 0 {
		file = append(file, 0)
	}
	return file
}

// TestXRPBPFKV builds an XRP program for BPF-KV (testdata/xrp_bpfkv_get.c:
// its own section name and headers, unsigned int return, index and values
// in one file) from C, loads it unchanged on a real target, and looks keys
// up with one pushdown command per batch, checking every value against
// the tree's keys and the step count against the tree's depth.
func TestXRPBPFKV(t *testing.T) {
	builds := []struct {
		name  string
		flags []string
	}{
		// XRP's Makefile: -O2 -g, clang's default CPU (v1: no ALU32/JMP32).
		{"as XRP builds it", []string{"-O2", "-g"}},
		{"mcpu v3", []string{"-O2", "-mcpu=v3"}},
	}
	trees := []struct {
		name   string
		keys   int
		fanout int
	}{
		{"full nodes", 2000, functions.Fanout},
		{"deep", 300, 3},
	}
	type object struct {
		name string
		obj  []byte
	}
	var objs []object
	for _, b := range builds {
		objs = append(objs, object{b.name, buildBPF(t, "xrp_bpfkv_get.c", b.flags...)})
	}
	// XRP_GET_OBJ names an object built from BPF-KV's own xrp-bpf/get.c
	// (with XRP's linux/bpf.h and libbpf's bpf_helpers.h), to run it
	// through the same checks: its request layout is the one above.
	if path := os.Getenv("XRP_GET_OBJ"); path != "" {
		obj, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, object{"XRP_GET_OBJ", obj})
	}
	for _, o := range objs {
		for _, tr := range trees {
			t.Run(o.name+"/"+tr.name, func(t *testing.T) {
				testXRPBPFKV(t, o.obj, tr.keys, tr.fanout)
			})
		}
	}
}

func testXRPBPFKV(t *testing.T, obj []byte, nkeys, fanout int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(nkeys), uint64(fanout)))
	present := map[uint64]bool{}
	var keys []uint64
	for len(keys) < nkeys {
		k := rng.Uint64N(1 << 40)
		if !present[k] {
			present[k] = true
			keys = append(keys, k)
		}
	}
	db := bpfkvOneFile(t, keys, fanout)
	depth := 1 // nodes on a root-to-leaf path
	for off := uint64(0); ; depth++ {
		n, err := functions.ParseNode(db[off:])
		if err != nil {
			t.Fatal(err)
		}
		if n.Type == functions.NodeLeaf {
			break
		}
		off = n.Ptr[0] & functions.PtrMask
	}

	// The database starts one block into the namespace, so that a program
	// reading from the namespace's start instead of the file's fails.
	vol, err := volume.Open(fmt.Sprintf("mem:%d", 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	const dbLBA = 1
	if _, err := vol.WriteAt(db, dbLBA*bs); err != nil {
		t.Fatal(err)
	}
	tt := testtarget.Start(t, testtarget.Config{
		NQN: testNQN, Name: "xrp", Volume: vol,
		Limits: sandbox.Limits{Time: 10 * time.Second, MaxSteps: 4 * sgKeys * depth},
		Runtimes: func() ([]sandbox.Runtime, error) {
			return []sandbox.Runtime{ebpf.NewRuntime(ebpf.Options{Logger: slog.New(slog.DiscardHandler)})}, nil
		},
	})
	t.Cleanup(tt.Stop)
	ctrl, ns := testhost.Connect(t, tt.Addr(), testNQN, 1, host.Options{KeepAlive: -1})
	id, err := ctrl.LoadFunction(ctx, obj)
	if err != nil {
		t.Fatalf("the XRP program was refused: %v", err)
	}
	files := []pushdown.File{{Size: uint64(len(db)), Extents: []pushdown.Extent{{LBA: dbLBA, Blocks: uint32(len(db) / bs)}}}}

	// Batches: every key of the tree once, in random order, mixed with
	// absent keys (between, below and above the stored ones); batch sizes
	// from 1 to the program's 32.
	sorted := slices.Sorted(func(yield func(uint64) bool) {
		for k := range present {
			if !yield(k) {
				return
			}
		}
	})
	absent := []uint64{0, sorted[0] - 1, sorted[len(sorted)-1] + 1, 1<<63 - 1}
	for range 40 {
		k := rng.Uint64N(1 << 40)
		if !present[k] {
			absent = append(absent, k)
		}
	}
	lookups := append(slices.Clone(keys), absent...)
	rng.Shuffle(len(lookups), func(i, j int) { lookups[i], lookups[j] = lookups[j], lookups[i] })
	for len(lookups) > 0 {
		n := min(len(lookups), 1+rng.IntN(sgKeys))
		batch := lookups[:n]
		lookups = lookups[n:]

		scratch := make([]byte, sandbox.ScratchSize)
		binary.LittleEndian.PutUint64(scratch[sgRoot:], 0)
		binary.LittleEndian.PutUint32(scratch[sgNKeys:], uint32(len(batch)))
		for i, k := range batch {
			binary.LittleEndian.PutUint64(scratch[sgKeysOff+8*i:], k)
		}
		res, err := ns.Pushdown(ctx, id, files, host.Start{File: 0, Offset: 0, Length: functions.NodeSize}, scratch)
		if err != nil {
			t.Fatalf("batch %v: %v", batch, err)
		}
		wantSteps := 0
		for i, k := range batch {
			v := res.Output[sgValuesOff+sgValueSize*i:]
			found := v[0] == 1
			if found != present[k] {
				t.Fatalf("key %d: found %v, want %v", k, found, present[k])
			}
			wantSteps += depth
			if present[k] {
				wantSteps++ // the value's block
				if want := functions.BTreeValue(k, functions.DefaultValueSize); !bytes.Equal(v[1:1+len(want)], want) {
					t.Fatalf("key %d: value %x, want %x", k, v[1:1+len(want)], want)
				}
			}
		}
		if int(res.Steps) != wantSteps {
			t.Errorf("batch of %d keys: %d steps, want %d (depth %d, one more per key found)", len(batch), res.Steps, wantSteps, depth)
		}
	}

	// The other way round: nearstore's btree_lookup reads BPF-KV's
	// one-file layout when the file is both its index file and its value
	// log, since a leaf's pointer (less FILE_MASK) is then the value's
	// offset in that file (functions/README.md says so).
	mod, err := functions.Module("btree_lookup", sandbox.KindEBPF)
	if err != nil {
		t.Fatal(err)
	}
	bt, err := ctrl.LoadFunction(ctx, mod)
	if err != nil {
		t.Fatal(err)
	}
	both := []pushdown.File{files[0], files[0]}
	for _, k := range slices.Concat(keys[:min(len(keys), 50)], absent[:10]) {
		scratch := make([]byte, sandbox.ScratchSize)
		functions.BTreeRequest{Mode: functions.BTreeGet, Key: k, ValueSize: functions.DefaultValueSize}.Encode(scratch)
		res, err := ns.Pushdown(ctx, bt, both, host.Start{File: functions.IndexFile, Length: functions.NodeSize}, scratch)
		if err != nil {
			t.Fatalf("btree_lookup of %d: %v", k, err)
		}
		r, err := functions.ParseBTreeResult(res.Output)
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(functions.BTreeNotFound)
		if present[k] {
			want = functions.BTreeFound
		}
		if r.Status != want || (present[k] && !bytes.Equal(r.Value, functions.BTreeValue(k, functions.DefaultValueSize))) {
			t.Fatalf("btree_lookup of %d: status %d value %x; want status %d", k, r.Status, r.Value, want)
		}
	}
}
