package lsm

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"
)

// compaction is a compaction the engine picked: its task, plus what the
// engine needs to install it.
type compaction struct {
	startLevel, outputLevel int
	inputs                  []CompactionInput
	rng                     keyRange
	move                    bool // a single table with nothing under it moves down unchanged
}

// maxBytes is the target size of a level L1+.
func (d *DB) maxBytes(level int) float64 {
	b := float64(d.opts.LBaseMaxBytes)
	for l := 1; l < level; l++ {
		b *= float64(d.opts.LevelMultiplier)
	}
	return b
}

// targetFileSize is the output table size for a level.
func (d *DB) targetFileSize(level int) uint64 {
	s := uint64(d.opts.TargetFileSize)
	for l := 1; l < level; l++ {
		s *= 2
	}
	return s
}

// pendingCompactionBytes estimates how far compaction is behind: the
// bytes by which levels L1-L5 exceed their targets.
func (d *DB) pendingCompactionBytes(v *Version) uint64 {
	var n uint64
	for l := 1; l < NumLevels-1; l++ {
		if s, m := v.levelSize(l), d.maxBytes(l); float64(s) > m {
			n += s - uint64(m)
		}
	}
	return n
}

// scoreLocked is a level's compaction score: L0's table count over its
// threshold, a lower level's size over its target. >= 1 needs compaction.
func (d *DB) scoreLocked(v *Version, level int) float64 {
	if level == 0 {
		return float64(len(v.Levels[0])) / float64(d.opts.L0CompactionThreshold)
	}
	return float64(v.levelSize(level)) / d.maxBytes(level)
}

func anyCompacting(fs []*FileMeta) bool {
	for _, f := range fs {
		if f.compacting {
			return true
		}
	}
	return false
}

func rangeOf(fs []*FileMeta) keyRange {
	var r keyRange
	for _, f := range fs {
		r = r.union(f.userRange())
	}
	return r
}

// pickCompactionLocked picks the level with the highest score >= 1 that
// has a compaction free of tables already compacting, and marks its
// inputs compacting.
func (d *DB) pickCompactionLocked() *compaction {
	v := d.current
	best, bestScore := -1, 1.0
	for level := 0; level < NumLevels-1; level++ {
		if s := d.scoreLocked(v, level); s >= bestScore {
			best, bestScore = level, s
		}
	}
	if best < 0 {
		return nil
	}
	if c := d.compactionForLevelLocked(v, best, nil); c != nil {
		return c
	}
	// The best level is busy: try any other that needs compaction.
	return d.anyOtherLocked(v, best)
}

func (d *DB) anyOtherLocked(v *Version, skip int) *compaction {
	for level := 0; level < NumLevels-1; level++ {
		if level == skip || d.scoreLocked(v, level) < 1 {
			continue
		}
		if c := d.compactionForLevelLocked(v, level, nil); c != nil {
			return c
		}
	}
	return nil
}

// compactionForLevelLocked builds a compaction out of level: all of L0, or
// one table of a lower level (the next after the level's compact pointer,
// round robin), plus the overlapping tables of the next level. With within
// set, only tables overlapping it are taken (manual compaction). It
// returns nil if the tables are busy or there is nothing to do.
func (d *DB) compactionForLevelLocked(v *Version, level int, within *keyRange) *compaction {
	var start []*FileMeta
	if level == 0 {
		// All of L0: its tables leave together, which keeps L0's
		// newest-first order a valid seq order for every key.
		start = v.Levels[0]
		if within != nil && len(v.overlaps(0, *within)) == 0 {
			return nil
		}
	} else {
		files := v.Levels[level]
		if within != nil {
			files = v.overlaps(level, *within)
			if len(files) > 0 && !anyCompacting(files) {
				start = files
			}
		} else {
			ptr := d.compactPtr[level]
			n := len(files)
			first := 0
			for first < n && ptr != nil && bytes.Compare(userKey(files[first].Smallest), ptr) <= 0 {
				first++
			}
			for k := 0; k < n; k++ {
				f := files[(first+k)%n]
				if f.compacting {
					continue
				}
				if anyCompacting(v.overlaps(level+1, f.userRange())) {
					continue
				}
				start = []*FileMeta{f}
				break
			}
		}
	}
	if len(start) == 0 || anyCompacting(start) {
		return nil
	}
	rng := rangeOf(start)
	out := v.overlaps(level+1, rng)
	if anyCompacting(out) {
		return nil
	}
	c := &compaction{startLevel: level, outputLevel: level + 1, rng: rng.union(rangeOf(out))}
	c.inputs = append(c.inputs, CompactionInput{Level: level, Files: start})
	if len(out) > 0 {
		c.inputs = append(c.inputs, CompactionInput{Level: level + 1, Files: out})
	}
	c.move = len(start) == 1 && len(out) == 0 && start[0].RangeDels == 0
	for _, in := range c.inputs {
		for _, f := range in.Files {
			f.compacting = true
		}
	}
	if level > 0 {
		d.compactPtr[level] = append([]byte(nil), userKey(start[len(start)-1].Largest)...)
	}
	return c
}

