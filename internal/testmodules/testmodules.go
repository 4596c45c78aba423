// Package testmodules gives tests their function modules: Read, for
// the modules built into testdata directories, and wasm modules
// assembled by hand (there is no wat2wasm here) for where a function must
// misbehave in a way the C functions never do.
package testmodules

import (
	"os"
	"path/filepath"
	"testing"
)

// Read returns the file at filepath.Join(elem...), a module in a
// testdata directory, failing t if it cannot.
func Read(t testing.TB, elem ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(elem...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Reveal is a C-layout module whose compute(in, in_len, out, out_cap)
// copies out_cap bytes from in to out, whatever in_len says: it hands its
// caller whatever its memory held past the input, which is how the tests
// catch one tenant's bytes reaching another. Its text form:
//
//	(module
//	  (memory (export "memory") 2)
//	  (global (export "__heap_base") i32 (i32.const 1024))
//	  (func (export "compute") (param i32 i32 i32 i32) (result i32)
//	    (memory.copy (local.get 2) (local.get 0) (local.get 3))
//	    local.get 3))
func Reveal() []byte {
	section := func(id byte, body ...byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	exports := []byte{3}
	exports = append(append(exports, name("memory")...), 2, 0)
	exports = append(append(exports, name("__heap_base")...), 3, 0)
	exports = append(append(exports, name("compute")...), 0, 0)
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	m = append(m, section(1, 1, 0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f)...)
	m = append(m, section(3, 1, 0)...)
	m = append(m, section(5, 1, 0, 2)...)
	m = append(m, section(6, 1, 0x7f, 0, 0x41, 0x80, 0x08, 0x0b)...)
	m = append(m, section(7, exports...)...)
	m = append(m, section(10, 1, 14, 0, 0x20, 2, 0x20, 0, 0x20, 3, 0xfc, 0x0a, 0, 0, 0x20, 3, 0x0b)...)
	return m
}
