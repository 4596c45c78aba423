package tpch_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/internal/testruntime"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/tpch"
)

// BenchmarkGenerate measures LINEITEM generation, in bytes of rows.
func BenchmarkGenerate(b *testing.B) {
	g, err := tpch.NewGenerator(0.01, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(g.Rows() * tpch.RowSize)
	for b.Loop() {
		if _, err := g.WriteLineitem(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// table returns SF 0.01's LINEITEM rows and tables, seed 1.
func table(b *testing.B) ([]byte, *tpch.Tables) {
	g, err := tpch.NewGenerator(0.01, 1)
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := g.WriteLineitem(&buf); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes(), g.Tables()
}

// BenchmarkScan measures each query's function on one 1 MiB λ read
// (16,384 rows behind the parameters), natively and in both sandboxes,
// with the input already in the instance (the executor reads blocks
// straight into it). Bytes are the input's.
func BenchmarkScan(b *testing.B) {
	rows, _ := table(b)
	rows = rows[:1<<20]
	ctx := context.Background()
	rts := testruntime.Both(b)
	// No eBPF budgets: they cap one call's work, and this measures it.
	lim := sandbox.Limits{Time: 10 * time.Second, MaxInstructions: 1 << 62, MaxBackJumps: 1 << 62}
	for _, q := range validation(b) {
		in := q.Input(rows)
		outCap := q.OutCap(len(in))
		b.Run(fmt.Sprintf("Q%d/native", q.Number), func(b *testing.B) {
			native := functions.Native(q.Function())
			out := make([]byte, outCap)
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := native(in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, rt := range rts {
			b.Run(fmt.Sprintf("Q%d/%v", q.Number, rt.Kind()), func(b *testing.B) {
				mod, err := functions.Module(q.Function(), rt.Kind())
				if err != nil {
					b.Skip(err)
				}
				m, err := rt.Load(ctx, mod, lim)
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close(ctx)
				inst, err := sandbox.Prepare(ctx, m, in, outCap)
				if err != nil {
					b.Fatal(err)
				}
				defer inst.Release()
				b.SetBytes(int64(len(in)))
				for b.Loop() {
					if _, err := inst.Compute(ctx, len(in), outCap); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkEvaluate measures the host-side reference on the whole SF 0.01
// table, and BenchmarkFinish the host's part of a pushdown: finishing the
// native functions' outputs of 1 MiB λ reads over it. Bytes are the
// table's either way.
func BenchmarkEvaluate(b *testing.B) {
	rows, tables := table(b)
	for _, q := range validation(b) {
		b.Run(fmt.Sprintf("Q%d", q.Number), func(b *testing.B) {
			b.SetBytes(int64(len(rows)))
			for b.Loop() {
				if _, err := tpch.Evaluate(q, tables, bytes.NewReader(rows)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFinish(b *testing.B) {
	rows, tables := table(b)
	for _, q := range validation(b) {
		var outs [][]byte
		for off := 0; off < len(rows); off += 1 << 20 {
			in := q.Input(rows[off:min(off+1<<20, len(rows))])
			out := make([]byte, q.OutCap(len(in)))
			n, err := functions.Native(q.Function())(in, out)
			if err != nil {
				b.Fatal(err)
			}
			outs = append(outs, out[:n])
		}
		b.Run(fmt.Sprintf("Q%d", q.Number), func(b *testing.B) {
			b.SetBytes(int64(len(rows)))
			for b.Loop() {
				if _, err := tpch.Finish(q, tables, outs...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
