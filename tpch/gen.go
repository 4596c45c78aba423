package tpch

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
)

// Table cardinalities at scale factor 1 (TPC-H 4.2.5.1). LINEITEM has 1 to
// 7 rows per order, 4 on average, so about 6,000,000 × SF rows.
const (
	ordersPerSF    = 1_500_000
	partsPerSF     = 200_000
	suppliersPerSF = 10_000
)

// MaxSF is the largest scale factor: part keys (200,000 × SF) stay within
// the rows' s32 l_partkey.
const MaxSF = 10_000

// Generator makes a TPC-H database's LINEITEM table, and the ORDERS and
// PART columns Q12 and Q14 join with, at a scale factor and from a seed.
//
// The values follow the spec's distributions (TPC-H 4.2.3) but not dbgen's
// random streams, so the data is not byte-for-byte dbgen's and the answers
// are not the spec's published ones; Evaluate is the reference instead.
// Every order draws from its own random stream, seeded by (seed, order
// number), so any range of orders can be made independently, in any order
// or in parallel, and always comes out the same. PART is the same per part
// key.
//
// A Generator is immutable and safe for concurrent use.
type Generator struct {
	sf        float64
	seed      uint64
	orders    int64
	parts     int64
	suppliers int64
}

// NewGenerator returns the generator of scale factor sf (0 < sf ≤ MaxSF;
// fractions such as 0.01 scale every table, as dbgen's -s does) and seed.
func NewGenerator(sf float64, seed uint64) (*Generator, error) {
	if !(sf > 0 && sf <= MaxSF) {
		return nil, fmt.Errorf("tpch: scale factor %v: want more than 0, at most %d", sf, MaxSF)
	}
	card := func(perSF float64) int64 { return max(1, int64(math.Round(perSF*sf))) }
	return &Generator{
		sf:        sf,
		seed:      seed,
		orders:    card(ordersPerSF),
		parts:     card(partsPerSF),
		suppliers: card(suppliersPerSF),
	}, nil
}

// SF returns the scale factor.
func (g *Generator) SF() float64 { return g.sf }

// Seed returns the seed.
func (g *Generator) Seed() uint64 { return g.seed }

// Orders returns the number of orders: ORDERS' cardinality.
func (g *Generator) Orders() int64 { return g.orders }

// Parts returns the number of parts, whose keys are 1 to Parts().
func (g *Generator) Parts() int64 { return g.parts }

// Suppliers returns the number of suppliers, whose keys are 1 to
// Suppliers().
func (g *Generator) Suppliers() int64 { return g.suppliers }

// OrderKey returns the key of the i-th order (from 0). Keys are sparse as
// the spec's (4.2.3): the first 8 of every 32, so 1..8, 33..40, ...
func OrderKey(i int64) int64 { return i/8*32 + i%8 + 1 }

// orderIndex is the inverse of OrderKey; ok is false for a key no order
// has.
func orderIndex(key int64) (i int64, ok bool) {
	k := key - 1
	if k < 0 || k%32 >= 8 {
		return 0, false
	}
	return k/32*8 + k%32, true
}

// Order is the ORDERS columns the generator makes: those the queries and
// LINEITEM's dates need.
type Order struct {
	Key      int64
	Date     Date // o_orderdate
	Priority Priority
	Lines    int // the order's LINEITEM rows, 1..7
}

// Part is the PART columns the generator makes.
type Part struct {
	Key         int64
	Type        PartType
	RetailPrice int64 // cents
}

// Streams: the salt is mixed into the seed so that orders and parts draw
// from unrelated streams.
const (
	orderStream = 0x4f52444552530000 // "ORDERS"
	partStream  = 0x5041525400000000 // "PART"
)

// rng is a PCG stream with the spec's "random [lo .. hi]" draws.
type rng struct{ p rand.PCG }

// mix is SplitMix64's finalizer: it spreads neighbouring seeds and keys
// over unrelated PCG states.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (g *Generator) stream(salt uint64, n int64) rng {
	var r rng
	r.p.Seed(mix(g.seed^salt), mix(uint64(n)^salt))
	return r
}

// between returns a uniform integer in [lo, hi]: the high word of a 64×64
// product (Lemire's method without the rejection step; the bias, under
// 2^-57 for these ranges, is far below anything a query can see).
func (r *rng) between(lo, hi int64) int64 {
	h, _ := bits.Mul64(r.p.Uint64(), uint64(hi-lo+1))
	return lo + int64(h)
}

// Order returns the i-th order (0 ≤ i < Orders()).
func (g *Generator) Order(i int64) Order {
	r := g.stream(orderStream, i)
	return g.orderHead(&r, i)
}

// orderHead draws an order's own columns: the first draws of its stream,
// before its lines'.
func (g *Generator) orderHead(r *rng, i int64) Order {
	return Order{
		Key:      OrderKey(i),
		Date:     Date(r.between(int64(StartDate), int64(EndDate-151))),
		Priority: Priority(r.between(0, int64(numPriorities-1))),
		Lines:    int(r.between(1, 7)),
	}
}

// Part returns the part of key (1 ≤ key ≤ Parts()).
func (g *Generator) Part(key int64) Part {
	r := g.stream(partStream, key)
	return Part{
		Key:         key,
		Type:        PartType(r.between(0, NumPartTypes-1)),
		RetailPrice: RetailPrice(key),
	}
}

// RetailPrice is p_retailprice of a part key in cents (TPC-H 4.2.3):
// (90000 + ((key/10) mod 20001) + 100 × (key mod 1000)) / 100 dollars.
func RetailPrice(key int64) int64 { return 90000 + key/10%20001 + 100*(key%1000) }

