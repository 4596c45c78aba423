package nsfunc

// The buffers handed out by ns_alloc, by address. Keeping them here keeps
// them alive (Go's collector does not move objects, so the addresses stay
// valid) and lets Pushdown and Compute turn the runtime's addresses back
// into slices without unsafe pointer arithmetic.
var allocs = map[uint32][]byte{}

// alloc returns the address of a new zeroed buffer of at least n bytes, or
// 0 if n is too large.
func alloc(n uint32) uint32 {
	if n > 1<<30 {
		return 0
	}
	if n < 16 {
		n = 16 // distinct, aligned addresses
	}
	b := make([]byte, n)
	p := addrOf(b)
	allocs[p] = b
	return p
}

// free forgets a buffer alloc returned; the collector reclaims it.
func free(p uint32) { delete(allocs, p) }

// lookup returns the n bytes at address p if they lie inside one buffer
// alloc returned, else nil.
func lookup(p, n uint32) []byte {
	if b, ok := allocs[p]; ok {
		if uint64(n) <= uint64(len(b)) {
			return b[:n:n]
		}
		return nil
	}
	for a, b := range allocs {
		if p > a && uint64(p-a)+uint64(n) <= uint64(len(b)) {
			return b[p-a : p-a+n : p-a+n]
		}
	}
	return nil
}
