package tpch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strings"
	"time"
)

// Query is one of the TPC-H queries whose filter and projection run as λ
// reads (Q1, Q6, Q12, Q14), with its substitution parameters (TPC-H
// 2.4.1.3, 2.4.6.3, 2.4.12.3, 2.4.14.3). Fields a query does not use are
// ignored.
type Query struct {
	// Number is 1, 6, 12 or 14.
	Number int
	// Delta (Q1): l_shipdate <= date '1998-12-01' - interval 'Delta' day.
	// The spec draws it from [60, 120]; validation uses 90.
	Delta int
	// Date (Q6, Q12: the first of January of 1993..1997; Q14: the first of
	// a month of 1993..1997): the start of the year (Q6: l_shipdate; Q12:
	// l_receiptdate) or the month (Q14: l_shipdate) the query selects.
	Date Date
	// Discount (Q6), in hundredths: l_discount between Discount − 1 and
	// Discount + 1 hundredths. The spec draws it from [2, 9].
	Discount int
	// Quantity (Q6): l_quantity < Quantity, 24 or 25 in the spec.
	Quantity int
	// ShipModes (Q12): l_shipmode in (ShipModes[0], ShipModes[1]), two
	// different modes.
	ShipModes [2]ShipMode
}

// Queries lists the query numbers this package evaluates.
func Queries() []int { return []int{1, 6, 12, 14} }

// q1Base is Q1's date '1998-12-01' (a test checks it against MakeDate).
const q1Base Date = 10561

// Validation returns the query with the spec's validation parameters
// (TPC-H 2.4.n.4): Q1 Delta 90; Q6 1994-01-01, 0.06, 24; Q12 MAIL and
// SHIP, 1994-01-01; Q14 1995-09-01.
func Validation(n int) (Query, error) {
	switch n {
	case 1:
		return Query{Number: 1, Delta: 90}, nil
	case 6:
		return Query{Number: 6, Date: MakeDate(1994, time.January, 1), Discount: 6, Quantity: 24}, nil
	case 12:
		return Query{Number: 12, Date: MakeDate(1994, time.January, 1), ShipModes: [2]ShipMode{Mail, Ship}}, nil
	case 14:
		return Query{Number: 14, Date: MakeDate(1995, time.September, 1)}, nil
	}
	return Query{}, fmt.Errorf("tpch: no query %d: want one of %v", n, Queries())
}

// Bounds a query's parameters must keep to so that its parameter header
// encodes them exactly. They are wider than the spec's substitution
// ranges, so that experiments can vary the selectivity.
const (
	maxDelta    = 100_000
	maxQuantity = 1 << 30
	minDate     = -100_000 // 1696
	maxDate     = 100_000  // 2243
)

// Validate reports whether the query's parameters can be evaluated and
// encoded for its function.
func (q Query) Validate() error {
	dateOK := q.Date >= minDate && q.Date <= maxDate
	switch q.Number {
	case 1:
		if q.Delta < 0 || q.Delta > maxDelta {
			return fmt.Errorf("tpch: Q1 delta %d: want 0 to %d days", q.Delta, maxDelta)
		}
		return nil
	case 6:
		if !dateOK {
			return fmt.Errorf("tpch: Q6 date %v out of range", q.Date)
		}
		if q.Discount < 1 || q.Discount > 99 {
			return fmt.Errorf("tpch: Q6 discount %d hundredths: want 1 to 99", q.Discount)
		}
		if q.Quantity < 0 || q.Quantity > maxQuantity {
			return fmt.Errorf("tpch: Q6 quantity %d out of range", q.Quantity)
		}
		return nil
	case 12:
		if !dateOK {
			return fmt.Errorf("tpch: Q12 date %v out of range", q.Date)
		}
		a, b := q.ShipModes[0], q.ShipModes[1]
		if a >= numShipModes || b >= numShipModes || a == b {
			return fmt.Errorf("tpch: Q12 ship modes %v and %v: want two different modes", a, b)
		}
		return nil
	case 14:
		if !dateOK {
			return fmt.Errorf("tpch: Q14 date %v out of range", q.Date)
		}
		return nil
	}
	return fmt.Errorf("tpch: no query %d: want one of %v", q.Number, Queries())
}

// Function returns the name of the standard function that runs the
// query's filter and projection: "tpch_q1", "tpch_q6", ...
func (q Query) Function() string { return fmt.Sprintf("tpch_q%d", q.Number) }

func (q Query) String() string {
	switch q.Number {
	case 1:
		return fmt.Sprintf("Q1(delta %d)", q.Delta)
	case 6:
		return fmt.Sprintf("Q6(%v, 0.%02d, %d)", q.Date, q.Discount, q.Quantity)
	case 12:
		return fmt.Sprintf("Q12(%v, %v, %v)", q.ShipModes[0], q.ShipModes[1], q.Date)
	case 14:
		return fmt.Sprintf("Q14(%v)", q.Date)
	}
	return fmt.Sprintf("Q%d", q.Number)
}

