// Package rubble is RubbleDB (ATC '23) on nearstore: a replicated kv/lsm
// in which only the primary flushes and compacts and ships the tables it
// produces into its secondaries' disks over NVMe/TCP (issue 23).
//
// What exists so far is the secondary's slot pool (slotpool.go): an
// offloadfs on the secondary's own volume holding preallocated,
// fixed-size slot files whose device extents never move, so the primary
// can write a table into a free slot directly by LBA. The shipping
// itself, the ordering by memtable ID, the fallback and the benchmark
// are not built yet; docs/CLUSTER.md says what remains.
package rubble
