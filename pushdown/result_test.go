package pushdown

import (
	"bytes"
	"math"
	"testing"
	"time"
)

func TestResultRoundTrip(t *testing.T) {
	for _, r := range []Result{
		{},
		{Code: -22, Steps: 3, Reads: 7, Done: true, BytesRead: 1 << 40, TargetMicros: 1234, Output: []byte("out")},
		{Done: true, TargetMicros: math.MaxUint32, Output: bytes.Repeat([]byte{9}, 100)},
	} {
		b := make([]byte, ResultSize+len(r.Output))
		if n := r.Marshal(b); n != len(b) {
			t.Fatalf("Marshal used %d bytes, want %d", n, len(b))
		}
		var got Result
		if err := got.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		if got.Code != r.Code || got.Steps != r.Steps || got.Reads != r.Reads || got.Done != r.Done ||
			got.BytesRead != r.BytesRead || got.TargetMicros != r.TargetMicros || !bytes.Equal(got.Output, r.Output) {
			t.Errorf("round trip: got %+v, want %+v", got, r)
		}
	}
}

// TestResultTargetMicrosOffset pins the field to bytes 28-31, which older
// decoders treat as reserved.
func TestResultTargetMicrosOffset(t *testing.T) {
	r := Result{TargetMicros: 0x01020304}
	b := make([]byte, ResultSize)
	r.Marshal(b)
	if want := []byte{4, 3, 2, 1}; !bytes.Equal(b[28:32], want) {
		t.Errorf("bytes 28-31 = %x, want %x", b[28:32], want)
	}
}

func TestMicrosOf(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want uint32
	}{
		{0, 1},
		{time.Nanosecond, 1},
		{time.Microsecond, 1},
		{time.Microsecond + 1, 2},
		{time.Second, 1e6},
		{time.Duration(math.MaxUint32) * time.Microsecond, math.MaxUint32},
		{time.Duration(math.MaxUint32+1) * time.Microsecond, math.MaxUint32},
		{math.MaxInt64, math.MaxUint32},
	} {
		if got := MicrosOf(tc.d); got != tc.want {
			t.Errorf("MicrosOf(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
