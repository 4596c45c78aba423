package lsm

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
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

// levelTargets returns the base level (where L0 compacts to) and the
// target size of each level L1+, sized dynamically as Pebble does: the
// bottom level's target is the whole tree's size less a LevelMultiplier-th
// (so it exceeds the bottom's size while data sits above it), the base
// level is the deepest one at or above the first level holding data whose
// target, dividing the bottom's by LevelMultiplier per level, is at most
// LBaseMaxBytes, its target is LBaseMaxBytes, and the levels between grow
// by one smoothed multiplier, (bottom / LBaseMaxBytes)^(1/(6 − base)).
// Sizing from the whole tree rather than the largest level, and smoothing
// the ratio, keeps each level's ratio to the next at most
// LevelMultiplier and usually below it, which is what a byte merged down
// costs. Levels above the base have target 0: they should hold nothing.
// With nothing below L0 the base is L6, so early data is written once per
// level it actually needs.
func (d *DB) levelTargets(v *Version) (base int, targets [NumLevels]float64) {
	first := -1
	var below uint64
	for l := 1; l < NumLevels; l++ {
		if s := v.levelSize(l); s > 0 {
			if first < 0 {
				first = l
			}
			below += s
		}
	}
	if first < 0 {
		base = NumLevels - 1
		targets[base] = 1
		return base, targets
	}
	total := float64(below + v.levelSize(0))
	mult := float64(d.opts.LevelMultiplier)
	bottom := total - total/mult
	cur := bottom
	for l := NumLevels - 2; l >= first; l-- {
		cur /= mult
	}
	lbase := float64(d.opts.LBaseMaxBytes)
	base = first
	for base > 1 && cur > lbase {
		base--
		cur /= mult
	}
	smoothed := 1.0
	if base < NumLevels-1 {
		smoothed = math.Pow(bottom/lbase, 1/float64(NumLevels-1-base))
	}
	size := lbase
	for l := base; l < NumLevels; l++ {
		if l > base {
			size *= smoothed
		}
		targets[l] = max(size, 1)
	}
	return base, targets
}

// l0OutputLevel is where L0 compacts to: the base level, unless a level
// above it holds data in rng (after the base moved down), in which case
// the first such level, so newer data never lands below older.
func (d *DB) l0OutputLevel(v *Version, rng keyRange) int {
	base, _ := d.levelTargets(v)
	for l := 1; l < base; l++ {
		if len(v.overlaps(l, rng)) > 0 {
			return l
		}
	}
	return base
}

// targetFileSize is the output table size for a level: TargetFileSize at
// the base level, doubling with each level below it (as Pebble, relative
// to the base level, so a shallow tree's bottom is not cut into tables
// that overlap everything above them).
func (d *DB) targetFileSize(v *Version, level int) uint64 {
	base, _ := d.levelTargets(v)
	s := uint64(d.opts.TargetFileSize)
	for l := base; l < level; l++ {
		s *= 2
	}
	return s
}

// pendingCompactionBytes estimates how far compaction is behind: the
// bytes by which levels L1-L5 exceed their targets.
func (d *DB) pendingCompactionBytes(v *Version) uint64 {
	_, targets := d.levelTargets(v)
	var n uint64
	for l := 1; l < NumLevels-1; l++ {
		if s, m := v.levelSize(l), targets[l]; float64(s) > m {
			n += s - uint64(m)
		}
	}
	return n
}

// fillLocked is a level's fill factor: L0's table count over its
// threshold, a lower level's size over its target (see levelTargets).
func (d *DB) fillLocked(v *Version, level int) float64 {
	if level == 0 {
		return float64(len(v.Levels[0])) / float64(d.opts.L0CompactionThreshold)
	}
	_, targets := d.levelTargets(v)
	size := float64(v.levelSize(level))
	if targets[level] == 0 {
		if size == 0 {
			return 0
		}
		return 1000 + size // data above the base level goes down first
	}
	return size / targets[level]
}

// scoreLocked is a level's compaction score; >= 1 needs compaction. A
// level is due when its fill factor is at least 1, and its score is its
// fill factor divided by that of the level it compacts into (floored at
// 0.01), as Pebble scores: a level is not compacted into one that is
// fuller still, relative to its target, so the lower level is compacted
// first and the upper one keeps gathering data. Pushing data into an
// overfull level only makes it rewrite more later; letting it gather
// means each byte is merged into the level below in bigger batches,
// which lowers write amplification (with random keys, every L0→Lbase
// compaction rewrites all of Lbase). L0 at L0SlowdownWritesThreshold
// tables or more, or at twice L0CompactionThreshold, keeps its plain fill
// factor, so the adjustment never holds writers back.
func (d *DB) scoreLocked(v *Version, level int) float64 {
	fill := d.fillLocked(v, level)
	if fill < 1 || level == NumLevels-1 {
		return fill
	}
	base, targets := d.levelTargets(v)
	if level > 0 && targets[level] == 0 {
		return fill // above the base level: down first, whatever is below
	}
	if level == 0 && len(v.Levels[0]) >= min(d.opts.L0SlowdownWritesThreshold, 2*d.opts.L0CompactionThreshold) {
		return fill
	}
	next := level + 1
	if level == 0 {
		next = base
	}
	return fill / max(0.01, d.fillLocked(v, next))
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
// one table of a lower level (the one with the least overlap for its
// size), plus the overlapping tables of the output level. With within
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
			// The table whose overlap with the next level is smallest
			// for its size (RocksDB's kMinOverlappingRatio, Pebble's
			// default): it moves the most bytes down per byte
			// rewritten. L1+ compact to the next level.
			best := -1.0
			for _, f := range files {
				if f.compacting {
					continue
				}
				next := v.overlaps(level+1, f.userRange())
				if anyCompacting(next) {
					continue
				}
				var over uint64
				for _, g := range next {
					over += g.Size
				}
				ratio := float64(over) / float64(max(f.Size, 1))
				if best < 0 || ratio < best {
					best, start = ratio, []*FileMeta{f}
				}
			}
		}
	}
	if len(start) == 0 || anyCompacting(start) {
		return nil
	}
	rng := rangeOf(start)
	outLevel := level + 1
	if level == 0 {
		outLevel = d.l0OutputLevel(v, rng)
	}
	out := v.overlaps(outLevel, rng)
	if anyCompacting(out) {
		return nil
	}
	c := &compaction{startLevel: level, outputLevel: outLevel, rng: rng.union(rangeOf(out))}
	c.inputs = append(c.inputs, CompactionInput{Level: level, Files: start})
	if len(out) > 0 {
		c.inputs = append(c.inputs, CompactionInput{Level: outLevel, Files: out})
	}
	c.move = len(start) == 1 && len(out) == 0 && start[0].RangeDels == 0
	for _, in := range c.inputs {
		for _, f := range in.Files {
			f.compacting = true
		}
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
		TargetFileSize: d.targetFileSize(d.current, c.outputLevel),
		Table:          d.opts.Table,
	}
	for l := c.outputLevel + 1; l < NumLevels; l++ {
		if len(d.current.overlaps(l, c.rng)) > 0 {
			task.DropDeletes = false
		}
	}
	d.mu.Unlock()
	res, err := d.runCompactionTask(ctx, task)
	took := time.Since(start)
	if err == nil {
		err = d.fs.SyncDir(d.dir)
	}
	if err == nil {
		err = d.logAndApply(res.Edit, func() {
			d.m.compactions++
			d.m.compactDur += took
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
