package functions

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testruntime"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

func load(t *testing.T, rt sandbox.Runtime, name string, lim sandbox.Limits) sandbox.Module {
	t.Helper()
	b, err := Module(name, rt.Kind())
	if err != nil {
		t.Fatal(err)
	}
	m, err := rt.Load(context.Background(), b, lim)
	if err != nil {
		t.Fatalf("loading %s (%v): %v", name, rt.Kind(), err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// randomInput returns an input for fn and an output capacity, mostly valid,
// sometimes malformed or with too small an output.
func randomInput(r *rand.Rand, fn string) ([]byte, int) {
	small := r.IntN(8) == 0
	switch fn {
	case "stats64", "stats32":
		w := 8
		if fn == "stats32" {
			w = 4
		}
		n := r.IntN(200)
		if r.IntN(10) == 0 {
			n = 20000 + r.IntN(20000)
		}
		in := make([]byte, w*n)
		for i := range in {
			in[i] = byte(r.Uint32())
		}
		if r.IntN(10) == 0 {
			in = append(in, 1)
		}
		if small {
			return in, r.IntN(32)
		}
		return in, 32 + r.IntN(16)
	case "knn":
		dim := 1 + r.IntN(16)
		n := r.IntN(60)
		vec := func() []int32 {
			v := make([]int32, dim)
			for i := range v {
				if r.IntN(2) == 0 {
					v[i] = int32(r.Uint32())
				} else {
					v[i] = int32(r.IntN(200) - 100)
				}
			}
			return v
		}
		var vs [][]int32
		for range n {
			vs = append(vs, vec())
		}
		in := EncodeKNN(vec(), vs...)
		switch r.IntN(12) {
		case 0:
			in = in[:len(in)-1-r.IntN(3)]
		case 1:
			in[4] = 1
		}
		if small && n > 0 {
			return in, r.IntN(8 * n)
		}
		return in, 8*n + r.IntN(16)
	case "grep":
		alpha := "ab\n"
		if r.IntN(3) == 0 {
			alpha = "abcdefgh \n"
		}
		text := make([]byte, r.IntN(3000))
		if r.IntN(10) == 0 {
			text = make([]byte, 60000)
		}
		for i := range text {
			text[i] = alpha[r.IntN(len(alpha))]
		}
		pat := make([]byte, r.IntN(5))
		for i := range pat {
			pat[i] = alpha[r.IntN(len(alpha)-1)]
		}
		in := EncodeGrep(pat, text)
		if r.IntN(15) == 0 {
			binary.LittleEndian.PutUint32(in, uint32(len(in)))
		}
		want, err := Grep(in)
		if err != nil || !small || len(want) == 0 {
			return in, len(want) + r.IntN(4)
		}
		return in, r.IntN(len(want))
	case "bitmap":
		var in []byte
		total := 0
		for range r.IntN(100) {
			n := r.IntN(1 + r.IntN(300))
			total += n
			in = binary.LittleEndian.AppendUint32(in, uint32(n)|uint32(r.IntN(2))<<31)
		}
		if r.IntN(12) == 0 {
			in = append(in, 0)
		}
		need := (total + 7) / 8
		if small && need > 0 {
			return in, r.IntN(need)
		}
		return in, need + r.IntN(4)
	case "tpch_q1", "tpch_q6", "tpch_q12", "tpch_q14":
		return randomTPCHInput(r, fn)
	}
	panic(fn)
}

// TestRuntimesCompute runs every compute module in both runtimes on the
// table's inputs and random ones and compares with the native functions.
func TestRuntimesCompute(t *testing.T) {
	ctx := context.Background()
	for _, rt := range testruntime.Both(t) {
		for _, fn := range Names() {
			native := Native(fn)
			if native == nil {
				continue
			}
			t.Run(fmt.Sprintf("%v/%s", rt.Kind(), fn), func(t *testing.T) {
				// A generous clock: the race detector slows the eBPF
				// interpreter down a lot, and this test is about semantics.
				m := load(t, rt, fn, sandbox.Limits{Time: 20 * time.Second})
				if !m.HasCompute() || m.HasPushdown() {
					t.Fatalf("entries: compute %v, pushdown %v", m.HasCompute(), m.HasPushdown())
				}
				type input struct {
					in     []byte
					outCap int
				}
				var inputs []input
				for _, c := range computeCases {
					if c.fn == fn {
						inputs = append(inputs, input{c.in, c.outCap})
					}
				}
				r := rand.New(rand.NewPCG(uint64(len(fn)), uint64(rt.Kind())))
				for range 300 {
					in, outCap := randomInput(r, fn)
					inputs = append(inputs, input{in, outCap})
				}
				for i, c := range inputs {
					wantOut := make([]byte, c.outCap)
					n, wantErr := native(c.in, wantOut)
					got, err := sandbox.Compute(ctx, m, c.in, c.outCap)
					if code(err) != code(wantErr) || (err == nil) != (wantErr == nil) {
						t.Fatalf("input %d (%d bytes, out_cap %d): err %v, native %v", i, len(c.in), c.outCap, err, wantErr)
					}
					if err == nil && !bytes.Equal(got, wantOut[:n]) {
						t.Fatalf("input %d (%d bytes, out_cap %d): output %d bytes differs from native (%d bytes)", i, len(c.in), c.outCap, len(got), n)
					}
				}
			})
		}
	}
}

// runInstance runs a pushdown request on inst through the executor, and
// checks every step against the Go reference run in lockstep on its own
// scratch.
func runInstance(t *testing.T, inst sandbox.Instance, files [][]byte, req BTreeRequest, maxSteps int) (BTreeResult, int) {
	t.Helper()
	dev, table, err := memDevice(files)
	if err != nil {
		t.Fatal(err)
	}
	ls := &lockstep{t: t, Instance: inst, req: req, ref: make([]byte, sandbox.ScratchSize)}
	req.Encode(ls.ref)
	params := make([]byte, sandbox.ScratchSize)
	req.Encode(params)
	e := pushdown.Executor{Limits: sandbox.Limits{MaxSteps: maxSteps}}
	res, err := e.RunSteps(context.Background(), dev, ls, &pushdown.Request{Files: table, StartFile: IndexFile, StartLength: NodeSize, Params: params})
	if err != nil {
		t.Fatalf("%+v: after %d steps: %v", req, res.Steps, err)
	}
	got, err := ParseBTreeResult(res.Output)
	if err != nil {
		t.Fatal(err)
	}
	return got, int(res.Steps)
}

// lockstep is a sandbox instance whose every step is checked against
// BTreeStep on a scratch of its own. It hides the instance's StepDriver,
// if any, so that the executor calls Step.
type lockstep struct {
	t *testing.T
	sandbox.Instance
	req   BTreeRequest
	ref   []byte
	data  []byte
	steps int
}

func (l *lockstep) Data(n int) ([]byte, error) {
	b, err := l.Instance.Data(n)
	l.data = b
	return b, err
}

func (l *lockstep) Step(ctx context.Context, file uint32, off uint64, n int) (bool, []sandbox.Next, error) {
	l.steps++
	data := bytes.Clone(l.data[:n])
	done, next, err := l.Instance.Step(ctx, file, off, n)
	wdone, wnext, werr := BTreeStep(l.ref, data)
	if err != nil || werr != nil {
		l.t.Fatalf("%+v: step %d: err %v, reference %v", l.req, l.steps, err, werr)
	}
	if !bytes.Equal(l.Scratch(), l.ref) {
		l.t.Fatalf("%+v: step %d: scratch differs from the reference:\n got %x\nwant %x", l.req, l.steps, l.Scratch()[:128], l.ref[:128])
	}
	if done != wdone || fmt.Sprint(next) != fmt.Sprint(wnext) {
		l.t.Fatalf("%+v: step %d: done %v next %v; reference %v %v", l.req, l.steps, done, next, wdone, wnext)
	}
	return done, next, nil
}

// TestRuntimesBTree walks trees of up to 9 levels with btree_lookup in both
// runtimes, driving the pushdown loop through the Instance API.
func TestRuntimesBTree(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	type tree struct {
		keys      []uint64
		files     [][]byte
		depth     int
		valueSize int
		desc      string
	}
	var trees []tree
	for _, c := range []struct{ keys, fanout, valueSize int }{
		{0, 31, 64}, {40000, 31, 64}, {800, 3, 64}, {300, 2, 13}, {2000, 4, BTreeMaxValue},
	} {
		keys := randomKeys(r, c.keys)
		index, values := BuildBTreeFanout(keys, c.valueSize, c.fanout)
		trees = append(trees, tree{keys, [][]byte{index, values}, depthOf(t, index), c.valueSize, fmt.Sprint(c)})
	}
	if trees[3].depth < 6 {
		t.Fatalf("the deep tree has %d levels", trees[3].depth)
	}
	for _, rt := range testruntime.Both(t) {
		t.Run(rt.Kind().String(), func(t *testing.T) {
			m := load(t, rt, "btree_lookup", sandbox.Limits{MaxSteps: 1000, Time: 20 * time.Second})
			if !m.HasPushdown() || m.HasCompute() {
				t.Fatalf("entries: compute %v, pushdown %v", m.HasCompute(), m.HasPushdown())
			}
			for _, tr := range trees {
				n := 10 * len(tr.keys)
				for i := range 150 {
					inst, err := m.Acquire(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					var key uint64
					switch {
					case i%2 == 0 && len(tr.keys) > 0:
						key = tr.keys[r.IntN(len(tr.keys))]
					case i == 1:
						key = KeyNone
					default:
						key = r.Uint64N(uint64(n + 10))
					}
					if i%3 == 0 {
						hi := key + r.Uint64N(uint64(n/4+10))
						res, _ := runInstance(t, inst, tr.files, BTreeRequest{Mode: BTreeRange, Key: key, Hi: hi, Max: uint32(r.IntN(300))}, 1000)
						if res.Status != BTreeFound && res.Status != BTreeMore {
							t.Fatalf("%s: range: status %d", tr.desc, res.Status)
						}
					} else {
						res, steps := runInstance(t, inst, tr.files, BTreeRequest{Mode: BTreeGet, Key: key, ValueSize: uint32(tr.valueSize)}, 64)
						_, found := slices.BinarySearch(tr.keys, key)
						if found != (res.Status == BTreeFound) || (found && (steps != tr.depth+1 || !bytes.Equal(res.Value, BTreeValue(key, tr.valueSize)))) {
							t.Fatalf("%s: get %d: status %d in %d steps (depth %d)", tr.desc, key, res.Status, steps, tr.depth)
						}
					}
					inst.Release()
				}
			}
		})
	}
}

// TestRuntimesBTreeErrors checks that a malformed node is NS_EINVAL in both
// runtimes, as in the reference.
func TestRuntimesBTreeErrors(t *testing.T) {
	index, _ := BuildBTreeFanout([]uint64{1, 2, 3, 4, 5}, 8, 2)
	bad := bytes.Clone(index[:NodeSize])
	binary.LittleEndian.PutUint64(bad[8:], 9) // type
	for _, rt := range testruntime.Both(t) {
		m := load(t, rt, "btree_lookup", sandbox.Limits{Time: 20 * time.Second})
		inst, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		BTreeRequest{Mode: BTreeGet, Key: 3, ValueSize: 8}.Encode(inst.Scratch())
		buf, _ := inst.Data(NodeSize)
		copy(buf, bad)
		if _, _, err := inst.Step(context.Background(), 0, 0, NodeSize); code(err) != EINVAL {
			t.Errorf("%v: malformed node: %v", rt.Kind(), err)
		}
		inst.Release()
	}
}
