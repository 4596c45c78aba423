/*
 * grep.c — compute: the rows of a text that contain a pattern (λ-IO's grep).
 * compute has only (in, out), so the parameter is a header that λ read
 * requests prepend to the file data.
 *
 * Input:  u32 pattern_len; u8 pattern[pattern_len]; then the text: rows
 *         separated by '\n' (a final '\n' ends the last row rather than
 *         starting an empty one).
 * Output: every row that contains the pattern (a plain byte comparison;
 *         an empty pattern matches every row), each followed by '\n'.
 * Errors: NS_EINVAL if the header is short or pattern_len runs past the
 *         input; NS_ERANGE if the rows do not fit in out_cap.
 *
 * The scan covers the whole text rather than one row at a time, so that a
 * row without a match costs only the scan: a non-empty pattern without
 * '\n' can only occur inside one row, so each occurrence names a matching
 * row, found by looking back for the '\n' before it and on for the one
 * after it; the scan resumes after that row. (A pattern holding '\n'
 * matches no row, and the empty pattern every row: the text itself.)
 *
 * Candidates are the positions where the pattern's first byte and its
 * last byte (m - 1 further on) both match, and in wasm its middle byte
 * too: one byte matches often in text, two or three at the pattern's
 * distances much less, so few candidates need the full comparison.
 *
 * A loop iteration costs far more than a few ALU operations in both
 * runtimes (wasm leaves its compiled code at every back-edge to check for
 * a timeout; eBPF counts backward jumps), so every loop looks at many
 * bytes per iteration: up to 1024 with wasm SIMD (built with -msimd128, see
 * scripts/build-functions.sh), 8 at a time otherwise (eBPF has no SIMD).
 */
#include "nearstore.h"
#ifdef __wasm_simd128__
#include <wasm_simd128.h>
#endif

#define ONES8  0x0101010101010101ULL
#define LOWS8  0x7f7f7f7f7f7f7f7fULL
#define HIGHS8 0x8080808080808080ULL

