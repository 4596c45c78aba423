/*
 * btree_lookup.c — a pushdown walk of BPF-KV's B+-tree (include/bpfkv.h,
 * functions/README.md): a point lookup (get) or a range scan.
 *
 * The host writes a struct bpfkv_req at the start of scratch and starts
 * the request at any node on the key's path (the root, or the first level
 * it has not cached). Every step gets one node (or, last, the value) and
 * asks for the next read: a child (file 0, 512 bytes), the value (file 1,
 * value_size bytes), or the next leaf (range). A missing key is a result
 * (status BPFKV_NOT_FOUND), not an error; a malformed node or request is
 * NS_EINVAL.
 */
#include "nearstore.h"
#include "bpfkv.h"

NS_INLINE u64 child_of(const struct bpfkv_node *n, u64 key)
{
	/* BPF-KV's nxt_node: the last used i with key[i] <= key. */
	u32 i = 1;
	NS_WASM_UNROLL(unroll(full))
	for (; i < BPFKV_FANOUT; i++)
		if (key < n->key[i] || n->key[i] == BPFKV_KEY_NONE)
			break;
	return n->ptr[i - 1] & BPFKV_PTR_MASK;
}

NS_INLINE void ask(struct bpf_xrp *ctx, u32 file, u64 addr, u64 size)
{
	ctx->next_file[0] = file;
	ctx->next_addr[0] = addr;
	ctx->size[0] = size;
}

/* scan_leaf adds the leaf's keys in [key, hi] to the results. It returns 1
 * when the scan is over (status set), 0 when the next leaf is wanted. */
NS_INLINE int scan_leaf(struct bpfkv_req *q, u8 *result, const struct bpfkv_node *n)
{
	u32 max = q->max;
	if (max == 0 || max > BPFKV_RANGE_MAX)
		max = BPFKV_RANGE_MAX;
	for (u32 i = 0; i < BPFKV_FANOUT; i++) {
		u64 k = n->key[i];
		if (k == BPFKV_KEY_NONE)
			break;
		if (k < q->key)
			continue;
		if (k > q->hi) {
			q->status = BPFKV_FOUND;
			return 1;
		}
		if (q->count >= max) {
			q->status = BPFKV_MORE;
			q->next_key = k;
			return 1;
		}
		u8 *e = result + (u64)q->count * 16;
		ns_store64(e, k);
		ns_store64(e + 8, n->ptr[i] & BPFKV_PTR_MASK);
		q->count++;
	}
	if (n->next == 0) {
		q->status = BPFKV_FOUND;
		return 1;
	}
	return 0;
}

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	struct bpfkv_req *q = (struct bpfkv_req *)ctx->scratch;
	u8 *result = (u8 *)ctx->scratch + BPFKV_RESULT_OFF;
	const struct bpfkv_node *n = (const struct bpfkv_node *)ctx->data;
	u32 len = ctx->data_len;

	if (q->mode == BPFKV_MODE_GET) {
		if (q->value_size == 0 || q->value_size > BPFKV_RESULT_SIZE)
			return NS_EINVAL;
		if (q->state == BPFKV_STATE_VALUE) {
			if (len < q->value_size)
				return NS_EINVAL;
			ns_copy(result, ctx->data, q->value_size);
			q->status = BPFKV_FOUND;
			ctx->done = 1;
			return 0;
		}
		if (q->state != BPFKV_STATE_NODE || len < BPFKV_NODE_SIZE)
			return NS_EINVAL;
		q->nodes++;
		if (n->type == BPFKV_INNER) {
			u64 c = child_of(n, q->key);
			if (c == 0) /* the root: a cycle, or an empty slot */
				return NS_EINVAL;
			ask(ctx, BPFKV_INDEX_FILE, c, BPFKV_NODE_SIZE);
			return 0;
		}
		if (n->type != BPFKV_LEAF)
			return NS_EINVAL;
		for (u32 i = 0; i < BPFKV_FANOUT; i++) {
			u64 k = n->key[i];
			if (k == q->key && k != BPFKV_KEY_NONE) {
				q->value_off = n->ptr[i] & BPFKV_PTR_MASK;
				q->state = BPFKV_STATE_VALUE;
				ask(ctx, BPFKV_VALUE_FILE, q->value_off, q->value_size);
				return 0;
			}
			if (k > q->key)
				break;
		}
		q->status = BPFKV_NOT_FOUND;
		ctx->done = 1;
		return 0;
	}

	if (q->mode != BPFKV_MODE_RANGE || len < BPFKV_NODE_SIZE)
		return NS_EINVAL;
	q->nodes++;
	if (q->state == BPFKV_STATE_NODE && n->type == BPFKV_INNER) {
		if (q->hi < q->key) {
			q->status = BPFKV_FOUND;
			ctx->done = 1;
			return 0;
		}
		u64 c = child_of(n, q->key);
		if (c == 0)
			return NS_EINVAL;
		ask(ctx, BPFKV_INDEX_FILE, c, BPFKV_NODE_SIZE);
		return 0;
	}
	if ((q->state != BPFKV_STATE_NODE && q->state != BPFKV_STATE_SCAN) ||
	    n->type != BPFKV_LEAF)
		return NS_EINVAL;
	if (scan_leaf(q, result, n)) {
		ctx->done = 1;
		return 0;
	}
	q->state = BPFKV_STATE_SCAN;
	ask(ctx, BPFKV_INDEX_FILE, n->next & BPFKV_PTR_MASK, BPFKV_NODE_SIZE);
	return 0;
}
