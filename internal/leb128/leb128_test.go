package leb128

import (
	"encoding/hex"
	"math"
	"testing"
)

// The encodings are the wasm specification's and DWARF's examples, and
// the edges of each width.
func TestAppendUint(t *testing.T) {
	want := map[uint64]string{
		0: "00", 127: "7f", 128: "8001", 624485: "e58e26",
		math.MaxUint32: "ffffffff0f",
		math.MaxUint64: "ffffffffffffffffff01",
	}
	for v, w := range want {
		if got := hex.EncodeToString(AppendUint(nil, v)); got != w {
			t.Errorf("AppendUint(%d) = %s, want %s", v, got, w)
		}
	}
}

func TestAppendInt(t *testing.T) {
	want := map[int64]string{
		0: "00", 63: "3f", 64: "c000", -1: "7f", -64: "40", -65: "bf7f", -123456: "c0bb78",
		math.MinInt32: "8080808078",
		math.MinInt64: "8080808080808080807f",
		math.MaxInt64: "ffffffffffffffffff00",
	}
	for v, w := range want {
		if got := hex.EncodeToString(AppendInt(nil, v)); got != w {
			t.Errorf("AppendInt(%d) = %s, want %s", v, got, w)
		}
	}
	if got := AppendInt([]byte{0xaa}, 1); hex.EncodeToString(got) != "aa01" {
		t.Errorf("AppendInt appended to aa: % x", got)
	}
}
