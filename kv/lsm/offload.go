package lsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/vfs"
)

// Compaction offload (docs/LSM.md, "Offloaded compaction"), OffloadDB's
// first change: the host picks a compaction as always, and with
// OffloadOptions.Compaction sends it as the task CompactTaskName through
// the file system's task offload (offloadfs.FS.Offload), which grants the
// input tables to the engine, reserves and grants the outputs, and on
// success gives the outputs their names and commits them. The rules:
//
//  1. The outputs are tables with fresh file numbers, reserved large
//     enough that the engine's cut (CompactArgs) fits them: a task that
//     would overflow one fails, and nothing of it is visible.
//  2. The host's MANIFEST edit is the commit point, as for a local
//     compaction: a crash before it leaves the outputs as tables no
//     version holds, which the next Open removes; after it the inputs
//     are obsolete and deleted.
//  3. The engine's result is checked before it is logged: every new
//     table is one of the outputs, at the output level, with the size the
//     file system committed. A task the engine turns away (admission
//     control), fails, or answers wrongly runs on the host at once.
//  4. Reads never wait for it: the inputs stay in the version, readable,
//     until the edit installs the outputs.

// OffloadOptions turn on OffloadDB's changes, each on its own.
type OffloadOptions struct {
	// FS is the file system the store's files are on (its VFS is the
	// store's vfs.FS), mounted read-write with a Remote: it reserves and
	// grants the tasks' files. *offloadfs.FS is one.
	FS TaskOffloader
	// Peer is the engine that runs the tasks (an *offload.Client: the
	// storage node's engine or a peer's).
	Peer offloadfs.Peer
	// Compaction sends compactions to Peer.
	Compaction bool
	// Recycle sends flushes to Peer as the WAL offsets of the memtable's
	// entries (recycle.go).
	Recycle bool
	// L0CacheBytes, if positive, keeps flushed memtables up to this many
	// bytes in memory, answering Gets in their L0 tables' place until
	// the tables leave L0 (l0cache.go).
	L0CacheBytes int64
}

// TaskOffloader runs a registered task on a peer over files, as
// offloadfs.FS.Offload does: outputs are visible under their names only
// if it returns no error.
type TaskOffloader interface {
	Offload(ctx context.Context, peer offloadfs.Peer, task string, files []offloadfs.OffloadFile, args []byte) (*offloadfs.OffloadResult, error)
}

// OffloadMetrics count what the offload paths did.
type OffloadMetrics struct {
	// Compactions ran at the engine; LocalCompactions ran on this host
	// after the engine turned them away (Rejected of them) or failed.
	Compactions, LocalCompactions, Rejected uint64
	// BytesRead and BytesWritten are the offloaded compactions' input
	// and output bytes: what did not cross the network.
	BytesRead, BytesWritten uint64
	// Flushes wrote their L0 table at the engine from the WAL;
	// LocalFlushes were written here after the engine did not.
	Flushes, LocalFlushes uint64
	// L0CacheHits are Gets a cached memtable answered in its table's
	// place; L0CacheFull the flushes that did not fit the cache (ordinary
	// flushes); L0CacheTables and L0CacheBytes what it holds now.
	L0CacheHits, L0CacheFull uint64
	L0CacheTables            int
	L0CacheBytes             int64
}

// offloadCounters are OffloadMetrics' running totals.
type offloadCounters struct {
	compactions, local, rejected atomic.Uint64
	bytesRead, bytesWritten      atomic.Uint64
	flushes, localFlushes        atomic.Uint64
	l0CacheHits, l0CacheFull     atomic.Uint64
}

// OffloadMetrics returns the offload counters.
func (d *DB) OffloadMetrics() OffloadMetrics {
	c := &d.offloadCtr
	d.mu.Lock()
	tables, bytes := len(d.l0cache), d.l0cacheBytes
	d.mu.Unlock()
	return OffloadMetrics{
		L0CacheHits: c.l0CacheHits.Load(), L0CacheFull: c.l0CacheFull.Load(), L0CacheTables: tables, L0CacheBytes: bytes,
		Compactions: c.compactions.Load(), LocalCompactions: c.local.Load(), Rejected: c.rejected.Load(),
		BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(),
		Flushes: c.flushes.Load(), LocalFlushes: c.localFlushes.Load(),
	}
}

