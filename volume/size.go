package volume

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// ParseSize parses a byte count such as "4096", "4k", "4KiB", "1.5G" or
// "4KB". Units are case-insensitive: none or B means bytes; K, Ki and KiB
// (likewise M, G, T, P, E) are powers of 1024; KB, MB, GB, TB, PB and EB are
// powers of 1000. Space between number and unit is allowed, so FormatSize
// output parses back. The result must be a whole number of bytes that fits
// in an int64.
func ParseSize(s string) (int64, error) {
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("volume: %w", err)
	}
	return n, nil
}

// parseSize is ParseSize without the package prefix on errors, for callers
// that add their own context.
func parseSize(s string) (int64, error) {
	num, mult, err := splitSize(s)
	if err != nil {
		return 0, err
	}
	// Exact rational arithmetic: "3.2GB" must be exactly 3200000000, which
	// float64 would only get right by luck.
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("bad size %q: bad number %q", s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("bad size %q: not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	return r.Num().Int64(), nil
}

// splitSize splits s into its number (digits with an optional fraction) and
// the multiplier its unit stands for.
func splitSize(s string) (num string, mult int64, err error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return "", 0, fmt.Errorf("bad size %q: want a number with an optional unit, e.g. 4096, 4k, 1GiB", s)
	}
	if i < len(t) && t[i] == '.' {
		j := i + 1
		for j < len(t) && t[j] >= '0' && t[j] <= '9' {
			j++
		}
		if j == i+1 {
			return "", 0, fmt.Errorf("bad size %q: no digits after '.'", s)
		}
		i = j
	}
	num = t[:i]
	unit := strings.TrimSpace(t[i:])
	mult, ok := unitMultiplier(unit)
	if !ok {
		return "", 0, fmt.Errorf("bad size %q: unknown unit %q (want B, K, KiB, KB, M, MiB, MB, G, GiB, GB, T, ...)", s, unit)
	}
	return num, mult, nil
}

// unitMultiplier maps a size unit to its number of bytes: bare prefixes and
// IEC names are binary, SI names with B are decimal.
func unitMultiplier(unit string) (int64, bool) {
	u := strings.ToLower(unit)
	if u == "" || u == "b" {
		return 1, true
	}
	const prefixes = "kmgtpe"
	p := strings.IndexByte(prefixes, u[0])
	if p < 0 {
		return 0, false
	}
	exp := p + 1
	switch u[1:] {
	case "", "i", "ib":
		return 1 << (10 * exp), true
	case "b":
		m := int64(1)
		for range exp {
			m *= 1000
		}
		return m, true
	}
	return 0, false
}

// FormatSize formats n bytes for people: "1 GiB", "512 MiB", "4 KiB",
// "1.5 KiB", "100 B". Exact multiples of a unit print as integers and parse
// back exactly with ParseSize; other values are rounded to two decimals.
func FormatSize(n int64) string {
	// Largest first; a local so the table is not package-level state.
	binaryUnits := [...]struct {
		shift uint
		name  string
	}{{60, "EiB"}, {50, "PiB"}, {40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}}
	sign := ""
	u := uint64(n)
	if n < 0 {
		sign = "-"
		u = -u // two's complement; correct for math.MinInt64 as well
	}
	for _, bu := range binaryUnits {
		unit := uint64(1) << bu.shift
		if u < unit {
			continue
		}
		if u%unit == 0 {
			return sign + strconv.FormatUint(u/unit, 10) + " " + bu.name
		}
		f := strconv.FormatFloat(float64(u)/float64(unit), 'f', 2, 64)
		f = strings.TrimRight(strings.TrimRight(f, "0"), ".")
		return sign + f + " " + bu.name
	}
	return sign + strconv.FormatUint(u, 10) + " B"
}

// parseRate parses a non-negative rate such as "700000", "700k" or "5M"
// (decimal suffixes, as IOPS are quoted).
func parseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			mult = 1e3
		case 'm', 'M':
			mult = 1e6
		case 'g', 'G':
			mult = 1e9
		}
		if mult != 1 {
			t = t[:len(t)-1]
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("bad rate %q: want a non-negative number with optional k, M or G", s)
	}
	return f * mult, nil
}

// parseBandwidth parses bytes per second such as "3.2GB/s", "2.5GiB/s" or
// "800MB" (the "/s" is optional), with ParseSize's units.
func parseBandwidth(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	num, mult, err := splitSize(t)
	if err != nil {
		return 0, fmt.Errorf("bad bandwidth %q: want a size per second, e.g. 3.2GB/s", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("bad bandwidth %q: %w", s, err)
	}
	bw := f * float64(mult)
	if math.IsInf(bw, 0) {
		return 0, fmt.Errorf("bad bandwidth %q: too large", s)
	}
	return bw, nil
}
