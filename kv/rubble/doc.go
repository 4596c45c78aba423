// Package rubble is RubbleDB (ATC '23) on nearstore: a replicated kv/lsm
// in which only the primary flushes and compacts and ships the tables it
// produces into its secondaries' disks over NVMe/TCP (issue 23).
//
// The parts:
//
//   - The slot pool (slotpool.go): an offloadfs on a node's own volume
//     holding preallocated, fixed-size slot files whose device extents
//     never move, one pool per replication group (MakePoolAt).
//   - The Secondary (secondary.go): a kv/lsm store that never flushes
//     or compacts, applies the primary's writes at the primary's
//     sequence numbers, installs shipped edits once it holds the writes
//     they cover, maps table paths to slots, keeps that map on disk
//     (MapFileName), and releases a slot only when no version holds its
//     table. lsm.DB.SetReplica switches it to flushing and compacting.
//   - Store (store.go, storeship.go): a kv/chain Store whose role
//     follows the chain. The head is the primary: its lsm BeforeEdit
//     writes each new table into a free slot of every secondary's pool
//     over NVMe/TCP (Dialer, TargetDialer) and appends the edit with each
//     secondary's file map to the chain (chain.Node.Append), in one order
//     with the writes, which carry the primary's sequence numbers
//     (chain.Op.Tag). Secondaries report their pool and held slots in
//     notes carried up the chain's acks (chain.Noter); the primary gives
//     out only slots no note holds and no unreflected record assigned.
//     A replica that cannot follow an edit (its tree's fingerprint is
//     not the primary's, no tables were shipped to it, it joined by a
//     COPY of data) compacts for itself; the primary later resyncs it by
//     shipping its whole tree with an edit (the record's base), which
//     the replica installs in a new store beside its recent writes. A
//     dead head's successor turns primary: it starts to flush and
//     compact its own tree (on its pool) and ships to the rest.
//   - Fallback: when, over a window, shipping took longer than the
//     primary's own flushes and compactions, the primary appends the
//     fallback record and every replica compacts for itself; after four
//     windows the primary resyncs them and measures again.
//     StoreConfig.Fallback forces it.
//   - Shipper (ship.go): the same shipping with secondaries given as
//     function values, for tests of the data path without a chain.
//
// The wire formats (note, record, slot map) are in wire.go. The cluster
// side (node serve --store rubble, tests) is in docs/CLUSTER.md.
package rubble
