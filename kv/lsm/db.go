package lsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/vfs"
)

// Errors a DB returns; test with errors.Is.
var (
	// ErrNotFound: the key has no value.
	ErrNotFound = errors.New("lsm: not found")
	// ErrClosed: the DB (or snapshot, or iterator) is closed.
	ErrClosed = errors.New("lsm: closed")
	// ErrReadOnly: a write, flush or compaction on a DB opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("lsm: store opened read-only")
)

// DB is an LSM-tree store. All methods are safe for concurrent use, except
// that Close must not race with other calls.
//
// Write path: a commit joins a queue; the first committer in becomes the
// leader and takes the whole queue as one group: it makes room (rotating
// the memtable and WAL, or stalling), assigns sequence numbers, writes the
// group's records to the WAL with one write and at most one sync, applies
// them to the memtable and then publishes the group's last seq as visible.
// Leaders follow each other, so seqs are assigned, logged, applied and
// published in one order.
//
// Durability: a write with Sync is on disk, with every write committed
// before it, when the call returns. Records of unsynced writes are
// gathered and written in 64 KiB pieces, so a crash — of the machine or
// just the process — may lose the last unsynced writes, but what survives
// is always a prefix of the commit order, of whole batches.
//
// Errors: a failed WAL or MANIFEST write, flush or compaction is sticky:
// the store turns read-only and every later write returns that error.
// Reopen it to recover.
//
// Invariants:
//   - visibleSeq <= logSeq; every entry with seq <= visibleSeq is in a
//     memtable of the current read state or in the current version.
//   - Every entry in a memtable is in a WAL numbered >= the version's
//     LogNumber, which is the oldest unflushed memtable's log.
//   - A table file is deleted only when no version holds it.
type DB struct {
	fs   vfs.FS
	dir  string
	opts Options
	log  *slog.Logger
	bc   *blockCache
	tc   *tableCache
	pd   *pushState // nil: no pushdown

	offloadCtr offloadCounters

	// visibleSeq is the highest seq readers may see.
	visibleSeq atomic.Uint64
	// logSeq is the highest seq assigned; written by the commit leader.
	logSeq atomic.Uint64

	commitMu      sync.Mutex
	commitPending []*commitReq
	committing    bool
	// wal and walBuf belong to the commit leader (and to Close, after
	// the commit pipeline is idle).
	wal    vfs.File
	walNum uint64
	walBuf []byte
	// walSize is the bytes written to the WAL file (walBuf's follow).
	walSize uint64

	// manifestMu serializes version changes: it is held from computing a
	// new version to installing it.
	manifestMu   sync.Mutex
	manifest     vfs.File
	manifestNum  uint64
	manifestSize int64
	// logNum is the current version's LogNumber; guarded by manifestMu.
	logNum uint64

	// rsMu guards rs, the read state new reads take (readers share it,
	// read-only); it is replaced under mu and rsMu.
	rsMu     sync.RWMutex
	rs       readState
	isClosed atomic.Bool

	mu sync.Mutex
	// Guarded by mu:
	mem          *memTable
	imm          []*memTable // oldest first
	current      *Version
	nextFileNum  uint64
	snapshots    map[SeqNum]int
	flushing     bool
	compactions  int
	manual       bool // a manual compaction has the compaction slots
	closed       bool
	bgErr        error
	changed      chan struct{} // closed and replaced when background state changes
	obsolete     []uint64      // tables no version holds, to delete
	l0cache      []cachedMem   // oldest first
	l0cacheBytes int64
	m            counters

	bgWG sync.WaitGroup
}

// counters are Metrics' running totals; guarded by DB.mu.
type counters struct {
	walBytes, walSyncs, commitGroups, batches uint64
	userBytes                                 uint64
	flushes, flushBytes                       uint64
	compactions, moves                        uint64
	compactRead, compactWritten               uint64
	levelIn, levelWritten                     [NumLevels]uint64
	stalls, slowdowns                         uint64
	stallDur, slowdownDur                     time.Duration
	// flushDur, compactDur: time spent writing flush and compaction
	// outputs (the store's own work; BeforeEdit not included).
	flushDur, compactDur time.Duration
}

type commitReq struct {
	b     *Batch
	ents  []batchEntry
	size  int
	sync  bool
	flush bool // rotate the memtable after this group
	// at, if nonzero, is the seq the batch must start at (ApplyAt).
	at   SeqNum
	done chan error
	// apply hands a follower the memtable to apply its logged batch to;
	// it then marks applied done, and reports overflow.
	apply    chan *memTable
	applied  *sync.WaitGroup
	overflow atomic.Bool
}

