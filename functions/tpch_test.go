package functions

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nearstore/nearstore/tpch"
)

// tpchInput is a query's parameter header followed by rows.
func tpchInput(p tpch.Params, rows ...tpch.Lineitem) []byte {
	b, _ := p.AppendBinary(nil)
	for i := range rows {
		b, _ = rows[i].AppendBinary(b)
	}
	return b
}

// row is a valid LINEITEM row the cases below vary one column of.
func row() tpch.Lineitem {
	return tpch.Lineitem{
		OrderKey: 7, PartKey: 42, SuppKey: 3, LineNumber: 1, Quantity: 10,
		ExtendedPrice: 12345, Discount: 4, Tax: 2, ReturnFlag: 'N', LineStatus: 'O',
		ShipDate: 1000, CommitDate: 1001, ReceiptDate: 1002, ShipMode: tpch.Mail,
	}
}

func with(f func(*tpch.Lineitem)) tpch.Lineitem {
	l := row()
	f(&l)
	return l
}

// TestTPCHNative checks the native functions on hand-made rows at the
// edges of every filter, against outputs written out by hand.
func TestTPCHNative(t *testing.T) {
	q1 := tpch.Params{Query: 1, DateLo: math.MinInt32, DateHi: 1001}
	q6 := tpch.Params{Query: 6, DateLo: 1000, DateHi: 1100, DiscLo: 3, DiscHi: 5, QtyHi: 24}
	q12 := tpch.Params{Query: 12, DateLo: 1002, DateHi: 1003, ModeA: tpch.Mail, ModeB: tpch.Ship}
	q14 := tpch.Params{Query: 14, DateLo: 1000, DateHi: 1001}

	// Q1: the rows at the cutoff count, the ones after do not; groups by
	// flag; the charge is price × (100 − disc) × (100 + tax).
	in := tpchInput(q1,
		row(),
		with(func(l *tpch.Lineitem) { l.ShipDate = 1001 }),
		with(func(l *tpch.Lineitem) { l.ReturnFlag, l.LineStatus = 'R', 'F'; l.Quantity = -1 }),
		with(func(l *tpch.Lineitem) { l.ShipDate = 1001; l.ReturnFlag = 'X' }), // not selected: its flag is not looked at
	)
	var want [tpch.Q1Groups]tpch.Q1Sums
	want[3] = tpch.Q1Sums{Count: 1, SumQty: 10, SumBasePrice: 12345, SumDiscPrice: 12345 * 96, SumCharge: 12345 * 96 * 102, SumDisc: 4}
	want[4] = want[3]
	want[4].SumQty = ^uint64(0)
	checkNative(t, "tpch_q1", in, tpch.Q1PartialSize, tpch.AppendQ1Partial(nil, &want), 0)
	checkNative(t, "tpch_q1", tpchInput(q1, with(func(l *tpch.Lineitem) { l.LineStatus = 'x' })), 288, nil, EINVAL)
	checkNative(t, "tpch_q1", in, 287, nil, ERANGE)

	// Q6: both discount bounds are inclusive, quantity and date_hi
	// exclusive.
	in = tpchInput(q6,
		row(), // disc 4, qty 10: selected
		with(func(l *tpch.Lineitem) { l.Discount = 3 }),
		with(func(l *tpch.Lineitem) { l.Discount = 5; l.Quantity = 23 }),
		with(func(l *tpch.Lineitem) { l.Discount = 6 }),
		with(func(l *tpch.Lineitem) { l.Discount = 2 }),
		with(func(l *tpch.Lineitem) { l.Quantity = 24 }),
		with(func(l *tpch.Lineitem) { l.ShipDate = 1100 }),
		with(func(l *tpch.Lineitem) { l.ShipDate = 999 }),
		with(func(l *tpch.Lineitem) { l.ShipDate = 1099 }),
	)
	checkNative(t, "tpch_q6", in, 16, u64s(4, 12345*(4+3+5+4)), 0)

	// Q12: receipt date in range, one of the two modes, commit < receipt,
	// ship < commit.
	in = tpchInput(q12,
		row(),
		with(func(l *tpch.Lineitem) { l.OrderKey = 8; l.ShipMode = tpch.Ship }),
		with(func(l *tpch.Lineitem) { l.ShipMode = tpch.Air }),
		with(func(l *tpch.Lineitem) { l.CommitDate = 1002 }),
		with(func(l *tpch.Lineitem) { l.ShipDate = 1001 }),
		with(func(l *tpch.Lineitem) { l.ReceiptDate = 1003 }),
		with(func(l *tpch.Lineitem) { l.OrderKey = -1 }),
	)
	wantQ12 := u64s(7, uint64(tpch.Mail), 8, uint64(tpch.Ship), ^uint64(0), uint64(tpch.Mail))
	checkNative(t, "tpch_q12", in, 48, wantQ12, 0)
	checkNative(t, "tpch_q12", in, 47, nil, ERANGE)
	checkNative(t, "tpch_q12", tpchInput(q12, with(func(l *tpch.Lineitem) { l.ShipMode = tpch.Air })), 0, nil, 0)

	// Q14: the part key is zero-extended, the revenue wraps.
	in = tpchInput(q14,
		row(),
		with(func(l *tpch.Lineitem) { l.ShipDate = 1001 }),
		with(func(l *tpch.Lineitem) { l.PartKey = -1; l.Discount = 200 }),
	)
	disc := uint64(200) // 100 − 200 wraps
	checkNative(t, "tpch_q14", in, 64, u64s(42, 12345*96, 0xffffffff, 12345*(100-disc)), 0)

	// Headers: short, partial rows, the wrong magic or query.
	for name, p := range map[string]tpch.Params{"tpch_q1": q1, "tpch_q6": q6, "tpch_q12": q12, "tpch_q14": q14} {
		good := tpchInput(p, row())
		for _, bad := range [][]byte{
			nil, good[:31], good[:33], good[:len(good)-1],
			append([]byte{'X'}, good[1:]...),
			append(append(good[:4:4], 2, 0, 0, 0), good[8:]...),
		} {
			checkNative(t, name, bad, 1<<10, nil, EINVAL)
		}
		checkNative(t, name, good[:tpch.ParamsSize], 1<<10, map[string][]byte{
			"tpch_q1": make([]byte, 288), "tpch_q6": make([]byte, 16), "tpch_q12": {}, "tpch_q14": {},
		}[name], 0)
	}
}

