// An XRP-style pushdown: walk a chain of 512-byte blocks, one dependent
// read per step, accumulating into scratch. Block layout (little-endian):
//   u64 magic      'NSCHAIN1'
//   u64 next_off   offset of the next block, or ~0 at the end of the chain
//   u32 next_file  file-table index of the next block
//   u32 flags      bit 0: also read the block at aux_off (fan-out of 2)
//   u64 value      added to the sum
//   u64 aux_off
// Scratch: u64 hops, u64 sum, u64 aux_sum, u64 last_file.
#include "nearstore.h"

#define BLOCK 512
#define MAGIC 0x314e49414843534eULL /* "NSCHAIN1" */

struct block {
	u64 magic;
	u64 next_off;
	u32 next_file;
	u32 flags;
	u64 value;
	u64 aux_off;
};

struct acc {
	u64 hops;
	u64 sum;
	u64 aux_sum;
	u64 last_file;
};

static __attribute__((noinline)) u64 mix(u64 v, u64 hops)
{
	/* A BPF-to-BPF call with arguments and a result. */
	return v * 3 + hops;
}

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	struct acc *acc = (struct acc *)ctx->scratch;
	struct block *b = (struct block *)ctx->data;

	if (ctx->data_len < BLOCK)
		return NS_EINVAL;
	if (b->magic != MAGIC)
		return NS_EINVAL;
	acc->sum += mix(b->value, acc->hops);
	acc->hops++;
	acc->last_file = ctx->cur_file;
	if (ctx->data_len >= 2 * BLOCK) {
		/* The second block of a fan-out read: its value counts apart. */
		struct block *aux = (struct block *)(ctx->data + BLOCK);
		acc->aux_sum += aux->value;
	}
	if (b->next_off == ~0ULL) {
		ctx->done = 1;
		return 0;
	}
	ctx->next_addr[0] = b->next_off;
	ctx->size[0] = BLOCK;
	ctx->next_file[0] = b->next_file;
	if (b->flags & 1) {
		ctx->next_addr[1] = b->aux_off;
		ctx->size[1] = BLOCK;
		ctx->next_file[1] = b->next_file;
	}
	return 0;
}
