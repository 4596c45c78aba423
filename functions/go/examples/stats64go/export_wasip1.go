//go:build wasip1

package main

import "github.com/nearstore/nearstore/functions/go/nsfunc"

//go:wasmexport compute
//lint:ignore U1000 called by the host through go:wasmexport
func compute(in, inLen, out, outCap uint32) int32 {
	return nsfunc.Compute(in, inLen, out, outCap, stats)
}
