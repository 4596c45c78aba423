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
 */
#include "nearstore.h"

/*
 * Word-at-a-time scanning: a loop iteration costs far more than a few
 * ALU operations in both runtimes (wasm leaves its compiled code at every
 * back-edge to check for a timeout; eBPF counts backward jumps), so look
 * at 8 bytes per iteration.
 *
 * has_byte(w, bb) flags (bit 7 of) each byte of w equal to b, where bb is
 * b in every byte: the classic zero-byte test on w ^ bb. It is non-zero
 * exactly when w holds b, and its lowest flag is exact (a borrow can only
 * add flags above a true one), so first_flag finds the first b.
 */
#define ONES8  0x0101010101010101ULL
#define HIGHS8 0x8080808080808080ULL

NS_INLINE u64 has_byte(u64 w, u64 bb)
{
	u64 x = w ^ bb;
	return (x - ONES8) & ~x & HIGHS8;
}

/* first_flag returns the index of the lowest flagged byte of a non-zero
 * has_byte result: its lowest set bit is 1 << (8k + 7), and multiplying
 * 1 << 8k by the bytes 7, 6, ..., 0 brings k to the top byte. */
NS_INLINE u32 first_flag(u64 hit)
{
	return (u32)((((hit & -hit) >> 7) * 0x0001020304050607ULL) >> 56);
}

/* find_byte returns the index of the first b in p[i, n), or n. */
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

NS_INLINE int contains(const u8 *row, u32 n, const u8 *pat, u32 m)
{
	if (m == 0)
		return 1;
	if (m > n)
		return 0;
	for (u32 i = 0;; i++) {
		i = find_byte(row, i, n, pat[0]);
		if (i + m > n)
			return 0;
		u32 j = 1;
		while (j < m && row[i + j] == pat[j])
			j++;
		if (j == m)
			return 1;
	}
}

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
	u32 o = 0;
	u32 start = 0;
	while (start < n) {
		u32 end = find_byte(text, start, n, '\n');
		u32 rl = end - start;
		if (contains(text + start, rl, pat, m)) {
			if (rl + 1 > out_cap - o)
				return NS_ERANGE;
			ns_copy(out + o, text + start, rl);
			o += rl;
			out[o++] = '\n';
		}
		start = end + 1;
	}
	return (int)o;
}
