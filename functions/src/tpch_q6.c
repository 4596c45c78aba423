/*
 * tpch_q6.c — compute: TPC-H Q6 over LINEITEM rows (include/tpch.h): the
 * rows with date_lo <= l_shipdate < date_hi, disc_lo <= l_discount <=
 * disc_hi and l_quantity < qty_hi, counted, and their revenue summed. The
 * host adds the partials of all its λ reads (tpch.Finish).
 *
 * Output (16 bytes): u64 count; u64 Σ l_extendedprice × l_discount
 * (10^-4 dollars), mod 2^64.
 * Errors: NS_EINVAL for a bad header or a partial row; NS_ERANGE if
 * out_cap < 16.
 */
#include "tpch.h"

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	s32 n = tpch_rows(in, in_len, 6);
	if (n < 0)
		return NS_EINVAL;
	if (out_cap < 16)
		return NS_ERANGE;
	s32 lo = tpch_s32(in + TPCH_P_DATE_LO);
	s32 hi = tpch_s32(in + TPCH_P_DATE_HI);
	u32 dlo = in[TPCH_P_DISC_LO], dhi = in[TPCH_P_DISC_HI];
	s32 qhi = tpch_s32(in + TPCH_P_QTY_HI);
	u64 count = 0, revenue = 0;
	const u8 *r = in + TPCH_PARAMS_SIZE;
	NS_WASM_UNROLL(unroll_count(16))
	for (s32 i = 0; i < n; i++, r += TPCH_ROW_SIZE) {
		s32 ship = tpch_s32(r + TPCH_SHIPDATE);
		u32 disc = r[TPCH_DISCOUNT];
		if (ship < lo || ship >= hi || disc < dlo || disc > dhi ||
		    tpch_s32(r + TPCH_QUANTITY) >= qhi)
			continue;
		count++;
		revenue += ns_load64(r + TPCH_EXTENDEDPRICE) * disc;
	}
	ns_store64(out, count);
	ns_store64(out + 8, revenue);
	return 16;
}
