// Package btree is BPF-KV (XRP, OSDI '22) on nearstore: a B+-tree of
// fixed-size 512-byte nodes of 8-byte keys and 8-byte pointers, whose
// leaves point into a value log of fixed-size values, stored in two
// offloadfs files, with a lookup that is a chain of dependent reads — the
// textbook case for running it next to the data.
//
// Every operation reads the tree one of two ways (Mode):
//
//   - Plain: the host reads each node it does not cache with an ordinary
//     NVMe read, then the value: levels+1 round trips, less the levels
//     cached.
//   - Pushdown: the host walks the levels it caches and sends one Pushdown
//     Read that runs btree_lookup (functions/src/btree_lookup.c, wasm or
//     eBPF) at the target from the first level it does not, down to the
//     leaf and into the value log: one round trip.
//
// Both are the same request, stepped by functions.BTreeStep on the host
// and by btree_lookup at the target, so they return the same results by
// construction; the tests check both against the data loaded. Range
// queries use btree_lookup's range mode, 252 keys per request, resuming
// at next_key. A pushdown the target cannot serve (ErrPushdownUnavailable:
// stale or missing extent maps, limits) is done plainly instead and
// counted (Stats.Fallbacks).
//
// A store is created by a bulk load of keys in ascending order (Create)
// and opened with Open; the key set is then fixed, and values are updated
// in place (Update). The layout is functions.BuildBTreeFanout's: root at
// offset 0, levels top-down, leaves chained, the i-th key's value at
// i*ValueSize; Options.Fanout below 31 builds deep trees from few keys.
package btree
