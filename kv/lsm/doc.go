// Package lsm is nearstore's LSM-tree engine, in the RocksDB/Pebble mould,
// written on vfs.FS so it runs on a local directory or on offloadfs. It is
// ours rather than Pebble because later work cuts inside it: a Get split
// into an in-memory phase and a pushed-down on-disk phase, flushes and
// compactions run as self-contained tasks elsewhere, and replicas that
// apply another instance's version edits.
//
// What is where:
//
//   - internal.go: internal keys (user key + 8-byte trailer seq<<8|kind)
//     and their order.
//   - batch.go: Batch and its encoding, which is also the WAL record.
//   - record.go: the checksummed record framing of the WAL and MANIFEST.
//   - skiplist.go, memtable.go: the memtable, a lock-free skiplist in an
//     arena (points) plus a second one for range tombstones.
//   - block.go, bloom.go, table.go: the table format (docs/LSM.md): data
//     blocks with prefix-compressed keys and restart points, a two-level
//     index, a bloom filter, range deletions, properties, a footer; CRC32C
//     on every block. CorruptionError names the file and offset.
//   - cache.go: the sharded LRU block cache (with Resident, a no-I/O
//     residency query) and the table cache of open readers.
//   - version.go: FileMeta, VersionEdit (encodable; Version.Apply is
//     public so a replica can apply another instance's edits) and Version.
//   - options.go: Options, WriteOptions, IterOptions.
//   - db.go: Open and recovery, the commit pipeline (group commit with
//     concurrent memtable inserts, WAL, per-write Sync), memtable
//     rotation, write slowdowns and stalls, flushes, MANIFEST rotation,
//     Get, snapshots.
//   - dbiter.go, iter.go, rangedel.go: the user Iterator over a merging
//     iterator of memtables, L0 tables and level iterators, with MVCC
//     visibility and range tombstones applied.
//   - compaction.go: CompactionTask, which runs against a TaskEnv and
//     knows nothing of the engine; picker.go: leveled picking by score,
//     trivial moves, Compact.
//   - metrics.go: Metrics, and Resident.
//   - offload.go, offloadargs.go, recycle.go, l0cache.go: OffloadDB
//     (Options.Offload): compactions and flushes (from the WAL) run as
//     offload tasks at the storage node, whose side is package
//     kv/lsm/offloadtask, and flushed memtables kept for Gets.
//
// Tests run on an in-memory vfs that keeps only synced bytes and synced
// directory entries across a simulated crash (memfs_test.go); the model
// test (model_test.go) checks random operations against a map, the crash
// tests (crash_test.go, kill_test.go) recovery at every file-system
// operation and after SIGKILL.
package lsm
