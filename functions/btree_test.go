package functions

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

func TestNodeLayout(t *testing.T) {
	n := Node{Next: 0x0102, Type: NodeLeaf}
	for i := range Fanout {
		n.Key[i] = uint64(100 + i)
		n.Ptr[i] = uint64(200 + i)
	}
	b, _ := n.AppendBinary(nil)
	le := binary.LittleEndian
	for _, c := range []struct {
		off  int
		want uint64
	}{{0, 0x0102}, {8, NodeLeaf}, {16, 100}, {16 + 8*30, 130}, {264, 200}, {264 + 8*30, 230}} {
		if got := le.Uint64(b[c.off:]); got != c.want {
			t.Errorf("u64 at %d = %d, want %d", c.off, got, c.want)
		}
	}
	if len(b) != NodeSize {
		t.Fatalf("node is %d bytes", len(b))
	}
	if p, err := ParseNode(b); err != nil || p != n {
		t.Fatalf("ParseNode = %+v, %v", p, err)
	}
	if _, err := ParseNode(b[:511]); err == nil {
		t.Fatal("ParseNode of 511 bytes succeeded")
	}
}

func TestRequestLayout(t *testing.T) {
	s := bytes.Repeat([]byte{0xee}, sandbox.ScratchSize)
	BTreeRequest{Mode: BTreeRange, Key: 1, Hi: 2, ValueSize: 3, Max: 4}.Encode(s)
	want := make([]byte, sandbox.ScratchSize)
	copy(want, u64s(1, 2))
	copy(want[16:], u32s(BTreeRange, 3, 4))
	if !bytes.Equal(s, want) {
		t.Fatalf("scratch = %x", s[:64])
	}
}

// depthOf walks the leftmost path.
func depthOf(t *testing.T, index []byte) int {
	d := 1
	for off := uint64(0); ; d++ {
		n, err := ParseNode(index[off:])
		if err != nil {
			t.Fatal(err)
		}
		if n.Type == NodeLeaf {
			return d
		}
		off = n.Ptr[0]
	}
}

func TestBuildBTreeShape(t *testing.T) {
	for _, c := range []struct {
		keys, fanout, depth, nodes int
	}{
		{0, 31, 1, 1}, {1, 31, 1, 1}, {31, 31, 1, 1}, {32, 31, 2, 3},
		{961, 31, 2, 32}, {962, 31, 3, 35}, {729, 3, 6, 364}, {730, 3, 7, 244 + 82 + 28 + 10 + 4 + 2 + 1},
	} {
		keys := make([]uint64, c.keys)
		for i := range keys {
			keys[i] = uint64(i) * 10
		}
		index, values := BuildBTreeFanout(keys, 8, c.fanout)
		if len(index) != c.nodes*NodeSize || len(values) != 8*c.keys {
			t.Errorf("%+v: %d nodes, %d value bytes", c, len(index)/NodeSize, len(values))
		}
		if d := depthOf(t, index); d != c.depth {
			t.Errorf("%+v: depth %d", c, d)
		}
		// The leaves, chained from the leftmost, hold every key in order
		// with its value's offset.
		off := uint64(0)
		for {
			n, _ := ParseNode(index[off:])
			if n.Type == NodeLeaf {
				break
			}
			off = n.Ptr[0]
		}
		var got []uint64
		for {
			n, _ := ParseNode(index[off:])
			if n.Type != NodeLeaf {
				t.Fatalf("%+v: node at %d in the leaf chain is not a leaf", c, off)
			}
			for i, k := range n.Key {
				if k == KeyNone {
					if n.Ptr[i] != 0 {
						t.Fatalf("%+v: unused slot with ptr %d", c, n.Ptr[i])
					}
					continue
				}
				if n.Ptr[i] != uint64(len(got))*8 || !bytes.Equal(values[n.Ptr[i]:n.Ptr[i]+8], BTreeValue(k, 8)) {
					t.Fatalf("%+v: key %d: bad value pointer %d", c, k, n.Ptr[i])
				}
				got = append(got, k)
			}
			if n.Next == 0 {
				break
			}
			if n.Next <= off {
				t.Fatalf("%+v: leaf chain goes backwards", c)
			}
			off = n.Next
		}
		if !slices.Equal(got, keys) && !(len(got) == 0 && len(keys) == 0) {
			t.Fatalf("%+v: leaves hold %v", c, got)
		}
	}
}

