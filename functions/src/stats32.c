/*
 * stats32.c — compute: count, sum, min and max of the little-endian u32s in
 * the input, written as struct {u64 count, sum, min, max} (32 bytes), the
 * same output as stats64. The sum wraps mod 2^64 (it cannot for inputs
 * under 16 GiB). An empty input gives all zeros. in_len not a multiple of 4
 * is NS_EINVAL; out_cap < 32 is NS_ERANGE.
 */
#include "nearstore.h"

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	if (in_len % 4 != 0)
		return NS_EINVAL;
	if (out_cap < 32)
		return NS_ERANGE;
	u32 n = in_len / 4;
	u64 sum = 0;
	u32 min = ~0U, max = 0;
	NS_WASM_UNROLL(unroll_count(32))
	for (u32 i = 0; i < n; i++) {
		u32 x = ns_load32(in + (u64)i * 4);
		sum += x;
		if (x < min)
			min = x;
		if (x > max)
			max = x;
	}
	if (n == 0)
		min = 0;
	ns_store64(out, n);
	ns_store64(out + 8, sum);
	ns_store64(out + 16, min);
	ns_store64(out + 24, max);
	return 32;
}
