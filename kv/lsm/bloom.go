package lsm

import "encoding/binary"

// A table's bloom filter covers the user keys of its point entries
// (docs/LSM.md, "Filter block"). Its contents are m bytes of bits
// followed by one byte k, the number of probes. Probe i of a key tests bit
// (h + i*delta) mod (8m), where h = bloomHash(key) and delta = h>>17 |
// h<<15 (32-bit arithmetic), as LevelDB's. Bit b is byte b/8, bit b%8.

// bloomHash is LevelDB's Murmur-like hash with seed 0xbc9f1d34, reading
// the last 1-3 bytes as unsigned.
func bloomHash(b []byte) uint32 {
	const (
		seed = 0xbc9f1d34
		m    = 0xc6a4a793
	)
	h := uint32(seed) ^ uint32(len(b))*m
	for ; len(b) >= 4; b = b[4:] {
		h += binary.LittleEndian.Uint32(b)
		h *= m
		h ^= h >> 16
	}
	switch len(b) {
	case 3:
		h += uint32(b[2]) << 16
		fallthrough
	case 2:
		h += uint32(b[1]) << 8
		fallthrough
	case 1:
		h += uint32(b[0])
		h *= m
		h ^= h >> 24
	}
	return h
}

// buildBloom returns the filter contents for the given key hashes.
func buildBloom(hashes []uint32, bitsPerKey int) []byte {
	bitsPerKey = max(bitsPerKey, 1)
	k := int(float64(bitsPerKey) * 0.69)
	k = max(1, min(k, 30))
	nbits := len(hashes) * bitsPerKey
	if len(hashes) > 0 {
		nbits = max(nbits, 64)
	}
	nbytes := (nbits + 7) / 8
	nbits = nbytes * 8
	out := make([]byte, nbytes+1)
	for _, h := range hashes {
		delta := h>>17 | h<<15
		for j := 0; j < k; j++ {
			b := h % uint32(nbits)
			out[b/8] |= 1 << (b % 8)
			h += delta
		}
	}
	out[nbytes] = byte(k)
	return out
}

// bloom is a filter's contents.
type bloom []byte

// mayContain reports whether the key may be in the set; false is certain.
// A filter of no bits holds no keys.
func (f bloom) mayContain(h uint32) bool {
	if len(f) < 2 {
		return false
	}
	nbits := uint32(len(f)-1) * 8
	k := int(f[len(f)-1])
	if k > 30 {
		return true // reserved for other encodings: never filter
	}
	delta := h>>17 | h<<15
	for j := 0; j < k; j++ {
		b := h % nbits
		if f[b/8]&(1<<(b%8)) == 0 {
			return false
		}
		h += delta
	}
	return true
}
