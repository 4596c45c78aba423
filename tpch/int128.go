package tpch

import (
	"math/big"
	"math/bits"
	"strings"
)

// Int128 is a signed 128-bit integer, two's complement: the sums the
// queries finish with. A SUM over LINEITEM in the spec's units overflows
// 64 bits at a few dozen scale factors (Q1's sum_charge, in 10⁻⁶ dollars,
// is about 2^56 at SF 1), so the host sums in 128 bits and stays exact.
type Int128 struct {
	Hi int64
	Lo uint64
}

// Int128Of returns x as an Int128.
func Int128Of(x int64) Int128 { return Int128{Hi: x >> 63, Lo: uint64(x)} }

// Uint128Of returns x, unsigned, as an Int128.
func Uint128Of(x uint64) Int128 { return Int128{Lo: x} }

// Add returns a + b, wrapping mod 2^128.
func (a Int128) Add(b Int128) Int128 {
	lo, carry := bits.Add64(a.Lo, b.Lo, 0)
	return Int128{Hi: a.Hi + b.Hi + int64(carry), Lo: lo}
}

// Mul returns a × b, exactly (the product of two int64s always fits).
func Mul(a, b int64) Int128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	// The unsigned product of the two's complement words exceeds the
	// signed one by b·2^64 when a < 0 and by a·2^64 when b < 0.
	if a < 0 {
		hi -= uint64(b)
	}
	if b < 0 {
		hi -= uint64(a)
	}
	return Int128{Hi: int64(hi), Lo: lo}
}

// Sign returns -1, 0 or +1.
func (a Int128) Sign() int {
	switch {
	case a.Hi < 0:
		return -1
	case a.Hi == 0 && a.Lo == 0:
		return 0
	}
	return 1
}

// Big returns a as a big.Int.
func (a Int128) Big() *big.Int {
	x := new(big.Int).SetInt64(a.Hi)
	x.Lsh(x, 64)
	return x.Add(x, new(big.Int).SetUint64(a.Lo))
}

// String formats a in decimal.
func (a Int128) String() string { return a.Big().String() }

// Decimal formats a as a fixed-point number of scale digits after the
// point: Int128Of(12345).Decimal(2) is "123.45".
func (a Int128) Decimal(scale int) string {
	s := a.Big().String()
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if len(s) <= scale {
		s = strings.Repeat("0", scale-len(s)+1) + s
	}
	if scale > 0 {
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	}
	if neg {
		s = "-" + s
	}
	return s
}
