package functions

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testruntime"
	"github.com/nearstore/nearstore/sandbox"
)

// BenchmarkStats64 compares native Go with both runtimes on 256 KiB and
// on 8 bytes (the per-call overhead).
func BenchmarkStats64(b *testing.B) {
	for _, size := range []int{8, 256 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) { benchStats64(b, size) })
	}
}

func benchStats64(b *testing.B, size int) {
	in := make([]byte, size)
	for i := 0; i < len(in); i += 8 {
		binary.LittleEndian.PutUint64(in[i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	b.Run("native", func(b *testing.B) {
		out := make([]byte, 32)
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			if _, err := computeStats64(in, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, rt := range testruntime.Both(b) {
		b.Run(rt.Kind().String(), func(b *testing.B) {
			m, err := rt.Load(context.Background(), must(Module("stats64", rt.Kind())), sandbox.Limits{Time: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			inst, err := m.Acquire(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			defer inst.Release()
			ib, _ := inst.Input(len(in))
			copy(ib, in)
			if _, err := inst.Output(32); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := inst.Compute(context.Background(), len(in), 32); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
