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
//
// # Keeping the target in step
//
// With Options.Remote (the namespace's target), a read-write mount runs a
// synchronizer (sync.go): each commit hands it the inodes whose maps
// changed, without waiting, and it pushes their committed maps to the
// target in the background (Extent Map Put), the latest version of each
// inode winning, retrying with backoff, and pushing everything again when
// the target has lost its maps (a restart). Only committed maps are
// pushed, so the target never holds a map a crash could take back.
//
// FS.Pushdown, File.LambdaRead and File.LambdaWrite (offload.go) follow
// BPF-oF's rules end to end: a request is sent only if the target holds
// exactly the files' current versions (as the synchronizer knows them);
// the target refuses versions it does not hold; and when the request
// completes the versions are compared again, its result discarded if any
// changed. A request not sent, refused or discarded runs on the host
// instead — the same module in a local sandbox, driven by the same
// executor over the files' blocks — so callers get the same result either
// way; Stats and Metrics count where requests ran and every mismatch.
//
// FS.Grant (grant.go) gives another host access to files' blocks for a
// lease; until the grant is released or expires, the owner does not
// truncate them away or overwrite them (ErrGranted), and a removed
// granted file keeps its blocks until the grant ends.
package offloadfs
