// XRP's own convention: SEC("prog"), any function name, u32 return.
#include "nearstore.h"

__attribute__((section("prog"), used))
unsigned int oliver_agg_func(struct bpf_xrp *context)
{
	*(u64 *)context->scratch = context->data_len;
	context->done = 1;
	return 0;
}