// Open opens the store in dir, creating it if needed, and recovers it:
// the MANIFEST named by CURRENT gives the tables, and the WALs it does not
// cover are replayed into L0. Open writes a fresh MANIFEST, so a torn tail
// in the old one is never appended to.
func Open(vfsys vfs.FS, dir string, opts Options) (*DB, error) {
	opts.setDefaults()
	if err := checkOffload(opts.Offload); err != nil {
		return nil, err
	}
	d := &DB{
		fs:        vfsys,
		dir:       dir,
		opts:      opts,
		log:       opts.Logger.With("lsm", dir),
		snapshots: map[SeqNum]int{},
		changed:   make(chan struct{}),
	}
	if opts.BlockCacheSize > 0 {
		d.bc = newBlockCache(opts.BlockCacheSize, 16)
	}
	d.tc = newTableCache(vfsys, dir, d.bc, opts.TableCacheSize)
	if opts.Pusher != nil {
		var err error
		if d.pd, err = openPushdown(context.Background(), &opts); err != nil {
			return nil, err
		}
	}
	if !opts.ReadOnly {
		if err := vfsys.MkdirAll(dir); err != nil {
			return nil, fmt.Errorf("lsm: open %s: %w", dir, err)
		}
	}
	if err := d.recover(); err != nil {
		d.tc.close()
		d.closeFiles()
		return nil, err
	}
	d.mu.Lock()
	d.maybeScheduleLocked()
	d.mu.Unlock()
	return d, nil
}

func (d *DB) path(name string) string { return d.fs.PathJoin(d.dir, name) }

func (d *DB) closeFiles() {
	if d.wal != nil {
		d.wal.Close()
		d.wal = nil
	}
	if d.manifest != nil {
		d.manifest.Close()
		d.manifest = nil
	}
}

func readAll(f vfs.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size())
	n, err := f.ReadAt(buf, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(buf)) {
		return nil, err
	}
	return buf, nil
}