// Result is a query's answer, exact: sums are integers in the units of the
// columns' products (below), and averages and ratios are big.Rat.
type Result struct {
	Query Query
	// Q1: one row per (l_returnflag, l_linestatus) with rows, ordered by
	// them.
	Q1 []Q1Row
	// Q6: revenue, Σ l_extendedprice × l_discount in 10⁻⁴ dollars.
	Revenue Int128
	// Q12: one row per ship mode with rows, ordered by its name.
	Q12 []Q12Row
	// Q14: Σ l_extendedprice × (1 − l_discount) over the PROMO parts and
	// over all, in 10⁻⁴ dollars; PromoRevenue is 100 × Promo / Total.
	Promo, Total Int128
}

// Q1Row is a row of Q1's answer. The sums are in the units of the
// products: SumQty whole units, SumBasePrice cents, SumDiscPrice 10⁻⁴
// dollars, SumCharge 10⁻⁶ dollars, SumDisc hundredths (for avg_disc).
type Q1Row struct {
	ReturnFlag, LineStatus byte
	SumQty                 Int128
	SumBasePrice           Int128
	SumDiscPrice           Int128
	SumCharge              Int128
	SumDisc                Int128
	Count                  int64
}

// ratio returns sum / (count × 10^scale).
func ratio(sum Int128, count int64, scale int) *big.Rat {
	d := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)
	d.Mul(d, big.NewInt(count))
	return new(big.Rat).SetFrac(sum.Big(), d)
}

// AvgQty is avg(l_quantity).
func (r *Q1Row) AvgQty() *big.Rat { return ratio(r.SumQty, r.Count, 0) }

// AvgPrice is avg(l_extendedprice), in dollars.
func (r *Q1Row) AvgPrice() *big.Rat { return ratio(r.SumBasePrice, r.Count, 2) }

// AvgDisc is avg(l_discount), as a fraction.
func (r *Q1Row) AvgDisc() *big.Rat { return ratio(r.SumDisc, r.Count, 2) }

// Q12Row is a row of Q12's answer.
type Q12Row struct {
	ShipMode      ShipMode
	HighLineCount int64 // lines of orders of priority 1-URGENT or 2-HIGH
	LowLineCount  int64 // the others
}

// PromoRevenue is Q14's promo_revenue, 100 × Promo / Total, and false if
// no line was selected (SQL's NULL).
func (r *Result) PromoRevenue() (*big.Rat, bool) {
	if r.Total.Sign() == 0 {
		return nil, false
	}
	p := new(big.Rat).SetFrac(r.Promo.Big(), r.Total.Big())
	return p.Mul(p, big.NewRat(100, 1)), true
}

// String formats the answer as the query's result set, decimals rounded
// to two places as the spec's reports print them.
func (r *Result) String() string {
	var b strings.Builder
	switch r.Query.Number {
	case 1:
		b.WriteString("l_returnflag|l_linestatus|sum_qty|sum_base_price|sum_disc_price|sum_charge|avg_qty|avg_price|avg_disc|count_order\n")
		for _, g := range r.Q1 {
			fmt.Fprintf(&b, "%c|%c|%s|%s|%s|%s|%s|%s|%s|%d\n", g.ReturnFlag, g.LineStatus,
				g.SumQty.Decimal(0), g.SumBasePrice.Decimal(2), round2(g.SumDiscPrice, 4), round2(g.SumCharge, 6),
				g.AvgQty().FloatString(2), g.AvgPrice().FloatString(2), g.AvgDisc().FloatString(2), g.Count)
		}
	case 6:
		fmt.Fprintf(&b, "revenue\n%s\n", round2(r.Revenue, 4))
	case 12:
		b.WriteString("l_shipmode|high_line_count|low_line_count\n")
		for _, m := range r.Q12 {
			fmt.Fprintf(&b, "%v|%d|%d\n", m.ShipMode, m.HighLineCount, m.LowLineCount)
		}
	case 14:
		b.WriteString("promo_revenue\n")
		if p, ok := r.PromoRevenue(); ok {
			b.WriteString(p.FloatString(2) + "\n")
		} else {
			b.WriteString("NULL\n")
		}
	}
	return b.String()
}

// round2 formats x × 10^-scale rounded to two decimal places.
func round2(x Int128, scale int) string {
	return ratio(x, 1, scale).FloatString(2)
}

