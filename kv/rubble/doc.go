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
//     table and a map without it is on disk (one write of the map for
//     the slots released together). lsm.DB.SetReplica switches it to flushing and compacting.
//   - Store (store.go, storeship.go): a kv/chain Store whose role
//     follows the chain. The head is the primary: its lsm BeforeEdit
//     writes each new table into a free slot of every secondary's pool
//     over NVMe/TCP (Dialer, TargetDialer), from the bytes captured as
//     kv/lsm wrote the table (capture.go; read back from the file when
//     no whole capture is held), and appends the edit with each
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
// Fencing. A head that was deposed (paused, cut off, its lease lost)
// while its successor became the head of a newer epoch through etcd may
// still have slot writes in flight into a secondary's pool, into slots
// the new head, going by the secondary's notes, sees free. The rules:
//
//   - Records are fenced by the chain: a member takes Ship messages only
//     from its predecessor of its own epoch, so a deposed head's edit
//     never reaches a secondary, and its Append fails. A record the new
//     head re-ships from its log (written under the older epoch and
//     taken by the new head as a member) is the old head's committed
//     order: its slots were written before it was appended, and the new
//     head, which applied it, counts them given out (noteAssignedLocked)
//     until the secondary's note shows them.
//   - Slot writes are fenced by the secondary's target, with NVMe
//     reservations (FenceSlots): before it writes into a secondary's
//     pool, a head registers on the secondary's namespace with a key
//     naming its group and its epoch, holds (with every registrant) a
//     Write Exclusive - All Registrants reservation, and preempts the
//     group's registrants of older epochs, and it writes nothing if the
//     group has a registrant of a newer epoch. So once a new head has
//     fenced a target, which it does before its first write there, the
//     old head's writes fail with Reservation Conflict, including one
//     whose data was still on its way (the target checks a command once
//     its data is in hand), and the old head cannot register again.
//     What the new head writes and the secondary installs is never
//     overwritten by a deposed head.
//   - A node's store tells its dialer the epoch it heads (Fencer) on
//     every chain change, 0 when it heads none, and the dialer then
//     does not dial: a head that learns of its deposition stops at once.
//   - The residue: the target does not abort a preempted host's
//     commands (target/reservations.go), so a write that passed its
//     check before the new head's preemption completes; it is already
//     executing in the target, which finishes it in the time of one
//     backend write, without waiting on its host. Reservations are not
//     persistent: a target that restarts holds none until the group's
//     head fences it again, so a deposed head may write into its free
//     slots and its kept ones (Restarting, below) until then. A
//     restarted node starts its stores over (Reset), and what it keeps
//     is checked after that fence.
//
// Restarting. A restarted node rejoins by COPY, which resets its store
// (Reset), and its primary then resyncs it. Reset keeps the tables of
// the tree it replaces that are in slots (Store.kept, listed in the
// note with their number, size and sequence bounds; their slots stay
// held), and a resync maps each table of the primary's tree that is one
// of them (keptTable.same: the number alone does not identify a table
// across a restart) to its slot instead of writing it again, with the
// CRC-32C of its bytes in the record (record.sums). The primary fences
// the replica's target before it appends the record (Store.fenceKept),
// and the replica takes a kept slot only for the very table kept there
// and only if the slot's bytes match the sum (as it checks every summed
// table's slot, kept or not: the record may come after it let its kept
// tables go): a deposed head that wrote
// into it while the restarted target held no reservation is caught, and
// none can write after the fence. The next resync, an install as a
// secondary, the fallback, becoming primary, a refused check, or
// keptFor passing let the kept tables go.
//
// Stopping. A node stopping gracefully quiesces its stores (Quiesce:
// no new flush or compaction, the running ones finish, shipping through
// the still-serving chain) before it leaves its chains; a flush whose
// edit came after the node's chain view closed would turn the store
// read-only.
//
// The wire formats (note, record, slot map) are in wire.go. The cluster
// side (node serve --store rubble, tests) is in docs/CLUSTER.md.
package rubble
