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

NS_INLINE int contains(const u8 *row, u32 n, const u8 *pat, u32 m)
{
	if (m == 0)
		return 1;
	if (m > n)
		return 0;
	u8 first = pat[0];
	for (u32 i = 0; i + m <= n; i++) {
		if (row[i] != first)
			continue;
		u32 j = 1;
		while (j < m && row[i + j] == pat[j])
			j++;
		if (j == m)
			return 1;
	}
	return 0;
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
		u32 end = start;
		while (end < n && text[end] != '\n')
			end++;
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
