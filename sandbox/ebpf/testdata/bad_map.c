// Declares and uses a legacy map: refused.
#include "nearstore.h"

struct bpf_map_def {
	unsigned int type, key_size, value_size, max_entries, map_flags;
};

struct bpf_map_def __attribute__((section("maps"), used)) counters = {
	.type = 2, .key_size = 4, .value_size = 8, .max_entries = 1,
};

static void *(*map_lookup_elem)(void *map, const void *key) = (void *)1;

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	u32 k = 0;
	u64 *v = map_lookup_elem(&counters, &k);
	if (v)
		(*v)++;
	ctx->done = 1;
	return 0;
}
