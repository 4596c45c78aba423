/*
 * stats64.c — compute: count, sum, min and max of the little-endian u64s in
 * the input, written as struct {u64 count, sum, min, max} (32 bytes). The
 * sum wraps mod 2^64. An empty input gives all zeros. in_len not a multiple
 * of 8 is NS_EINVAL; out_cap < 32 is NS_ERANGE.
 *
 * wasm leaves its compiled code at every loop back-edge to check for a
 * timeout (tens of nanoseconds each time, several elements' worth of
 * work), so in wasm each iteration of the main loop takes 128 elements
 * (1 KiB) with SIMD (built with -msimd128, see scripts/build-functions.sh):
 * two u64 lanes per operation, and min and max by signed compares of the
 * values with their top bit flipped (wasm SIMD has no unsigned i64x2
 * compare). eBPF's interpreter gains little from unrolling, and its
 * budgets and README figures count one backward jump per element, so it
 * runs the plain loop.
 */
#include "nearstore.h"
#ifdef __wasm_simd128__
#include <wasm_simd128.h>
#endif

struct stats {
	u64 sum, min, max;
};

/* scalar folds in[i, n) into s, one element per iteration. */
NS_INLINE void scalar(const u8 *in, u32 i, u32 n, struct stats *s)
{
	u64 sum = s->sum, min = s->min, max = s->max;
	for (; i < n; i++) {
		u64 x = ns_load64(in + (u64)i * 8);
		sum += x;
		if (x < min)
			min = x;
		if (x > max)
			max = x;
	}
	s->sum = sum, s->min = min, s->max = max;
}

#ifdef __wasm_simd128__

/* Elements per iteration of simd's loop: 64 v128 loads. */
#define SIMD_BLOCK 128

/*
 * simd folds the first n / SIMD_BLOCK * SIMD_BLOCK elements into s and
 * returns how many it took. The accumulators are split in two (even and
 * odd loads) so that consecutive compares do not wait on each other.
 */
NS_INLINE u32 simd(const u8 *in, u32 n, struct stats *s)
{
	const v128_t top = wasm_i64x2_splat((s64)0x8000000000000000ULL);
	v128_t sum0 = wasm_i64x2_splat(0), sum1 = sum0;
	/* min and max of the biased values (x ^ top), as signed i64s. */
	v128_t min0 = wasm_i64x2_splat(0x7fffffffffffffffLL), min1 = min0;
	v128_t max0 = top, max1 = top;
	u32 i = 0;
	for (; i + SIMD_BLOCK <= n; i += SIMD_BLOCK) {
		const u8 *p = in + (u64)i * 8;
#pragma clang loop unroll(full)
		for (u32 k = 0; k < SIMD_BLOCK * 8; k += 32) {
			v128_t a = wasm_v128_load(p + k);
			v128_t b = wasm_v128_load(p + k + 16);
			sum0 = wasm_i64x2_add(sum0, a);
			sum1 = wasm_i64x2_add(sum1, b);
			a = wasm_v128_xor(a, top);
			b = wasm_v128_xor(b, top);
			min0 = wasm_v128_bitselect(a, min0, wasm_i64x2_lt(a, min0));
			min1 = wasm_v128_bitselect(b, min1, wasm_i64x2_lt(b, min1));
			max0 = wasm_v128_bitselect(a, max0, wasm_i64x2_gt(a, max0));
			max1 = wasm_v128_bitselect(b, max1, wasm_i64x2_gt(b, max1));
		}
	}
	if (i == 0)
		return 0;
	v128_t sum = wasm_i64x2_add(sum0, sum1);
	v128_t min = wasm_v128_bitselect(min0, min1, wasm_i64x2_lt(min0, min1));
	v128_t max = wasm_v128_bitselect(max0, max1, wasm_i64x2_gt(max0, max1));
	u64 lo, hi;
	s->sum += (u64)wasm_i64x2_extract_lane(sum, 0) + (u64)wasm_i64x2_extract_lane(sum, 1);
	lo = (u64)wasm_i64x2_extract_lane(min, 0) ^ 0x8000000000000000ULL;
	hi = (u64)wasm_i64x2_extract_lane(min, 1) ^ 0x8000000000000000ULL;
	lo = lo < hi ? lo : hi;
	if (lo < s->min)
		s->min = lo;
	lo = (u64)wasm_i64x2_extract_lane(max, 0) ^ 0x8000000000000000ULL;
	hi = (u64)wasm_i64x2_extract_lane(max, 1) ^ 0x8000000000000000ULL;
	lo = lo > hi ? lo : hi;
	if (lo > s->max)
		s->max = lo;
	return i;
}

#endif

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	if (in_len % 8 != 0)
		return NS_EINVAL;
	if (out_cap < 32)
		return NS_ERANGE;
	u32 n = in_len / 8;
	struct stats s = {0, ~0ULL, 0};
	u32 i = 0;
#ifdef __wasm_simd128__
	i = simd(in, n, &s);
#endif
	scalar(in, i, n, &s);
	if (n == 0)
		s.min = 0;
	ns_store64(out, n);
	ns_store64(out + 8, s.sum);
	ns_store64(out + 16, s.min);
	ns_store64(out + 24, s.max);
	return 32;
}
