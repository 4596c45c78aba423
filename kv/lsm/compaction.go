package lsm

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/nearstore/nearstore/vfs"
)

// CompactionInput is one level's input tables to a compaction.
type CompactionInput struct {
	Level int
	Files []*FileMeta
}

// A CompactionTask merges input tables into new tables of OutputLevel. It
// is self-contained: everything it needs is in the struct and the TaskEnv
// it runs against, so it can run outside the engine's process — on the
// storage node or a peer, given read access to the input files and space
// for the outputs — and hand back a result the engine installs with
// LogAndApply-style version edits.
//
// Semantics: the outputs hold, for every user key, the entries a reader at
// any of Snapshots (or at the latest state) could see, given that nothing
// outside the inputs in levels <= OutputLevel overlaps the inputs' range.
// Entries shadowed by a newer entry or range tombstone in the same snapshot
// stripe are dropped; with DropDeletes (no table below OutputLevel
// overlaps the range), tombstones that shadow nothing a snapshot needs are
// dropped too.
type CompactionTask struct {
	// Inputs, in level order (L0 tables newest first).
	Inputs      []CompactionInput
	OutputLevel int
	// Snapshots are the open snapshots' sequence numbers, ascending.
	Snapshots []SeqNum
	// DropDeletes: no table below OutputLevel overlaps the inputs.
	DropDeletes bool
	// TargetFileSize is the size at which an output table is cut (at a
	// user-key boundary); 0: one output.
	TargetFileSize uint64
	Table          TableOptions
}

// TaskEnv is where a task reads its inputs and writes its outputs.
type TaskEnv interface {
	// OpenTable opens input table fileNum (of the given size) for
	// reading.
	OpenTable(fileNum, size uint64) (vfs.File, error)
	// CreateTable makes a new, empty output table and returns its
	// number. The task writes, syncs and closes it; making its directory
	// entry durable is the caller's business.
	CreateTable() (fileNum uint64, f vfs.File, err error)
}

// CompactionResult is what a task produced.
type CompactionResult struct {
	// Edit removes the inputs and adds the outputs.
	Edit         *VersionEdit
	Outputs      []*FileMeta
	BytesRead    uint64
	BytesWritten uint64
}

// Run executes the task. On error, any outputs already created are listed
// in the returned result (Outputs) so the caller can remove them.
func (t *CompactionTask) Run(ctx context.Context, env TaskEnv) (*CompactionResult, error) {
	res := &CompactionResult{Edit: &VersionEdit{}}
	var iters []internalIterator
	var tombs []tombstone
	var files []vfs.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, in := range t.Inputs {
		for _, fm := range in.Files {
			res.Edit.DeletedFiles = append(res.Edit.DeletedFiles, DeletedFile{Level: in.Level, FileNum: fm.FileNum})
			res.BytesRead += fm.Size
			f, err := env.OpenTable(fm.FileNum, fm.Size)
			if err != nil {
				return res, fmt.Errorf("lsm: compaction input %06d: %w", fm.FileNum, err)
			}
			files = append(files, f)
			r, err := openTable(f, tableFileName(fm.FileNum), fm.FileNum, int64(fm.Size), nil)
			if err != nil {
				return res, err
			}
			iters = append(iters, r.newIter())
			tombs = append(tombs, r.tombs...)
		}
	}
	it := newMergingIter(iters)
	p := outputParams{
		level:       t.OutputLevel,
		snapshots:   t.Snapshots,
		dropDeletes: t.DropDeletes,
		targetSize:  t.TargetFileSize,
		table:       t.Table,
	}
	outs, written, err := writeOutputs(ctx, it, tombs, p, env.CreateTable)
	res.Outputs = outs
	res.BytesWritten = written
	if err != nil {
		return res, err
	}
	for _, o := range outs {
		res.Edit.NewFiles = append(res.Edit.NewFiles, NewFile{Level: t.OutputLevel, Meta: o})
	}
	return res, nil
}

// outputParams say how writeOutputs filters and cuts.
type outputParams struct {
	level       int
	snapshots   []SeqNum
	dropDeletes bool
	targetSize  uint64
	table       TableOptions
}

// stripe returns the snapshot stripe of seq: the index of the smallest
// snapshot that sees it (len(snapshots) if none does).
func stripe(snaps []SeqNum, seq SeqNum) int {
	return sort.Search(len(snaps), func(i int) bool { return snaps[i] >= seq })
}

