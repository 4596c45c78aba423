/*
 * tpch_q1.c — compute: TPC-H Q1's filter and partial aggregation over
 * LINEITEM rows (include/tpch.h): for the rows with date_lo <= l_shipdate
 * < date_hi (Q1 asks for l_shipdate <= 1998-12-01 − delta: date_lo is
 * INT32_MIN and date_hi that date + 1), grouped by (l_returnflag,
 * l_linestatus), the count and the sums the host needs for every column of
 * the answer, averages included. The host adds the partials of all its λ
 * reads (tpch.Finish).
 *
 * Output (288 bytes): 6 groups of 6 u64s, group 2 × {A 0, N 1, R 2} +
 * {F 0, O 1}, each {count, Σ qty, Σ price, Σ price × (100 − disc),
 * Σ price × (100 − disc) × (100 + tax), Σ disc}, mod 2^64.
 * Errors: NS_EINVAL for a bad header or a partial row, or a selected row
 * whose flags are not one of the six groups; NS_ERANGE if out_cap < 288.
 */
#include "tpch.h"

#define GROUP_SIZE 48
#define OUT_SIZE   (6 * GROUP_SIZE)

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	s32 n = tpch_rows(in, in_len, 1);
	if (n < 0)
		return NS_EINVAL;
	if (out_cap < OUT_SIZE)
		return NS_ERANGE;
	s32 lo = tpch_s32(in + TPCH_P_DATE_LO);
	s32 hi = tpch_s32(in + TPCH_P_DATE_HI);
	for (u32 i = 0; i < OUT_SIZE; i += 8)
		ns_store64(out + i, 0);
	const u8 *r = in + TPCH_PARAMS_SIZE;
	NS_WASM_UNROLL(unroll_count(8))
	for (s32 i = 0; i < n; i++, r += TPCH_ROW_SIZE) {
		s32 ship = tpch_s32(r + TPCH_SHIPDATE);
		if (ship < lo || ship >= hi)
			continue;
		u32 g;
		switch (r[TPCH_RETURNFLAG]) {
		case 'A': g = 0; break;
		case 'N': g = 2; break;
		case 'R': g = 4; break;
		default: return NS_EINVAL;
		}
		switch (r[TPCH_LINESTATUS]) {
		case 'F': break;
		case 'O': g++; break;
		default: return NS_EINVAL;
		}
		u8 *a = out + g * GROUP_SIZE;
		u64 price = ns_load64(r + TPCH_EXTENDEDPRICE);
		u64 disc = r[TPCH_DISCOUNT];
		u64 dp = price * (100 - disc);
		ns_store64(a, ns_load64(a) + 1);
		ns_store64(a + 8, ns_load64(a + 8) + (u64)(s64)tpch_s32(r + TPCH_QUANTITY));
		ns_store64(a + 16, ns_load64(a + 16) + price);
		ns_store64(a + 24, ns_load64(a + 24) + dp);
		ns_store64(a + 32, ns_load64(a + 32) + dp * (100 + (u64)r[TPCH_TAX]));
		ns_store64(a + 40, ns_load64(a + 40) + disc);
	}
	return OUT_SIZE;
}