// SuppKey is the spec's i-th supplier (0 ≤ i ≤ 3) of a part key among s
// suppliers: (key + i × (s/4 + (key−1)/s)) mod s + 1.
func SuppKey(key int64, i int64, s int64) int64 {
	return (key+i*(s/4+(key-1)/s))%s + 1
}

// AppendLines appends the lines of the i-th order to dst and returns the
// order.
func (g *Generator) AppendLines(dst []Lineitem, i int64) ([]Lineitem, Order) {
	r := g.stream(orderStream, i)
	o := g.orderHead(&r, i)
	for n := 1; n <= o.Lines; n++ {
		var l Lineitem
		g.line(&r, &o, n, &l)
		dst = append(dst, l)
	}
	return dst, o
}

// line draws the n-th line of order o (TPC-H 4.2.3, LINEITEM).
func (g *Generator) line(r *rng, o *Order, n int, l *Lineitem) {
	partKey := r.between(1, g.parts)
	supp := r.between(0, 3)
	qty := r.between(1, 50)
	*l = Lineitem{
		OrderKey:      o.Key,
		PartKey:       int32(partKey),
		SuppKey:       int32(SuppKey(partKey, supp, g.suppliers)),
		LineNumber:    uint8(n),
		Quantity:      int32(qty),
		ExtendedPrice: qty * RetailPrice(partKey),
		Discount:      uint8(r.between(0, 10)),
		Tax:           uint8(r.between(0, 8)),
		ShipDate:      o.Date + Date(r.between(1, 121)),
		CommitDate:    o.Date + Date(r.between(30, 90)),
	}
	l.ReceiptDate = l.ShipDate + Date(r.between(1, 30))
	// Draw the return flag's coin for every line, so that a line's later
	// columns do not depend on its dates.
	returned := r.between(0, 1)
	switch {
	case l.ReceiptDate > CurrentDate:
		l.ReturnFlag = 'N'
	case returned == 0:
		l.ReturnFlag = 'R'
	default:
		l.ReturnFlag = 'A'
	}
	l.LineStatus = 'F'
	if l.ShipDate > CurrentDate {
		l.LineStatus = 'O'
	}
	l.ShipInstruct = ShipInstruct(r.between(0, int64(numShipInstructs-1)))
	l.ShipMode = ShipMode(r.between(0, int64(numShipModes-1)))
}

// AppendRows appends the LINEITEM rows of orders [from, to) to dst, in
// order, RowSize bytes each.
func (g *Generator) AppendRows(dst []byte, from, to int64) []byte {
	var l Lineitem
	for i := from; i < to; i++ {
		r := g.stream(orderStream, i)
		o := g.orderHead(&r, i)
		for n := 1; n <= o.Lines; n++ {
			g.line(&r, &o, n, &l)
			dst = append(dst, make([]byte, RowSize)...)
			l.Put(dst[len(dst)-RowSize:])
		}
	}
	return dst
}

// Rows returns the number of LINEITEM rows, without making them (a
// device's file can be sized before it is written).
func (g *Generator) Rows() int64 {
	var n int64
	for i := range g.orders {
		n += int64(g.Order(i).Lines)
	}
	return n
}

// writeBatch is how many orders WriteLineitem makes per write: about
// 64 KiB of rows, a few writes per MiB, a small buffer.
const writeBatch = 256

// WriteLineitem writes the whole LINEITEM table to w, row after row in
// order key order, and returns the number of rows. It holds only a batch
// of rows in memory at a time, so any scale factor streams.
func (g *Generator) WriteLineitem(w io.Writer) (rows int64, err error) {
	buf := make([]byte, 0, writeBatch*7*RowSize)
	for i := int64(0); i < g.orders; i += writeBatch {
		buf = g.AppendRows(buf[:0], i, min(i+writeBatch, g.orders))
		if _, err := w.Write(buf); err != nil {
			return rows, fmt.Errorf("tpch: writing LINEITEM at row %d: %w", rows, err)
		}
		rows += int64(len(buf) / RowSize)
	}
	return rows, nil
}

// WriteLineitemAt writes the whole LINEITEM table to w from offset off on
// (for instance a file or a device at a block boundary), as WriteLineitem
// does.
func (g *Generator) WriteLineitemAt(w io.WriterAt, off int64) (rows int64, err error) {
	return g.WriteLineitem(io.NewOffsetWriter(w, off))
}

// Tables are the dimension columns the host joins LINEITEM with:
// o_orderpriority by order key (Q12) and p_type by part key (Q14). They
// are columns indexed by the keys' arithmetic rather than maps: at SF 1,
// 1.5 MB of priorities and 200 KB of part types.
type Tables struct {
	priority []Priority // by order index (OrderKey's inverse)
	partType []PartType // by part key − 1
}

// Tables makes the generator's dimension columns.
func (g *Generator) Tables() *Tables {
	t := &Tables{
		priority: make([]Priority, g.orders),
		partType: make([]PartType, g.parts),
	}
	for i := range t.priority {
		t.priority[i] = g.Order(int64(i)).Priority
	}
	for k := range t.partType {
		t.partType[k] = g.Part(int64(k) + 1).Type
	}
	return t
}

// OrderPriority returns o_orderpriority of the order with the key; ok is
// false if there is no such order.
func (t *Tables) OrderPriority(orderKey int64) (p Priority, ok bool) {
	i, ok := orderIndex(orderKey)
	if !ok || i >= int64(len(t.priority)) {
		return 0, false
	}
	return t.priority[i], true
}

// PartType returns p_type of the part with the key; ok is false if there
// is no such part.
func (t *Tables) PartType(partKey int64) (pt PartType, ok bool) {
	if partKey < 1 || partKey > int64(len(t.partType)) {
		return 0, false
	}
	return t.partType[partKey-1], true
}