// Evaluate answers the query on the LINEITEM rows read from rows (whole
// rows, as the generator writes them) joined with t's ORDERS and PART
// columns (t may be nil for Q1 and Q6): the plain host-side evaluation,
// row by row with the SQL text's semantics, that Finish must agree with.
// A row whose order or part t does not have is an error rather than a row
// the inner join drops: it means the tables are not the rows' own.
func Evaluate(q Query, t *Tables, rows io.Reader) (Result, error) {
	if err := q.Validate(); err != nil {
		return Result{}, err
	}
	if t == nil && (q.Number == 12 || q.Number == 14) {
		return Result{}, fmt.Errorf("tpch: evaluating Q%d needs the tables", q.Number)
	}
	res := Result{Query: q}
	q1 := map[[2]byte]*Q1Row{}
	q12 := map[ShipMode]*Q12Row{}
	// The SQL's date arithmetic, once.
	q1Cutoff := q1Base - Date(q.Delta)
	year, month := q.Date.AddMonths(12), q.Date.AddMonths(1)
	r := bufio.NewReaderSize(rows, 1024*RowSize)
	var row [RowSize]byte
	for n := int64(0); ; n++ {
		if _, err := io.ReadFull(r, row[:]); err != nil {
			if err == io.EOF {
				break
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return Result{}, fmt.Errorf("tpch: LINEITEM ends inside row %d", n)
			}
			return Result{}, fmt.Errorf("tpch: reading LINEITEM row %d: %w", n, err)
		}
		l := ParseLineitem(row[:])
		price := l.ExtendedPrice
		switch q.Number {
		case 1:
			if l.ShipDate > q1Cutoff {
				continue
			}
			k := [2]byte{l.ReturnFlag, l.LineStatus}
			g := q1[k]
			if g == nil {
				g = &Q1Row{ReturnFlag: l.ReturnFlag, LineStatus: l.LineStatus}
				q1[k] = g
			}
			disc, tax := 100-int64(l.Discount), 100+int64(l.Tax)
			g.SumQty = g.SumQty.Add(Int128Of(int64(l.Quantity)))
			g.SumBasePrice = g.SumBasePrice.Add(Int128Of(price))
			g.SumDiscPrice = g.SumDiscPrice.Add(Mul(price, disc))
			g.SumCharge = g.SumCharge.Add(Mul(price, disc*tax))
			g.SumDisc = g.SumDisc.Add(Int128Of(int64(l.Discount)))
			g.Count++
		case 6:
			d := int(l.Discount)
			if l.ShipDate >= q.Date && l.ShipDate < year &&
				d >= q.Discount-1 && d <= q.Discount+1 && int(l.Quantity) < q.Quantity {
				res.Revenue = res.Revenue.Add(Mul(price, int64(d)))
			}
		case 12:
			if (l.ShipMode != q.ShipModes[0] && l.ShipMode != q.ShipModes[1]) ||
				!(l.CommitDate < l.ReceiptDate && l.ShipDate < l.CommitDate) ||
				l.ReceiptDate < q.Date || l.ReceiptDate >= year {
				continue
			}
			p, ok := t.OrderPriority(l.OrderKey)
			if !ok {
				return Result{}, fmt.Errorf("tpch: LINEITEM row %d: no order %d", n, l.OrderKey)
			}
			m := q12[l.ShipMode]
			if m == nil {
				m = &Q12Row{ShipMode: l.ShipMode}
				q12[l.ShipMode] = m
			}
			if p == Urgent || p == High {
				m.HighLineCount++
			} else {
				m.LowLineCount++
			}
		case 14:
			if l.ShipDate < q.Date || l.ShipDate >= month {
				continue
			}
			pt, ok := t.PartType(int64(l.PartKey))
			if !ok {
				return Result{}, fmt.Errorf("tpch: LINEITEM row %d: no part %d", n, l.PartKey)
			}
			rev := Mul(price, 100-int64(l.Discount))
			res.Total = res.Total.Add(rev)
			if strings.HasPrefix(pt.String(), "PROMO") {
				res.Promo = res.Promo.Add(rev)
			}
		}
	}
	for _, g := range q1 {
		res.Q1 = append(res.Q1, *g)
	}
	slices.SortFunc(res.Q1, func(a, b Q1Row) int {
		return strings.Compare(string([]byte{a.ReturnFlag, a.LineStatus}), string([]byte{b.ReturnFlag, b.LineStatus}))
	})
	for _, m := range q12 {
		res.Q12 = append(res.Q12, *m)
	}
	slices.SortFunc(res.Q12, func(a, b Q12Row) int { return strings.Compare(a.ShipMode.String(), b.ShipMode.String()) })
	return res, nil
}

