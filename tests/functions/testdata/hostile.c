/*
 * hostile.c — one module that misbehaves on request, built for both
 * runtimes (wasm32 and BPF) from the same source. The misbehaviour is
 * chosen by the first u32 of the scratch (pushdown) or of the input
 * (compute), so one load covers every shape. The end-to-end tests in
 * tests/functions send it to a real target and check that each shape comes
 * back to the caller as a clear error while the target keeps serving.
 *
 * Pushdown scratch: u32 mode, u32 reserved, u64 arg.
 * Compute input:    u32 mode, u32 reserved, then anything.
 */
#include "nearstore.h"

enum {
	MODE_OK = 0,       /* pushdown: done at once; compute: echo the input after the header */
	MODE_LOOP = 1,     /* spin forever */
	MODE_OOB = 2,      /* load through a pointer outside every buffer */
	MODE_HUGE = 3,     /* pushdown: ask for 16 x 8 KiB; compute: claim out_cap + 1 bytes */
	MODE_BADFILE = 4,  /* pushdown: resubmit to file 7 */
	MODE_PASTEND = 5,  /* pushdown: resubmit 512 bytes at arg (a file's end) of cur_file */
	MODE_FOREVER = 6,  /* pushdown: resubmit the same block every step */
	MODE_STALL = 7,    /* pushdown: neither done nor a read asked for */
	MODE_FAIL = 8,     /* return -1000 */
	MODE_BOMB = 9,     /* wasm: grow memory a page at a time, then touch past the limit */
	MODE_FILL = 10,    /* compute: fill all of out_cap with 0xA5 */
	MODE_TRAP = 11,    /* wasm: trap (unreachable); BPF has no trap: NS_EINVAL */
};

#define OUTSIDE 0xfffffff0UL

static int spin(void)
{
	volatile u32 forever = 1;
	while (forever)
		;
	return 0;
}

static int trap(void)
{
#if defined(__wasm__)
	__builtin_trap();
#endif
	return NS_EINVAL;
}

static int bomb(void)
{
#if defined(__wasm__)
	while (__builtin_wasm_memory_grow(0, 1) != (unsigned long)-1)
		;
	/* The cap held; now touch the first byte past it. */
	unsigned long end = __builtin_wasm_memory_size(0) * 65536UL;
	return *(volatile u8 *)end;
#else
	return *(volatile u8 *)OUTSIDE;
#endif
}

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	u32 mode = ns_load32(ctx->scratch);
	u64 arg = ns_load64(ctx->scratch + 8);

	switch (mode) {
	case MODE_OK:
		ctx->done = 1;
		return 0;
	case MODE_LOOP:
		return spin();
	case MODE_OOB:
		return *(volatile u8 *)OUTSIDE;
	case MODE_HUGE:
		for (u32 i = 0; i < NS_MAX_FANOUT; i++) {
			ctx->next_file[i] = ctx->cur_file;
			ctx->next_addr[i] = 0;
			ctx->size[i] = 8192;
		}
		return 0;
	case MODE_BADFILE:
		ctx->next_file[0] = 7;
		ctx->next_addr[0] = 0;
		ctx->size[0] = 512;
		return 0;
	case MODE_PASTEND:
		ctx->next_file[0] = ctx->cur_file;
		ctx->next_addr[0] = arg;
		ctx->size[0] = 512;
		return 0;
	case MODE_FOREVER:
		ctx->next_file[0] = ctx->cur_file;
		ctx->next_addr[0] = ctx->cur_addr;
		ctx->size[0] = ctx->data_len;
		return 0;
	case MODE_STALL:
		return 0;
	case MODE_FAIL:
		return -1000;
	case MODE_BOMB:
		return bomb();
	case MODE_TRAP:
		return trap();
	}
	return NS_EINVAL;
}

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	if (in_len < 8)
		return NS_EINVAL;
	switch (ns_load32(in)) {
	case MODE_OK:
		if (in_len - 8 > out_cap)
			return NS_ERANGE;
		ns_copy(out, in + 8, in_len - 8);
		return in_len - 8;
	case MODE_LOOP:
		return spin();
	case MODE_OOB:
		return *(volatile u8 *)OUTSIDE;
	case MODE_HUGE:
		return out_cap + 1;
	case MODE_FAIL:
		return -1000;
	case MODE_BOMB:
		return bomb();
	case MODE_FILL:
		for (u32 i = 0; i < out_cap; i++)
			out[i] = 0xa5;
		return out_cap;
	case MODE_TRAP:
		return trap();
	}
	return NS_EINVAL;
}
