// A compute entry beside one XRP-style program: the program is the
// pushdown entry, compute stays the compute entry.
#include "nearstore.h"

__attribute__((section("xrp"), used))
unsigned int walk(struct bpf_xrp *context)
{
	*(u64 *)context->scratch = 3;
	context->done = 1;
	return 0;
}

NS_COMPUTE int compute(const unsigned char *in, unsigned int in_len,
		       unsigned char *out, unsigned int out_cap)
{
	if (out_cap < 1)
		return NS_ERANGE;
	out[0] = in_len ? in[0] + 1 : 0;
	return 1;
}
