// Package rubble is RubbleDB (ATC '23) on nearstore: a replicated kv/lsm
// in which only the primary flushes and compacts and ships the tables it
// produces into its secondaries' disks over NVMe/TCP (issue 23).
//
// What exists: the secondary's slot pool (slotpool.go), an offloadfs on
// the secondary's own volume holding preallocated, fixed-size slot files
// whose device extents never move; the Shipper (ship.go), plugged into
// the primary store as lsm.Options.BeforeEdit, which writes every table
// a flush or compaction produces into a free slot of each secondary over
// NVMe/TCP and sends the edit with the file map; and the Secondary
// (secondary.go), a store that never flushes or compacts, applies the
// primary's writes at the primary's sequence numbers, installs shipped
// edits once it holds the writes they cover, and releases a slot only
// when no version holds its table. Carrying edits on the chain's stream,
// the fallback and the benchmark are not built yet; docs/CLUSTER.md says
// what remains.
package rubble
