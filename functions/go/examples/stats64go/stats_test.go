package main

import (
	"encoding/binary"
	"testing"
)

func TestStats(t *testing.T) {
	le := binary.LittleEndian
	in := make([]byte, 0, 32)
	for _, v := range []uint64{5, 1, 9, 3} {
		in = le.AppendUint64(in, v)
	}
	out := make([]byte, 32)
	if n := stats(in, out); n != 32 {
		t.Fatalf("stats = %d", n)
	}
	want := []uint64{4, 18, 1, 9}
	for i, w := range want {
		if got := le.Uint64(out[8*i:]); got != w {
			t.Errorf("field %d = %d, want %d", i, got, w)
		}
	}
	if n := stats(nil, out); n != 32 || le.Uint64(out[16:]) != 0 {
		t.Errorf("empty: %d, min %d", n, le.Uint64(out[16:]))
	}
	if n := stats(in[:7], out); n != -22 {
		t.Errorf("ragged input: %d", n)
	}
	if n := stats(in, out[:31]); n != -34 {
		t.Errorf("short output: %d", n)
	}
}