// checkOffload checks Options.Offload at Open.
func checkOffload(o *OffloadOptions) error {
	if o == nil || !(o.Compaction || o.Recycle) {
		return nil // the L0 cache needs no engine
	}
	if o.FS == nil || o.Peer == nil {
		return errors.New("lsm: open: Options.Offload needs an FS and a Peer")
	}
	return nil
}

// runCompactionTask runs task at the engine when compaction offload is
// on, and on this host otherwise or when the engine does not (rule 3).
func (d *DB) runCompactionTask(ctx context.Context, task *CompactionTask) (*CompactionResult, error) {
	if o := d.opts.Offload; o != nil && o.Compaction {
		res, err := d.offloadCompaction(ctx, task)
		if err == nil {
			return res, nil
		}
		d.offloadCtr.local.Add(1)
		if errors.Is(err, offload.ErrRejected) {
			d.offloadCtr.rejected.Add(1)
			d.log.Debug("offloaded compaction turned away; compacting here", "err", err)
		} else {
			d.log.Warn("offloaded compaction failed; compacting here", "err", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return task.Run(ctx, d.taskEnv())
}

// errTooWide: a compaction with more input tables than a task's files
// leaves room for runs on the host.
var errTooWide = errors.New("lsm: too many input tables for one offloaded task")

// outputPlan returns where an offloaded compaction of total input bytes
// cuts its outputs and how many it reserves, given the level's target
// size and the files left for outputs: the target's cut when that fits,
// else a larger one. Every output but the last holds at least cut bytes
// of blocks, which the inputs' blocks bound, so n outputs always suffice.
func outputPlan(total, target uint64, slots int) (cut uint64, n int) {
	if target > 0 {
		if need := (total+target-1)/target + 1; need <= uint64(slots) {
			return target, int(need)
		}
	}
	if slots < 2 {
		return 0, 1
	}
	return max((total+uint64(slots)-2)/uint64(slots-1), 1), slots
}

// outputReserve is the space reserved for an output cut at cut bytes:
// the cut, plus the last key's entries, index, filter and footer.
func outputReserve(cut, total uint64) int64 {
	if cut == 0 {
		cut = total
	}
	return int64(cut + cut/8 + 1<<20)
}

// offloadCompaction runs task at the engine (rules 1 and 3); the caller
// logs the edit (rule 2).
func (d *DB) offloadCompaction(ctx context.Context, task *CompactionTask) (*CompactionResult, error) {
	o := d.opts.Offload
	var files []offloadfs.OffloadFile
	defer func() {
		for _, f := range files {
			if f.In != nil {
				f.In.Close()
			}
		}
	}()
	var total uint64
	for _, in := range task.Inputs {
		for _, fm := range in.Files {
			if len(files) >= pushdown.MaxFiles-1 {
				return nil, errTooWide
			}
			f, err := d.fs.Open(d.path(tableFileName(fm.FileNum)))
			if err != nil {
				return nil, err
			}
			of, ok := f.(*offloadfs.File)
			if !ok {
				f.Close()
				return nil, fmt.Errorf("lsm: table %06d is not on offloadfs", fm.FileNum)
			}
			files = append(files, offloadfs.OffloadFile{In: of})
			total += fm.Size
		}
	}
	nIn := len(files)
	cut, nOut := outputPlan(total, task.TargetFileSize, pushdown.MaxFiles-nIn)
	reserve := outputReserve(cut, total)
	args := CompactArgs{Task: *task}
	args.Task.TargetFileSize = cut
	d.mu.Lock()
	for range nOut {
		args.Outputs = append(args.Outputs, d.nextFileNum)
		d.nextFileNum++
	}
	d.mu.Unlock()
	for _, num := range args.Outputs {
		files = append(files, offloadfs.OffloadFile{Out: d.path(tableFileName(num)), Reserve: reserve})
	}
	res, err := o.FS.Offload(ctx, o.Peer, CompactTaskName, files, args.Encode(nil))
	if err != nil {
		return nil, err
	}
	// The outputs have their names now; the ones not in the result, and
	// all of them if the result is wrong, are removed.
	kept := map[uint64]bool{}
	removeRest := func() {
		for _, num := range args.Outputs {
			if !kept[num] {
				d.fs.Remove(d.path(tableFileName(num)))
			}
		}
	}
	cr, err := d.checkCompactResult(task, &args, res, nIn)
	if err != nil {
		removeRest()
		return nil, err
	}
	for _, m := range cr.Outputs {
		kept[m.FileNum] = true
	}
	removeRest()
	if res.Local {
		d.offloadCtr.local.Add(1)
	} else {
		d.offloadCtr.compactions.Add(1)
		d.offloadCtr.bytesRead.Add(cr.BytesRead)
		d.offloadCtr.bytesWritten.Add(cr.BytesWritten)
	}
	return cr, nil
}

// checkCompactResult checks an engine's answer (rule 3) and makes it the
// compaction's result.
func (d *DB) checkCompactResult(task *CompactionTask, args *CompactArgs, res *offloadfs.OffloadResult, nIn int) (*CompactionResult, error) {
	e, err := DecodeVersionEdit(res.Output)
	if err != nil {
		return nil, fmt.Errorf("lsm: offloaded compaction's result: %w", err)
	}
	if e.LogNumber != 0 || e.NextFileNum != 0 || e.LastSeq != 0 || len(e.DeletedFiles) != 0 {
		return nil, errors.New("lsm: offloaded compaction's result changes more than its outputs")
	}
	cr := &CompactionResult{Edit: &VersionEdit{}}
	for _, in := range task.Inputs {
		for _, fm := range in.Files {
			cr.Edit.DeletedFiles = append(cr.Edit.DeletedFiles, DeletedFile{Level: in.Level, FileNum: fm.FileNum})
			cr.BytesRead += fm.Size
		}
	}
	prev := -1
	for _, nf := range e.NewFiles {
		i := slices.Index(args.Outputs, nf.Meta.FileNum)
		switch {
		case nf.Level != task.OutputLevel:
			return nil, fmt.Errorf("lsm: offloaded compaction's table %06d at L%d, want L%d", nf.Meta.FileNum, nf.Level, task.OutputLevel)
		case i <= prev:
			return nil, fmt.Errorf("lsm: offloaded compaction's table %06d is not a next output", nf.Meta.FileNum)
		case nf.Meta.Size == 0 || uint64(res.Sizes[nIn+i]) != nf.Meta.Size:
			return nil, fmt.Errorf("lsm: offloaded compaction's table %06d: %d bytes, the file has %d", nf.Meta.FileNum, nf.Meta.Size, res.Sizes[nIn+i])
		}
		prev = i
		cr.Outputs = append(cr.Outputs, nf.Meta)
		cr.BytesWritten += nf.Meta.Size
		cr.Edit.NewFiles = append(cr.Edit.NewFiles, nf)
	}
	return cr, nil
}

// TaskFiles adapts an offloaded compaction's files, as a task's
// environment reaches them, to a TaskEnv: inputs are opened by file
// number, outputs created in CompactArgs.Outputs' order.
type TaskFiles struct {
	// Open returns file i of the request (inputs first) as a vfs.File.
	Open func(i int) vfs.File
	args *CompactArgs
	next int
}

// NewTaskFiles returns the TaskEnv of a compaction with args, its files
// opened by open.
func NewTaskFiles(args *CompactArgs, open func(i int) vfs.File) *TaskFiles {
	return &TaskFiles{Open: open, args: args}
}

// OpenTable implements TaskEnv.
func (t *TaskFiles) OpenTable(fileNum, size uint64) (vfs.File, error) {
	i := 0
	for _, in := range t.args.Task.Inputs {
		for _, fm := range in.Files {
			if fm.FileNum == fileNum {
				return t.Open(i), nil
			}
			i++
		}
	}
	return nil, fmt.Errorf("lsm: table %06d is not an input", fileNum)
}

// CreateTable implements TaskEnv: the next output.
func (t *TaskFiles) CreateTable() (uint64, vfs.File, error) {
	if t.next >= len(t.args.Outputs) {
		return 0, nil, fmt.Errorf("lsm: the compaction needs more than its %d outputs", len(t.args.Outputs))
	}
	i := t.next
	t.next++
	return t.args.Outputs[i], t.Open(t.args.NumInputs() + i), nil
}
