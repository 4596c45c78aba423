package lsm

import (
	"log/slog"

	"github.com/nearstore/nearstore/sandbox"
)

// Options configure Open. The zero value is usable: every field has a
// default, applied by Open.
type Options struct {
	// MemTableSize is the arena size of a memtable in bytes (default
	// 4 MiB). A batch larger than it gets a memtable of its own size.
	MemTableSize int
	// MemTableStopWritesThreshold is the number of memtables (the
	// mutable one included) at which writes stall until a flush
	// finishes (default 4).
	MemTableStopWritesThreshold int
	// L0CompactionThreshold is the L0 table count at which L0 is
	// compacted into L1 (default 4).
	L0CompactionThreshold int
	// L0SlowdownWritesThreshold is the L0 table count at which each
	// commit is delayed by a millisecond (default 12).
	L0SlowdownWritesThreshold int
	// L0StopWritesThreshold is the L0 table count at which a full
	// memtable is not rotated: writes stall until compaction catches up
	// (default 20).
	L0StopWritesThreshold int
	// SoftPendingCompactionBytes is the estimate of bytes compaction is
	// behind (levels' sizes above their targets) at which each commit is
	// delayed by a millisecond (default 64 GiB);
	// HardPendingCompactionBytes the one at which a full memtable is not
	// rotated (default 256 GiB).
	SoftPendingCompactionBytes, HardPendingCompactionBytes uint64
	// LBaseMaxBytes is the base level's target size (default 64 MiB).
	// Level targets are dynamic, sized from the whole tree as Pebble
	// does (docs/LSM.md, "Compaction picking"): the bottom level's is
	// the tree's size less a LevelMultiplier-th, L0 compacts into the
	// deepest level whose target, dividing the bottom's by
	// LevelMultiplier per level, is at most this, and the levels
	// between grow by one smoothed multiplier.
	LBaseMaxBytes int64
	// LevelMultiplier is the largest size ratio of adjacent levels, and the
	// bottom level's share of the tree is 1 − 1/LevelMultiplier (default
	// 10).
	LevelMultiplier int
	// TargetFileSize is the size compaction cuts tables of the base level
	// at (default 2 MiB); each level below it doubles it.
	TargetFileSize int64
	// MaxConcurrentCompactions bounds background compactions (default
	// 1). Flushes run apart from them.
	MaxConcurrentCompactions int
	// DisableAutomaticCompactions leaves compaction to Compact.
	DisableAutomaticCompactions bool
	// DisableFlushes keeps full memtables in memory, unflushed: a
	// replica (kv/rubble) gets its tables from its primary by
	// InstallEdit, which drops the memtables they cover. Flush fails
	// (it would wait for a flush that never runs); set the
	// stop-writes thresholds high enough for the primary's edits to
	// arrive before writes stall.
	DisableFlushes bool
	// BlockCacheSize is the block cache's byte budget (default 8 MiB;
	// negative: no cache).
	BlockCacheSize int64
	// TableCacheSize is the number of tables kept open (default 500).
	TableCacheSize int
	// MaxManifestFileSize is the MANIFEST size past which the next
	// version change starts a new one holding the whole version (default
	// 64 MiB).
	MaxManifestFileSize int64
	// ReadOnly opens the store without writing anything: the WALs are
	// replayed into memtables kept in memory (not flushed), no WAL or
	// MANIFEST is created, no obsolete file removed, no flush or
	// compaction runs, and Set, Delete, DeleteRange, Apply, Flush and
	// Compact fail with ErrReadOnly. The directory must hold a store
	// (CURRENT). It serves readers of a store another process owns, or
	// of a snapshot of its directory, and a file system mounted
	// read-only; the writer must not remove files under a read-only
	// reader (a snapshot of the directory keeps them).
	ReadOnly bool
	// BeforeEdit, if set, is called with every version edit a flush or
	// compaction makes, its new tables written and synced, before the
	// edit is logged and installed, in the order edits are installed
	// (one at a time). A primary ships the edit and its tables to its
	// replicas here (kv/rubble). An error fails the edit: nothing is
	// installed and the store turns read-only (the error is sticky).
	BeforeEdit func(e *VersionEdit) error
	// Table shapes the tables written.
	Table TableOptions
	// Logger receives flush, compaction and error events (default
	// slog.Default()).
	Logger *slog.Logger
	// Pusher, if set, pushes the on-disk part of Gets down to the storage
	// node holding the tables (pushdown.go); the store's files must be on
	// the Pusher's file system. Nil: Gets read on the host.
	Pusher Pusher
	// PushdownModule is the lsm_get module to register with the Pusher
	// (default: the standard build for PushdownRuntime, functions.Module).
	PushdownModule []byte
	// PushdownRuntime picks the standard lsm_get build when
	// PushdownModule is nil: sandbox.KindWasm (the default, also for 0)
	// or sandbox.KindEBPF. Both compute the same results; they differ in
	// what a step costs the storage node, and the node (and the host, for
	// requests it runs itself) needs a runtime of that kind.
	PushdownRuntime sandbox.Kind
	// CacheSampleRate is the fraction of the Gets that would be pushed
	// down that take the ordinary read path instead and fill the block
	// cache, so that it does not go stale under pushdown (default
	// DefaultCacheSampleRate; negative: none).
	CacheSampleRate float64
	// Offload, if set, runs flushes and compactions at an offload engine
	// as its fields say (offload.go); nil: everything runs here.
	Offload *OffloadOptions
}