func TestBuildBTreePanics(t *testing.T) {
	for _, f := range []func(){
		func() { BuildBTree([]uint64{KeyNone}, 8) },
		func() { BuildBTree(nil, 0) },
		func() { BuildBTreeFanout(nil, 8, 1) },
		func() { BuildBTreeFanout(nil, 8, 32) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}

// randomKeys returns n distinct sorted keys spread over [0, 10n).
func randomKeys(r *rand.Rand, n int) []uint64 {
	m := map[uint64]bool{}
	for len(m) < n {
		m[r.Uint64N(uint64(10*n))] = true
	}
	var ks []uint64
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// refRange is what a range scan must return: keys in [lo, hi], at most max
// (and the next key if stopped there).
func refRange(keys []uint64, lo, hi uint64, max int, valueSize int) (es []BTreeEntry, status uint32, next uint64) {
	if max == 0 || max > BTreeRangeMax {
		max = BTreeRangeMax
	}
	for i, k := range keys {
		if k < lo || k > hi {
			continue
		}
		if len(es) == max {
			return es, BTreeMore, k
		}
		es = append(es, BTreeEntry{k, uint64(i * valueSize)})
	}
	return es, BTreeFound, 0
}

func TestBTreeStepGo(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct{ keys, fanout, valueSize int }{
		{0, 31, 64}, {1, 31, 64}, {500, 31, 64}, {5000, 31, 100}, {800, 3, 64}, {300, 2, 8}, {2000, 5, BTreeMaxValue},
	} {
		keys := randomKeys(r, c.keys)
		index, values := BuildBTreeFanout(keys, c.valueSize, c.fanout)
		files := [][]byte{index, values}
		depth := depthOf(t, index)
		root := sandbox.Next{File: IndexFile, Offset: 0, Len: NodeSize}
		scratch := make([]byte, sandbox.ScratchSize)
		probes := []uint64{0, KeyNone, KeyNone - 1}
		for range 200 {
			probes = append(probes, r.Uint64N(uint64(10*c.keys+10)))
		}
		probes = append(probes, keys[:min(len(keys), 50)]...)
		for _, key := range probes {
			BTreeRequest{Mode: BTreeGet, Key: key, ValueSize: uint32(c.valueSize)}.Encode(scratch)
			steps, err := RunPushdown(BTreeStep, scratch, files, root, sandbox.Limits{})
			if err != nil {
				t.Fatalf("%+v: get %d: %v", c, key, err)
			}
			res, err := ParseBTreeResult(scratch)
			if err != nil {
				t.Fatal(err)
			}
			i, found := slices.BinarySearch(keys, key)
			switch {
			case found && (res.Status != BTreeFound || !bytes.Equal(res.Value, BTreeValue(key, c.valueSize)) || res.ValueOff != uint64(i*c.valueSize) || steps != depth+1):
				t.Fatalf("%+v: get %d: %+v in %d steps", c, key, res, steps)
			case !found && (res.Status != BTreeNotFound || steps != depth):
				t.Fatalf("%+v: get %d (absent): %+v in %d steps", c, key, res, steps)
			}
			if int(res.Nodes) != depth {
				t.Fatalf("%+v: get %d read %d nodes, depth %d", c, key, res.Nodes, depth)
			}
		}
		for range 50 {
			lo := r.Uint64N(uint64(10*c.keys + 10))
			hi := lo + r.Uint64N(uint64(5*c.keys+10))
			max := r.IntN(300)
			BTreeRequest{Mode: BTreeRange, Key: lo, Hi: hi, Max: uint32(max)}.Encode(scratch)
			if _, err := RunPushdown(BTreeStep, scratch, files, root, sandbox.Limits{MaxSteps: 1000}); err != nil {
				t.Fatalf("%+v: range [%d, %d]: %v", c, lo, hi, err)
			}
			res, _ := ParseBTreeResult(scratch)
			es, status, next := refRange(keys, lo, hi, max, c.valueSize)
			if res.Status != status || res.NextKey != next || !slices.Equal(res.Entries, es) {
				t.Fatalf("%+v: range [%d, %d] max %d: status %d next %d %d entries; want %d %d %d", c, lo, hi, max,
					res.Status, res.NextKey, len(res.Entries), status, next, len(es))
			}
		}
	}
}

func TestBTreeStepErrors(t *testing.T) {
	index, values := BuildBTreeFanout([]uint64{1, 2, 3, 4, 5, 6, 7}, 8, 2)
	node := func(mut func(*Node)) []byte {
		n, _ := ParseNode(index)
		mut(&n)
		b, _ := n.AppendBinary(nil)
		return b
	}
	for _, c := range []struct {
		name string
		req  BTreeRequest
		data []byte
	}{
		{"short node", BTreeRequest{Mode: BTreeGet, Key: 1, ValueSize: 8}, index[:511]},
		{"value size 0", BTreeRequest{Mode: BTreeGet, Key: 1}, index},
		{"value too big", BTreeRequest{Mode: BTreeGet, Key: 1, ValueSize: BTreeMaxValue + 1}, index},
		{"bad type", BTreeRequest{Mode: BTreeGet, Key: 1, ValueSize: 8}, node(func(n *Node) { n.Type = 7 })},
		{"child is root", BTreeRequest{Mode: BTreeGet, Key: 1, ValueSize: 8}, node(func(n *Node) { n.Ptr[0] = 0 })},
		{"bad mode", BTreeRequest{Mode: 9, Key: 1}, index},
		{"range short", BTreeRequest{Mode: BTreeRange, Hi: 9}, values[:8]},
	} {
		scratch := make([]byte, sandbox.ScratchSize)
		c.req.Encode(scratch)
		if _, _, err := BTreeStep(scratch, c.data); code(err) != EINVAL {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// A leaf where a range scan expects the next leaf is fine; an inner node is not.
	scratch := make([]byte, sandbox.ScratchSize)
	BTreeRequest{Mode: BTreeRange, Hi: 9}.Encode(scratch)
	binary.LittleEndian.PutUint32(scratch[28:], btreeStateScan)
	if _, _, err := BTreeStep(scratch, index); code(err) != EINVAL {
		t.Errorf("inner node in scan: %v", err)
	}
	// BPF-KV's FILE_MASK bit on pointers is ignored.
	n, _ := ParseNode(index)
	for i := range n.Ptr {
		if n.Key[i] != KeyNone {
			n.Ptr[i] |= 1 << 63
		}
	}
	masked, _ := n.AppendBinary(nil)
	BTreeRequest{Mode: BTreeGet, Key: 7, ValueSize: 8}.Encode(scratch)
	done, next, err := BTreeStep(scratch, masked)
	if err != nil || done || len(next) != 1 || next[0].Offset >= 1<<63 {
		t.Fatalf("masked pointer: %v %v %v", done, next, err)
	}
}

// TestRunPushdownRules checks that a native step function runs under the
// executor's rules: each broken rule ends the request with the executor's
// error, after the steps it ran.
func TestRunPushdownRules(t *testing.T) {
	index, values := BuildBTreeFanout([]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 8, 2)
	files := [][]byte{index, values}
	ask := func(nx ...sandbox.Next) StepFunc {
		return func(scratch, data []byte) (bool, []sandbox.Next, error) { return false, nx, nil }
	}
	for _, c := range []struct {
		name  string
		step  StepFunc
		lim   sandbox.Limits
		want  error
		steps int
	}{
		{"step limit", ask(sandbox.Next{Len: NodeSize}), sandbox.Limits{MaxSteps: 3}, pushdown.ErrStepLimit, 3},
		{"past the end", ask(sandbox.Next{File: ValueFile, Offset: uint64(len(values)) - 4, Len: 8}), sandbox.Limits{}, pushdown.ErrOutsideFile, 1},
		{"no such file", ask(sandbox.Next{File: 2, Len: 1}), sandbox.Limits{}, pushdown.ErrOutsideFile, 1},
		{"step too big", ask(sandbox.Next{Len: NodeSize}, sandbox.Next{Len: NodeSize}), sandbox.Limits{MaxStepBytes: NodeSize + 1}, pushdown.ErrStepSize, 1},
		{"no progress", ask(), sandbox.Limits{}, pushdown.ErrNoProgress, 1},
		{"function error", func([]byte, []byte) (bool, []sandbox.Next, error) { return false, nil, fnErr(EINVAL) }, sandbox.Limits{}, sandbox.ErrFunction, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			steps, err := RunPushdown(c.step, make([]byte, sandbox.ScratchSize), files, sandbox.Next{Len: NodeSize}, c.lim)
			if !errors.Is(err, c.want) || steps != c.steps {
				t.Fatalf("%d steps, %v; want %d, %v", steps, err, c.steps, c.want)
			}
		})
	}
	if _, err := RunPushdown(BTreeStep, make([]byte, sandbox.ScratchSize-1), files, sandbox.Next{Len: NodeSize}, sandbox.Limits{}); err == nil {
		t.Fatal("a short scratch was taken")
	}
}

// TestMemDevice checks the device RunPushdown lays files out on: each
// file from a block boundary, zeroes between, the table mapping each file's
// bytes, and a read across files seeing all of them.
func TestMemDevice(t *testing.T) {
	files := [][]byte{bytes.Repeat([]byte{1}, 700), nil, {2, 3}, bytes.Repeat([]byte{4}, 512)}
	dev, table, err := memDevice(files)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Size() != 4*memBlock {
		t.Fatalf("size %d", dev.Size())
	}
	var want []byte
	for i, f := range files {
		if table[i].Size != uint64(len(f)) {
			t.Fatalf("file %d: size %d", i, table[i].Size)
		}
		if err := pushdown.CheckMap(&table[i], uint64(dev.Size())/memBlock, memBlock); err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		for _, x := range table[i].Extents {
			if x.LBA*memBlock != uint64(len(want)) {
				t.Fatalf("file %d starts at block %d, want byte %d", i, x.LBA, len(want))
			}
		}
		want = append(want, f...)
		want = append(want, make([]byte, (memBlock-len(f)%memBlock)%memBlock)...)
	}
	got := make([]byte, len(want)+10)
	n, err := dev.ReadAt(got, 0)
	if n != len(want) || err != io.EOF || !bytes.Equal(got[:n], want) {
		t.Fatalf("whole device: %d bytes, %v", n, err)
	}
	got = make([]byte, 600)
	if _, err := dev.ReadAt(got, 900); err != nil || !bytes.Equal(got, want[900:1500]) {
		t.Fatalf("read across files: %v", err)
	}
	if _, err := dev.WriteAt([]byte{1}, 0); err == nil {
		t.Fatal("wrote to the read-only device")
	}
}
