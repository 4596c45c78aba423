//go:build !wasip1

package nsfunc

// fakeNext hands out stand-in addresses off wasm, so the package's logic
// can be tested natively.
var fakeNext uint32 = 1 << 16

// addrOf returns a stand-in address for b, unique among live buffers.
func addrOf(b []byte) uint32 {
	p := fakeNext
	fakeNext += (uint32(len(b)) + 15) &^ 15
	return p
}
