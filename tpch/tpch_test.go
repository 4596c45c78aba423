package tpch

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDates(t *testing.T) {
	for _, c := range []struct {
		d    Date
		want string
	}{
		{StartDate, "1992-01-01"}, {CurrentDate, "1995-06-17"}, {EndDate, "1998-12-31"},
		{q1Base, "1998-12-01"}, {0, "1970-01-01"}, {-1, "1969-12-31"},
	} {
		if c.d.String() != c.want {
			t.Errorf("%d is %v, want %s", c.d, c.d, c.want)
		}
		if p, err := ParseDate(c.want); err != nil || p != c.d {
			t.Errorf("ParseDate(%q) = %d, %v", c.want, p, err)
		}
	}
	if d := MakeDate(1995, time.September, 1).AddMonths(1); d.String() != "1995-10-01" {
		t.Errorf("a month after 1995-09-01: %v", d)
	}
	if d := MakeDate(1994, time.January, 1).AddMonths(12); d.String() != "1995-01-01" {
		t.Errorf("a year after 1994-01-01: %v", d)
	}
	if _, err := ParseDate("1995-13-01"); err == nil {
		t.Error("ParseDate accepted month 13")
	}
}

func TestInt128(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ints := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 100, -100}
	for range 200 {
		ints = append(ints, int64(r.Uint64()), int64(r.IntN(1000))-500)
	}
	for _, a := range ints {
		for _, b := range ints[:20] {
			want := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
			if got := Mul(a, b).Big(); got.Cmp(want) != 0 {
				t.Fatalf("Mul(%d, %d) = %v, want %v", a, b, got, want)
			}
			want.Add(big.NewInt(a), big.NewInt(b))
			if got := Int128Of(a).Add(Int128Of(b)).Big(); got.Cmp(want) != 0 {
				t.Fatalf("%d + %d = %v, want %v", a, b, got, want)
			}
		}
	}
	if s := Uint128Of(math.MaxUint64).Add(Uint128Of(1)).String(); s != "18446744073709551616" {
		t.Errorf("2^64 is %s", s)
	}
	for _, c := range []struct {
		x     int64
		scale int
		want  string
	}{{12345, 2, "123.45"}, {-5, 2, "-0.05"}, {7, 0, "7"}, {0, 4, "0.0000"}, {-12345, 4, "-1.2345"}} {
		if got := Int128Of(c.x).Decimal(c.scale); got != c.want {
			t.Errorf("%d.Decimal(%d) = %q, want %q", c.x, c.scale, got, c.want)
		}
	}
	if Int128Of(-3).Sign() != -1 || Int128Of(0).Sign() != 0 || Uint128Of(1<<63).Sign() != 1 {
		t.Error("Sign")
	}
}

func TestRowLayout(t *testing.T) {
	l := Lineitem{
		OrderKey: 0x0102030405060708, ExtendedPrice: -2, PartKey: 0x11223344, SuppKey: 0x55667788,
		ShipDate: 0x01020304, CommitDate: -1, ReceiptDate: 5, Quantity: 50, Discount: 10, Tax: 8,
		ReturnFlag: 'R', LineStatus: 'F', ShipInstruct: TakeBackReturn, ShipMode: FOB, LineNumber: 7,
	}
	b, _ := l.AppendBinary([]byte{0xee})
	b = b[1:]
	want := []byte{
		8, 7, 6, 5, 4, 3, 2, 1, // l_orderkey
		0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // l_extendedprice
		0x44, 0x33, 0x22, 0x11, // l_partkey
		0x88, 0x77, 0x66, 0x55, // l_suppkey
		4, 3, 2, 1, // l_shipdate
		0xff, 0xff, 0xff, 0xff, // l_commitdate
		5, 0, 0, 0, // l_receiptdate
		50, 0, 0, 0, // l_quantity
		10, 8, 'R', 'F', 3, 6, 7, // discount, tax, flags, instruct, mode, linenumber
	}
	want = append(want, make([]byte, RowSize-len(want))...)
	if !bytes.Equal(b, want) {
		t.Fatalf("row\n%x\nwant\n%x", b, want)
	}
	if got := ParseLineitem(b); got != l {
		t.Fatalf("round trip: %+v", got)
	}
	// Put clears the reserved bytes of a reused buffer.
	dirty := bytes.Repeat([]byte{0xaa}, RowSize)
	l.Put(dirty)
	if !bytes.Equal(dirty, want) {
		t.Fatal("Put left reserved bytes set")
	}
}

