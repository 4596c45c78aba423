package tpch_test

import (
	"bytes"
	"context"
	"fmt"
	"math/big"
	"reflect"
	"testing"
	"time"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/internal/testruntime"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/tpch"
)

// runner runs one call of a query's function: natively or in a sandbox.
type runner struct {
	name string
	run  func(q tpch.Query, in []byte, outCap int) ([]byte, error)
}

// runners returns the native references and, for every kind the functions
// are built for, a sandbox runtime, with modules loaded on first use and
// closed when the test ends. lim is the sandboxes' limits.
func runners(tb testing.TB, lim sandbox.Limits) []runner {
	tb.Helper()
	ctx := context.Background()
	rs := []runner{{"native", func(q tpch.Query, in []byte, outCap int) ([]byte, error) {
		out := make([]byte, outCap)
		n, err := functions.Native(q.Function())(in, out)
		return out[:n], err
	}}}
	for _, rt := range testruntime.Both(tb) {
		mods := map[string]sandbox.Module{}
		rs = append(rs, runner{rt.Kind().String(), func(q tpch.Query, in []byte, outCap int) ([]byte, error) {
			m := mods[q.Function()]
			if m == nil {
				b, err := functions.Module(q.Function(), rt.Kind())
				if err != nil {
					return nil, err
				}
				if m, err = rt.Load(ctx, b, lim); err != nil {
					return nil, err
				}
				mods[q.Function()] = m
				tb.Cleanup(func() { _ = m.Close(ctx) })
			}
			return sandbox.Compute(ctx, m, in, outCap)
		}})
	}
	return rs
}

// pushdown answers q as a λ read per chunk of rows would: each chunk's
// rows behind the query's parameters, through run, and the outputs
// finished on the host.
func pushdown(q tpch.Query, tables *tpch.Tables, rows []byte, chunk int, run runner) (tpch.Result, error) {
	f, err := tpch.NewFinisher(q, tables)
	if err != nil {
		return tpch.Result{}, err
	}
	for off := 0; off < len(rows); off += chunk {
		in := q.Input(rows[off:min(off+chunk, len(rows))])
		out, err := run.run(q, in, q.OutCap(len(in)))
		if err != nil {
			return tpch.Result{}, fmt.Errorf("%s: chunk at %d: %w", run.name, off, err)
		}
		if err := f.Add(out); err != nil {
			return tpch.Result{}, fmt.Errorf("%s: chunk at %d: %w", run.name, off, err)
		}
	}
	return f.Result(), nil
}

func validation(tb testing.TB) []tpch.Query {
	var qs []tpch.Query
	for _, n := range tpch.Queries() {
		q, err := tpch.Validation(n)
		if err != nil {
			tb.Fatal(err)
		}
		qs = append(qs, q)
	}
	return qs
}

// TestPushdownEqualsEvaluate is the pushdown's correctness check: at SF
// 0.01, for a few seeds, every query answered by scanning the table in
// 64 KiB and 1 MiB chunks with the native, wasm and eBPF functions and
// finishing on the host equals the plain host-side evaluation, exactly.
func TestPushdownEqualsEvaluate(t *testing.T) {
	// A generous clock: the race detector slows the eBPF interpreter a
	// lot, and this test is about the answers.
	rs := runners(t, sandbox.Limits{Time: time.Minute})
	other := []tpch.Query{
		{Number: 1, Delta: 60},
		{Number: 6, Date: tpch.MakeDate(1996, 1, 1), Discount: 2, Quantity: 25},
		{Number: 12, Date: tpch.MakeDate(1997, 1, 1), ShipModes: [2]tpch.ShipMode{tpch.RegAir, tpch.FOB}},
		{Number: 14, Date: tpch.MakeDate(1993, 2, 1)},
	}
	for _, seed := range []uint64{1, 2, 3} {
		g, err := tpch.NewGenerator(0.01, seed)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := g.WriteLineitem(&buf); err != nil {
			t.Fatal(err)
		}
		rows, tables := buf.Bytes(), g.Tables()
		qs := validation(t)
		if seed == 1 {
			qs = append(qs, other...)
		}
		for _, q := range qs {
			want, err := tpch.Evaluate(q, tables, bytes.NewReader(rows))
			if err != nil {
				t.Fatal(err)
			}
			checkNonTrivial(t, want)
			for _, chunk := range []int{64 << 10, 1 << 20} {
				for _, r := range rs {
					t.Run(fmt.Sprintf("seed%d/%v/%dKiB/%s", seed, q, chunk>>10, r.name), func(t *testing.T) {
						got, err := pushdown(q, tables, rows, chunk, r)
						if err != nil {
							t.Fatal(err)
						}
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("pushdown:\n%v\nevaluate:\n%v", got.String(), want.String())
						}
					})
				}
			}
		}
	}
}

