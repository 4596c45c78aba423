// Command stats64go is the stats64 function written in Go: the count, sum,
// minimum and maximum of the little-endian u64s in its input, written as
// four little-endian u64s (32 bytes); an empty input gives all zeros. It
// returns EINVAL if the input is not a whole number of u64s and ERANGE if
// the output buffer is under 32 bytes. Build it as a reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o stats64go.wasm \
//		./functions/go/examples/stats64go
package main

import (
	"encoding/binary"

	"github.com/nearstore/nearstore/functions/go/nsfunc"
)

// stats is the function proper.
func stats(in, out []byte) int32 {
	if len(in)%8 != 0 {
		return nsfunc.EINVAL
	}
	if len(out) < 32 {
		return nsfunc.ERANGE
	}
	var sum, lo, hi uint64
	lo = ^uint64(0)
	n := len(in) / 8
	for i := 0; i+8 <= len(in); i += 8 {
		x := binary.LittleEndian.Uint64(in[i:])
		sum += x
		lo = min(lo, x)
		hi = max(hi, x)
	}
	if n == 0 {
		lo = 0
	}
	binary.LittleEndian.PutUint64(out[0:], uint64(n))
	binary.LittleEndian.PutUint64(out[8:], sum)
	binary.LittleEndian.PutUint64(out[16:], lo)
	binary.LittleEndian.PutUint64(out[24:], hi)
	return 32
}

// main is not run: a c-shared (reactor) module only initializes the
// runtime, then serves calls to its exports.
func main() {}