func TestParamsLayout(t *testing.T) {
	p := Params{Query: 6, DateLo: 8766, DateHi: 9131, DiscLo: 5, DiscHi: 7, ModeA: Mail, ModeB: Ship, QtyHi: 24}
	b, _ := p.AppendBinary(nil)
	want := []byte{
		'T', 'P', 'C', 'H', 6, 0, 0, 0,
		0x3e, 0x22, 0, 0, 0xab, 0x23, 0, 0,
		5, 7, 5, 3, 24, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0,
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("params\n%x\nwant\n%x", b, want)
	}
	if got, err := ParseParams(b, 6); err != nil || got != p {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if _, err := ParseParams(b, 1); err == nil {
		t.Error("ParseParams accepted another query's header")
	}
	if _, err := ParseParams(b[:31], 6); err == nil {
		t.Error("ParseParams accepted a short header")
	}
	// The validation queries' headers, spelled out.
	for _, c := range []struct {
		q    int
		want Params
	}{
		{1, Params{Query: 1, DateLo: math.MinInt32, DateHi: MakeDate(1998, time.September, 3)}}, // <= 09-02
		{6, Params{Query: 6, DateLo: MakeDate(1994, 1, 1), DateHi: MakeDate(1995, 1, 1), DiscLo: 5, DiscHi: 7, QtyHi: 24}},
		{12, Params{Query: 12, DateLo: MakeDate(1994, 1, 1), DateHi: MakeDate(1995, 1, 1), ModeA: Mail, ModeB: Ship}},
		{14, Params{Query: 14, DateLo: MakeDate(1995, 9, 1), DateHi: MakeDate(1995, 10, 1)}},
	} {
		q, err := Validation(c.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := q.Params(); got != c.want {
			t.Errorf("Q%d params %+v, want %+v", c.q, got, c.want)
		}
		if q.Function() != map[int]string{1: "tpch_q1", 6: "tpch_q6", 12: "tpch_q12", 14: "tpch_q14"}[c.q] {
			t.Errorf("Q%d function %q", c.q, q.Function())
		}
	}
}

func TestQueryValidate(t *testing.T) {
	for _, q := range []Query{
		{Number: 2},
		{Number: 1, Delta: -1},
		{Number: 6, Date: MakeDate(1994, 1, 1), Discount: 0, Quantity: 24},
		{Number: 6, Date: MakeDate(1994, 1, 1), Discount: 100, Quantity: 24},
		{Number: 12, Date: MakeDate(1994, 1, 1), ShipModes: [2]ShipMode{Mail, Mail}},
		{Number: 12, Date: MakeDate(1994, 1, 1), ShipModes: [2]ShipMode{Mail, 7}},
		{Number: 14, Date: 1 << 30},
	} {
		if err := q.Validate(); err == nil {
			t.Errorf("%v validated", q)
		}
		if _, err := Evaluate(q, nil, bytes.NewReader(nil)); err == nil {
			t.Errorf("Evaluate(%v) succeeded", q)
		}
		if _, err := Finish(q, nil); err == nil {
			t.Errorf("Finish(%v) succeeded", q)
		}
	}
	if _, err := Validation(3); err == nil {
		t.Error("Validation(3) succeeded")
	}
}

func TestNames(t *testing.T) {
	if m, err := ParseShipMode("REG AIR"); err != nil || m != RegAir || m.String() != "REG AIR" {
		t.Errorf("REG AIR: %v, %v", m, err)
	}
	if _, err := ParseShipMode("BOAT"); err == nil {
		t.Error("ParseShipMode(BOAT) succeeded")
	}
	if s := PartType(149).String(); s != "PROMO BRUSHED COPPER" || !PartType(149).IsPromo() {
		t.Errorf("type 149: %s", s)
	}
	if s := PartType(0).String(); s != "STANDARD ANODIZED TIN" || PartType(0).IsPromo() {
		t.Errorf("type 0: %s", s)
	}
	for pt := range PartType(NumPartTypes) {
		if pt.IsPromo() != strings.HasPrefix(pt.String(), "PROMO") {
			t.Errorf("%v: IsPromo %v", pt, pt.IsPromo())
		}
	}
	if PartType(150).IsPromo() || Priority(9).String() != "Priority(9)" || High.String() != "2-HIGH" {
		t.Error("out-of-range codes")
	}
}

// TestGenerator checks the generated tables against the spec's rules
// (TPC-H 4.2.3) at SF 0.01.
func TestGenerator(t *testing.T) {
	g, err := NewGenerator(0.01, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.Orders() != 15000 || g.Parts() != 2000 || g.Suppliers() != 100 {
		t.Fatalf("cardinalities %d orders, %d parts, %d suppliers", g.Orders(), g.Parts(), g.Suppliers())
	}
	var buf bytes.Buffer
	rows, err := g.WriteLineitem(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != rows*RowSize || rows != g.Rows() {
		t.Fatalf("%d rows, %d bytes, Rows() %d", rows, buf.Len(), g.Rows())
	}
	// 1 to 7 lines per order, 4 on average: 60,000 ± a few standard
	// deviations (2 × √15000 ≈ 245 per σ).
	if rows < 58500 || rows > 61500 {
		t.Errorf("%d rows at SF 0.01, want about 60000", rows)
	}
	tables := g.Tables()
	data := buf.Bytes()
	var (
		order              Order
		prevKey            int64
		lines              int
		orderIndex         int64 = -1
		flags                    = map[[2]byte]int{}
		modes              [numShipModes]int
		minShip, maxRecv   = Date(math.MaxInt32), Date(math.MinInt32)
		sumQty, sumDisc    int64
		discounts, taxes   [256]int
		sawQty1, sawQty50  bool
		promoParts, nParts int
	)
	for i := 0; i < len(data); i += RowSize {
		l := ParseLineitem(data[i:])
		if l.OrderKey != prevKey {
			if orderIndex >= 0 && lines != order.Lines {
				t.Fatalf("order %d: %d lines, want %d", order.Key, lines, order.Lines)
			}
			orderIndex++
			order = g.Order(orderIndex)
			prevKey, lines = l.OrderKey, 0
			if l.OrderKey != order.Key || l.OrderKey != OrderKey(orderIndex) {
				t.Fatalf("row %d: order key %d, want %d", i/RowSize, l.OrderKey, order.Key)
			}
			if p, ok := tables.OrderPriority(l.OrderKey); !ok || p != order.Priority {
				t.Fatalf("order %d: priority %v %v, want %v", l.OrderKey, p, ok, order.Priority)
			}
		}
		lines++
		bad := func(what string) { t.Fatalf("row %d: %s: %+v (order %+v)", i/RowSize, what, l, order) }
		if int(l.LineNumber) != lines {
			bad("line number")
		}
		if l.PartKey < 1 || int64(l.PartKey) > g.Parts() || l.SuppKey < 1 || int64(l.SuppKey) > g.Suppliers() {
			bad("part or supplier key")
		}
		supp := -1
		for j := range int64(4) {
			if SuppKey(int64(l.PartKey), j, g.Suppliers()) == int64(l.SuppKey) {
				supp = int(j)
			}
		}
		if supp < 0 {
			bad("supplier is not one of the part's four")
		}
		if l.Quantity < 1 || l.Quantity > 50 || l.ExtendedPrice != int64(l.Quantity)*RetailPrice(int64(l.PartKey)) {
			bad("quantity or price")
		}
		sawQty1, sawQty50 = sawQty1 || l.Quantity == 1, sawQty50 || l.Quantity == 50
		if l.Discount > 10 || l.Tax > 8 {
			bad("discount or tax")
		}
		discounts[l.Discount]++
		taxes[l.Tax]++
		ship, commit := l.ShipDate-order.Date, l.CommitDate-order.Date
		if ship < 1 || ship > 121 || commit < 30 || commit > 90 || l.ReceiptDate-l.ShipDate < 1 || l.ReceiptDate-l.ShipDate > 30 {
			bad("dates")
		}
		if order.Date < StartDate || order.Date > EndDate-151 {
			bad("order date")
		}
		minShip, maxRecv = min(minShip, l.ShipDate), max(maxRecv, l.ReceiptDate)
		switch {
		case l.ReceiptDate > CurrentDate && l.ReturnFlag != 'N',
			l.ReceiptDate <= CurrentDate && l.ReturnFlag != 'R' && l.ReturnFlag != 'A':
			bad("return flag")
		case (l.ShipDate > CurrentDate) != (l.LineStatus == 'O') || (l.LineStatus != 'O' && l.LineStatus != 'F'):
			bad("line status")
		case l.ShipInstruct >= numShipInstructs || l.ShipMode >= numShipModes:
			bad("codes")
		}
		if !bytes.Equal(data[i+offReserved:i+RowSize], make([]byte, RowSize-offReserved)) {
			bad("reserved bytes")
		}
		flags[[2]byte{l.ReturnFlag, l.LineStatus}]++
		modes[l.ShipMode]++
		sumQty += int64(l.Quantity)
		sumDisc += int64(l.Discount)
	}
	if orderIndex+1 != g.Orders() {
		t.Fatalf("%d orders in LINEITEM, want %d", orderIndex+1, g.Orders())
	}
	// Q1's four groups, as in the spec's answer; no (A|R, O).
	if len(flags) != 4 || flags[[2]byte{'A', 'F'}] == 0 || flags[[2]byte{'N', 'F'}] == 0 ||
		flags[[2]byte{'N', 'O'}] == 0 || flags[[2]byte{'R', 'F'}] == 0 {
		t.Errorf("flag groups %v", flags)
	}
	if minShip < StartDate+1 || maxRecv > EndDate {
		t.Errorf("dates %v to %v", minShip, maxRecv)
	}
	// Uniform columns: means within a few percent, every value present.
	n := float64(rows)
	if m := float64(sumQty) / n; math.Abs(m-25.5) > 0.3 {
		t.Errorf("mean quantity %.2f, want 25.5", m)
	}
	if m := float64(sumDisc) / n; math.Abs(m-5) > 0.1 {
		t.Errorf("mean discount %.2f, want 5", m)
	}
	for d := range 11 {
		if math.Abs(float64(discounts[d])/n-1.0/11) > 0.01 {
			t.Errorf("discount %d: %d rows", d, discounts[d])
		}
	}
	for x := range 9 {
		if math.Abs(float64(taxes[x])/n-1.0/9) > 0.01 {
			t.Errorf("tax %d: %d rows", x, taxes[x])
		}
	}
	for m, c := range modes {
		if math.Abs(float64(c)/n-1.0/7) > 0.01 {
			t.Errorf("%v: %d rows", ShipMode(m), c)
		}
	}
	if !sawQty1 || !sawQty50 {
		t.Error("quantities 1 and 50 never drawn")
	}
	for k := int64(1); k <= g.Parts(); k++ {
		p := g.Part(k)
		pt, ok := tables.PartType(k)
		if !ok || pt != p.Type || p.Type >= NumPartTypes || p.RetailPrice != RetailPrice(k) {
			t.Fatalf("part %d: %+v, table %v %v", k, p, pt, ok)
		}
		nParts++
		if p.Type.IsPromo() {
			promoParts++
		}
	}
	// One type in six is PROMO.
	if f := float64(promoParts) / float64(nParts); math.Abs(f-1.0/6) > 0.03 {
		t.Errorf("%d of %d parts PROMO", promoParts, nParts)
	}
	if _, ok := tables.OrderPriority(9); ok {
		t.Error("order 9 exists: keys are the first 8 of every 32")
	}
	if _, ok := tables.OrderPriority(OrderKey(g.Orders())); ok {
		t.Error("an order past the last exists")
	}
	if _, ok := tables.PartType(g.Parts() + 1); ok {
		t.Error("a part past the last exists")
	}
}

func TestRetailPrice(t *testing.T) {
	// The spec's formula at a few keys: (90000 + (k/10 mod 20001) + 100 (k mod 1000)) / 100.
	for k, want := range map[int64]int64{1: 90100, 10: 91001, 999: 90000 + 99 + 99900, 200000: 90000 + 20000} {
		if got := RetailPrice(k); got != want {
			t.Errorf("RetailPrice(%d) = %d, want %d", k, got, want)
		}
	}
}

// TestGeneratorDeterministic: the same seed makes the same bytes, through
// either writer and any split of the orders; another seed does not.
func TestGeneratorDeterministic(t *testing.T) {
	g, _ := NewGenerator(0.002, 7)
	var a bytes.Buffer
	if _, err := g.WriteLineitem(&a); err != nil {
		t.Fatal(err)
	}
	b := make(offsetBuffer, 100+a.Len())
	if _, err := g.WriteLineitemAt(b, 100); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b[100:]) {
		t.Fatal("WriteLineitemAt differs from WriteLineitem")
	}
	split := g.AppendRows(nil, 1000, g.Orders())
	split = append(g.AppendRows(nil, 0, 1000), split...)
	if !bytes.Equal(a.Bytes(), split) {
		t.Fatal("AppendRows in two parts differs")
	}
	var lines []Lineitem
	for i := range g.Orders() {
		lines, _ = g.AppendLines(lines, i)
	}
	for i, l := range lines {
		if ParseLineitem(a.Bytes()[i*RowSize:]) != l {
			t.Fatalf("line %d: AppendLines differs", i)
		}
	}
	h, _ := NewGenerator(0.002, 8)
	var c bytes.Buffer
	if _, err := h.WriteLineitem(&c); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Bytes()[:4096], c.Bytes()[:4096]) {
		t.Fatal("seeds 7 and 8 make the same rows")
	}
	for _, sf := range []float64{0, -1, math.NaN(), math.Inf(1), MaxSF + 1} {
		if _, err := NewGenerator(sf, 1); err == nil {
			t.Errorf("scale factor %v accepted", sf)
		}
	}
	if g, err := NewGenerator(1e-9, 1); err != nil || g.Orders() != 1 || g.Parts() != 1 || g.Suppliers() != 1 {
		t.Errorf("tiny scale factor: %v", err)
	}
}

type offsetBuffer []byte

func (b offsetBuffer) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > int64(len(b)) {
		return 0, errors.New("past the end")
	}
	return copy(b[off:], p), nil
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestWriteError(t *testing.T) {
	g, _ := NewGenerator(0.01, 1)
	rows, err := g.WriteLineitem(&failWriter{n: 100_000})
	if err == nil || !strings.Contains(err.Error(), "disk full") || rows*RowSize > 100_000 {
		t.Fatalf("%d rows, %v", rows, err)
	}
}

// TestEvaluateSmall checks Evaluate on a hand-made table against answers
// worked out by hand.
func TestEvaluateSmall(t *testing.T) {
	g, _ := NewGenerator(0.001, 3)
	tables := g.Tables()
	// Find a PROMO part and another, and an urgent order and a low one.
	var promo, plain int64
	for k := int64(1); promo == 0 || plain == 0; k++ {
		if pt, _ := tables.PartType(k); pt.IsPromo() {
			promo = k
		} else {
			plain = k
		}
	}
	var urgent, low int64
	for i := int64(0); urgent == 0 || low == 0; i++ {
		switch g.Order(i).Priority {
		case Urgent:
			urgent = OrderKey(i)
		case Low:
			low = OrderKey(i)
		}
	}
	d := MakeDate(1995, 9, 10)
	mk := func(f func(*Lineitem)) Lineitem {
		l := Lineitem{OrderKey: urgent, PartKey: int32(promo), Quantity: 2, ExtendedPrice: 1000, Discount: 10, Tax: 5,
			ReturnFlag: 'A', LineStatus: 'F', ShipDate: d, CommitDate: d + 1, ReceiptDate: d + 2, ShipMode: Mail}
		f(&l)
		return l
	}
	var rows []byte
	for _, l := range []Lineitem{
		mk(func(*Lineitem) {}),
		mk(func(l *Lineitem) { l.PartKey = int32(plain); l.ExtendedPrice = 3000; l.Discount = 0; l.OrderKey = low }),
		mk(func(l *Lineitem) { l.ShipDate = MakeDate(1995, 10, 1); l.ReturnFlag, l.LineStatus = 'N', 'O' }),
		mk(func(l *Lineitem) { l.ShipMode = Ship; l.CommitDate = d + 2 }), // Q12: commit not before receipt
	} {
		rows, _ = l.AppendBinary(rows)
	}
	eval := func(q Query) Result {
		t.Helper()
		res, err := Evaluate(q, tables, bytes.NewReader(rows))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	q14, _ := Validation(14)
	res := eval(q14)
	// Promo: 1000 × 90 = 90000 and 1000 × 90 (row 4); total + 3000 × 100.
	if res.Promo != Int128Of(180000) || res.Total != Int128Of(480000) {
		t.Fatalf("Q14 promo %v total %v", res.Promo, res.Total)
	}
	if p, ok := res.PromoRevenue(); !ok || p.FloatString(4) != "37.5000" {
		t.Errorf("promo_revenue %v", p)
	}
	q12 := Query{Number: 12, Date: MakeDate(1995, 1, 1), ShipModes: [2]ShipMode{Ship, Mail}}
	res = eval(q12)
	if want := []Q12Row{{ShipMode: Mail, HighLineCount: 1, LowLineCount: 1}}; !reflect.DeepEqual(res.Q12, want) {
		t.Errorf("Q12 %+v, want %+v", res.Q12, want)
	}
	res = eval(Query{Number: 1, Delta: 0})
	if len(res.Q1) != 2 || res.Q1[0].ReturnFlag != 'A' || res.Q1[0].Count != 3 || res.Q1[1].ReturnFlag != 'N' {
		t.Fatalf("Q1 %+v", res.Q1)
	}
	a := res.Q1[0]
	// Charges: 1000 × 90 × 105 twice, 3000 × 100 × 105.
	if a.SumQty != Int128Of(6) || a.SumBasePrice != Int128Of(5000) || a.SumDiscPrice != Int128Of(480000) ||
		a.SumCharge != Int128Of(2*9450000+31500000) || a.SumDisc != Int128Of(20) {
		t.Errorf("Q1 group A|F %+v", a)
	}
	if a.AvgQty().RatString() != "2" || a.AvgPrice().RatString() != "50/3" || a.AvgDisc().RatString() != "1/15" {
		t.Errorf("averages %v %v %v", a.AvgQty(), a.AvgPrice(), a.AvgDisc())
	}
	if !strings.Contains(res.String(), "A|F|6|50.00|48.00|50.40|2.00|16.67|0.07|3\n") {
		t.Errorf("Q1 report:\n%s", res.String())
	}
	// Errors: a partial row, an order or part the tables lack.
	if _, err := Evaluate(Query{Number: 1}, nil, bytes.NewReader(rows[:100])); err == nil {
		t.Error("a partial row evaluated")
	}
	orphan := mk(func(l *Lineitem) { l.OrderKey = 9; l.PartKey = 1 << 30 })
	bad, _ := orphan.AppendBinary(nil)
	for _, q := range []Query{q12, q14} {
		if _, err := Evaluate(q, tables, bytes.NewReader(bad)); err == nil {
			t.Errorf("%v: a row without its order or part evaluated", q)
		}
	}
}

// TestFinishErrors: malformed partials are refused, and a refused one
// adds nothing.
func TestFinishErrors(t *testing.T) {
	g, _ := NewGenerator(0.001, 3)
	tables := g.Tables()
	for _, c := range []struct {
		q       int
		partial []byte
	}{
		{1, make([]byte, 287)},
		{6, make([]byte, 17)},
		{12, make([]byte, 15)},
		{12, append(le.AppendUint64(nil, 1), le.AppendUint64(nil, 7)...)}, // mode 7
		{12, append(le.AppendUint64(nil, 9), le.AppendUint64(nil, 1)...)}, // order 9
		{14, append(le.AppendUint64(nil, 1<<32+1), le.AppendUint64(nil, 1)...)},
	} {
		q, _ := Validation(c.q)
		f, err := NewFinisher(q, tables)
		if err != nil {
			t.Fatal(err)
		}
		before := f.Result()
		if err := f.Add(c.partial); err == nil {
			t.Errorf("Q%d: partial %x added", c.q, c.partial)
		}
		if !reflect.DeepEqual(f.Result(), before) {
			t.Errorf("Q%d: a refused partial changed the result", c.q)
		}
	}
	for _, n := range []int{12, 14} {
		q, _ := Validation(n)
		if _, err := NewFinisher(q, nil); err == nil {
			t.Errorf("Q%d finisher without tables", n)
		}
	}
}
