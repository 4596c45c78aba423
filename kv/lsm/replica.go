package lsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
)

// errFlushesDisabled is Flush's answer on a store opened with
// DisableFlushes, which would otherwise wait for a flush that never runs.
var errFlushesDisabled = errors.New("lsm: flush: the store runs with DisableFlushes (a replica: its primary flushes)")

// This file holds what a replica of a primary store needs (kv/rubble): a
// store opened with Options.DisableFlushes and DisableAutomaticCompactions
// takes the primary's writes at the primary's sequence numbers (ApplyAt)
// and installs the tables the primary's flushes and compactions produce
// (InstallEdit), so its tree holds the same data as the primary's without
// flushing or compacting anything itself.

// ApplyAt commits b with the sequence numbers seq, seq+1, … (one per
// entry), as a replica applies a primary's write: tables the primary
// ships carry the primary's numbers, and a key's versions in the
// replica's memtables and in those tables must order alike. seq must be
// above every number the store has assigned; gaps are allowed (a write
// the primary logged but this replica never saw cannot be in its tree).
// The caller serializes ApplyAt calls in the primary's order.
func (d *DB) ApplyAt(ctx context.Context, b *Batch, seq SeqNum, o *WriteOptions) error {
	if d.opts.ReadOnly {
		return ErrReadOnly
	}
	if seq == 0 {
		return fmt.Errorf("lsm: apply at seq 0: numbers start at 1")
	}
	if last := d.logSeq.Load(); seq <= last {
		return fmt.Errorf("lsm: apply at seq %d: the store is at %d", seq, last)
	}
	_, ents, err := decodeBatch(b.Repr())
	if err != nil {
		return fmt.Errorf("lsm: apply: %w", err)
	}
	req := &commitReq{b: b, ents: ents, size: batchMemSize(ents), sync: o != nil && o.Sync, at: seq,
		done: make(chan error, 1), apply: make(chan *memTable, 1)}
	if err := d.waitForRoom(ctx); err != nil {
		return err
	}
	return d.commit(req)
}

// LastSeq is the highest sequence number the store has assigned.
func (d *DB) LastSeq() SeqNum { return d.logSeq.Load() }

