// BPF-KV's convention: the program in a section of its own name
// (SEC("oliver_agg")), an unsigned int return, a license section, and
// nothing named pushdown: the object's single program is the entry.
#include "nearstore.h"

char LICENSE[] __attribute__((section("license"), used)) = "GPL";

__attribute__((section("oliver_agg"), used))
unsigned int oliver_agg_func(struct bpf_xrp *context)
{
	*(u64 *)context->scratch = 0xa99;
	*(u64 *)(context->scratch + 8) = context->cur_addr;
	context->done = 1;
	return 0;
}