func (d *DB) readFile(name string) ([]byte, error) {
	f, err := d.fs.Open(d.path(name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f)
}

// recover rebuilds the state from CURRENT, the MANIFEST and the WALs.
func (d *DB) recover() error {
	v := &Version{}
	var logNum, nextFile uint64
	var lastSeq SeqNum
	cur, err := d.readFile("CURRENT")
	switch {
	case errors.Is(err, fs.ErrNotExist) && d.opts.ReadOnly:
		return fmt.Errorf("lsm: open %s read-only: no store there (no CURRENT): %w", d.dir, err)
	case errors.Is(err, fs.ErrNotExist):
		// A new store (or one that crashed before its first CURRENT).
	case err != nil:
		return fmt.Errorf("lsm: read CURRENT: %w", err)
	default:
		name := string(cur)
		if n := len(name); n > 0 && name[n-1] == '\n' {
			name = name[:n-1]
		}
		if k, _, ok := parseFileName(name); !ok || k != "manifest" {
			return &CorruptionError{File: "CURRENT", Reason: fmt.Sprintf("names %q", name)}
		}
		data, err := d.readFile(name)
		if err != nil {
			return fmt.Errorf("lsm: read %s: %w", name, err)
		}
		rr := recordReader{buf: data}
		for {
			rec, err := rr.next()
			if err == io.EOF || errors.Is(err, errTornRecord) {
				// A torn tail is an edit whose sync never returned:
				// it was never acted on.
				break
			}
			e, err := DecodeVersionEdit(rec)
			if err != nil {
				return &CorruptionError{File: name, Offset: int64(rr.off), Reason: err.Error()}
			}
			if v, err = v.Apply(e); err != nil {
				return fmt.Errorf("lsm: replay %s: %w", name, err)
			}
			logNum = max(logNum, e.LogNumber)
			nextFile = max(nextFile, e.NextFileNum)
			lastSeq = max(lastSeq, e.LastSeq)
		}
	}
	names, err := d.fs.List(d.dir)
	if err != nil {
		return fmt.Errorf("lsm: list %s: %w", d.dir, err)
	}
	var logs []uint64
	for _, n := range names {
		k, num, ok := parseFileName(n)
		if !ok {
			continue
		}
		nextFile = max(nextFile, num+1)
		if k == "log" && num >= logNum {
			logs = append(logs, num)
		}
	}
	for _, fs := range v.Levels {
		for _, f := range fs {
			nextFile = max(nextFile, f.FileNum+1)
			lastSeq = max(lastSeq, f.LargestSeq)
		}
	}
	d.nextFileNum = max(nextFile, 1)
	d.installLocked(v)

	// Replay the WALs into memtables, flushing each full one to L0 (or,
	// read-only, keeping it as an immutable memtable).
	slices.Sort(logs)
	edit := &VersionEdit{}
	mem := newMemTable(d.opts.MemTableSize, 0)
	var replayed []*memTable // read-only: the full ones, oldest first
	flushMem := func() error {
		if mem.empty() {
			return nil
		}
		if d.opts.ReadOnly {
			replayed = append(replayed, mem)
			mem = newMemTable(d.opts.MemTableSize, 0)
			return nil
		}
		meta, err := d.writeL0(context.Background(), mem, nil)
		if err != nil {
			return err
		}
		if meta != nil {
			edit.NewFiles = append(edit.NewFiles, NewFile{Level: 0, Meta: meta})
		}
		mem = newMemTable(d.opts.MemTableSize, 0)
		return nil
	}
	tornAt := ""
	for _, num := range logs {
		name := logFileName(num)
		data, err := d.readFile(name)
		if err != nil {
			return fmt.Errorf("lsm: read %s: %w", name, err)
		}
		rr := recordReader{buf: data}
		for {
			rec, err := rr.next()
			if err == io.EOF {
				break
			}
			if errors.Is(err, errTornRecord) {
				tornAt = name
				d.log.Info("WAL ends in a torn record", "file", name, "offset", rr.off, "bytes", len(data))
				break
			}
			if tornAt != "" && tornAt != name {
				return &CorruptionError{File: tornAt, Reason: "torn record followed by a later log's records"}
			}
			seq, ents, err := decodeBatch(rec)
			if err != nil {
				return &CorruptionError{File: name, Offset: int64(rr.off), Reason: err.Error()}
			}
			if len(ents) == 0 {
				continue
			}
			if sz := batchMemSize(ents); !mem.hasRoom(sz) {
				if err := flushMem(); err != nil {
					return err
				}
				if !mem.hasRoom(sz) {
					mem = newMemTable(sz, 0)
				}
			}
			mem.apply(seq, ents)
			lastSeq = max(lastSeq, seq+SeqNum(len(ents))-1)
		}
	}
	if d.opts.ReadOnly {
		// Nothing is written: the replayed memtables serve reads, the
		// files stay as the writer left them.
		d.logSeq.Store(lastSeq)
		d.visibleSeq.Store(lastSeq)
		d.mu.Lock()
		d.mem, d.imm = mem, replayed
		d.publishReadStateLocked()
		d.mu.Unlock()
		return nil
	}
	if err := flushMem(); err != nil {
		return err
	}
	if len(edit.NewFiles) > 0 {
		if err := d.fs.SyncDir(d.dir); err != nil {
			return fmt.Errorf("lsm: sync %s: %w", d.dir, err)
		}
	}

	// A fresh WAL and a fresh MANIFEST holding the whole version.
	d.walNum = d.nextFileNum
	d.nextFileNum++
	d.wal, err = d.fs.Create(d.path(logFileName(d.walNum)))
	if err != nil {
		return fmt.Errorf("lsm: create WAL: %w", err)
	}
	nv, err := v.Apply(edit)
	if err != nil {
		return err
	}
	d.logSeq.Store(lastSeq)
	d.visibleSeq.Store(lastSeq)
	d.mem = newMemTable(d.opts.MemTableSize, d.walNum)
	d.manifestNum = d.nextFileNum
	d.nextFileNum++
	snap := nv.snapshotEdit()
	snap.LogNumber = d.walNum
	snap.NextFileNum = d.nextFileNum
	snap.LastSeq = lastSeq
	mname := manifestFileName(d.manifestNum)
	d.manifest, err = d.fs.Create(d.path(mname))
	if err != nil {
		return fmt.Errorf("lsm: create %s: %w", mname, err)
	}
	rec := appendRecord(nil, snap.Encode(nil))
	if _, err := d.manifest.Write(rec); err != nil {
		return fmt.Errorf("lsm: write %s: %w", mname, err)
	}
	if err := d.manifest.Sync(); err != nil {
		return fmt.Errorf("lsm: sync %s: %w", mname, err)
	}
	if err := d.setCurrent(mname); err != nil {
		return err
	}
	d.manifestSize = int64(len(rec))
	d.logNum = d.walNum
	d.mu.Lock()
	d.installLocked(nv)
	d.mu.Unlock()

	// Everything not in the new state is garbage now.
	live := map[uint64]bool{}
	for _, fs := range nv.Levels {
		for _, f := range fs {
			live[f.FileNum] = true
		}
	}
	for _, n := range names {
		k, num, ok := parseFileName(n)
		if !ok {
			if n == "CURRENT.tmp" {
				d.fs.Remove(d.path(n))
			}
			continue
		}
		if (k == "sst" && !live[num]) || (k == "log" && num < d.walNum) || (k == "manifest" && num != d.manifestNum) {
			if err := d.fs.Remove(d.path(n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				d.log.Warn("remove obsolete file", "file", n, "err", err)
			}
		}
	}
	d.mu.Lock()
	d.obsolete = nil // the tables of the replaced versions were just removed above
	d.mu.Unlock()
	return nil
}

// setCurrent points CURRENT at a manifest: write a temp file, sync it,
// rename it over CURRENT and sync the directory.
func (d *DB) setCurrent(manifest string) error {
	tmp := d.path("CURRENT.tmp")
	f, err := d.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("lsm: create CURRENT.tmp: %w", err)
	}
	_, err = f.Write([]byte(manifest + "\n"))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.fs.Rename(tmp, d.path("CURRENT"))
	}
	if err == nil {
		err = d.fs.SyncDir(d.dir)
	}
	if err != nil {
		return fmt.Errorf("lsm: set CURRENT to %s: %w", manifest, err)
	}
	return nil
}

// installLocked makes v current. Caller holds mu (or is Open, alone).
func (d *DB) installLocked(v *Version) {
	for _, fs := range v.Levels {
		for _, f := range fs {
			f.refs.Add(1)
		}
	}
	v.refs.Store(1)
	old := d.current
	d.current = v
	d.pruneL0CacheLocked(v)
	d.publishReadStateLocked()
	if old != nil {
		d.unrefVersionLocked(old)
	}
	d.notifyLocked()
}

