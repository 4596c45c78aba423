// Package cluster is nearstore's control plane, kept in etcd: node
// membership (each node's key lives on its lease, so a dead node
// disappears when the lease expires), the chain of each replication group
// (ordered members and an epoch bumped on every change), and watches that
// tell nodes and clients about a new configuration. It is shared by the
// replicated stores (kv/chain's CRRS, which LEED and RubbleDB build on).
//
// The decisions are a pure core (chain.go: Reconfigure, Promote, Remove;
// shardmap.go and move.go: the shard map of key ranges to groups, the
// steps of moving a range and the write-imbalance plan), tested with
// tables; control.go does the etcd I/O around it, and every
// configuration change is one etcd transaction with a compare on the
// stored configuration: no consensus of our own. embed.go runs a real
// single-member etcd in-process for a local cluster; a deployment points
// the nodes at an external etcd cluster instead. docs/CLUSTER.md
// describes the keys and the protocol.
package cluster
