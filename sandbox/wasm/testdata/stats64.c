/*
 * stats64.c — a compute test function: count, sum, min and max of the
 * little-endian u64s in its input, written as four u64s (32 bytes).
 * An empty input gives all zeros. in_len not a multiple of 8 returns
 * NS_EINVAL; out_cap < 32 returns NS_ERANGE.
 *
 * The loop is unrolled: sandbox/wasm runs modules with wazero's
 * close-on-context-done, which puts an interrupt check (an indirect call)
 * on every loop back-edge, so a tight loop pays for it once per element
 * unless unrolled (about 7x slower here without).
 */
#include "../../../functions/include/nearstore.h"

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	if (in_len % 8 != 0)
		return NS_EINVAL;
	if (out_cap < 32)
		return NS_ERANGE;
	u32 n = in_len / 8;
	u64 sum = 0, min = ~0ULL, max = 0;
	const u64 *v = (const u64 *)in;
#pragma clang loop unroll_count(8)
	for (u32 i = 0; i < n; i++) {
		u64 x = v[i];
		sum += x;
		if (x < min)
			min = x;
		if (x > max)
			max = x;
	}
	if (n == 0)
		min = 0;
	u64 *o = (u64 *)out;
	o[0] = n;
	o[1] = sum;
	o[2] = min;
	o[3] = max;
	return 32;
}
