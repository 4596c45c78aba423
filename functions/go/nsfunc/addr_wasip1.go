//go:build wasip1

package nsfunc

import "unsafe"

// addrOf returns b's address in linear memory.
func addrOf(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// nsAlloc is the ABI's ns_alloc: the runtime asks it for each buffer.
//
//go:wasmexport ns_alloc
//lint:ignore U1000 called by the host through go:wasmexport
func nsAlloc(size uint32) uint32 { return alloc(size) }

// nsFree lets the runtime give back a buffer it replaced with a larger one.
//
//go:wasmexport ns_free
//lint:ignore U1000 called by the host through go:wasmexport
func nsFree(ptr uint32) { free(ptr) }
