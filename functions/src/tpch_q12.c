/*
 * tpch_q12.c — compute: TPC-H Q12's filter and projection over LINEITEM
 * rows (include/tpch.h): the rows with date_lo <= l_receiptdate < date_hi,
 * l_shipmode mode_a or mode_b, l_commitdate < l_receiptdate and
 * l_shipdate < l_commitdate, each projected onto the key the host joins
 * ORDERS on and the mode it groups by. The host counts them by order
 * priority (tpch.Finish).
 *
 * Output: a 16-byte record per selected row, in row order:
 * {u64 l_orderkey; u64 l_shipmode code}.
 * Errors: NS_EINVAL for a bad header or a partial row; NS_ERANGE if the
 * records do not fit in out_cap (16 bytes per row always do).
 */
#include "tpch.h"

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	s32 n = tpch_rows(in, in_len, 12);
	if (n < 0)
		return NS_EINVAL;
	s32 lo = tpch_s32(in + TPCH_P_DATE_LO);
	s32 hi = tpch_s32(in + TPCH_P_DATE_HI);
	u32 ma = in[TPCH_P_MODE_A], mb = in[TPCH_P_MODE_B];
	u32 o = 0;
	const u8 *r = in + TPCH_PARAMS_SIZE;
	NS_WASM_UNROLL(unroll_count(16))
	for (s32 i = 0; i < n; i++, r += TPCH_ROW_SIZE) {
		s32 receipt = tpch_s32(r + TPCH_RECEIPTDATE);
		u32 mode = r[TPCH_SHIPMODE];
		if (receipt < lo || receipt >= hi || (mode != ma && mode != mb))
			continue;
		s32 commit = tpch_s32(r + TPCH_COMMITDATE);
		if (commit >= receipt || tpch_s32(r + TPCH_SHIPDATE) >= commit)
			continue;
		if (out_cap - o < TPCH_RECORD_SIZE)
			return NS_ERANGE;
		ns_store64(out + o, ns_load64(r + TPCH_ORDERKEY));
		ns_store64(out + o + 8, mode);
		o += TPCH_RECORD_SIZE;
	}
	return (int)o;
}
