/*
 * knn.c — compute: the squared L2 distance from a target vector to every
 * vector of the input (λ-IO's KNN; the host picks the k nearest). Integer
 * vectors, since eBPF has no floating point.
 *
 * Input:  u32 dim (>= 1); u32 reserved (0); s32 target[dim];
 *         then n vectors of s32[dim] (n >= 0).
 * Output: u64 dist[n], dist[i] = sum over j of (v[i][j] - target[j])^2,
 *         computed mod 2^64 (exact whenever the true value is below 2^64).
 * Errors: NS_EINVAL for a short or ragged input, dim 0 or a non-zero
 *         reserved word; NS_ERANGE if out_cap < 8n.
 */
#include "nearstore.h"

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	if (in_len < 8)
		return NS_EINVAL;
	u32 dim = ns_load32(in);
	if (dim == 0 || ns_load32(in + 4) != 0 || dim > (in_len - 8) / 4)
		return NS_EINVAL;
	u32 vbytes = dim * 4;
	u32 rest = in_len - 8 - vbytes;
	if (rest % vbytes != 0)
		return NS_EINVAL;
	u32 n = rest / vbytes;
	if ((u64)n * 8 > out_cap)
		return NS_ERANGE;
	const u8 *t = in + 8;
	const u8 *v = t + vbytes;
	for (u32 i = 0; i < n; i++) {
		u64 d = 0;
		NS_WASM_UNROLL(unroll_count(16))
		for (u32 j = 0; j < vbytes; j += 4) {
			s64 a = (s32)ns_load32(v + j);
			s64 b = (s32)ns_load32(t + j);
			u64 x = (u64)(a - b);
			d += x * x;
		}
		ns_store64(out + (u64)i * 8, d);
		v += vbytes;
	}
	return (int)(n * 8);
}