// publishReadStateLocked makes the current memtables and version what new
// reads see. Call it, with mu held, whenever mem, imm or current change.
func (d *DB) publishReadStateLocked() {
	rs := readState{mems: make([]*memTable, 0, len(d.imm)+1), v: d.current, l0mem: d.l0CacheMapLocked()}
	if d.mem != nil {
		rs.mems = append(rs.mems, d.mem)
	}
	for i := len(d.imm) - 1; i >= 0; i-- {
		rs.mems = append(rs.mems, d.imm[i])
	}
	d.rsMu.Lock()
	d.rs = rs
	d.rsMu.Unlock()
}

func (d *DB) unrefVersionLocked(v *Version) {
	if v.refs.Add(-1) > 0 {
		return
	}
	d.releaseVersionLocked(v)
}

// releaseVersionLocked drops a dead version's references to its tables.
func (d *DB) releaseVersionLocked(v *Version) {
	for _, fs := range v.Levels {
		for _, f := range fs {
			if f.refs.Add(-1) == 0 {
				d.obsolete = append(d.obsolete, f.FileNum)
			}
		}
	}
}

// notifyLocked wakes everyone waiting for background progress.
func (d *DB) notifyLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// waitLocked waits, with mu released, until the background state changes
// or ctx ends.
func (d *DB) waitLocked(ctx context.Context) error {
	ch := d.changed
	d.mu.Unlock()
	defer d.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deleteObsolete removes the tables no version holds any more.
func (d *DB) deleteObsolete() {
	d.mu.Lock()
	nums := d.obsolete
	d.obsolete = nil
	d.mu.Unlock()
	for _, n := range nums {
		d.tc.evict(n)
		if err := d.fs.Remove(d.path(tableFileName(n))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.log.Warn("remove obsolete table", "file", tableFileName(n), "err", err)
		}
	}
}

// logAndApply appends e to the MANIFEST, syncs it, and installs the
// resulting version, calling onInstall (if set) under mu at the same
// moment. On error nothing is installed and the error is sticky: the
// MANIFEST's state is unknown.
func (d *DB) logAndApply(e *VersionEdit, onInstall func()) error {
	d.manifestMu.Lock()
	defer d.manifestMu.Unlock()
	d.mu.Lock()
	cur := d.current
	e.NextFileNum = d.nextFileNum
	d.mu.Unlock()
	e.LastSeq = d.logSeq.Load()
	nv, err := cur.Apply(e)
	if err != nil {
		return err
	}
	if err := d.beforeLog(e); err != nil {
		return err
	}
	rec := appendRecord(nil, e.Encode(nil))
	_, err = d.manifest.Write(rec)
	if err == nil {
		err = d.manifest.Sync()
	}
	if err != nil {
		err = fmt.Errorf("lsm: write %s: %w", manifestFileName(d.manifestNum), err)
		d.setBgErr(err)
		return err
	}
	d.manifestSize += int64(len(rec))
	if e.LogNumber != 0 {
		d.logNum = e.LogNumber
	}
	d.mu.Lock()
	if onInstall != nil {
		onInstall() // before installLocked publishes, so readers see both at once
	}
	d.installLocked(nv)
	d.maybeScheduleLocked()
	d.mu.Unlock()
	d.deleteObsolete()
	if d.manifestSize > d.opts.MaxManifestFileSize {
		if err := d.rotateManifest(nv); err != nil {
			d.setBgErr(err)
			return err
		}
	}
	return nil
}

// rotateManifest starts a new MANIFEST holding v whole, points CURRENT at
// it and removes the old one. Caller holds manifestMu. Until CURRENT is
// switched the old MANIFEST stays complete, so a crash anywhere in
// between recovers from one or the other.
func (d *DB) rotateManifest(v *Version) error {
	d.mu.Lock()
	num := d.nextFileNum
	d.nextFileNum++
	next := d.nextFileNum
	d.mu.Unlock()
	snap := v.snapshotEdit()
	snap.LogNumber = d.logNum
	snap.NextFileNum = next
	snap.LastSeq = d.logSeq.Load()
	name := manifestFileName(num)
	f, err := d.fs.Create(d.path(name))
	if err != nil {
		return fmt.Errorf("lsm: create %s: %w", name, err)
	}
	rec := appendRecord(nil, snap.Encode(nil))
	_, err = f.Write(rec)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = d.setCurrent(name)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("lsm: rotate MANIFEST: %w", err)
	}
	old, oldNum := d.manifest, d.manifestNum
	d.manifest, d.manifestNum, d.manifestSize = f, num, int64(len(rec))
	old.Close()
	if err := d.fs.Remove(d.path(manifestFileName(oldNum))); err != nil {
		d.log.Warn("remove old MANIFEST", "file", manifestFileName(oldNum), "err", err)
	}
	return nil
}

func (d *DB) setBgErr(err error) {
	d.mu.Lock()
	if d.bgErr == nil {
		d.bgErr = err
		d.log.Error("background error; the store is read-only", "err", err)
	}
	d.notifyLocked()
	d.mu.Unlock()
}

// Set writes value under key.
func (d *DB) Set(key, value []byte, o *WriteOptions) error {
	b := &Batch{data: make([]byte, batchHeaderLen, batchHeaderLen+len(key)+len(value)+2*binary.MaxVarintLen32+1)}
	b.Set(key, value)
	return d.Apply(context.Background(), b, o)
}

// Delete deletes key.
func (d *DB) Delete(key []byte, o *WriteOptions) error {
	b := NewBatch()
	b.Delete(key)
	return d.Apply(context.Background(), b, o)
}