// Finisher combines the partial results of a query's function, one per λ
// read (any number, in any order), into the query's answer: the host's
// part of the pushdown — Q1's and Q6's sums in 128 bits, Q12's join with
// ORDERS and Q14's with PART, the grouping and the ordering.
type Finisher struct {
	q       Query
	t       *Tables
	q1      [Q1Groups]Q1Row
	revenue Int128
	q12     [numShipModes][2]int64 // high, low
	promo   Int128
	total   Int128
}

// NewFinisher returns a Finisher for q; t gives the ORDERS and PART
// columns Q12 and Q14 join with (nil is fine for Q1 and Q6).
func NewFinisher(q Query, t *Tables) (*Finisher, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if t == nil && (q.Number == 12 || q.Number == 14) {
		return nil, fmt.Errorf("tpch: finishing Q%d needs the tables", q.Number)
	}
	f := &Finisher{q: q, t: t}
	for g := range f.q1 {
		f.q1[g].ReturnFlag, f.q1[g].LineStatus = q1Flags(g)
	}
	return f, nil
}

// Add folds in one partial result, the output of one call of the query's
// function. It checks the partial's layout and, for Q12 and Q14, that
// every key joins; on error nothing of the partial is added.
func (f *Finisher) Add(partial []byte) error {
	switch f.q.Number {
	case 1:
		p, err := ParseQ1Partial(partial)
		if err != nil {
			return err
		}
		for g, s := range p {
			r := &f.q1[g]
			r.Count += int64(s.Count)
			r.SumQty = r.SumQty.Add(Uint128Of(s.SumQty))
			r.SumBasePrice = r.SumBasePrice.Add(Uint128Of(s.SumBasePrice))
			r.SumDiscPrice = r.SumDiscPrice.Add(Uint128Of(s.SumDiscPrice))
			r.SumCharge = r.SumCharge.Add(Uint128Of(s.SumCharge))
			r.SumDisc = r.SumDisc.Add(Uint128Of(s.SumDisc))
		}
	case 6:
		p, err := ParseQ6Partial(partial)
		if err != nil {
			return err
		}
		f.revenue = f.revenue.Add(Uint128Of(p.Revenue))
	case 12:
		n, err := records(12, partial)
		if err != nil {
			return err
		}
		var add [numShipModes][2]int64
		for i := range n {
			rec := partial[i*RecordSize:]
			key, mode := int64(le.Uint64(rec)), le.Uint64(rec[8:])
			if mode >= uint64(numShipModes) {
				return fmt.Errorf("tpch: Q12 record %d: ship mode %d", i, mode)
			}
			p, ok := f.t.OrderPriority(key)
			if !ok {
				return fmt.Errorf("tpch: Q12 record %d: no order %d", i, key)
			}
			if p == Urgent || p == High {
				add[mode][0]++
			} else {
				add[mode][1]++
			}
		}
		for m := range add {
			f.q12[m][0] += add[m][0]
			f.q12[m][1] += add[m][1]
		}
	case 14:
		n, err := records(14, partial)
		if err != nil {
			return err
		}
		var promo, total Int128
		for i := range n {
			rec := partial[i*RecordSize:]
			key, rev := le.Uint64(rec), le.Uint64(rec[8:])
			pt, ok := f.t.PartType(int64(key))
			if !ok {
				return fmt.Errorf("tpch: Q14 record %d: no part %d", i, key)
			}
			total = total.Add(Uint128Of(rev))
			if pt.IsPromo() {
				promo = promo.Add(Uint128Of(rev))
			}
		}
		f.promo, f.total = f.promo.Add(promo), f.total.Add(total)
	}
	return nil
}

// Result returns the answer to the partial results added so far.
func (f *Finisher) Result() Result {
	res := Result{Query: f.q, Revenue: f.revenue, Promo: f.promo, Total: f.total}
	// The groups' order is already (returnflag, linestatus)'s.
	for _, g := range f.q1 {
		if g.Count > 0 {
			res.Q1 = append(res.Q1, g)
		}
	}
	for m, c := range f.q12 {
		if c[0]+c[1] > 0 {
			res.Q12 = append(res.Q12, Q12Row{ShipMode: ShipMode(m), HighLineCount: c[0], LowLineCount: c[1]})
		}
	}
	slices.SortFunc(res.Q12, func(a, b Q12Row) int { return strings.Compare(a.ShipMode.String(), b.ShipMode.String()) })
	return res
}

// Finish answers q from the partial results of its function, one per λ
// read: NewFinisher, Add each, Result.
func Finish(q Query, t *Tables, partials ...[]byte) (Result, error) {
	f, err := NewFinisher(q, t)
	if err != nil {
		return Result{}, err
	}
	for i, p := range partials {
		if err := f.Add(p); err != nil {
			return Result{}, fmt.Errorf("partial %d: %w", i, err)
		}
	}
	return f.Result(), nil
}
