/*
 * badhelper.c (eBPF only) — calls bpf_get_current_pid_tgid (helper 14),
 * which nearstore does not allow: the verifier refuses it at Function Load.
 */
#include "nearstore.h"

static u64 (*get_pid_tgid)(void) = (void *)14;

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	ctx->done = 1;
	return (int)get_pid_tgid();
}
