// BPF-oF's field names: the next read stays in the file data came from
// (fd_arr[0] = cur_fd), at the offset the block's first u64 gives, until
// a block's first u64 is 0. scratch: the hops, then each hop's cur_fd.
#include "nearstore.h"

__attribute__((section("bpfof"), used))
unsigned int follow(struct bpf_xrp *context)
{
	u64 *hops = (u64 *)context->scratch;
	u64 next = *(u64 *)context->data;
	if (*hops < 8)
		((u64 *)context->scratch)[1 + *hops] = (u64)context->cur_fd;
	*hops += 1;
	if (next == 0 || *hops >= 8) {
		context->done = 1;
		return 0;
	}
	context->fd_arr[0] = context->cur_fd;
	context->next_addr[0] = next;
	context->size[0] = 8;
	return 0;
}
