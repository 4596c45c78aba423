// bpf_trace_printk and bpf_ktime_get_ns, the two allowed helpers.
#include "nearstore.h"

static long (*trace_printk)(const char *fmt, u32 fmt_size, ...) = (void *)6;
static u64 (*ktime_get_ns)(void) = (void *)5;

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	char fmt[] = "step at %llu, %u bytes";
	u64 t = ktime_get_ns();
	trace_printk(fmt, sizeof(fmt), ctx->cur_addr, ctx->data_len);
	*(u64 *)ctx->scratch = t;
	ctx->done = 1;
	return 0;
}