// DeleteRange deletes every key in [start, end).
func (d *DB) DeleteRange(start, end []byte, o *WriteOptions) error {
	b := NewBatch()
	b.DeleteRange(start, end)
	return d.Apply(context.Background(), b, o)
}

// Apply commits a batch atomically. ctx bounds only the wait before the
// batch joins the commit queue (a write stall); once queued, the batch is
// committed or fails with the group.
func (d *DB) Apply(ctx context.Context, b *Batch, o *WriteOptions) error {
	if d.opts.ReadOnly {
		return ErrReadOnly
	}
	_, ents, err := decodeBatch(b.Repr())
	if err != nil {
		return fmt.Errorf("lsm: apply: %w", err)
	}
	req := &commitReq{b: b, ents: ents, size: batchMemSize(ents), sync: o != nil && o.Sync,
		done: make(chan error, 1), apply: make(chan *memTable, 1)}
	if err := d.waitForRoom(ctx); err != nil {
		return err
	}
	return d.commit(req)
}

// waitForRoom waits while writes are stalled, so that a caller's ctx can
// end the wait; the commit leader checks again, without a ctx.
func (d *DB) waitForRoom(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var start time.Time
	defer func() {
		if !start.IsZero() {
			d.m.stallDur += time.Since(start)
		}
	}()
	for {
		if d.closed {
			return ErrClosed
		}
		if d.bgErr != nil {
			return d.bgErr
		}
		if !d.stalledLocked() {
			return nil
		}
		if start.IsZero() {
			start = time.Now()
			d.m.stalls++
		}
		if err := d.waitLocked(ctx); err != nil {
			return err
		}
	}
}

// stalledLocked reports whether the memtable is full and may not be
// rotated.
func (d *DB) stalledLocked() bool {
	if d.mem.hasRoom(1024) {
		return false
	}
	return len(d.imm)+1 >= d.opts.MemTableStopWritesThreshold || len(d.current.Levels[0]) >= d.opts.L0StopWritesThreshold ||
		d.pendingCompactionBytes(d.current) >= d.opts.HardPendingCompactionBytes
}

func (d *DB) commit(req *commitReq) error {
	d.commitMu.Lock()
	d.commitPending = append(d.commitPending, req)
	if d.committing {
		d.commitMu.Unlock()
		// A follower: the leader logs our batch, then either hands us
		// the memtable to apply it to or fails us.
		select {
		case m := <-req.apply:
			if !m.apply(req.b.seq(), req.ents) {
				req.overflow.Store(true)
			}
			req.applied.Done()
			return <-req.done
		case err := <-req.done:
			return err
		}
	}
	d.committing = true
	for len(d.commitPending) > 0 {
		group := d.commitPending
		d.commitPending = nil
		d.commitMu.Unlock()
		d.commitGroup(group, req)
		d.commitMu.Lock()
	}
	d.committing = false
	d.commitMu.Unlock()
	return <-req.done
}

// commitGroup is run by the leader (whose own request is self, if in the
// group): see DB. Every request's batch is applied to the memtable by its
// own goroutine, concurrently (the skiplist takes concurrent inserts);
// the group's seqs become visible only when all are applied, and the next
// group starts only then, so a memtable is never rotated or flushed with
// an insert in flight.
func (d *DB) commitGroup(group []*commitReq, self *commitReq) {
	fail := func(err error) {
		for _, r := range group {
			r.done <- err
		}
	}
	size, doSync, flush := 0, false, false
	var userBytes uint64
	for _, r := range group {
		size += r.size
		doSync = doSync || r.sync
		flush = flush || r.flush
		for _, e := range r.ents {
			userBytes += uint64(len(e.key) + len(e.value))
		}
	}
	mem, err := d.makeRoomForWrite(size)
	if err != nil {
		fail(err)
		return
	}
	seq := d.logSeq.Load()
	buf := d.walBuf
	walStart := len(buf)
	n := 0
	recycle := d.opts.Offload != nil && d.opts.Offload.Recycle
	for _, r := range group {
		if len(r.ents) == 0 {
			continue
		}
		if r.at > seq {
			seq = r.at - 1
		}
		r.b.setSeq(seq + 1)
		if recycle {
			mem.walRefs = append(mem.walRefs, walRef{seq: seq + 1, off: d.walSize + uint64(len(buf))})
		}
		seq += SeqNum(len(r.ents))
		buf = appendRecord(buf, r.b.data)
		n++
	}
	walBytes := len(buf) - walStart
	d.walBuf = buf
	if doSync || len(buf) >= walBufferSize {
		if err := d.writeWALBuffer(); err != nil {
			d.setBgErr(err)
			fail(err)
			return
		}
	}
	if doSync {
		if err := d.wal.Sync(); err != nil {
			err = fmt.Errorf("lsm: sync WAL %s: %w", logFileName(d.walNum), err)
			d.setBgErr(err)
			fail(err)
			return
		}
	}
	d.logSeq.Store(seq)
	var wg sync.WaitGroup
	selfApply := false
	for _, r := range group {
		if len(r.ents) == 0 {
			continue
		}
		wg.Add(1)
		r.applied = &wg
		if r == self {
			selfApply = true
		} else {
			r.apply <- mem
		}
	}
	if selfApply && !mem.apply(self.b.seq(), self.ents) {
		self.overflow.Store(true)
	}
	if selfApply {
		wg.Done()
	}
	wg.Wait()
	for _, r := range group {
		if r.overflow.Load() {
			// hasRoom's estimate is an upper bound, so this cannot
			// happen; if it does the memtable lacks a logged entry.
			err := errors.New("lsm: memtable overflow")
			d.setBgErr(err)
			fail(err)
			return
		}
	}
	d.visibleSeq.Store(seq)
	d.mu.Lock()
	d.m.walBytes += uint64(walBytes)
	d.m.commitGroups++
	d.m.batches += uint64(n)
	d.m.userBytes += userBytes
	if doSync {
		d.m.walSyncs++
	}
	if flush && !d.mem.empty() {
		err = d.rotateLocked(d.opts.MemTableSize)
	}
	d.mu.Unlock()
	fail(err)
}

