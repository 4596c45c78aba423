// Package testfuncs gives tests the standard functions' native Go
// references (functions.Native) and inputs to check the sandboxed
// functions against them.
package testfuncs

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/nearstore/nearstore/functions"
)

// Native runs the native Go reference of the function name on in, with
// outCap bytes of output room, and returns its output; it fails t if the
// reference fails.
func Native(t testing.TB, name string, in []byte, outCap int) []byte {
	t.Helper()
	out := make([]byte, outCap)
	n, err := functions.Native(name)(in, out)
	if err != nil {
		t.Fatalf("native %s: %v", name, err)
	}
	return out[:n]
}

// KNN draws a knn query from rng: a target of dim components, then n
// vectors of dim components each, little-endian int32s as knn reads
// them, every component in [-1000, 1000).
func KNN(rng *rand.Rand, dim, n int) (target []int32, vecs []byte) {
	target = make([]int32, dim)
	for i := range target {
		target[i] = rng.Int32N(2000) - 1000
	}
	vecs = make([]byte, 0, 4*dim*n)
	for range n * dim {
		vecs = binary.LittleEndian.AppendUint32(vecs, uint32(rng.Int32N(2000)-1000))
	}
	return target, vecs
}
