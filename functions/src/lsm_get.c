/*
 * lsm_get.c — the on-disk phase of a kv/lsm point lookup (include/lsm.h,
 * functions/README.md; the table format is docs/LSM.md).
 *
 * The host searches its memtables and caches first, then sends the tables
 * it could not settle, newest first, as a plan: for each, the block to read
 * first — the data block its cached index names, or the top-level index
 * block. Every step gets one block and searches it for the first internal
 * key >= (user key, snapshot seq, 0xff), which is the key's newest entry
 * visible at the snapshot when its user key matches:
 *
 *   - in an index block (top-level or partition), that entry's value is
 *     the handle of the next block to read, in the same table;
 *   - in a data block, a matching SET or DEL finishes the request (the
 *     first table holding the key settles it, as BPF-oF's parser does);
 *     anything else means this table has no visible entry, and the next
 *     plan entry is read, or the request finishes with LSM_ABSENT.
 *
 * A value longer than the capacity finishes as LSM_SET_BLOCK: the host
 * reads that data block itself. Range tombstones are the host's business
 * (it holds them all in memory). Block checksums are not checked here: the
 * blocks come straight from the target's device; the host checks every
 * block it reads itself. A malformed block or request is NS_EINVAL; a key
 * longer than the key buffer is LSM_E2BIG (the host then reads plainly).
 */
#include "nearstore.h"
#include "lsm.h"

/*
 * wazero checks for a timeout at every loop header it enters, by leaving
 * the compiled code (tens of nanoseconds each time, functions/README.md),
 * and the eBPF interpreter pays for every instruction, so the hot paths
 * avoid loops: varints of one or two bytes (all but values of 16 KiB or
 * more) take no loop, keys compare 8 bytes at a time with the tail masked,
 * the first 32 bytes in straight-line code in wasm, and wasm copies are
 * one memory.copy (bulk memory: a call of the runtime's memmove, no loop),
 * eBPF's 8 bytes at a time.
 */

/* get_uv_slow decodes a uvarint below 2^32 at d[*off], before end. */
static int get_uv_slow(const u8 *d, u32 end, u32 *off, u32 *v)
{
	u32 x = 0, o = *off;
	for (u32 s = 0; s < 35; s += 7) {
		if (o >= end)
			return 0;
		u32 b = d[o++];
		if (s == 28 && b > 0x0f)
			return 0;
		x |= (b & 0x7f) << s;
		if (b < 0x80) {
			*off = o;
			*v = x;
			return 1;
		}
	}
	return 0;
}

NS_INLINE int get_uv(const u8 *d, u32 end, u32 *off, u32 *v)
{
	u32 o = *off;
	if (o < end && d[o] < 0x80) {
		*v = d[o];
		*off = o + 1;
		return 1;
	}
	/* Two bytes: value lengths of 128 to 16383 bytes. */
	if (o + 1 < end && d[o + 1] < 0x80) {
		*v = (d[o] & 0x7f) | ((u32)d[o + 1] << 7);
		*off = o + 2;
		return 1;
	}
	return get_uv_slow(d, end, off, v);
}

/* copy copies n bytes: one memory.copy in wasm, else 8 at a time then
 * byte by byte. */
NS_INLINE void copy(u8 *d, const u8 *s, u32 n)
{
#if defined(__wasm__)
	__builtin_memcpy(d, s, n);
#else
	u32 i = 0;
#pragma clang loop unroll_count(8)
	for (; i + 8 <= n; i += 8)
		ns_store64(d + i, ns_load64(s + i));
	for (; i < n; i++)
		d[i] = s[i];
#endif
}

/* cmp_bytes compares a[0:n) with b[0:n) bytewise. Both may be read up to
 * 7 bytes past n (the callers' keys are followed by their trailers, or lie
 * in the scratch). */
NS_INLINE int cmp_bytes(const u8 *a, const u8 *b, u32 n)
{
	u32 i = 0;
	u64 x = 0, y = 0;
#if defined(__wasm__)
	/* Keys of up to 32 bytes (kv/lsm's bench keys are 24) take no loop. */
#pragma clang loop unroll(full)
	for (u32 j = 0; j < 4; j++) {
		if (i + 8 > n)
			break;
		x = ns_load64(a + i);
		y = ns_load64(b + i);
		if (x != y)
			goto differ;
		i += 8;
	}
	/* The loop's header is an exit in wazero even when its first test
	 * fails, as it does for every key that matches in those 32 bytes:
	 * enter it only for longer keys. */
	if (i + 8 <= n)
#endif
	for (; i + 8 <= n; i += 8) {
		x = ns_load64(a + i);
		y = ns_load64(b + i);
		if (x != y)
			goto differ;
	}
	if (i == n)
		return 0;
	{
		u64 mask = ((u64)1 << (8 * (n - i))) - 1;
		x = ns_load64(a + i) & mask;
		y = ns_load64(b + i) & mask;
		if (x == y)
			return 0;
	}
differ:
	x = __builtin_bswap64(x);
	y = __builtin_bswap64(y);
	return x < y ? -1 : 1;
}