func checkNative(t *testing.T, fn string, in []byte, outCap int, want []byte, wantCode int32) {
	t.Helper()
	out := make([]byte, outCap)
	n, err := Native(fn)(in, out)
	if code(err) != wantCode || (err == nil) != (wantCode == 0) {
		t.Fatalf("%s (%d bytes, out_cap %d): err %v, want code %d", fn, len(in), outCap, err, wantCode)
	}
	if err == nil && !bytes.Equal(out[:n], want) {
		t.Fatalf("%s (%d bytes): output\n%x\nwant\n%x", fn, len(in), out[:n], want)
	}
}

// randomTPCHInput returns an input for a tpch_* function and an output
// capacity: rows whose columns are drawn around the parameters' bounds
// (and now and then anything at all), sometimes a malformed header or a
// partial row, sometimes too small an output.
func randomTPCHInput(r *rand.Rand, fn string) ([]byte, int) {
	q := map[string]uint32{"tpch_q1": 1, "tpch_q6": 6, "tpch_q12": 12, "tpch_q14": 14}[fn]
	near := func(x int32) int32 { return x + int32(r.IntN(7)) - 3 }
	p := tpch.Params{
		Query:  q,
		DateLo: tpch.Date(1000 + r.IntN(20)),
		DiscLo: uint8(r.IntN(6)), DiscHi: uint8(3 + r.IntN(6)),
		ModeA: tpch.ShipMode(r.IntN(7)), ModeB: tpch.ShipMode(r.IntN(7)),
		QtyHi: int32(r.IntN(50)),
	}
	p.DateHi = p.DateLo + tpch.Date(r.IntN(20))
	if q == 1 && r.IntN(2) == 0 {
		p.DateLo = math.MinInt32
	}
	n := r.IntN(100)
	if r.IntN(10) == 0 {
		n = 2000 + r.IntN(2000)
	}
	in, _ := p.AppendBinary(nil)
	for range n {
		l := tpch.Lineitem{
			OrderKey:      int64(r.Uint64()),
			PartKey:       int32(r.Uint32()),
			Quantity:      near(p.QtyHi),
			ExtendedPrice: int64(r.IntN(10_000_000)),
			Discount:      uint8(near(int32(p.DiscLo + 1))),
			Tax:           uint8(r.IntN(9)),
			ReturnFlag:    "ANR"[r.IntN(3)],
			LineStatus:    "FO"[r.IntN(2)],
			ShipDate:      tpch.Date(near(int32(p.DateLo + tpch.Date(r.IntN(20))))),
			ShipMode:      tpch.ShipMode(r.IntN(7)),
		}
		l.CommitDate = l.ShipDate + tpch.Date(r.IntN(5)-1)
		l.ReceiptDate = l.CommitDate + tpch.Date(r.IntN(5)-1)
		if r.IntN(40) == 0 {
			l.ExtendedPrice = int64(r.Uint64())
			l.Discount = uint8(r.Uint32())
			l.Tax = uint8(r.Uint32())
			l.Quantity = int32(r.Uint32())
		}
		in, _ = l.AppendBinary(in)
	}
	if n > 0 && r.IntN(20) == 0 {
		// A flag Q1 has no group for.
		in[tpch.ParamsSize+r.IntN(n)*tpch.RowSize+tpch.OffReturnFlag+r.IntN(2)] = byte(r.Uint32())
	}
	switch r.IntN(25) {
	case 0:
		in = in[:len(in)-1-r.IntN(min(len(in), 40))]
	case 1:
		in[r.IntN(8)] ^= 1 << r.IntN(8)
	}
	out := map[uint32]int{1: tpch.Q1PartialSize, 6: tpch.Q6PartialSize}[q]
	if out == 0 {
		out = n * tpch.RecordSize
	}
	if r.IntN(8) == 0 && out > 0 {
		return in, r.IntN(out)
	}
	return in, out + r.IntN(32)
}
