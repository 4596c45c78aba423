package ebpf

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/sandbox"
)

// BenchmarkStats64_1MiB runs testdata/stats64.c over 1 MiB in the
// interpreter, against the same loop in native Go.
func BenchmarkStats64_1MiB(b *testing.B) {
	in := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range in {
		in[i] = byte(rng.Uint32())
	}
	want := stats64Native(in)
	b.Run("interp", func(b *testing.B) {
		m := loadObj(b, "stats64.o", sandbox.Limits{})
		ctx := context.Background()
		inst, err := sandbox.Prepare(ctx, m, in, 32)
		if err != nil {
			b.Fatal(err)
		}
		defer inst.Release()
		ob, _ := inst.Output(32)
		b.SetBytes(int64(len(in)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := inst.Compute(ctx, len(in), 32); err != nil {
				b.Fatal(err)
			}
		}
		if binary.LittleEndian.Uint64(ob[8:]) != want[1] {
			b.Fatal("wrong sum")
		}
	})
	b.Run("native", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		var got [4]uint64
		for b.Loop() {
			got = stats64Native(in)
		}
		if got != want {
			b.Fatal("wrong")
		}
	})
}

// TestConcurrent runs one module from 8 goroutines (go test -race).
func TestConcurrent(t *testing.T) {
	stats := loadObj(t, "stats64.o", sandbox.Limits{})
	chain := loadObj(t, "xrp_chain.o", sandbox.Limits{})
	files := chainFiles()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 50 {
				in := make([]byte, 8*(1+rng.IntN(512)))
				for i := range in {
					in[i] = byte(rng.Uint32())
				}
				out, err := sandbox.Compute(context.Background(), stats, in, 32)
				if err != nil {
					errs <- err
					return
				}
				want := stats64Native(in)
				for i := range 4 {
					if binary.LittleEndian.Uint64(out[8*i:]) != want[i] {
						t.Errorf("goroutine %d: field %d wrong", g, i)
						return
					}
				}
				scratch, steps, err := runPushdown(t, chain, files, sandbox.Next{Len: 512})
				if err != nil {
					errs <- err
					return
				}
				if steps != 3 || binary.LittleEndian.Uint64(scratch) != 3 {
					t.Errorf("goroutine %d: chain walked %d steps", g, steps)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// BenchmarkBTreeLookup runs BPF-KV gets (functions/src/btree_lookup.c,
// interpreted, as the target runs pushdown entries) over a tree of 5000
// keys, the one target's BenchmarkBPFKVPushdown reads: three node steps
// and the value step per op, Acquire and Release included. Each node
// step scans about half of a 31-key node, the interpreter's hot loop.
func BenchmarkBTreeLookup(b *testing.B) {
	keys := make([]uint64, 5000)
	for i := range keys {
		keys[i] = uint64(i)*7 + 1
	}
	index, values := functions.BuildBTree(keys, functions.DefaultValueSize)
	files := [][]byte{index, values}
	code, err := functions.Module("btree_lookup", sandbox.KindEBPF)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	m, err := NewRuntime(Options{}).Load(ctx, code, sandbox.Limits{Time: testTime})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(ctx)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		k := i % len(keys)
		key := keys[k]
		i += 997
		in, err := m.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: functions.DefaultValueSize}.Encode(in.Scratch())
		next := sandbox.Next{File: functions.IndexFile, Len: functions.NodeSize}
		for steps := 0; ; steps++ {
			if steps == 8 {
				b.Fatal("too many steps")
			}
			buf, err := in.Data(int(next.Len))
			if err != nil {
				b.Fatal(err)
			}
			copy(buf, files[next.File][next.Offset:][:next.Len])
			done, more, err := in.Step(ctx, next.File, next.Offset, int(next.Len))
			if err != nil {
				b.Fatal(err)
			}
			if done {
				break
			}
			next = more[0]
		}
		r, err := functions.ParseBTreeResult(in.Scratch())
		if err != nil || r.Status != functions.BTreeFound || r.ValueOff != uint64(k)*functions.DefaultValueSize {
			b.Fatalf("get %d: %+v, %v", key, r, err)
		}
		in.Release()
	}
}