/* same reports whether a[0, n) equals b[0, n). */
NS_INLINE int same(const u8 *a, const u8 *b, u32 n)
{
	u32 i = 0;
	for (; i + 8 <= n; i += 8)
		if (ns_load64(a + i) != ns_load64(b + i))
			return 0;
	for (; i < n; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

#ifdef __wasm_simd128__

/*
 * wasm leaves its compiled code at every loop iteration, so the helpers
 * below avoid byte-at-a-time tails: a short remainder is one 16-byte
 * load that overlaps bytes already seen (or not to be seen), masked.
 */

/* eq16 is the bitmask of the bytes of p[0, 16) equal to b (splatted). */
NS_INLINE u32 eq16(const u8 *p, v128_t b)
{
	return (u32)wasm_i8x16_bitmask(wasm_i8x16_eq(wasm_v128_load(p), b));
}

/* eq64 is the bitmask of the bytes of p[0, 64) equal to b (splatted). */
NS_INLINE u64 eq64(const u8 *p, v128_t b)
{
	return (u64)eq16(p, b) | (u64)eq16(p + 16, b) << 16 | (u64)eq16(p + 32, b) << 32 | (u64)eq16(p + 48, b) << 48;
}

/* find_byte returns the index of the first b in p[i, n), or n. The first
 * 128 bytes are looked at without a loop: a row's end is usually there. */
NS_INLINE u32 find_byte(const u8 *p, u32 i, u32 n, u8 b)
{
	v128_t bb = wasm_i8x16_splat((signed char)b);
	if (i + 128 <= n) {
		u64 lo = eq64(p + i, bb), hi = eq64(p + i + 64, bb);
		if (lo)
			return i + (u32)__builtin_ctzll(lo);
		if (hi)
			return i + 64 + (u32)__builtin_ctzll(hi);
		i += 128;
	}
	for (; i + 64 <= n; i += 64) {
		v128_t e0 = wasm_i8x16_eq(wasm_v128_load(p + i), bb);
		v128_t e1 = wasm_i8x16_eq(wasm_v128_load(p + i + 16), bb);
		v128_t e2 = wasm_i8x16_eq(wasm_v128_load(p + i + 32), bb);
		v128_t e3 = wasm_i8x16_eq(wasm_v128_load(p + i + 48), bb);
		if (!wasm_v128_any_true(wasm_v128_or(wasm_v128_or(e0, e1), wasm_v128_or(e2, e3))))
			continue;
		u64 hit = (u64)wasm_i8x16_bitmask(e0) | (u64)wasm_i8x16_bitmask(e1) << 16 |
			  (u64)wasm_i8x16_bitmask(e2) << 32 | (u64)wasm_i8x16_bitmask(e3) << 48;
		return i + (u32)__builtin_ctzll(hit);
	}
	for (; i + 16 <= n; i += 16) {
		u32 hit = eq16(p + i, bb);
		if (hit)
			return i + (u32)__builtin_ctz(hit);
	}
	if (i == n)
		return n;
	if (n >= 16) {
		/* p[n - 16, n), of which p[i, n) are the last n - i bytes. */
		u32 hit = eq16(p + n - 16, bb) >> (16 - (n - i));
		return hit ? i + (u32)__builtin_ctz(hit) : n;
	}
	while (i < n && p[i] != b)
		i++;
	return i;
}

/* row_start returns the index after the last '\n' in t[lo, i), or lo.
 * The 128 bytes before i are looked at without a loop: a row's start is
 * usually there. */
NS_INLINE u32 row_start(const u8 *t, u32 lo, u32 i)
{
	v128_t nl = wasm_i8x16_splat('\n');
	if (i - lo >= 128) {
		u64 hi = eq64(t + i - 64, nl), lo2 = eq64(t + i - 128, nl);
		if (hi)
			return i - (u32)__builtin_clzll(hi);
		if (lo2)
			return i - 64 - (u32)__builtin_clzll(lo2);
		i -= 128;
	}
	for (; i - lo >= 64; i -= 64) {
		const u8 *p = t + i - 64;
		v128_t e0 = wasm_i8x16_eq(wasm_v128_load(p), nl);
		v128_t e1 = wasm_i8x16_eq(wasm_v128_load(p + 16), nl);
		v128_t e2 = wasm_i8x16_eq(wasm_v128_load(p + 32), nl);
		v128_t e3 = wasm_i8x16_eq(wasm_v128_load(p + 48), nl);
		if (!wasm_v128_any_true(wasm_v128_or(wasm_v128_or(e0, e1), wasm_v128_or(e2, e3))))
			continue;
		u64 hit = (u64)wasm_i8x16_bitmask(e0) | (u64)wasm_i8x16_bitmask(e1) << 16 |
			  (u64)wasm_i8x16_bitmask(e2) << 32 | (u64)wasm_i8x16_bitmask(e3) << 48;
		return i - (u32)__builtin_clzll(hit);
	}
	for (; i - lo >= 16; i -= 16) {
		u32 hit = eq16(t + i - 16, nl);
		if (hit)
			return i - 16 + (32 - (u32)__builtin_clz(hit));
	}
	if (i >= 16) {
		/* t[i - 16, i), of which t[lo, i) are the last i - lo bytes. */
		u32 hit = eq16(t + i - 16, nl) & (0xffffu << (16 - (i - lo)));
		return hit ? i - 16 + (32 - (u32)__builtin_clz(hit)) : lo;
	}
	while (i > lo && t[i - 1] != '\n')
		i--;
	return i;
}

/* copy copies s[0, n) to d. */
NS_INLINE void copy(u8 *d, const u8 *s, u32 n)
{
	if (n < 16) {
		u32 i = 0;
		for (; i < n; i++)
			d[i] = s[i];
		return;
	}
	if (n <= 128) {
		/* A row: eight 16-byte copies without a loop, the last ones
		 * overlapping (the same bytes to the same places). */
#pragma clang loop unroll(full)
		for (u32 k = 0; k < 8; k++) {
			u32 o = 16 * k < n - 16 ? 16 * k : n - 16;
			wasm_v128_store(d + o, wasm_v128_load(s + o));
		}
		return;
	}
	u32 i = 0;
	for (; i + 64 <= n; i += 64) {
		wasm_v128_store(d + i, wasm_v128_load(s + i));
		wasm_v128_store(d + i + 16, wasm_v128_load(s + i + 16));
		wasm_v128_store(d + i + 32, wasm_v128_load(s + i + 32));
		wasm_v128_store(d + i + 48, wasm_v128_load(s + i + 48));
	}
	for (; i + 16 <= n; i += 16)
		wasm_v128_store(d + i, wasm_v128_load(s + i));
	/* The last 16 bytes, overlapping what is already copied. */
	wasm_v128_store(d + n - 16, wasm_v128_load(s + n - 16));
}

/*
 * pattern is what the scan needs of the pattern, set up once per call:
 * its first, middle and last bytes splatted (f, c, l), which must all
 * match at their distances (0, mid, m - 1) from a candidate, and head,
 * its first 16 bytes (zero past m) for the comparison. Two bytes are not
 * enough in text: 'e' and 'n' seven bytes apart, say, are in most 1024-byte
 * blocks of English, and every candidate costs a loop iteration; three
 * leave few false candidates.
 */
struct pattern {
	const u8 *p;
	u32 m, mid;
	v128_t f, c, l, head;
	/* rare: of the three, the byte least common in text (r, splatted)
	 * is rare enough to screen 1 KiB blocks by itself, at distance dr. */
	int rare;
	u32 dr;
	v128_t r;
};

/*
 * commonness ranks a byte by how often it occurs in English text: space
 * and the commonest lowercase letters high, anything else 0. It is a
 * switch, not a loop over a table: wasm leaves its compiled code at every
 * loop iteration.
 */
NS_INLINE u32 commonness(u8 b)
{
	switch (b) {
	case ' ': return 16;
	case 'e': return 15;
	case 't': return 14;
	case 'a': return 13;
	case 'o': return 12;
	case 'i': return 11;
	case 'n': return 10;
	case 's': return 9;
	case 'h': return 8;
	case 'r': return 7;
	case 'd': return 6;
	case 'l': return 5;
	case 'c': return 4;
	case 'u': return 3;
	case 'm': return 2;
	case 'w': return 1;
	default: return 0;
	}
}

/* prepare sets k up for pat[0, m), m > 0; pat's input ends at in_end. */
NS_INLINE void prepare(struct pattern *k, const u8 *pat, u32 m, const u8 *in_end)
{
	k->p = pat;
	k->m = m;
	k->mid = m / 2;
	k->f = wasm_i8x16_splat((signed char)pat[0]);
	k->c = wasm_i8x16_splat((signed char)pat[m / 2]);
	k->l = wasm_i8x16_splat((signed char)pat[m - 1]);
	u32 dr = 0;
	if (commonness(pat[m / 2]) < commonness(pat[dr]))
		dr = m / 2;
	if (commonness(pat[m - 1]) < commonness(pat[dr]))
		dr = m - 1;
	k->dr = dr;
	k->r = wasm_i8x16_splat((signed char)pat[dr]);
	k->rare = commonness(pat[dr]) == 0;
	if (in_end - pat >= 16) {
		k->head = wasm_v128_load(pat);
		return;
	}
	u8 b[16] = {0};
	for (u32 j = 0; j < m; j++)
		b[j] = pat[j];
	k->head = wasm_v128_load(b);
}

/* cand is the candidate mask of the 16 positions from p. */
NS_INLINE v128_t cand(const u8 *p, const struct pattern *k)
{
	return wasm_v128_and(wasm_v128_and(wasm_i8x16_eq(wasm_v128_load(p), k->f),
					   wasm_i8x16_eq(wasm_v128_load(p + k->mid), k->c)),
			     wasm_i8x16_eq(wasm_v128_load(p + k->m - 1), k->l));
}

/* cand64 is the candidate bitmap of the 64 positions from p. */
NS_INLINE u64 cand64(const u8 *p, const struct pattern *k)
{
	return (u64)wasm_i8x16_bitmask(cand(p, k)) |
	       (u64)wasm_i8x16_bitmask(cand(p + 16, k)) << 16 |
	       (u64)wasm_i8x16_bitmask(cand(p + 32, k)) << 32 |
	       (u64)wasm_i8x16_bitmask(cand(p + 48, k)) << 48;
}

/* match reports whether the pattern occurs at t + j (j + m <= n): one
 * comparison and no loop for a pattern of up to 16 bytes. */
NS_INLINE int match(const u8 *t, u32 j, u32 n, const struct pattern *k)
{
	if (j + 16 > n)
		return same(t + j, k->p, k->m);
	u32 ne = ~(u32)wasm_i8x16_bitmask(wasm_i8x16_eq(wasm_v128_load(t + j), k->head));
	if (k->m <= 16)
		return (ne & ((1u << k->m) - 1)) == 0;
	return (ne & 0xffff) == 0 && same(t + j + 16, k->p + 16, k->m - 16);
}

/* rare_in reports whether the rare byte is at distance dr from one of
 * the 16 * loads positions from p: one i8x16.eq per 16 positions. */
NS_INLINE int rare_in(const u8 *p, const struct pattern *k, u32 loads)
{
	const u8 *q = p + k->dr;
	v128_t any[4];
#pragma clang loop unroll(full)
	for (u32 x = 0; x < 4; x++)
		any[x] = wasm_i8x16_eq(wasm_v128_load(q + 16 * x), k->r);
#pragma clang loop unroll(full)
	for (u32 x = 4; x < loads; x++)
		any[x % 4] = wasm_v128_or(any[x % 4], wasm_i8x16_eq(wasm_v128_load(q + 16 * x), k->r));
	return wasm_v128_any_true(wasm_v128_or(wasm_v128_or(any[0], any[1]), wasm_v128_or(any[2], any[3])));
}

/* find_block returns the first position in [i, i + 1024) where the
 * pattern occurs in t, or lim (i + 1024 <= lim, as find_pat): the
 * block's candidates found with three i8x16.eq per 16 positions, and its
 * 64 positions at a time only when the block holds a candidate. The
 * first candidate is tried before any loop is entered: wasm leaves its
 * compiled code on entering a loop too, and the first is usually the
 * match. */
static u32 find_block(const u8 *t, u32 i, u32 lim, u32 n, const struct pattern *k)
{
	const u8 *p = t + i;
	v128_t g[16];
#pragma clang loop unroll(full)
	for (u32 x = 0; x < 16; x++)
		g[x] = wasm_v128_or(wasm_v128_or(cand(p + 64 * x, k), cand(p + 64 * x + 16, k)),
				    wasm_v128_or(cand(p + 64 * x + 32, k), cand(p + 64 * x + 48, k)));
	/* The 64-position groups that hold a candidate, usually one. */
	u32 groups = 0;
#pragma clang loop unroll(full)
	for (u32 x = 0; x < 16; x++)
		groups |= (u32)wasm_v128_any_true(g[x]) << x;
	if (!groups)
		return lim;
	/* The first candidate, without entering a loop: usually the one. */
	u32 q = i + 64 * (u32)__builtin_ctz(groups);
	u64 hit = cand64(t + q, k);
	u32 j = q + (u32)__builtin_ctzll(hit);
	if (match(t, j, n, k))
		return j;
	hit &= hit - 1;
	for (;;) {
		for (; hit; hit &= hit - 1) {
			j = q + (u32)__builtin_ctzll(hit);
			if (match(t, j, n, k))
				return j;
		}
		groups &= groups - 1;
		if (!groups)
			return lim;
		q = i + 64 * (u32)__builtin_ctz(groups);
		hit = cand64(t + q, k);
	}
}

/* find_pat returns the first position in [i, lim) where the pattern
 * occurs in t, or lim; lim = n - m + 1 keeps every load inside t[0, n).
 * Each loop iteration is one straight run of code: with a rare byte in
 * the pattern, 2048 positions, passed over after one comparison per 16
 * positions when the rare byte is not among them; otherwise 1024
 * positions (find_block). */
NS_INLINE u32 find_pat(const u8 *t, u32 i, u32 lim, u32 n, const struct pattern *k)
{
	if (k->rare)
		for (; i + 2048 <= lim; i += 2048) {
			if (!rare_in(t + i, k, 128))
				continue;
			u32 j = find_block(t, i, lim, n, k);
			if (j == lim)
				j = find_block(t, i + 1024, lim, n, k);
			if (j != lim)
				return j;
		}
	for (; i + 1024 <= lim; i += 1024) {
		if (k->rare && !rare_in(t + i, k, 64))
			continue;
		u32 j = find_block(t, i, lim, n, k);
		if (j != lim)
			return j;
	}
	for (; i + 16 <= lim; i += 16)
		for (u32 hit = wasm_i8x16_bitmask(cand(t + i, k)); hit; hit &= hit - 1) {
			u32 j = i + (u32)__builtin_ctz(hit);
			if (match(t, j, n, k))
				return j;
		}
	for (; i < lim; i++)
		if (t[i] == k->p[0] && same(t + i, k->p, k->m))
			return i;
	return lim;
}

#else /* word at a time */

/*
 * has_byte(w, bb) flags (bit 7 of) each byte of w equal to b, where bb is
 * b in every byte: the classic zero-byte test on w ^ bb. It is non-zero
 * exactly when w holds b, and its lowest flag is exact (a borrow can only
 * add flags above a true one), so first_flag finds the first b; the flags
 * above may be false. exact_byte's flags are all exact, at the cost of
 * one more operation, for finding the last b.
 */
NS_INLINE u64 has_byte(u64 w, u64 bb)
{
	u64 x = w ^ bb;
	return (x - ONES8) & ~x & HIGHS8;
}

NS_INLINE u64 exact_byte(u64 w, u64 bb)
{
	u64 x = w ^ bb;
	return ~(((x & LOWS8) + LOWS8) | x | LOWS8);
}

/* first_flag returns the index of the lowest flagged byte of a non-zero
 * has_byte result: its lowest set bit is 1 << (8k + 7), and multiplying
 * 1 << 8k by the bytes 7, 6, ..., 0 brings k to the top byte. */
NS_INLINE u32 first_flag(u64 hit)
{
	return (u32)((((hit & -hit) >> 7) * 0x0001020304050607ULL) >> 56);
}

/* last_flag returns the index of the highest flagged byte of a non-zero
 * exact_byte result (eBPF has no count-leading-zeros). */
NS_INLINE u32 last_flag(u64 hit)
{
	u32 k = 0;
	if (hit >> 32) {
		k = 4;
		hit >>= 32;
	}
	if (hit >> 16) {
		k += 2;
		hit >>= 16;
	}
	if (hit >> 8)
		k++;
	return k;
}

NS_INLINE u32 find_byte(const u8 *p, u32 i, u32 n, u8 b)
{
	u64 bb = b * ONES8;
	for (; i + 8 <= n; i += 8) {
		u64 hit = has_byte(ns_load64(p + i), bb);
		if (hit)
			return i + first_flag(hit);
	}
	while (i < n && p[i] != b)
		i++;
	return i;
}

NS_INLINE u32 row_start(const u8 *t, u32 lo, u32 i)
{
	for (; i - lo >= 8; i -= 8) {
		u64 hit = exact_byte(ns_load64(t + i - 8), '\n' * ONES8);
		if (hit)
			return i - 8 + last_flag(hit) + 1;
	}
	while (i > lo && t[i - 1] != '\n')
		i--;
	return i;
}

/* pattern: the pattern and its first and last bytes in every byte. */
struct pattern {
	const u8 *p;
	u32 m;
	u64 f, l;
};

NS_INLINE void prepare(struct pattern *k, const u8 *pat, u32 m, const u8 *in_end)
{
	(void)in_end;
	k->p = pat;
	k->m = m;
	k->f = pat[0] * ONES8;
	k->l = pat[m - 1] * ONES8;
}

NS_INLINE u32 find_pat(const u8 *t, u32 i, u32 lim, u32 n, const struct pattern *k)
{
	(void)n;
	const u8 *e = t + k->m - 1;
	for (; i + 8 <= lim; i += 8) {
		/* A true candidate is flagged in both; the false flags the
		 * borrows add are weeded out by the comparison. */
		u64 hit = has_byte(ns_load64(t + i), k->f) & has_byte(ns_load64(e + i), k->l);
		for (; hit; hit &= hit - 1) {
			u32 j = i + first_flag(hit);
			if (same(t + j, k->p, k->m))
				return j;
		}
	}
	for (; i < lim; i++)
		if (t[i] == k->p[0] && same(t + i, k->p, k->m))
			return i;
	return lim;
}

NS_INLINE void copy(u8 *d, const u8 *s, u32 n) { ns_copy(d, s, n); }

#endif

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	if (in_len < 4)
		return NS_EINVAL;
	u32 m = ns_load32(in);
	if (m > in_len - 4)
		return NS_EINVAL;
	const u8 *pat = in + 4;
	const u8 *text = pat + m;
	u32 n = in_len - 4 - m;
	if (m == 0) {
		/* Every row: the text, with the last row's '\n' if it lacks one. */
		u32 o = n + (n > 0 && text[n - 1] != '\n');
		if (o > out_cap)
			return NS_ERANGE;
		copy(out, text, n);
		if (o > n)
			out[n] = '\n';
		return (int)o;
	}
	if (m > n || find_byte(pat, 0, m, '\n') < m)
		return 0;
	struct pattern k;
	prepare(&k, pat, m, in + in_len);
	u32 lim = n - m + 1; /* the positions where the pattern fits */
	u32 o = 0;
	for (u32 start = 0; start < lim;) {
		u32 i = find_pat(text, start, lim, n, &k);
		if (i == lim)
			break;
		u32 rs = row_start(text, start, i);
		u32 re = find_byte(text, i + m, n, '\n');
		u32 rl = re - rs;
		if (rl + 1 > out_cap - o)
			return NS_ERANGE;
		copy(out + o, text + rs, rl);
		o += rl;
		out[o++] = '\n';
		start = re + 1;
	}
	return (int)o;
}
