// Two programs in sections of their own: neither is the entry until the
// loader is told which. Each leaves its own mark in scratch.
#include "nearstore.h"

char LICENSE[] __attribute__((section("license"), used)) = "GPL";

__attribute__((section("xrp/get"), used))
unsigned int get(struct bpf_xrp *context)
{
	*(u64 *)context->scratch = 1;
	context->done = 1;
	return 0;
}

__attribute__((section("xrp/range"), used))
unsigned int range(struct bpf_xrp *context)
{
	*(u64 *)context->scratch = 2;
	context->done = 1;
	return 0;
}