// walBufferSize is how many bytes of unsynced WAL records the commit
// leader gathers before writing them out.
const walBufferSize = 64 << 10

// writeWALBuffer writes the gathered WAL records. Called by the commit
// leader (or Close, with the pipeline idle).
func (d *DB) writeWALBuffer() error {
	if len(d.walBuf) == 0 {
		return nil
	}
	n, err := d.wal.Write(d.walBuf)
	d.walSize += uint64(n)
	d.walBuf = d.walBuf[:0]
	if err != nil {
		return fmt.Errorf("lsm: write WAL %s: %w", logFileName(d.walNum), err)
	}
	return nil
}

// makeRoomForWrite returns the memtable to apply size bytes to, rotating
// (or stalling) first if the current one lacks room. Only the commit
// leader calls it.
func (d *DB) makeRoomForWrite(size int) (*memTable, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	slowed := false
	for {
		if d.closed {
			return nil, ErrClosed
		}
		if d.bgErr != nil {
			return nil, d.bgErr
		}
		l0 := len(d.current.Levels[0])
		pending := d.pendingCompactionBytes(d.current)
		if !slowed && ((l0 >= d.opts.L0SlowdownWritesThreshold && l0 < d.opts.L0StopWritesThreshold) ||
			(pending >= d.opts.SoftPendingCompactionBytes && pending < d.opts.HardPendingCompactionBytes)) {
			slowed = true
			d.m.slowdowns++
			d.mu.Unlock()
			time.Sleep(time.Millisecond)
			d.mu.Lock()
			d.m.slowdownDur += time.Millisecond
			continue
		}
		if d.mem.hasRoom(size) {
			return d.mem, nil
		}
		if d.mem.empty() {
			// One batch bigger than a memtable: give it its own.
			d.mem = newMemTable(max(d.opts.MemTableSize, size), d.mem.logNum)
			d.publishReadStateLocked()
			return d.mem, nil
		}
		if len(d.imm)+1 >= d.opts.MemTableStopWritesThreshold || l0 >= d.opts.L0StopWritesThreshold ||
			pending >= d.opts.HardPendingCompactionBytes {
			d.m.stalls++
			start := time.Now()
			d.log.Debug("write stall", "immutable", len(d.imm), "L0", l0, "pending", pending)
			d.waitLocked(context.Background())
			d.m.stallDur += time.Since(start)
			continue
		}
		if err := d.rotateLocked(max(d.opts.MemTableSize, size)); err != nil {
			return nil, err
		}
	}
}

// rotateLocked makes the memtable immutable and starts a new one with a
// new WAL. The old WAL is synced first, so a later synced write never
// survives a crash that loses an earlier one. Called by the commit leader
// with mu held.
func (d *DB) rotateLocked(capacity int) error {
	num := d.nextFileNum
	d.nextFileNum++
	d.mu.Unlock()
	err := d.writeWALBuffer()
	if err == nil {
		err = d.wal.Sync()
	}
	var f vfs.File
	if err == nil {
		f, err = d.fs.Create(d.path(logFileName(num)))
	}
	if err == nil {
		err = d.fs.SyncDir(d.dir)
	}
	d.mu.Lock()
	if err != nil {
		if f != nil {
			f.Close()
		}
		err = fmt.Errorf("lsm: rotate WAL: %w", err)
		if d.bgErr == nil {
			d.bgErr = err
		}
		return err
	}
	if cerr := d.wal.Close(); cerr != nil {
		d.log.Warn("close WAL", "file", logFileName(d.walNum), "err", cerr)
	}
	d.wal, d.walNum, d.walSize = f, num, 0
	d.imm = append(d.imm, d.mem)
	d.mem = newMemTable(capacity, num)
	d.publishReadStateLocked()
	d.maybeScheduleLocked()
	return nil
}

