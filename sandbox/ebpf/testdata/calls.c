// BPF-to-BPF calls: nested noinline functions, a stack buffer passed to a
// callee, and rodata (a constant table). compute writes one u64: the
// result for the first input byte.
#include "nearstore.h"

static const u64 table[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};

static __attribute__((noinline)) u64 leaf(u64 x)
{
	return table[x & 7] + x;
}

static __attribute__((noinline)) u64 fill(u64 *buf, u64 n)
{
	u64 s = 0;
	for (u64 i = 0; i < n && i < 16; i++) {
		buf[i] = leaf(i + n);
		s += buf[i];
	}
	return s;
}

static __attribute__((noinline)) u64 middle(u64 x)
{
	u64 buf[16];
	u64 s = fill(buf, x & 15);
	return s + buf[0];
}

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	if (in_len < 1 || out_cap < 8)
		return NS_EINVAL;
	*(u64 *)out = middle(in[0]);
	return 8;
}
