package tpch

import (
	"fmt"
	"math"
)

// The functions' side of the queries: the parameters a λ read prepends to
// the rows it reads, and the partial results the functions return, which
// Finish combines. functions/README.md has the same tables.

// ParamsSize is the size of the parameter header of every tpch_* function.
// The input of a call is the header followed by whole rows, so the rows
// start at this offset.
const ParamsSize = 32

// ParamsMagic is the header's first four bytes, "TPCH": a function given
// anything else refuses the input rather than scan it with garbage bounds.
const ParamsMagic = 0x48435054

// Byte offsets of the parameter header's fields. Every function filters
// on one date column in [date_lo, date_hi): l_shipdate for Q1, Q6 and Q14,
// l_receiptdate for Q12; the other fields matter only to the query named.
//
//	offset size field
//	     0    4 magic, "TPCH"
//	     4    4 query: 1, 6, 12 or 14
//	     8    4 date_lo, s32, inclusive
//	    12    4 date_hi, s32, exclusive
//	    16    1 disc_lo, u8 (Q6), inclusive
//	    17    1 disc_hi, u8 (Q6), inclusive
//	    18    1 mode_a, ShipMode (Q12)
//	    19    1 mode_b, ShipMode (Q12)
//	    20    4 qty_hi, s32 (Q6), exclusive
//	    24    8 reserved, zero (ignored)
const (
	offParamsMagic   = 0
	offParamsQuery   = 4
	offParamsDateLo  = 8
	offParamsDateHi  = 12
	offParamsDiscLo  = 16
	offParamsDiscHi  = 17
	offParamsModeA   = 18
	offParamsModeB   = 19
	offParamsQtyHi   = 20
	offParamsReserve = 24
)

// Params is the decoded parameter header.
type Params struct {
	Query          uint32
	DateLo, DateHi Date
	DiscLo, DiscHi uint8
	ModeA, ModeB   ShipMode
	QtyHi          int32
}

// AppendBinary appends the ParamsSize-byte header.
func (p Params) AppendBinary(b []byte) ([]byte, error) {
	b = le.AppendUint32(b, ParamsMagic)
	b = le.AppendUint32(b, p.Query)
	b = le.AppendUint32(b, uint32(p.DateLo))
	b = le.AppendUint32(b, uint32(p.DateHi))
	b = append(b, p.DiscLo, p.DiscHi, byte(p.ModeA), byte(p.ModeB))
	b = le.AppendUint32(b, uint32(p.QtyHi))
	return append(b, make([]byte, ParamsSize-offParamsReserve)...), nil
}

// ParseParams decodes a parameter header from the start of in: what every
// function checks before it scans. It fails, as the functions do with
// NS_EINVAL, on a short input, a wrong magic or a query other than want.
func ParseParams(in []byte, want uint32) (Params, error) {
	if len(in) < ParamsSize {
		return Params{}, fmt.Errorf("tpch: %d bytes of input, shorter than the %d-byte parameter header", len(in), ParamsSize)
	}
	if m := le.Uint32(in[offParamsMagic:]); m != ParamsMagic {
		return Params{}, fmt.Errorf("tpch: parameter magic %#x, want %#x", m, ParamsMagic)
	}
	p := Params{
		Query:  le.Uint32(in[offParamsQuery:]),
		DateLo: Date(le.Uint32(in[offParamsDateLo:])),
		DateHi: Date(le.Uint32(in[offParamsDateHi:])),
		DiscLo: in[offParamsDiscLo],
		DiscHi: in[offParamsDiscHi],
		ModeA:  ShipMode(in[offParamsModeA]),
		ModeB:  ShipMode(in[offParamsModeB]),
		QtyHi:  int32(le.Uint32(in[offParamsQtyHi:])),
	}
	if p.Query != want {
		return Params{}, fmt.Errorf("tpch: parameters for query %d, want %d", p.Query, want)
	}
	return p, nil
}

// Params returns the parameter header the query's function takes. q must
// be valid (Query.Validate): out-of-range fields do not encode.
func (q Query) Params() Params {
	p := Params{Query: uint32(q.Number)}
	switch q.Number {
	case 1:
		// l_shipdate <= date '1998-12-01' - interval 'DELTA' day.
		p.DateLo = math.MinInt32
		p.DateHi = q1Base - Date(q.Delta) + 1
	case 6:
		// l_discount between DISCOUNT - 0.01 and DISCOUNT + 0.01.
		p.DateLo, p.DateHi = q.Date, q.Date.AddMonths(12)
		p.DiscLo, p.DiscHi = uint8(q.Discount-1), uint8(q.Discount+1)
		p.QtyHi = int32(q.Quantity)
	case 12:
		p.DateLo, p.DateHi = q.Date, q.Date.AddMonths(12)
		p.ModeA, p.ModeB = q.ShipModes[0], q.ShipModes[1]
	case 14:
		p.DateLo, p.DateHi = q.Date, q.Date.AddMonths(1)
	}
	return p
}

// Input returns the query's function input for rows (whole rows): the
// parameter header, then the rows, as a λ read lays them out. q must be
// valid, as for Params.
func (q Query) Input(rows []byte) []byte {
	b := make([]byte, 0, ParamsSize+len(rows))
	b, _ = q.Params().AppendBinary(b)
	return append(b, rows...)
}