// InstallEdit installs e, a version edit another store (the primary) made
// by a flush or compaction, whose new tables are already readable at this
// store's table paths (a replica's file system maps them to the slots the
// primary wrote them into). Tables e deletes are removed through the
// file system once no version holds them, as this store's own are.
//
// Rules: every new table must open, and every write a new table holds
// must already be applied here (ApplyAt), or InstallEdit fails and
// installs nothing: a replica applies an edit only once it has every
// write the edit covers. The memtables whose every entry is then in
// tables are dropped, with their WALs.
// Calls must not run concurrently (a replica applies edits in one order)
// nor with Flush; a replica runs with DisableFlushes, so nothing else
// drops memtables.
func (d *DB) InstallEdit(ctx context.Context, e *VersionEdit) error {
	if d.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var covered SeqNum
	for _, nf := range e.NewFiles {
		covered = max(covered, nf.Meta.LargestSeq)
	}
	if last := d.logSeq.Load(); covered > last {
		return fmt.Errorf("lsm: install edit: its tables hold writes up to seq %d, this store has applied only up to %d", covered, last)
	}
	own := &VersionEdit{DeletedFiles: e.DeletedFiles, NewFiles: make([]NewFile, len(e.NewFiles))}
	moves := Moved(e)
	held := map[uint64]*FileMeta{}
	d.mu.Lock()
	for _, fs := range d.current.Levels {
		for _, f := range fs {
			held[f.FileNum] = f
		}
	}
	d.mu.Unlock()
	var fresh []NewFile
	for i, nf := range e.NewFiles {
		if f, ok := held[nf.Meta.FileNum]; ok && moves[nf.Meta.FileNum] {
			// A move keeps the table's meta, as the primary's does, so
			// its references carry over and the table is not removed.
			own.NewFiles[i] = NewFile{Level: nf.Level, Meta: f}
			continue
		}
		f := nf.Meta // a fresh meta (refs, compacting): it is ours now
		own.NewFiles[i] = NewFile{Level: nf.Level, Meta: &FileMeta{FileNum: f.FileNum, Size: f.Size,
			Smallest: f.Smallest, Largest: f.Largest, SmallestSeq: f.SmallestSeq, LargestSeq: f.LargestSeq, RangeDels: f.RangeDels}}
		fresh = append(fresh, own.NewFiles[i])
	}
	// Every new table must open (footer, index, filter) before the edit
	// goes in: a table the primary failed to write is refused here, not
	// found by a read later.
	for _, nf := range fresh {
		h, err := d.tc.get(nf.Meta.FileNum, nf.Meta.Size)
		if err != nil {
			d.tc.evict(nf.Meta.FileNum)
			return fmt.Errorf("lsm: install edit: %w", err)
		}
		h.release()
	}
	// The memtables to drop are the oldest immutable ones wholly at or
	// below covered. imm changes meanwhile only by rotation, which
	// appends, so the count stays right until the install.
	d.mu.Lock()
	drop := 0
	for _, m := range d.imm {
		if memMaxSeq(m) > covered {
			break
		}
		drop++
	}
	if drop > 0 {
		if drop < len(d.imm) {
			own.LogNumber = d.imm[drop].logNum
		} else {
			own.LogNumber = d.mem.logNum
		}
	}
	for _, nf := range fresh {
		// Numbers this store gives its own files later (a replica that
		// starts to flush and compact, SetReplica) stay clear of the
		// primary's tables.
		d.nextFileNum = max(d.nextFileNum, nf.Meta.FileNum+1)
	}
	d.mu.Unlock()
	err := d.logAndApply(own, func() {
		d.imm = d.imm[drop:]
		if drop > 0 {
			d.notifyLocked() // writers stalled on memtables may go on
		}
	})
	if err != nil {
		return err
	}
	if own.LogNumber != 0 {
		d.removeLogsBelow(own.LogNumber)
	}
	return nil
}

// memMaxSeq is the highest sequence number in m (0 if empty). It reads
// the skiplists, which take concurrent readers.
func memMaxSeq(m *memTable) SeqNum {
	var hi SeqNum
	for _, it := range []*skiplistIter{m.newIter(), {s: m.rangeDels}} {
		for ok := it.First(); ok; ok = it.Next() {
			hi = max(hi, keySeq(it.Key()))
		}
	}
	return hi
}

// removeLogsBelow removes the WALs numbered below n: they hold nothing
// that is not in tables. Errors are ignored: a leftover WAL is replayed
// harmlessly (its entries are in tables already) and removed later.
func (d *DB) removeLogsBelow(n uint64) {
	names, err := d.fs.List(d.dir)
	if err != nil {
		return
	}
	for _, nm := range names {
		if k, num, ok := parseFileName(nm); ok && k == "log" && num < n {
			d.fs.Remove(d.path(nm))
		}
	}
}

// Seq is the sequence number of the batch's first entry, assigned when it
// was committed (0 before): what a primary sends with the batch so that
// its replicas apply it at the same numbers (ApplyAt).
func (b *Batch) Seq() SeqNum {
	if len(b.data) < batchHeaderLen {
		return 0
	}
	return b.seq()
}

// BatchFromRepr makes a batch from a copy of repr (a Batch.Repr, e.g.
// received from a primary), after checking that it decodes.
func BatchFromRepr(repr []byte) (*Batch, error) {
	_, ents, err := decodeBatch(repr)
	if err != nil {
		return nil, fmt.Errorf("lsm: batch: %w", err)
	}
	return &Batch{data: append([]byte(nil), repr...), count: uint32(len(ents))}, nil
}

