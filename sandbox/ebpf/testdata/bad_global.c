// Keeps state in a writable global (.bss): refused.
#include "nearstore.h"

u64 calls;

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	calls++;
	ctx->done = 1;
	return 0;
}
