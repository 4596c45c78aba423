// Package leb128 appends integers in LEB128, the variable-length encoding
// of wasm's binary format (and DWARF's): seven bits a byte, least
// significant group first, the top bit set on every byte but the last.
// Both wasm producers in the tree use it: sandbox/wasm when it rewrites a
// module's sections and instrumentation, sandbox/ebpf when it translates
// a program to wasm.
package leb128

// AppendUint appends v as an unsigned LEB128: as few bytes as hold v.
func AppendUint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// AppendInt appends v as a signed LEB128: as few bytes as hold v in two's
// complement, the last one's bit 6 being the sign.
func AppendInt(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7 // arithmetic: the sign spreads down
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
