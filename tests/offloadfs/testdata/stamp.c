/*
 * stamp.c — the function tests/offloadfs (and offloadfs's own tests) run
 * over stamped files. Every device block of a test file begins with a
 * 32-byte stamp: magic, inode, generation, file offset (u64 each). The
 * function only copies stamps out, so the test can tell exactly which
 * file, generation and offset every byte a request saw came from.
 *
 * Pushdown scratch in:  u64 second offset (~0: none), u32 second file,
 *                       u32 state (0).
 * Pushdown scratch out: the start range's first 32 bytes at 64, and the
 *                       second read's first 32 bytes at 96.
 * Compute input:        u32 mode, u32 block size, then data.
 *   mode 1 (stamps): output the first 32 bytes of every whole block.
 *   mode 2 (echo):   output the data as is (a λ write's identity).
 */
#include "nearstore.h"

#define STAMP 32
#define NONE  0xffffffffffffffffULL

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	char *s = ctx->scratch;
	if (ctx->data_len < STAMP)
		return NS_EINVAL;
	if (ns_load32(s + 12) == 0) {
		ns_copy(s + 64, ctx->data, STAMP);
		u64 second = ns_load64(s);
		if (second == NONE) {
			ctx->done = 1;
			return 0;
		}
		ns_store32(s + 12, 1);
		ctx->next_file[0] = ns_load32(s + 8);
		ctx->next_addr[0] = second;
		ctx->size[0] = STAMP;
		return 0;
	}
	ns_copy(s + 96, ctx->data, STAMP);
	ctx->done = 1;
	return 0;
}

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	if (in_len < 8)
		return NS_EINVAL;
	u32 mode = ns_load32(in);
	u32 bs = ns_load32(in + 4);
	const u8 *data = in + 8;
	u32 n = in_len - 8;
	switch (mode) {
	case 1: {
		if (bs < STAMP)
			return NS_EINVAL;
		u32 blocks = n / bs;
		if (blocks * STAMP > out_cap)
			return NS_ERANGE;
		for (u32 i = 0; i < blocks; i++)
			ns_copy(out + i * STAMP, data + i * bs, STAMP);
		return (int)(blocks * STAMP);
	}
	case 2:
		if (n > out_cap)
			return NS_ERANGE;
		ns_copy(out, data, n);
		return (int)n;
	}
	return NS_EINVAL;
}