// DefaultCacheSampleRate is Options.CacheSampleRate's default: 1% of
// pushed-down Gets refresh the block cache.
const DefaultCacheSampleRate = 0.01

func (o *Options) setDefaults() {
	if o.MemTableSize <= 0 {
		o.MemTableSize = 4 << 20
	}
	if o.MemTableStopWritesThreshold <= 1 {
		o.MemTableStopWritesThreshold = 4
	}
	if o.L0CompactionThreshold <= 0 {
		o.L0CompactionThreshold = 4
	}
	if o.L0SlowdownWritesThreshold <= 0 {
		o.L0SlowdownWritesThreshold = 12
	}
	if o.L0StopWritesThreshold <= 0 {
		o.L0StopWritesThreshold = 20
	}
	if o.SoftPendingCompactionBytes == 0 {
		o.SoftPendingCompactionBytes = 64 << 30
	}
	if o.HardPendingCompactionBytes == 0 {
		o.HardPendingCompactionBytes = 256 << 30
	}
	if o.LBaseMaxBytes <= 0 {
		o.LBaseMaxBytes = 64 << 20
	}
	if o.LevelMultiplier <= 1 {
		o.LevelMultiplier = 10
	}
	if o.TargetFileSize <= 0 {
		o.TargetFileSize = 2 << 20
	}
	if o.MaxConcurrentCompactions <= 0 {
		o.MaxConcurrentCompactions = 1
	}
	if o.BlockCacheSize == 0 {
		o.BlockCacheSize = 8 << 20
	}
	if o.TableCacheSize <= 0 {
		o.TableCacheSize = 500
	}
	if o.MaxManifestFileSize <= 0 {
		o.MaxManifestFileSize = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// WriteOptions control one write. A nil *WriteOptions is NoSync.
type WriteOptions struct {
	// Sync: the write is durable (its WAL record synced) before the call
	// returns. A synced write also makes every write committed before it
	// durable.
	Sync bool
}

// IterOptions bound an iterator. A nil *IterOptions means no bounds.
type IterOptions struct {
	// LowerBound, if set, is the smallest key the iterator returns.
	LowerBound []byte
	// UpperBound, if set, is the exclusive upper bound of the keys it
	// returns.
	UpperBound []byte
}