// checkNonTrivial makes sure an answer selected something, so that the
// comparisons above compare more than empty results.
func checkNonTrivial(t *testing.T, r tpch.Result) {
	t.Helper()
	ok := true
	switch r.Query.Number {
	case 1:
		ok = len(r.Q1) >= 3
	case 6:
		ok = r.Revenue.Sign() > 0
	case 12:
		ok = len(r.Q12) == 2 && r.Q12[0].HighLineCount > 0 && r.Q12[1].LowLineCount > 0
	case 14:
		ok = r.Promo.Sign() > 0 && r.Total.Sign() > 0
	}
	if !ok {
		t.Fatalf("%v selected (almost) nothing:\n%s", r.Query, r.String())
	}
}

// TestValidationAnswers prints the validation queries' answers at SF 0.01
// (with -v), and checks what the spec's distributions imply about them:
// Q6's and Q12's against the spec's SF 1 answers scaled down, within
// what sampling at this size allows.
func TestValidationAnswers(t *testing.T) {
	g, _ := tpch.NewGenerator(0.01, 1)
	var buf bytes.Buffer
	if _, err := g.WriteLineitem(&buf); err != nil {
		t.Fatal(err)
	}
	tables := g.Tables()
	for _, q := range validation(t) {
		res, err := tpch.Evaluate(q, tables, bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v:\n%s", q, res.String())
		switch q.Number {
		case 1:
			// The spec's answer has four groups; A|F and R|F are about
			// the same size, N|F (returned in the few days before the
			// current date) tiny.
			if len(res.Q1) != 4 || res.Q1[1].Count*20 > res.Q1[0].Count || res.Q1[3].Count*10 < res.Q1[0].Count*9 {
				t.Errorf("Q1 groups %+v", res.Q1)
			}
		case 6:
			// The spec's answer at SF 1 is 123141078.23; the predicate's
			// selectivity and the price distribution scale it with SF.
			rev, _ := new(big.Rat).SetFrac(res.Revenue.Big(), big.NewInt(10000)).Float64()
			if want := 123141078.23 * 0.01; rev < want*0.8 || rev > want*1.2 {
				t.Errorf("Q6 revenue %.2f, want within 20%% of %.2f", rev, want)
			}
		case 12:
			// The spec's answer at SF 1: MAIL 6202 high, 9324 low; SHIP
			// 6200 and 9262. Two priorities of five are high.
			want := []struct {
				mode      string
				high, low float64
			}{{"MAIL", 62.02, 93.24}, {"SHIP", 62.00, 92.62}}
			if len(res.Q12) != len(want) {
				t.Fatalf("Q12 rows %+v, want MAIL and SHIP", res.Q12)
			}
			for i, w := range want {
				r := res.Q12[i]
				if r.ShipMode.String() != w.mode || !near(float64(r.HighLineCount), w.high, 0.35) || !near(float64(r.LowLineCount), w.low, 0.35) {
					t.Errorf("Q12 row %d: %v high %d low %d; want %s about %.0f and %.0f", i, r.ShipMode, r.HighLineCount, r.LowLineCount, w.mode, w.high, w.low)
				}
			}
		case 14:
			// One part type in six is PROMO: about 16.7 %.
			p, _ := res.PromoRevenue()
			if f, _ := p.Float64(); f < 12 || f > 21 {
				t.Errorf("promo_revenue %.2f", f)
			}
		}
	}
}

// near reports whether got is within frac of want.
func near(got, want, frac float64) bool { return got >= want*(1-frac) && got <= want*(1+frac) }
