/*
 * bitmap.c — compute (for λ writes): expand a run-length-encoded bitmap.
 *
 * Input:  u32 runs: bits 0-30 the run's length in bits (0 is allowed and
 *         adds nothing), bit 31 the run's value.
 * Output: the bits in order, packed least significant bit first (bit i is
 *         bit i%8 of byte i/8); ceil(total/8) bytes, the last byte's unused
 *         high bits 0.
 * Errors: NS_EINVAL if in_len is not a multiple of 4; NS_ERANGE if the
 *         bitmap does not fit in out_cap.
 */
#include "nearstore.h"

NS_COMPUTE int compute(const u8 *in, u32 in_len, u8 *out, u32 out_cap)
{
	if (in_len % 4 != 0)
		return NS_EINVAL;
	u32 nruns = in_len / 4;
	u64 total = 0;
	NS_WASM_UNROLL(unroll_count(16))
	for (u32 r = 0; r < nruns; r++)
		total += ns_load32(in + (u64)r * 4) & 0x7fffffffU;
	if ((total + 7) / 8 > out_cap)
		return NS_ERANGE;
	u32 olen = (u32)((total + 7) / 8); /* the result's length */

	u32 o = 0;   /* bytes written */
	u32 acc = 0; /* the partial byte */
	u32 nb = 0;  /* bits in acc */
	for (u32 r = 0; r < nruns; r++) {
		u32 w = ns_load32(in + (u64)r * 4);
		u32 len = w & 0x7fffffffU;
		u32 bit = w >> 31;
		/* Fill the partial byte, all its bits at once (a loop
		 * iteration per bit costs far more, in both runtimes). */
		if (len > 0 && nb != 0) {
			u32 take = 8 - nb;
			if (take > len)
				take = len;
			if (bit)
				acc |= ((1U << take) - 1) << nb;
			nb += take;
			len -= take;
			if (nb == 8) {
				out[o++] = (u8)acc;
				acc = 0;
				nb = 0;
			}
		}
		/* Whole bytes, 8 at a time where possible. */
		u64 fill8 = bit ? ~0ULL : 0;
		while (len >= 64) {
			ns_store64(out + o, fill8);
			o += 8;
			len -= 64;
		}
		if (len >= 8 && o + 8 <= olen) {
			/* The last whole bytes in one store: the extra bytes it
			 * writes lie inside the result and are written again. */
			ns_store64(out + o, fill8);
			o += len / 8;
			len %= 8;
		}
		while (len >= 8) {
			out[o++] = (u8)fill8;
			len -= 8;
		}
		/* The rest starts a new partial byte (nb is 0 here if len > 0). */
		if (bit && len > 0)
			acc = (1U << len) - 1;
		nb += len;
	}
	if (nb > 0)
		out[o++] = (u8)acc;
	return (int)o;
}