// maybeScheduleLocked starts a flush and compactions if there is work and
// room for it.
func (d *DB) maybeScheduleLocked() {
	if d.closed || d.bgErr != nil || d.opts.ReadOnly {
		return
	}
	if !d.flushing && len(d.imm) > 0 && !d.opts.DisableFlushes {
		d.flushing = true
		d.bgWG.Add(1)
		go d.flushLoop()
	}
	if d.opts.DisableAutomaticCompactions || d.manual {
		return
	}
	for d.compactions < d.opts.MaxConcurrentCompactions {
		c := d.pickCompactionLocked()
		if c == nil {
			return
		}
		d.compactions++
		d.bgWG.Add(1)
		go func() {
			defer d.bgWG.Done()
			err := d.runCompaction(context.Background(), c)
			d.mu.Lock()
			d.compactions--
			d.releaseLocked(c)
			if err != nil && d.bgErr == nil {
				d.bgErr = err
				d.log.Error("compaction failed; the store is read-only", "err", err)
			}
			d.maybeScheduleLocked()
			d.notifyLocked()
			d.mu.Unlock()
		}()
	}
}

// flushLoop flushes immutable memtables, oldest first, until none is left.
func (d *DB) flushLoop() {
	defer d.bgWG.Done()
	for {
		d.mu.Lock()
		if len(d.imm) == 0 || d.closed || d.bgErr != nil {
			d.flushing = false
			d.notifyLocked()
			d.mu.Unlock()
			return
		}
		m := d.imm[0]
		snaps := d.snapshotListLocked()
		d.mu.Unlock()
		if err := d.flush(m, snaps); err != nil {
			d.setBgErr(err)
		}
	}
}

// flush writes m to an L0 table and installs it, dropping m from imm.
func (d *DB) flush(m *memTable, snaps []SeqNum) error {
	start := time.Now()
	meta, err := d.writeL0Table(context.Background(), m, snaps)
	if err != nil {
		return err
	}
	took := time.Since(start)
	if err := d.fs.SyncDir(d.dir); err != nil {
		return fmt.Errorf("lsm: sync %s: %w", d.dir, err)
	}
	e := &VersionEdit{}
	d.mu.Lock()
	if len(d.imm) > 1 {
		e.LogNumber = d.imm[1].logNum
	} else {
		e.LogNumber = d.mem.logNum
	}
	d.mu.Unlock()
	if meta != nil {
		e.NewFiles = []NewFile{{Level: 0, Meta: meta}}
	}
	err = d.logAndApply(e, func() {
		d.imm = d.imm[1:]
		d.cacheL0Locked(m, meta)
		d.m.flushes++
		d.m.flushDur += took
		if meta != nil {
			d.m.flushBytes += meta.Size
			d.m.levelWritten[0] += meta.Size
		}
	})
	if err != nil {
		return err
	}
	d.removeLogsBelow(e.LogNumber)
	return nil
}

// writeL0 writes a memtable's contents to a new table; nil if it had
// nothing to write.
func (d *DB) writeL0(ctx context.Context, m *memTable, snaps []SeqNum) (*FileMeta, error) {
	env := d.taskEnv()
	outs, _, err := writeOutputs(ctx, m.newIter(), m.tombstones(), outputParams{level: 0, snapshots: snaps, table: d.opts.Table}, env.CreateTable)
	if err != nil {
		for _, o := range outs {
			d.fs.Remove(d.path(tableFileName(o.FileNum)))
		}
		return nil, fmt.Errorf("lsm: flush: %w", err)
	}
	if len(outs) == 0 {
		return nil, nil
	}
	return outs[0], nil
}

// dbEnv runs tasks against the store's own directory.
type dbEnv struct{ d *DB }

func (d *DB) taskEnv() TaskEnv { return dbEnv{d} }

func (e dbEnv) OpenTable(fileNum, size uint64) (vfs.File, error) {
	return e.d.fs.Open(e.d.path(tableFileName(fileNum)))
}

func (e dbEnv) CreateTable() (uint64, vfs.File, error) {
	e.d.mu.Lock()
	num := e.d.nextFileNum
	e.d.nextFileNum++
	e.d.mu.Unlock()
	f, err := e.d.fs.Create(e.d.path(tableFileName(num)))
	return num, f, err
}

func (d *DB) snapshotListLocked() []SeqNum {
	out := make([]SeqNum, 0, len(d.snapshots))
	for s := range d.snapshots {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Flush makes the memtable immutable and waits until every memtable
// before it is in L0.
func (d *DB) Flush(ctx context.Context) error {
	if d.opts.ReadOnly {
		return ErrReadOnly
	}
	d.mu.Lock()
	disabled := d.opts.DisableFlushes
	d.mu.Unlock()
	if disabled {
		return errFlushesDisabled
	}
	req := &commitReq{b: NewBatch(), flush: true, done: make(chan error, 1), apply: make(chan *memTable, 1)}
	if err := d.commit(req); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.imm) == 0 {
		return d.bgErr
	}
	// Wait for the newest immutable memtable now (ours, or one rotated
	// after it) to be flushed: flushes go oldest first, and memtables
	// rotated later by other writers need not hold us up.
	last := d.imm[len(d.imm)-1]
	for slices.Contains(d.imm, last) {
		if d.bgErr != nil {
			return d.bgErr
		}
		if d.closed {
			return ErrClosed
		}
		if err := d.waitLocked(ctx); err != nil {
			return err
		}
	}
	return d.bgErr
}

// Close waits for background work, syncs the WAL and closes files.
// Unflushed memtables are not flushed: their WAL is replayed on Open.
func (d *DB) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.closed = true
	d.isClosed.Store(true)
	d.notifyLocked()
	d.mu.Unlock()
	d.bgWG.Wait()
	// Wait for an in-flight commit group to finish with the WAL.
	d.commitMu.Lock()
	var err error
	if d.wal != nil {
		if err = d.writeWALBuffer(); err == nil {
			err = d.wal.Sync()
		}
	}
	d.closeFiles()
	d.commitMu.Unlock()
	d.tc.close()
	d.mu.Lock()
	bg := d.bgErr
	d.mu.Unlock()
	if err == nil && bg != nil {
		err = bg
	}
	return err
}

