// Package leed is LEED's store (SIGCOMM '23) for one device: a hash
// key-value store built to run on the storage node, with an in-memory
// index of a few bytes per thousand objects.
//
// Keys (1 to 16 bytes, the NVMe KV command set's) hash to segments. Each
// segment's keys live in one chain of buckets (one 4 KiB block each) in a
// circular key log; a bucket holds key items — key, key length, value
// length, value offset — pointing into a circular value log. The only
// index in memory is SegTbl: per segment, where its chain is in the key
// log and how long it is, four bytes. So a GET reads the chain (one I/O,
// however long the chain) and the value (one); a PUT reads the chain,
// appends the value and appends the rewritten chain (three); a DELETE
// reads and rewrites the chain (two).
//
// Compaction (compact.go) reclaims each log's tail in sub-compactions that
// commit by checkpoint; recovery (recover.go) rebuilds SegTbl by scanning
// the key log. The on-disk layout is in layout.go and docs/LEED.md.
//
// Writes may also come already ordered, from a replication chain: Apply
// executes numbered operations in order, and the store records the number
// of the last one on the device.
//
// The token engine (tokens.go) admits the store's device I/Os by their
// cost, keeping the device busy without queueing more than it can serve.
package leed