// Sizes of the partial results.
const (
	// Q1PartialSize: Q1Groups groups of Q1GroupSize bytes.
	Q1GroupSize   = 48
	Q1Groups      = 6
	Q1PartialSize = Q1Groups * Q1GroupSize
	// Q6PartialSize: {u64 count; u64 revenue}.
	Q6PartialSize = 16
	// RecordSize is the size of one record of Q12's and Q14's outputs.
	RecordSize = 16
)

// OutCap returns the output capacity the query's function needs for an
// input of inLen bytes (header and rows): the fixed size of Q1's and Q6's
// partial aggregates, and one record per row at most for Q12 and Q14.
func (q Query) OutCap(inLen int) int {
	switch q.Number {
	case 1:
		return Q1PartialSize
	case 6:
		return Q6PartialSize
	}
	return max(inLen-ParamsSize, 0) / RowSize * RecordSize
}

// Q1Sums is one group of Q1's partial result: the aggregates of the
// selected rows whose (l_returnflag, l_linestatus) is the group's, all
// mod 2^64 (for rows the generator makes, a call of less than 4 GiB of
// input cannot wrap them: 2^26 rows of at most 50 × 2099.00 dollars).
//
//	offset size field
//	     0    8 count
//	     8    8 sum_qty         Σ l_quantity (sign-extended)
//	    16    8 sum_base_price  Σ l_extendedprice, cents
//	    24    8 sum_disc_price  Σ l_extendedprice × (100 − l_discount), 10⁻⁴ dollars
//	    32    8 sum_charge      Σ l_extendedprice × (100 − l_discount) × (100 + l_tax), 10⁻⁶ dollars
//	    40    8 sum_disc        Σ l_discount, hundredths
type Q1Sums struct {
	Count, SumQty, SumBasePrice, SumDiscPrice, SumCharge, SumDisc uint64
}

// Q1Group returns the index of the group of (returnflag, linestatus) in
// Q1's partial result: 2 × {A: 0, N: 1, R: 2} + {F: 0, O: 1}. ok is false
// for any other flag, which the function refuses (NS_EINVAL).
func Q1Group(returnFlag, lineStatus byte) (g int, ok bool) {
	switch returnFlag {
	case 'A':
	case 'N':
		g = 2
	case 'R':
		g = 4
	default:
		return 0, false
	}
	switch lineStatus {
	case 'F':
	case 'O':
		g++
	default:
		return 0, false
	}
	return g, true
}

// q1Flags is the inverse of Q1Group.
func q1Flags(g int) (returnFlag, lineStatus byte) {
	return "ANR"[g/2], "FO"[g%2]
}

// ParseQ1Partial decodes Q1's partial result.
func ParseQ1Partial(b []byte) ([Q1Groups]Q1Sums, error) {
	var p [Q1Groups]Q1Sums
	if len(b) != Q1PartialSize {
		return p, fmt.Errorf("tpch: Q1 partial result of %d bytes, want %d", len(b), Q1PartialSize)
	}
	for g := range p {
		s := b[g*Q1GroupSize:]
		p[g] = Q1Sums{le.Uint64(s), le.Uint64(s[8:]), le.Uint64(s[16:]), le.Uint64(s[24:]), le.Uint64(s[32:]), le.Uint64(s[40:])}
	}
	return p, nil
}

// AppendQ1Partial appends the encoding of a Q1 partial result.
func AppendQ1Partial(b []byte, p *[Q1Groups]Q1Sums) []byte {
	for _, s := range p {
		for _, x := range [...]uint64{s.Count, s.SumQty, s.SumBasePrice, s.SumDiscPrice, s.SumCharge, s.SumDisc} {
			b = le.AppendUint64(b, x)
		}
	}
	return b
}

// Q6Partial is Q6's partial result.
//
//	offset size field
//	     0    8 count of selected rows
//	     8    8 revenue, Σ l_extendedprice × l_discount mod 2^64, 10⁻⁴ dollars
type Q6Partial struct {
	Count, Revenue uint64
}

// ParseQ6Partial decodes Q6's partial result.
func ParseQ6Partial(b []byte) (Q6Partial, error) {
	if len(b) != Q6PartialSize {
		return Q6Partial{}, fmt.Errorf("tpch: Q6 partial result of %d bytes, want %d", len(b), Q6PartialSize)
	}
	return Q6Partial{le.Uint64(b), le.Uint64(b[8:])}, nil
}

// Q12Record is one record of Q12's output, a selected row projected onto
// the columns the host's join and grouping need.
//
//	offset size field
//	     0    8 l_orderkey
//	     8    8 l_shipmode, the row's code zero-extended
type Q12Record struct {
	OrderKey int64
	ShipMode uint64
}

// Q14Record is one record of Q14's output.
//
//	offset size field
//	     0    8 l_partkey, the row's u32 zero-extended
//	     8    8 revenue, l_extendedprice × (100 − l_discount) mod 2^64, 10⁻⁴ dollars
type Q14Record struct {
	PartKey uint64
	Revenue uint64
}

// records checks that b is a whole number of records.
func records(q int, b []byte) (int, error) {
	if len(b)%RecordSize != 0 {
		return 0, fmt.Errorf("tpch: Q%d output of %d bytes is not a whole number of %d-byte records", q, len(b), RecordSize)
	}
	return len(b) / RecordSize, nil
}