/* cmp_ikey compares the internal key e[0:el) with (k[0:kl), trailer t):
 * user keys bytewise, then trailers descending. -2: e is not an internal
 * key. */
NS_INLINE int cmp_ikey(const u8 *e, u32 el, const u8 *k, u32 kl, u64 t)
{
	if (el < 8)
		return -2;
	u32 ul = el - 8;
	int c = cmp_bytes(e, k, ul < kl ? ul : kl);
	if (c != 0)
		return c;
	if (ul != kl)
		return ul < kl ? -1 : 1;
	u64 et = ns_load64(e + ul);
	if (et > t)
		return -1;
	return et < t ? 1 : 0;
}

/* An entry found by seek. */
struct hit {
	u32 klen; /* key in the key buffer */
	u32 voff; /* value at d[voff, voff+vlen) */
	u32 vlen;
};

/* SCAN_ON: scan_entry's entry is below the target; go on. */
#define SCAN_ON 2

/* scan_entry reads the entry at *off (the previous entry's key, prev
 * bytes, in kb): 1 if its key is >= (k, t) (its key in kb, h set), a
 * negative error, or SCAN_ON with *off and *prev moved past it. */
NS_INLINE int scan_entry(const u8 *d, u32 ro, u32 *off, u32 *prev, const u8 *k, u32 kl, u64 t, u8 *kb,
			 struct hit *h)
{
	u32 o = *off;
	u32 shared, unshared, vlen;
	if (!get_uv(d, ro, &o, &shared) || !get_uv(d, ro, &o, &unshared) ||
	    !get_uv(d, ro, &o, &vlen) || shared > *prev ||
	    unshared > ro - o || vlen > ro - o - unshared)
		return NS_EINVAL;
	u32 klen = shared + unshared;
	if (klen > LSM_KEYBUF)
		return LSM_E2BIG;
	copy(kb + shared, d + o, unshared);
	o += unshared;
	int c = cmp_ikey(kb, klen, k, kl, t);
	if (c == -2)
		return NS_EINVAL;
	if (c >= 0) {
		h->klen = klen;
		h->voff = o;
		h->vlen = vlen;
		return 1;
	}
	*prev = klen;
	*off = o + vlen;
	return SCAN_ON;
}

/* seek finds the block's first entry whose key is >= (k, t): 1 found (its
 * key in kb), 0 none, or a negative error. */