// covered reports whether a tombstone in frags with a higher seq in the
// same snapshot stripe covers (k, seq). Stripes rise with seq, so it is
// enough to look at the lowest covering seq above seq.
func covered(frags []fragment, snaps []SeqNum, k []byte, seq SeqNum) bool {
	f := findFragment(frags, k)
	if f == nil {
		return false
	}
	// f.seqs is descending: find the last one > seq.
	i := sort.Search(len(f.seqs), func(i int) bool { return f.seqs[i] <= seq })
	if i == 0 {
		return false
	}
	return stripe(snaps, f.seqs[i-1]) == stripe(snaps, seq)
}

type kv struct {
	key, value []byte
}

// writeOutputs writes the entries of it (positioned nowhere; read
// forward from First) and tombs into tables made by create, filtering as
// p says. Point tombstones and range tombstones survive unless p allows
// dropping them. It returns the outputs made (also on error) and the
// bytes written.
func writeOutputs(ctx context.Context, it internalIterator, tombs []tombstone, p outputParams,
	create func() (uint64, vfs.File, error)) (outs []*FileMeta, written uint64, err error) {
	defer func() {
		if cerr := it.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	snaps := p.snapshots
	frags := fragmentTombstones(tombs)
	// Range tombstones that survive, sorted by start.
	var pending []tombstone
	for _, t := range tombs {
		if p.dropDeletes && (len(snaps) == 0 || snaps[0] >= t.seq) {
			continue
		}
		pending = append(pending, t)
	}
	slices.SortFunc(pending, func(a, b tombstone) int { return bytes.Compare(a.start, b.start) })

	var (
		w      *tableWriter
		f      vfs.File
		num    uint64
		closed bool
	)
	open := func() error {
		var err error
		num, f, err = create()
		if err != nil {
			return err
		}
		closed = false
		outs = append(outs, &FileMeta{FileNum: num})
		w = newTableWriter(f, p.table)
		return nil
	}
	// finish closes the current output, giving it the pending tombstones
	// that start before split (truncated at split), or all if split is nil.
	finish := func(split []byte) error {
		if w == nil {
			if err := open(); err != nil {
				return err
			}
		}
		rest := pending[:0:0]
		for _, t := range pending {
			if split == nil || bytes.Compare(t.start, split) < 0 {
				c := t
				if split != nil && bytes.Compare(c.end, split) > 0 {
					c.end = split
					rest = append(rest, tombstone{start: split, end: t.end, seq: t.seq})
				}
				w.addTombstone(c)
			} else {
				rest = append(rest, t)
			}
		}
		pending = rest
		info, err := w.finish()
		closed = true
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		m := outs[len(outs)-1]
		m.Size, m.Smallest, m.Largest = info.Size, info.Smallest, info.Largest
		m.SmallestSeq, m.LargestSeq = info.Props.SmallestSeq, info.Props.LargestSeq
		m.RangeDels = info.Props.NumRangeDeletions
		written += info.Size
		w = nil
		return nil
	}
	defer func() {
		if w != nil && !closed {
			f.Close()
		}
	}()

	var (
		cur     []byte // current user key
		kept    []kv
		lastStr int
		hasCur  bool
		n       int
		keyBufs [][]byte
	)
	flushKey := func() error {
		if p.dropDeletes {
			for len(kept) > 0 && keyKind(kept[len(kept)-1].key) == KindDelete {
				kept = kept[:len(kept)-1]
			}
		}
		for _, e := range kept {
			if w == nil {
				if err := open(); err != nil {
					return err
				}
			}
			if err := w.add(e.key, e.value); err != nil {
				return err
			}
		}
		kept = kept[:0]
		keyBufs = keyBufs[:0]
		return nil
	}
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return outs, written, err
			}
		}
		k := it.Key()
		uk := userKey(k)
		seq := keySeq(k)
		if !hasCur || !bytes.Equal(uk, cur) {
			if err := flushKey(); err != nil {
				return outs, written, err
			}
			if w != nil && p.targetSize > 0 && w.off+uint64(w.data.estimatedSize()) >= p.targetSize {
				// uk aliases the iterator's buffer; remainders keep it.
				if err := finish(slices.Clone(uk)); err != nil {
					return outs, written, err
				}
			}
			cur = append(cur[:0], uk...)
			hasCur = true
			lastStr = -1
		}
		st := stripe(snaps, seq)
		if st == lastStr {
			continue // shadowed by a newer entry the same readers see
		}
		lastStr = st
		if covered(frags, snaps, uk, seq) {
			continue
		}
		kept = append(kept, kv{key: slices.Clone(k), value: it.Value()})
	}
	if err := it.Error(); err != nil {
		return outs, written, err
	}
	if err := flushKey(); err != nil {
		return outs, written, err
	}
	if w != nil || len(pending) > 0 {
		if err := finish(nil); err != nil {
			return outs, written, err
		}
	}
	return outs, written, nil
}
