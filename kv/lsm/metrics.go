package lsm

import (
	"fmt"
	"strings"
	"time"
)

// LevelMetrics describe one level.
type LevelMetrics struct {
	Tables int
	Size   uint64
	// Score is the compaction score: >= 1 means the level is due.
	Score float64
	// BytesIn is what compactions into the level read; BytesWritten is
	// what flushes (L0) or compactions wrote into it.
	BytesIn, BytesWritten uint64
}

// Metrics is a snapshot of the store's counters.
type Metrics struct {
	Levels [NumLevels]LevelMetrics
	// MemTables counts memtables, the mutable one included;
	// MemTableBytes is their arena use.
	MemTables     int
	MemTableBytes int64
	WAL           struct {
		Files        int
		BytesWritten uint64
		Syncs        uint64
		// CommitGroups is the number of leader writes; Batches per
		// group shows group commit at work.
		CommitGroups, Batches uint64
	}
	// UserBytes is the key and value bytes written through the API.
	UserBytes uint64
	// Flush and Compact count the store's own flushes and compactions;
	// Duration is the time spent writing their outputs (a compaction's
	// merge, a flush's table), not the time in Options.BeforeEdit: the
	// work a RubbleDB secondary is spared (kv/rubble).
	Flush struct {
		Count, BytesWritten uint64
		InProgress          bool
		Duration            time.Duration
	}
	Compact struct {
		Count, Moves            uint64
		BytesRead, BytesWritten uint64
		InProgress              int
		Duration                time.Duration
	}
	// WriteStalls counts writes (and commit groups) that waited for a
	// flush or for L0 to shrink, and for how long; WriteSlowdowns counts commits delayed
	// by L0SlowdownWritesThreshold.
	WriteStalls, WriteSlowdowns struct {
		Count    uint64
		Duration time.Duration
	}
	// PendingCompactionBytes estimates the bytes above the levels'
	// targets.
	PendingCompactionBytes uint64
	// BaseLevel is the level L0 compacts into; levels sized dynamically
	// from the largest (see Options.LBaseMaxBytes).
	BaseLevel  int
	BlockCache struct {
		Size         int64
		Blocks       int
		Hits, Misses int64
	}
	TableCache struct {
		Open         int
		Hits, Misses int64
	}
	Snapshots int
	// Seq is the last visible sequence number.
	Seq SeqNum
}

// WriteAmp is the bytes written to disk (WAL, flushes, compactions) per
// byte written by users.
func (m Metrics) WriteAmp() float64 {
	if m.UserBytes == 0 {
		return 0
	}
	return float64(m.WAL.BytesWritten+m.Flush.BytesWritten+m.Compact.BytesWritten) / float64(m.UserBytes)
}

// Metrics returns the current metrics.
func (d *DB) Metrics() Metrics {
	var m Metrics
	d.mu.Lock()
	v := d.current
	for l := range m.Levels {
		lm := &m.Levels[l]
		lm.Tables = len(v.Levels[l])
		lm.Size = v.levelSize(l)
		if l < NumLevels-1 {
			lm.Score = d.scoreLocked(v, l)
		}
		lm.BytesIn, lm.BytesWritten = d.m.levelIn[l], d.m.levelWritten[l]
	}
	m.PendingCompactionBytes = d.pendingCompactionBytes(v)
	m.BaseLevel, _ = d.levelTargets(v)
	m.MemTables = 1 + len(d.imm)
	m.MemTableBytes = int64(d.mem.size())
	for _, im := range d.imm {
		m.MemTableBytes += int64(im.size())
	}
	m.WAL.Files = 1 + len(d.imm)
	m.WAL.BytesWritten, m.WAL.Syncs = d.m.walBytes, d.m.walSyncs
	m.WAL.CommitGroups, m.WAL.Batches = d.m.commitGroups, d.m.batches
	m.UserBytes = d.m.userBytes
	m.Flush.Count, m.Flush.BytesWritten, m.Flush.InProgress = d.m.flushes, d.m.flushBytes, d.flushing
	m.Flush.Duration, m.Compact.Duration = d.m.flushDur, d.m.compactDur
	m.Compact.Count, m.Compact.Moves = d.m.compactions, d.m.moves
	m.Compact.BytesRead, m.Compact.BytesWritten = d.m.compactRead, d.m.compactWritten
	m.Compact.InProgress = d.compactions
	m.WriteStalls.Count, m.WriteStalls.Duration = d.m.stalls, d.m.stallDur
	m.WriteSlowdowns.Count, m.WriteSlowdowns.Duration = d.m.slowdowns, d.m.slowdownDur
	m.Snapshots = len(d.snapshots)
	d.mu.Unlock()
	m.Seq = d.visibleSeq.Load()
	m.BlockCache.Size, m.BlockCache.Blocks = d.bc.stats()
	if d.bc != nil {
		m.BlockCache.Hits, m.BlockCache.Misses = d.bc.hits.Load(), d.bc.misses.Load()
	}
	m.TableCache.Open, m.TableCache.Hits, m.TableCache.Misses = d.tc.stats()
	return m
}

func (m Metrics) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "level  tables        size  score    bytes-in  bytes-written\n")
	for l, lm := range m.Levels {
		fmt.Fprintf(&sb, "L%d    %7d %11d  %5.2f %11d %14d\n", l, lm.Tables, lm.Size, lm.Score, lm.BytesIn, lm.BytesWritten)
	}
	fmt.Fprintf(&sb, "memtables %d (%d bytes), WAL %d bytes in %d groups of %d batches, %d syncs\n",
		m.MemTables, m.MemTableBytes, m.WAL.BytesWritten, m.WAL.CommitGroups, m.WAL.Batches, m.WAL.Syncs)
	fmt.Fprintf(&sb, "flushes %d (%d bytes), compactions %d + %d moves (read %d, wrote %d), write amp %.2f\n",
		m.Flush.Count, m.Flush.BytesWritten, m.Compact.Count, m.Compact.Moves, m.Compact.BytesRead, m.Compact.BytesWritten, m.WriteAmp())
	fmt.Fprintf(&sb, "stalls %d (%s), slowdowns %d (%s), pending compaction %d bytes, base level L%d\n",
		m.WriteStalls.Count, m.WriteStalls.Duration, m.WriteSlowdowns.Count, m.WriteSlowdowns.Duration, m.PendingCompactionBytes, m.BaseLevel)
	fmt.Fprintf(&sb, "block cache %d bytes in %d blocks, %d hits, %d misses; table cache %d open\n",
		m.BlockCache.Size, m.BlockCache.Blocks, m.BlockCache.Hits, m.BlockCache.Misses, m.TableCache.Open)
	return sb.String()
}

// Resident reports, without I/O, whether the data block at offset in
// table fileNum is in the block cache.
func (d *DB) Resident(fileNum, offset uint64) bool { return d.bc.resident(fileNum, offset) }