// beforeLog runs Options.BeforeEdit on e; a failure is sticky, as a
// failed MANIFEST write is, since the edit's outputs are then lost to
// the replicas. Caller holds manifestMu.
func (d *DB) beforeLog(e *VersionEdit) error {
	if d.opts.BeforeEdit == nil {
		return nil
	}
	if err := d.opts.BeforeEdit(e); err != nil {
		err = fmt.Errorf("lsm: before edit: %w", err)
		d.setBgErr(err)
		return err
	}
	return nil
}

// TablePath is where the store keeps table fileNum on its file system.
func (d *DB) TablePath(fileNum uint64) string { return d.path(tableFileName(fileNum)) }

// TableName is the name of table fileNum in a store's directory.
func TableName(fileNum uint64) string { return tableFileName(fileNum) }

// SetReplica switches the store at run time between a replica (replica
// true: as Options.DisableFlushes and DisableAutomaticCompactions, its
// tables installed by InstallEdit) and a store that flushes and compacts
// itself (a RubbleDB primary, or a replica fallen back to compacting
// locally), with beforeEdit as Options.BeforeEdit from the next edit on.
// It waits for an edit in progress to be logged (its BeforeEdit to
// return). A store leaving the replica role flushes the memtables it
// kept at once; one entering it lets a running flush or compaction
// finish, and InstallEdit must then wait for them (Metrics shows none in
// progress) since it may not run beside a flush.
func (d *DB) SetReplica(replica bool, beforeEdit func(e *VersionEdit) error) {
	d.manifestMu.Lock()
	defer d.manifestMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.opts.DisableFlushes, d.opts.DisableAutomaticCompactions = replica, replica
	d.opts.BeforeEdit = beforeEdit
	d.maybeScheduleLocked()
	d.notifyLocked()
}

// Fingerprint hashes the current version's tables (each one's level and
// number, level by level in the version's order): stores that applied
// the same edits from the same start have the same fingerprint, so a
// replica compares its own with its primary's before installing the
// primary's next edit, and refuses an edit made to another tree.
func (d *DB) Fingerprint() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := fnv.New64a()
	var buf [9]byte
	for l, fs := range d.current.Levels {
		for _, f := range fs {
			buf[0] = byte(l)
			binary.LittleEndian.PutUint64(buf[1:], f.FileNum)
			h.Write(buf[:])
		}
	}
	return h.Sum64()
}

// WriteBacklog is the number of memtables waiting for a flush and of L0
// tables: what a primary whose writes must not stall in Apply (kv/rubble)
// throttles its writers by before they commit.
func (d *DB) WriteBacklog() (immutable, l0 int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.imm), len(d.current.Levels[0])
}

// Moved is the set of tables e moves: added at one level and deleted
// from another by the same edit (a compaction that moves a table down
// without rewriting it). A replica already holds them.
func Moved(e *VersionEdit) map[uint64]bool {
	del := map[uint64]bool{}
	for _, d := range e.DeletedFiles {
		del[d.FileNum] = true
	}
	out := map[uint64]bool{}
	for _, nf := range e.NewFiles {
		if del[nf.Meta.FileNum] {
			out[nf.Meta.FileNum] = true
		}
	}
	return out
}

// VersionAfter returns an edit that builds, from nothing, the version
// the store would hold after e: what a replica that joins installs
// whole (after AdvanceSeq). Call it from BeforeEdit, while the version
// cannot change.
func (d *DB) VersionAfter(e *VersionEdit) (*VersionEdit, error) {
	d.mu.Lock()
	cur := d.current
	d.mu.Unlock()
	nv, err := cur.Apply(e)
	if err != nil {
		return nil, err
	}
	return nv.snapshotEdit(), nil
}

// AdvanceSeq raises the store's sequence numbers to seq if they are
// below it: a new replica about to install a primary's whole tree
// (InstallEdit of VersionAfter's edit), whose writes up to seq are all
// in those tables. No write may run beside it.
func (d *DB) AdvanceSeq(seq SeqNum) {
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	if seq > d.logSeq.Load() {
		d.logSeq.Store(seq)
		d.visibleSeq.Store(seq)
	}
}
