// Package chain is chain replication with request shipping (CRRS, as in
// LEED): a replication group's nodes form a chain kept in etcd by package
// cluster; writes enter at the head, flow down the chain in sequence
// order and are acknowledged from the tail; a read goes to any replica
// whose copy of the key is clean, else to the tail.
//
// The data plane (node.go, over the gRPC service in chainpb/chain.proto):
//
//   - The head gives each write the next sequence number, applies it to
//     its Store, and answers the client when the write is committed: when
//     the tail has applied it, so it is on every member.
//   - Each member keeps one Ship stream open to its successor: a hello
//     (answered with the successor's applied and committed points), then,
//     if the successor lacks writes this node no longer logs or is a
//     joining node, a COPY (a snapshot's keys in chunks, then its
//     sequence number), then the writes past that point in order. Group
//     commit: at most NodeConfig.ShipWindow messages are uncommitted at
//     a time, and the writes applied meanwhile go together in the next.
//     The successor skips writes it already applied (seq <=
//     applied: they are re-shipped after every reconfiguration) and
//     refuses a gap.
//   - Acks flow up the same streams when the committed point moves: the
//     tail's committed point is its applied point; every other member's
//     is its successor's.
//   - A key is dirty at a replica from the write's application until the
//     write is committed; a non-tail replica answers a read of a dirty key
//     with "dirty" and the client asks the tail.
//   - Every request and stream message carries the epoch of the
//     configuration it was routed by; a node of another epoch refuses it,
//     so nobody acts on a chain that no longer exists.
//
// Failures and joins (the decisions are cluster.Reconfigure's): a node's
// etcd lease expires, the chain is reconfigured by a compare-and-swap,
// and each node re-opens its Ship stream to its new successor, which gets
// every write past its applied point again from the log (a node logs
// every write past its committed point). A dead head's successor becomes
// head and numbers new writes after the last it applied; a dead tail's
// predecessor becomes tail and commits what it applied. A node that
// starts takes itself out of the chain, registers, and is made the
// joining node: the tail COPYs its snapshot to it and ships it every
// later write; once it holds them, the tail's commits wait for it too,
// and when it holds every write the tail had committed, the tail promotes
// it to tail (cluster.Promote). An acknowledged write is therefore on
// every member of the chain of the moment it was acknowledged.
//
// The Store (store.go) is what a node replicates: any local store that
// applies ordered writes with their sequence numbers (recording the last
// one atomically with the write, so re-shipped writes are skipped),
// reads a key, takes a consistent snapshot, and imports one (COPY).
// lsmstore adapts kv/lsm; LEED's store plugs in the same way.
//
// client.go routes: writes to the head, reads by ReadMode (ReadCRRS or
// ReadTail), retrying through reconfigurations until its context ends.
// router.go routes by the cluster's shard map, which every host enforces
// and acknowledges in etcd; move.go moves a key range between groups (a
// COPY, then a switch of the map) and balances write load by such moves.
// docs/CLUSTER.md has the whole protocol.
package chain
