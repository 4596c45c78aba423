package functions

import "github.com/nearstore/nearstore/tpch"

// The TPC-H functions (tpch_q1, tpch_q6, tpch_q12, tpch_q14): the filter
// and projection, and for Q1 and Q6 the partial aggregation, of a TPC-H
// query over LINEITEM rows in package tpch's layout, behind a parameter
// header (tpch.Params; functions/README.md has both layouts). Package
// tpch finishes their outputs (tpch.Finish).
//
// These are the references for the C functions: the same checks in the
// same order, and the same wrapping u64 arithmetic, so that their outputs
// are equal byte for byte on any input, not only on rows the generator
// makes.

// tpchRows checks the parameter header of query q and returns it and the
// rows after it, or EINVAL as tpch_rows (include/tpch.h) does.
func tpchRows(in []byte, q uint32) (tpch.Params, []byte, error) {
	if len(in) < tpch.ParamsSize || (len(in)-tpch.ParamsSize)%tpch.RowSize != 0 {
		return tpch.Params{}, nil, fnErr(EINVAL)
	}
	p, err := tpch.ParseParams(in, q)
	if err != nil {
		return tpch.Params{}, nil, fnErr(EINVAL)
	}
	return p, in[tpch.ParamsSize:], nil
}

func s32(b []byte, off int) int32 { return int32(le.Uint32(b[off:])) }

// inRange is the date filter every function applies: [lo, hi).
func inRange(x, lo, hi int32) bool { return x >= lo && x < hi }

func computeTPCHQ1(in, out []byte) (int, error) {
	p, rows, err := tpchRows(in, 1)
	if err != nil {
		return 0, err
	}
	if len(out) < tpch.Q1PartialSize {
		return 0, fnErr(ERANGE)
	}
	lo, hi := int32(p.DateLo), int32(p.DateHi)
	var acc [tpch.Q1Groups]tpch.Q1Sums
	for r := rows; len(r) > 0; r = r[tpch.RowSize:] {
		if !inRange(s32(r, tpch.OffShipDate), lo, hi) {
			continue
		}
		g, ok := tpch.Q1Group(r[tpch.OffReturnFlag], r[tpch.OffLineStatus])
		if !ok {
			return 0, fnErr(EINVAL)
		}
		price := le.Uint64(r[tpch.OffExtendedPrice:])
		disc := uint64(r[tpch.OffDiscount])
		dp := price * (100 - disc)
		a := &acc[g]
		a.Count++
		a.SumQty += uint64(int64(s32(r, tpch.OffQuantity)))
		a.SumBasePrice += price
		a.SumDiscPrice += dp
		a.SumCharge += dp * (100 + uint64(r[tpch.OffTax]))
		a.SumDisc += disc
	}
	tpch.AppendQ1Partial(out[:0], &acc)
	return tpch.Q1PartialSize, nil
}

func computeTPCHQ6(in, out []byte) (int, error) {
	p, rows, err := tpchRows(in, 6)
	if err != nil {
		return 0, err
	}
	if len(out) < tpch.Q6PartialSize {
		return 0, fnErr(ERANGE)
	}
	lo, hi, qhi := int32(p.DateLo), int32(p.DateHi), p.QtyHi
	var count, revenue uint64
	for r := rows; len(r) > 0; r = r[tpch.RowSize:] {
		disc := r[tpch.OffDiscount]
		if !inRange(s32(r, tpch.OffShipDate), lo, hi) || disc < p.DiscLo || disc > p.DiscHi ||
			s32(r, tpch.OffQuantity) >= qhi {
			continue
		}
		count++
		revenue += le.Uint64(r[tpch.OffExtendedPrice:]) * uint64(disc)
	}
	le.PutUint64(out, count)
	le.PutUint64(out[8:], revenue)
	return tpch.Q6PartialSize, nil
}

func computeTPCHQ12(in, out []byte) (int, error) {
	p, rows, err := tpchRows(in, 12)
	if err != nil {
		return 0, err
	}
	lo, hi := int32(p.DateLo), int32(p.DateHi)
	o := 0
	for r := rows; len(r) > 0; r = r[tpch.RowSize:] {
		receipt := s32(r, tpch.OffReceiptDate)
		mode := tpch.ShipMode(r[tpch.OffShipMode])
		if !inRange(receipt, lo, hi) || (mode != p.ModeA && mode != p.ModeB) {
			continue
		}
		commit := s32(r, tpch.OffCommitDate)
		if commit >= receipt || s32(r, tpch.OffShipDate) >= commit {
			continue
		}
		if len(out)-o < tpch.RecordSize {
			return 0, fnErr(ERANGE)
		}
		le.PutUint64(out[o:], le.Uint64(r[tpch.OffOrderKey:]))
		le.PutUint64(out[o+8:], uint64(mode))
		o += tpch.RecordSize
	}
	return o, nil
}

func computeTPCHQ14(in, out []byte) (int, error) {
	p, rows, err := tpchRows(in, 14)
	if err != nil {
		return 0, err
	}
	lo, hi := int32(p.DateLo), int32(p.DateHi)
	o := 0
	for r := rows; len(r) > 0; r = r[tpch.RowSize:] {
		if !inRange(s32(r, tpch.OffShipDate), lo, hi) {
			continue
		}
		if len(out)-o < tpch.RecordSize {
			return 0, fnErr(ERANGE)
		}
		le.PutUint64(out[o:], uint64(le.Uint32(r[tpch.OffPartKey:])))
		le.PutUint64(out[o+8:], le.Uint64(r[tpch.OffExtendedPrice:])*(100-uint64(r[tpch.OffDiscount])))
		o += tpch.RecordSize
	}
	return o, nil
}