// readState is what one read sees: memtables newest first and a version.
type readState struct {
	mems []*memTable
	v    *Version
	// l0mem are the L0 cache's memtables, by their L0 table (l0cache.go).
	l0mem map[uint64]*memTable
}

// loadReadState returns what a read sees now, holding a reference to its
// version. It takes no lock but rsMu's read side.
func (d *DB) loadReadState() (readState, error) {
	if d.isClosed.Load() {
		return readState{}, ErrClosed
	}
	d.rsMu.RLock()
	rs := d.rs
	rs.v.refs.Add(1)
	d.rsMu.RUnlock()
	return rs, nil
}

func (d *DB) releaseReadState(rs readState) {
	if rs.v.refs.Add(-1) > 0 {
		return
	}
	d.mu.Lock()
	d.releaseVersionLocked(rs.v)
	d.mu.Unlock()
	d.deleteObsolete()
}

// Get returns a copy of the latest value of key, or ErrNotFound.
func (d *DB) Get(key []byte) ([]byte, error) { return d.getAt(key, d.visibleSeq.Load()) }

// getAt looks key up as of snap: memtables newest first, then L0 newest
// first, then one table per level. The first point entry found is the
// newest (entries in earlier sources are newer); a range tombstone seen
// in it or any earlier source with a higher seq deletes it.
func (d *DB) getAt(key []byte, snap SeqNum) ([]byte, error) {
	if d.pd != nil {
		return d.getSplit(key, snap)
	}
	rs, err := d.loadReadState()
	if err != nil {
		return nil, err
	}
	defer d.releaseReadState(rs)
	var tomb SeqNum
	resolve := func(ikey, val []byte) ([]byte, error) {
		if keyKind(ikey) != KindSet || tomb > keySeq(ikey) {
			return nil, ErrNotFound
		}
		return slices.Clone(val), nil
	}
	for _, m := range rs.mems {
		tomb = max(tomb, maxCovering(m.tombstones(), key, snap))
		if ikey, val, ok := m.get(key, snap); ok {
			return resolve(ikey, val)
		}
	}
	probe := func(f *FileMeta) ([]byte, bool, error) {
		h, err := d.tc.get(f.FileNum, f.Size)
		if err != nil {
			return nil, false, err
		}
		defer h.release()
		r := h.reader()
		tomb = max(tomb, maxCoveringFrags(r.frags, key, snap))
		ikey, val, ok, err := r.get(key, snap)
		if err != nil || !ok {
			return nil, false, err
		}
		v, err := resolve(ikey, val)
		return v, true, err
	}
	for level, files := range rs.v.Levels {
		if level == 0 {
			for _, f := range files {
				if !f.userRange().contains(key) {
					continue
				}
				if m := rs.l0mem[f.FileNum]; m != nil {
					// The table's memtable, in its place.
					tomb = max(tomb, maxCovering(m.tombstones(), key, snap))
					if ikey, val, ok := m.get(key, snap); ok {
						d.offloadCtr.l0CacheHits.Add(1)
						return resolve(ikey, val)
					}
					continue
				}
				if v, ok, err := probe(f); ok || err != nil {
					return v, err
				}
			}
			continue
		}
		i := sort.Search(len(files), func(i int) bool {
			r := files[i].userRange()
			return !endsBefore(r.end, r.endExclusive, key)
		})
		if i < len(files) && files[i].userRange().contains(key) {
			if v, ok, err := probe(files[i]); ok || err != nil {
				return v, err
			}
		}
	}
	return nil, ErrNotFound
}

// Snapshot is a consistent view of the store at one sequence number.
// Compactions keep what it can see until it is closed.
type Snapshot struct {
	d      *DB
	seq    SeqNum
	closed atomic.Bool
}

// NewSnapshot returns a snapshot of the current state.
func (d *DB) NewSnapshot() *Snapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &Snapshot{d: d, seq: d.visibleSeq.Load()}
	d.snapshots[s.seq]++
	return s
}

// Seq is the snapshot's sequence number: it sees entries with seq <= Seq.
func (s *Snapshot) Seq() SeqNum { return s.seq }

// Get reads key as of the snapshot.
func (s *Snapshot) Get(key []byte) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return s.d.getAt(key, s.seq)
}

// NewIter iterates over the snapshot.
func (s *Snapshot) NewIter(o *IterOptions) (*Iterator, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return s.d.newIter(o, s.seq)
}

// Close releases the snapshot.
func (s *Snapshot) Close() error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	d := s.d
	d.mu.Lock()
	if d.snapshots[s.seq]--; d.snapshots[s.seq] == 0 {
		delete(d.snapshots, s.seq)
	}
	d.mu.Unlock()
	return nil
}
