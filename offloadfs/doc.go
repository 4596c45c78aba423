// Package offloadfs is the user-level file system a nearstore host keeps on
// a remote namespace (or any block device), designed so the storage target
// can run functions and tasks on files safely.
//
// It is initiator-centric, as in OffloadFS: the owning host holds all
// metadata and allocates all blocks; the target never changes metadata.
// Every file's extent map carries a version that changes whenever the map
// does (allocation, truncation, growth, removal), but not on overwrites of
// allocated blocks. File.Extents returns the map as a pushdown.File, in the
// device's blocks, ready for a pushdown request; the change feed
// (Options.OnCommit, FS.ChangedSince, FS.ExtentMap) tells a synchronizer
// which maps to push to the target, without blocking I/O. Other hosts can
// mount the committed state read-only.
//
// # Design
//
// The on-disk format is specified in docs/OFFLOADFS.md: a superblock, a
// metadata journal, a block bitmap, an inode bitmap, an inode table of
// 256-byte records holding up to ten extents inline (more go to a chain of
// extent blocks), and directories stored as blocks of packed entries.
// Every metadata block and inode record carries a CRC32C seeded with the
// file system's UUID.
//
// Metadata changes are made in memory and committed in group transactions
// through a redo journal of whole blocks (see journal.go): a commit
// flushes the device (so file data is durable before any metadata that
// exposes it), writes the transaction with a checksummed commit record,
// flushes again, then writes the blocks home. Commits happen on Sync,
// File.Sync and Close, every Options.CommitInterval, and when the running
// transaction nears half the journal. After a crash at any point Mount
// replays the last committed transaction, and Fsck finds a consistent
// tree in which everything synced before the crash is intact. Blocks a
// transaction frees are not reused until it commits, so a crash can never
// hand a synced file's blocks to another file.
//
// File data never goes through the journal: reads and writes go straight
// to the device at the extent's offset, and overwrites inside a file
// change no metadata at all, so the data path costs a shared lock and a
// binary search over the extent map. Allocation is next-fit over the
// bitmap, prefers growing a file's last extent in place, aligns large
// extents to 1 MiB, and reserves up to 1 MiB ahead of files that keep
// growing (trimmed when the last handle closes), so files written in order
// are a few large extents.
//
// Files are dense: a file of n bytes owns the blocks for all n, and gaps
// left by writes past the end are written as zeroes. This keeps the
// extent map a plain list in file order, which is what pushdown requests
// carry.
package offloadfs
