package volume

import (
	"math"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"4096", 4096},
		{"512B", 512},
		{"4k", 4096},
		{"4K", 4096},
		{"4Ki", 4096},
		{"4KiB", 4096},
		{"4kib", 4096},
		{"4KB", 4000},
		{"4kb", 4000},
		{"1M", 1 << 20},
		{"1MiB", 1 << 20},
		{"1MB", 1e6},
		{"64MiB", 64 << 20},
		{"512M", 512 << 20},
		{"1G", 1 << 30},
		{"1GiB", 1 << 30},
		{"1GB", 1e9},
		{"1T", 1 << 40},
		{"1TB", 1e12},
		{"2P", 2 << 50},
		{"7E", 7 << 60},
		{"1.5K", 1536},
		{"3.2GB", 3_200_000_000},
		{" 1 GiB ", 1 << 30},
		{"4 KiB", 4096},
		{"9223372036854775807", math.MaxInt64},
	}
	for _, tc := range good {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	bad := []struct{ in, why string }{
		{"", "want a number"},
		{"k", "want a number"},
		{"-1", "want a number"},
		{"+1", "want a number"},
		{".5K", "want a number"},
		{"1.K", "no digits after"},
		{"1X", "unknown unit"},
		{"1KX", "unknown unit"},
		{"1 K B", "unknown unit"},
		{"1e3", "unknown unit"},
		{"0.1K", "whole number"},
		{"1.5", "whole number"},
		{"8E", "too large"},
		{"9223372036854775808", "too large"},
		{"1/2", "unknown unit"},
	}
	for _, tc := range bad {
		_, err := ParseSize(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.why) || !strings.HasPrefix(err.Error(), "volume: ") {
			t.Errorf("ParseSize(%q) error = %v; want one containing %q", tc.in, err, tc.why)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{100, "100 B"},
		{1023, "1023 B"},
		{1024, "1 KiB"},
		{4096, "4 KiB"},
		{1536, "1.5 KiB"},
		{512 << 20, "512 MiB"},
		{1 << 30, "1 GiB"},
		{3 << 40, "3 TiB"},
		{1e9, "953.67 MiB"},
		{-4096, "-4 KiB"},
		{math.MinInt64, "-8 EiB"},
	} {
		if got := FormatSize(tc.in); got != tc.want {
			t.Errorf("FormatSize(%d) = %q; want %q", tc.in, got, tc.want)
		}
	}
	// Exact multiples round-trip through ParseSize.
	for _, n := range []int64{0, 1, 512, 4096, 1 << 20, 1536, 64 << 30, 5 << 40} {
		got, err := ParseSize(FormatSize(n))
		if err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, got, err)
		}
	}
}

func TestParseRateAndBandwidth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"700000", 700e3}, {"700k", 700e3}, {"700K", 700e3}, {"5M", 5e6}, {"1.5m", 1.5e6}, {"1G", 1e9}, {"0", 0}, {"2.5", 2.5},
	} {
		if got, err := parseRate(tc.in); err != nil || got != tc.want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "k", "-1", "fast", "1x", "NaN", "Inf"} {
		if _, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q) succeeded", in)
		}
	}
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"3.2GB/s", 3.2e9}, {"3.2GB", 3.2e9}, {"2.5GiB/s", 2.5 * (1 << 30)}, {"800MB/s", 800e6}, {"1000000", 1e6}, {"0", 0},
	} {
		if got, err := parseBandwidth(tc.in); err != nil || got != tc.want {
			t.Errorf("parseBandwidth(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "/s", "fast", "3.2XB/s", "-1GB/s", "1GB/h"} {
		if _, err := parseBandwidth(in); err == nil {
			t.Errorf("parseBandwidth(%q) succeeded", in)
		}
	}
}