func (d *DB) releaseLocked(c *compaction) {
	for _, in := range c.inputs {
		for _, f := range in.Files {
			f.compacting = false
		}
	}
}

// runCompaction runs c and installs its result.
func (d *DB) runCompaction(ctx context.Context, c *compaction) error {
	start := time.Now()
	if c.move {
		f := c.inputs[0].Files[0]
		e := &VersionEdit{
			DeletedFiles: []DeletedFile{{Level: c.startLevel, FileNum: f.FileNum}},
			NewFiles:     []NewFile{{Level: c.outputLevel, Meta: f}},
		}
		return d.logAndApply(e, func() { d.m.moves++ })
	}
	d.mu.Lock()
	task := &CompactionTask{
		Inputs:         c.inputs,
		OutputLevel:    c.outputLevel,
		Snapshots:      d.snapshotListLocked(),
		DropDeletes:    true,
		TargetFileSize: d.targetFileSize(c.outputLevel),
		Table:          d.opts.Table,
	}
	for l := c.outputLevel + 1; l < NumLevels; l++ {
		if len(d.current.overlaps(l, c.rng)) > 0 {
			task.DropDeletes = false
		}
	}
	d.mu.Unlock()
	res, err := task.Run(ctx, d.taskEnv())
	if err == nil {
		err = d.fs.SyncDir(d.dir)
	}
	if err == nil {
		err = d.logAndApply(res.Edit, func() {
			d.m.compactions++
			d.m.compactRead += res.BytesRead
			d.m.compactWritten += res.BytesWritten
			d.m.levelIn[c.outputLevel] += res.BytesRead
			d.m.levelWritten[c.outputLevel] += res.BytesWritten
		})
	}
	if err != nil {
		if res != nil {
			for _, o := range res.Outputs {
				d.fs.Remove(d.path(tableFileName(o.FileNum)))
			}
		}
		return fmt.Errorf("lsm: compact L%d→L%d: %w", c.startLevel, c.outputLevel, err)
	}
	if d.log.Enabled(ctx, slog.LevelDebug) {
		d.log.Debug("compacted", "from", c.startLevel, "to", c.outputLevel, "inputs", fmt.Sprint(c.inputs),
			"outputs", fmt.Sprint(res.Outputs), "snapshots", fmt.Sprint(task.Snapshots), "dropDeletes", task.DropDeletes,
			"in", res.BytesRead, "out", res.BytesWritten, "took", time.Since(start))
	}
	return nil
}

// Compact flushes the memtable and compacts every level's tables that
// overlap [start, end] (user keys, inclusive) down into the next level,
// level by level, so that afterwards the range lives in one level.
// Automatic compactions wait while it runs.
func (d *DB) Compact(ctx context.Context, start, end []byte) error {
	if bytes.Compare(start, end) > 0 {
		return fmt.Errorf("lsm: compact: start %q > end %q", start, end)
	}
	if err := d.Flush(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	for d.manual || d.compactions > 0 {
		if d.closed {
			d.mu.Unlock()
			return ErrClosed
		}
		if err := d.waitLocked(ctx); err != nil {
			d.mu.Unlock()
			return err
		}
	}
	d.manual = true
	defer func() {
		d.mu.Lock()
		d.manual = false
		d.maybeScheduleLocked()
		d.notifyLocked()
		d.mu.Unlock()
	}()
	within := keyRange{start: start, end: end}
	last := 1
	for l := 0; l < NumLevels; l++ {
		if len(d.current.overlaps(l, within)) > 0 {
			last = max(last, l)
		}
	}
	d.mu.Unlock()
	// Compact each level above the range's lowest into the next, so the
	// range ends in one level (L1 at least).
	for level := 0; level < last; level++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		d.mu.Lock()
		if d.bgErr != nil {
			err := d.bgErr
			d.mu.Unlock()
			return err
		}
		c := d.compactionForLevelLocked(d.current, level, &within)
		d.mu.Unlock()
		if c == nil {
			continue
		}
		err := d.runCompaction(ctx, c)
		d.mu.Lock()
		d.releaseLocked(c)
		d.mu.Unlock()
		if err != nil {
			d.setBgErr(err)
			return err
		}
	}
	return nil
}
