// stats64: count, sum, min and max of the little-endian u64 values of the
// input (a trailing partial value is ignored). Output: four u64.
#include "nearstore.h"

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	const u64 *v = (const u64 *)in;
	u32 n = in_len / 8;
	u64 sum = 0, mn = ~0ULL, mx = 0;
	u64 *o = (u64 *)out;

	if (out_cap < 32)
		return NS_ERANGE;
	for (u32 i = 0; i < n; i++) {
		u64 x = v[i];
		sum += x;
		if (x < mn)
			mn = x;
		if (x > mx)
			mx = x;
	}
	o[0] = n;
	o[1] = sum;
	o[2] = n ? mn : 0;
	o[3] = mx;
	return 32;
}
