/*
 * chain.c — a pushdown test function that walks a chain of 16-byte records.
 *
 * Each record is { u64 next; u64 value; }. A step adds the value of every
 * record in data to the running sum in scratch and follows the last
 * record's next pointer:
 *   next == 0                 the request is done;
 *   next has bit 63 set       fan out: read 16 bytes at (next & ~bit63) and
 *                             the 16 bytes after it, both from file 1;
 *   otherwise                 read 16 bytes at next from cur_file.
 * data_len not a multiple of 16 returns NS_EINVAL; a value of
 * 0xdeadbeef returns -1000 (a function error code).
 *
 * Scratch layout (u64 each): steps, sum, cur_addr of the last step,
 * cur_file of the last step, data_len of the last step.
 */
#include "../../../functions/include/nearstore.h"

#define FAN (1ULL << 63)

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	u64 *s = (u64 *)ctx->scratch;
	u32 n = ctx->data_len;
	u64 next = 0;

	if (n == 0 || n % 16 != 0)
		return NS_EINVAL;
	for (u32 i = 0; i < n; i += 16) {
		u64 v = ns_load64(ctx->data + i + 8);
		if (v == 0xdeadbeef)
			return -1000;
		s[1] += v;
		next = ns_load64(ctx->data + i);
	}
	s[0]++;
	s[2] = ctx->cur_addr;
	s[3] = ctx->cur_file;
	s[4] = n;
	if (next == 0) {
		ctx->done = 1;
		return 0;
	}
	if (next & FAN) {
		next &= ~FAN;
		ctx->next_addr[0] = next;
		ctx->size[0] = 16;
		ctx->next_file[0] = 1;
		ctx->next_addr[1] = next + 16;
		ctx->size[1] = 16;
		ctx->next_file[1] = 1;
		return 0;
	}
	ctx->next_addr[0] = next;
	ctx->size[0] = 16;
	ctx->next_file[0] = ctx->cur_file;
	return 0;
}
