/*
 * tpch_q14.c — compute: TPC-H Q14's filter and projection over LINEITEM
 * rows (include/tpch.h): the rows with date_lo <= l_shipdate < date_hi,
 * each projected onto the key the host joins PART on and its revenue. The
 * host sums the revenue of all of them and of the PROMO parts'
 * (tpch.Finish).
 *
 * Output: a 16-byte record per selected row, in row order:
 * {u64 l_partkey (zero-extended); u64 l_extendedprice × (100 − l_discount)
 * (10^-4 dollars), mod 2^64}.
 * Errors: NS_EINVAL for a bad header or a partial row; NS_ERANGE if the
 * records do not fit in out_cap (16 bytes per row always do).
 */
#include "tpch.h"

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	s32 n = tpch_rows(in, in_len, 14);
	if (n < 0)
		return NS_EINVAL;
	s32 lo = tpch_s32(in + TPCH_P_DATE_LO);
	s32 hi = tpch_s32(in + TPCH_P_DATE_HI);
	u32 o = 0;
	const u8 *r = in + TPCH_PARAMS_SIZE;
	NS_WASM_UNROLL(unroll_count(16))
	for (s32 i = 0; i < n; i++, r += TPCH_ROW_SIZE) {
		s32 ship = tpch_s32(r + TPCH_SHIPDATE);
		if (ship < lo || ship >= hi)
			continue;
		if (out_cap - o < TPCH_RECORD_SIZE)
			return NS_ERANGE;
		ns_store64(out + o, ns_load32(r + TPCH_PARTKEY));
		ns_store64(out + o + 8, ns_load64(r + TPCH_EXTENDEDPRICE) * (100 - (u64)r[TPCH_DISCOUNT]));
		o += TPCH_RECORD_SIZE;
	}
	return (int)o;
}
