// Package nvme holds the NVM Express data structures that both ends of a
// connection agree on: the 64-byte submission queue entry, the 16-byte
// completion queue entry, opcodes, status codes, controller properties, and
// the Identify, log page and discovery structures.
//
// It does no I/O. Every structure is encoded and decoded explicitly with
// encoding/binary at the byte offsets the NVMe Base and NVMe over Fabrics
// specifications give; the offsets are written next to each field so the code
// can be checked against the spec figure by figure. All multi-byte fields are
// little-endian, as on the wire.
package nvme