NS_INLINE int seek(const u8 *d, u32 len, const u8 *k, u32 kl, u64 t, u8 *kb, struct hit *h)
{
	if (len < 8)
		return NS_EINVAL;
	u32 nr = ns_load32(d + len - 4);
	if (nr == 0 || nr > (len - 4) / 4)
		return NS_EINVAL;
	u32 ro = len - 4 - 4 * nr;
	if (ro == 0)
		return 0;
	/*
	 * The first restart whose key is >= the target; the scan starts at
	 * the one before it. Restart 0 need not be probed: whether its key
	 * is >= the target or not, the scan starts there unless a later
	 * restart's key is below the target. wasm skips that probe, which
	 * leaves a block of one restart (16 entries) with no loop to enter;
	 * eBPF keeps its code. A malformed restart-0 entry is then refused
	 * only when the scan reads it, as any entry the search does not
	 * reach already was (an unsorted block is not detected either).
	 */
#if defined(__wasm__)
	u32 lo = 1, hi = nr;
#else
	u32 lo = 0, hi = nr;
#endif
	NS_WASM_UNROLL(unroll_count(4))
	while (lo < hi) {
		u32 mid = lo + (hi - lo) / 2;
		u32 off = ns_load32(d + ro + 4 * mid);
		u32 shared, unshared, vlen;
		if (!get_uv(d, ro, &off, &shared) || !get_uv(d, ro, &off, &unshared) ||
		    !get_uv(d, ro, &off, &vlen) || shared != 0 || unshared > ro - off)
			return NS_EINVAL;
		int c = cmp_ikey(d + off, unshared, k, kl, t);
		if (c == -2)
			return NS_EINVAL;
		if (c >= 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	u32 off = ns_load32(d + ro + 4 * (lo > 0 ? lo - 1 : 0));
	u32 prev = 0;
#if defined(__wasm__)
	/* The first 8 entries in straight-line code: a block of about 9
	 * entries (400-byte values) is mostly settled there. */
#pragma clang loop unroll(full)
	for (u32 j = 0; j < 8; j++) {
		if (off >= ro)
			return 0;
		int r = scan_entry(d, ro, &off, &prev, k, kl, t, kb, h);
		if (r != SCAN_ON)
			return r;
	}
#endif
	NS_WASM_UNROLL(unroll_count(4))
	while (off < ro) {
		int r = scan_entry(d, ro, &off, &prev, k, kl, t, kb, h);
		if (r != SCAN_ON)
			return r;
	}
	return 0;
}

NS_INLINE int ask(struct bpf_xrp *ctx, u32 file, u64 off, u64 len)
{
	if (len < 8 || len > LSM_MAX_BLOCK)
		return NS_EINVAL;
	ctx->next_file[0] = file;
	ctx->next_addr[0] = off;
	ctx->size[0] = len;
	return 0;
}

/* next_table moves on to the next plan entry, or finishes: no plan table
 * has the key. */
NS_INLINE int next_table(struct bpf_xrp *ctx, struct lsm_req *q)
{
	q->cur++;
	if (q->cur >= q->ntables) {
		q->status = LSM_ABSENT;
		ns_done(ctx, LSM_OFF_VALUE);
		return 0;
	}
	const struct lsm_plan *p = &q->plan[q->cur];
	if (p->kind == LSM_PLAN_DATA)
		q->state = LSM_STATE_DATA;
	else if (p->kind == LSM_PLAN_INDEX)
		q->state = LSM_STATE_TOP;
	else
		return NS_EINVAL;
	return ask(ctx, p->file, p->offset, p->length);
}

NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx)
{
	struct lsm_req *q = (struct lsm_req *)ctx->scratch;
	u8 *s = (u8 *)ctx->scratch;
	if (q->magic != LSM_MAGIC || q->status != LSM_PENDING || q->key_len == 0 ||
	    q->key_len > LSM_MAX_KEY || q->ntables == 0 || q->ntables > LSM_MAX_TABLES ||
	    q->cur >= q->ntables || q->value_cap > LSM_VALUE_MAX || (q->snap >> 56) != 0)
		return NS_EINVAL;
	const u8 *d = (const u8 *)ctx->data;
	const u8 *key = s + LSM_OFF_KEY;
	u8 *kb = s + LSM_OFF_KEYBUF;
	u64 t = (q->snap << 8) | 0xff;
	struct hit h = {0, 0, 0};
	q->blocks++;
	int r = seek(d, ctx->data_len, key, q->key_len, t, kb, &h);
	if (r < 0)
		return r;
	if (q->state == LSM_STATE_TOP || q->state == LSM_STATE_PART) {
		if (r == 0) /* past the table's last key */
			return next_table(ctx, q);
		if (h.vlen != 12)
			return NS_EINVAL;
		q->state = q->state == LSM_STATE_TOP ? LSM_STATE_PART : LSM_STATE_DATA;
		return ask(ctx, ctx->cur_file, ns_load64(d + h.voff), ns_load32(d + h.voff + 8));
	}
	if (q->state != LSM_STATE_DATA)
		return NS_EINVAL;
	if (r == 0 || h.klen != q->key_len + 8)
		return next_table(ctx, q);
	if (cmp_bytes(kb, key, q->key_len) != 0)
		return next_table(ctx, q);
	u64 tr = ns_load64(kb + q->key_len);
	q->trailer = tr;
	u32 rlen = LSM_OFF_VALUE;
	if ((tr & 0xff) == LSM_KIND_DEL) {
		q->status = LSM_DEL;
	} else if ((tr & 0xff) == LSM_KIND_SET) {
		u32 cap = q->value_cap ? q->value_cap : LSM_VALUE_MAX;
		q->value_len = h.vlen;
		if (h.vlen <= cap) {
			/* Over the plan and the key: neither is needed any more. */
			copy(s + LSM_OFF_VALUE, d + h.voff, h.vlen);
			q->status = LSM_SET;
			rlen += h.vlen;
		} else {
			q->block_off = ctx->cur_addr;
			q->block_len = ctx->data_len;
			q->status = LSM_SET_BLOCK;
		}
	} else {
		return NS_EINVAL;
	}
	ns_done(ctx, rlen);
	return 0;
}
