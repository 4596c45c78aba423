package rubble

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/vfs"
)

// FileSlot is one entry of a file-map update: table Table of the
// primary's store sits in slot Slot of the replica's pool.
type FileSlot struct {
	Table uint64
	Slot  int
}

// SecondaryConfig configures OpenSecondary.
type SecondaryConfig struct {
	// FS is the secondary's own offloadfs, holding a pool (MakePool);
	// the store's tables are the pool's slots.
	FS *offloadfs.FS
	// Local is the file system of the store's own files (WALs,
	// MANIFEST, the map, tables it writes itself), in Dir (default: FS).
	// A node keeps them on its local file system, the kernel's, and only
	// the slots on the volume its target exports.
	Local vfs.FS
	Dir   string
	// PoolDir is the pool's directory on FS (default SlotDir).
	PoolDir string
	// Persist keeps the file map in Dir (MapFileName), rewritten before
	// every install and before slots are released (those of the tables
	// removed within releaseDelay together), so that an existing store
	// reopens with its tables; without it the map is in memory only and
	// OpenSecondary refuses an existing store.
	Persist bool
	// Options are the store's; OpenSecondary turns flushes and
	// compactions off and raises the write-stall thresholds, since only
	// the primary's edits make room.
	Options lsm.Options
	// Released is told each slot the secondary lets go of: its table
	// was deleted by an edit and no version here holds it any more. The
	// primary may write into the slot again only after that.
	Released func(slot int)
}

// Secondary is a replica of a primary's kv/lsm store that never flushes
// or compacts: it applies the primary's writes at the primary's sequence
// numbers (Apply) and installs the tables the primary writes into its
// slots by the primary's version edits (Install).
//
// Invariants: the file map (table → slot) names each slot at most once;
// a slot leaves the map (and Released is told) only once no version of
// the store holds its table; an edit is installed only once every write
// its tables hold is applied here, so the tree never holds data the
// memtables lack the writes before.
type Secondary struct {
	pool *Pool
	db   *lsm.DB
	cfg  SecondaryConfig

	mu     sync.Mutex
	byPath map[string]FileSlot // table path in Dir → its slot
	inUse  map[int]bool        // slots the map names
	// applied, if not nil, is closed by the next Apply: made by an
	// Install that waits for writes, so a write no install waits for
	// makes and closes no channel.
	applied chan struct{}
	// releasing are slots whose tables were removed from the map and
	// which stay held until a map without them is persisted (by the
	// next install, or by releaseTimer after releaseDelay): one write
	// of the map for the tables a compaction's install lets go of, not
	// one each.
	releasing    []int
	releaseTimer *time.Timer
	closed       bool

	// captures are the bytes of the tables this store writes as a
	// primary, for shipping (capture.go).
	captures captures
}

// OpenSecondary opens the pool on cfg.FS and a store in cfg.Dir whose
// tables are the pool's slots. Without cfg.Persist the store must be
// new (the file map is kept in memory, so a secondary that restarts
// rejoins by a copy of the group's state); with it, an existing store
// reopens with its persisted map.
func OpenSecondary(ctx context.Context, cfg SecondaryConfig) (*Secondary, error) {
	if cfg.PoolDir == "" {
		cfg.PoolDir = SlotDir
	}
	pool, err := OpenPoolAt(ctx, cfg.FS, cfg.PoolDir)
	if err != nil {
		return nil, err
	}
	s := &Secondary{pool: pool, cfg: cfg, byPath: map[string]FileSlot{}, inUse: map[int]bool{}}
	s.captures.slot = int(pool.slotSize)
	o := cfg.Options
	o.DisableFlushes = true
	o.DisableAutomaticCompactions = true
	o.BeforeEdit = nil
	o.Pusher = nil
	o.MemTableStopWritesThreshold = max(o.MemTableStopWritesThreshold, 1<<20)
	o.L0SlowdownWritesThreshold = max(o.L0SlowdownWritesThreshold, 1<<30)
	o.L0StopWritesThreshold = max(o.L0StopWritesThreshold, 1<<30)
	o.SoftPendingCompactionBytes, o.HardPendingCompactionBytes = 1<<62, 1<<62
	if cfg.Local == nil {
		cfg.Local = cfg.FS.VFS()
	}
	s.cfg = cfg
	base := cfg.Local
	if _, err := base.Stat(base.PathJoin(cfg.Dir, "CURRENT")); err == nil {
		if !cfg.Persist {
			return nil, fmt.Errorf("rubble: secondary: %s holds a store already; a secondary without a persisted map starts empty", cfg.Dir)
		}
		files, err := readMap(base, base.PathJoin(cfg.Dir, MapFileName))
		if err != nil {
			return nil, fmt.Errorf("rubble: secondary: %s holds a store: %w", cfg.Dir, err)
		}
		for _, f := range files {
			if f.Slot < 0 || f.Slot >= len(pool.slots) || s.inUse[f.Slot] {
				return nil, fmt.Errorf("rubble: secondary: %s: slot %d of table %d is out of the pool or given twice", MapFileName, f.Slot, f.Table)
			}
			s.byPath[s.tablePath(f.Table)] = f
			s.inUse[f.Slot] = true
		}
	} else if cfg.Persist {
		// A new store starts with an empty map on disk, so a store
		// without one was not made by a persisting secondary.
		if err := base.MkdirAll(cfg.Dir); err != nil {
			return nil, fmt.Errorf("rubble: secondary: %w", err)
		}
		if err := writeMap(base, base.PathJoin(cfg.Dir, MapFileName), nil); err != nil {
			return nil, err
		}
	}
	db, err := lsm.Open(slotFS{FS: base, s: s}, cfg.Dir, o)
	if err != nil {
		return nil, fmt.Errorf("rubble: secondary: %w", err)
	}
	s.db = db
	return s, nil
}

// DB is the secondary's store, for reads.
func (s *Secondary) DB() *lsm.DB { return s.db }

// FS is the store's file system: its own, where a table of the file
// map opens as its slot.
func (s *Secondary) FS() vfs.FS { return slotFS{FS: s.cfg.Local, s: s} }

// Pool is the secondary's slot pool.
func (s *Secondary) Pool() *Pool { return s.pool }

// Close closes the store.
func (s *Secondary) Close() error {
	err := s.db.Close()
	s.mu.Lock()
	s.closed = true
	if s.releaseTimer != nil {
		s.releaseTimer.Stop()
		s.releaseTimer = nil
	}
	freed, perr := s.releaseLocked()
	s.mu.Unlock()
	s.released(freed)
	if err == nil && perr != nil {
		err = fmt.Errorf("rubble: release slots: %w", perr)
	}
	return err
}

// releaseDelay is how long a removed table's slot waits for others to
// be released with it by one write of the map.
const releaseDelay = 5 * time.Millisecond

// releaseLocked persists the map (it no longer names the releasing
// slots' tables) and frees the releasing slots, returning them. If the
// map cannot be written the slots stay held (leaked, never reused: a map
// on disk naming a free slot could, reopened, open a table since
// overwritten).
func (s *Secondary) releaseLocked() ([]int, error) {
	if len(s.releasing) == 0 {
		return nil, nil
	}
	freed := s.releasing
	s.releasing = nil
	if err := s.persistLocked(); err != nil {
		return nil, err
	}
	for _, slot := range freed {
		delete(s.inUse, slot)
	}
	return freed, nil
}

// released tells cfg.Released of each freed slot (s.mu not held).
func (s *Secondary) released(freed []int) {
	if s.cfg.Released == nil {
		return
	}
	for _, slot := range freed {
		s.cfg.Released(slot)
	}
}

// releaseLater frees the releasing slots after releaseDelay.
func (s *Secondary) releaseLater() {
	s.mu.Lock()
	s.releaseTimer = nil
	if s.closed {
		s.mu.Unlock()
		return
	}
	freed, err := s.releaseLocked()
	s.mu.Unlock()
	if err != nil {
		log := s.cfg.Options.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("rubble: slots of removed tables stay held", "dir", s.cfg.Dir, "err", err)
	}
	s.released(freed)
}

// SetReplica switches the store between the secondary's role (true: it
// installs the primary's edits) and flushing and compacting itself,
// with beforeEdit as its lsm.Options.BeforeEdit (lsm.DB.SetReplica): a
// secondary that becomes its group's primary, or falls back to
// compacting locally. Its slot tables stay in its tree until its own
// compactions delete them, which releases their slots.
// While it is a primary (beforeEdit set), the tables it writes are
// captured for shipping (capture.go).
func (s *Secondary) SetReplica(replica bool, beforeEdit func(*lsm.VersionEdit) error) {
	s.captures.enable(!replica && beforeEdit != nil)
	s.db.SetReplica(replica, beforeEdit)
}

// Apply applies a primary's batch (lsm.Batch.Repr) at the primary's
// sequence number seq. Calls come in the primary's order.
func (s *Secondary) Apply(ctx context.Context, repr []byte, seq lsm.SeqNum) error {
	b, err := lsm.BatchFromRepr(repr)
	if err != nil {
		return fmt.Errorf("rubble: apply: %w", err)
	}
	return s.applyBatch(ctx, b, seq)
}

// applyBatch is Apply of a batch in hand (not read from its Repr).
func (s *Secondary) applyBatch(ctx context.Context, b *lsm.Batch, seq lsm.SeqNum) error {
	if err := s.db.ApplyAt(ctx, b, seq, nil); err != nil {
		return fmt.Errorf("rubble: apply: %w", err)
	}
	s.mu.Lock()
	if s.applied != nil {
		close(s.applied)
		s.applied = nil
	}
	s.mu.Unlock()
	return nil
}

// Install installs an edit the primary made (lsm.VersionEdit.Encode)
// with the file-map update giving the slot of each new table. It waits
// (until ctx ends) for the writes the edit's tables hold to be applied.
// A bad edit or map is refused whole: nothing is installed or changed.
func (s *Secondary) Install(ctx context.Context, edit []byte, files []FileSlot) error {
	e, err := lsm.DecodeVersionEdit(edit)
	if err != nil {
		return fmt.Errorf("rubble: install: %w", err)
	}
	if err := s.mapFiles(e, files); err != nil {
		return err
	}
	var covered lsm.SeqNum
	for _, nf := range e.NewFiles {
		covered = max(covered, nf.Meta.LargestSeq)
	}
	for {
		s.mu.Lock()
		if s.applied == nil {
			s.applied = make(chan struct{})
		}
		ch := s.applied
		s.mu.Unlock()
		if s.db.LastSeq() >= covered {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			s.unmapFiles(e)
			return fmt.Errorf("rubble: install: waiting for writes up to seq %d: %w", covered, ctx.Err())
		}
	}
	if err := s.db.InstallEdit(ctx, e); err != nil {
		s.unmapFiles(e)
		return fmt.Errorf("rubble: install: %w", err)
	}
	return nil
}

// mapFiles checks files against e and the pool and adds them to the map,
// all or nothing.
func (s *Secondary) mapFiles(e *lsm.VersionEdit, files []FileSlot) error {
	bySlot := map[int]uint64{}
	byTable := map[uint64]int{}
	for _, f := range files {
		if f.Slot < 0 || f.Slot >= len(s.pool.slots) {
			return fmt.Errorf("rubble: install: table %d in slot %d: the pool has %d slots", f.Table, f.Slot, len(s.pool.slots))
		}
		if t, dup := bySlot[f.Slot]; dup {
			return fmt.Errorf("rubble: install: slot %d given to tables %d and %d", f.Slot, t, f.Table)
		}
		bySlot[f.Slot] = f.Table
		byTable[f.Table] = f.Slot
	}
	shipped := shippedFiles(e)
	if len(byTable) != len(files) || len(files) != len(shipped) {
		return fmt.Errorf("rubble: install: %d slots for %d new tables", len(files), len(shipped))
	}
	for _, nf := range shipped {
		if _, ok := byTable[nf.Meta.FileNum]; !ok {
			return fmt.Errorf("rubble: install: new table %d has no slot", nf.Meta.FileNum)
		}
		if int64(nf.Meta.Size) > s.pool.slotSize {
			return fmt.Errorf("rubble: install: table %d is %d bytes, over the %d-byte slot", nf.Meta.FileNum, nf.Meta.Size, s.pool.slotSize)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range files {
		if s.inUse[f.Slot] {
			return fmt.Errorf("rubble: install: slot %d holds a live table", f.Slot)
		}
		if _, dup := s.byPath[s.tablePath(f.Table)]; dup {
			return fmt.Errorf("rubble: install: table %d is installed already", f.Table)
		}
	}
	for _, f := range files {
		s.byPath[s.tablePath(f.Table)] = f
		s.inUse[f.Slot] = true
	}
	if err := s.persistLocked(); err != nil {
		for _, f := range files {
			delete(s.byPath, s.tablePath(f.Table))
			delete(s.inUse, f.Slot)
		}
		return fmt.Errorf("rubble: install: %w", err)
	}
	// The map just written names none of the releasing slots' tables.
	freed := s.releasing
	s.releasing = nil
	for _, slot := range freed {
		delete(s.inUse, slot)
	}
	if len(freed) > 0 && s.cfg.Released != nil {
		s.mu.Unlock()
		s.released(freed)
		s.mu.Lock()
	}
	return nil
}

// persistLocked writes the file map (Persist), so that a store reopened
// finds every table its MANIFEST may name. A leftover entry of a
// released slot is harmless: the table is in no version.
func (s *Secondary) persistLocked() error {
	if !s.cfg.Persist {
		return nil
	}
	files := make([]FileSlot, 0, len(s.byPath))
	for _, f := range s.byPath {
		files = append(files, f)
	}
	base := s.cfg.Local
	return writeMap(base, base.PathJoin(s.cfg.Dir, MapFileName), files)
}

// shippedFiles are the new tables of e that a primary ships: all but
// those e moves, which its replicas hold already.
func shippedFiles(e *lsm.VersionEdit) []lsm.NewFile {
	moved := lsm.Moved(e)
	var out []lsm.NewFile
	for _, nf := range e.NewFiles {
		if !moved[nf.Meta.FileNum] {
			out = append(out, nf)
		}
	}
	return out
}

// unmapFiles takes e's new tables out of the map after a failed install
// (the store never saw them, so their slots are free again).
func (s *Secondary) unmapFiles(e *lsm.VersionEdit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, nf := range shippedFiles(e) {
		p := s.tablePath(nf.Meta.FileNum)
		if f, ok := s.byPath[p]; ok {
			delete(s.byPath, p)
			delete(s.inUse, f.Slot)
		}
	}
	_ = s.persistLocked() // the entries left are harmless (persistLocked)
}

func (s *Secondary) tablePath(n uint64) string {
	return s.cfg.Local.PathJoin(s.cfg.Dir, lsm.TableName(n))
}

// Tables is the file map: every live table and its slot.
func (s *Secondary) Tables() []FileSlot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]FileSlot, 0, len(s.byPath))
	for _, f := range s.byPath {
		out = append(out, f)
	}
	return out
}

// slotFS is the secondary store's file system: its own offloadfs, except
// that a table in the file map opens as its slot, and removing it (the
// store does when no version holds it) releases the slot.
type slotFS struct {
	vfs.FS
	s *Secondary
}

func (f slotFS) lookup(name string) (FileSlot, bool) {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	fs, ok := f.s.byPath[name]
	return fs, ok
}

func (f slotFS) Open(name string) (vfs.File, error) {
	if fs, ok := f.lookup(name); ok {
		return f.s.pool.fsys.VFS().Open(f.s.pool.slotName(fs.Slot))
	}
	return f.FS.Open(name)
}

// Create creates name on the store's own file system; a table file's
// bytes are captured while the store is a primary (capture.go).
func (f slotFS) Create(name string) (vfs.File, error) {
	file, err := f.FS.Create(name)
	if err != nil {
		return nil, err
	}
	if cp := f.s.captures.start(name); cp != nil {
		return &captureFile{File: file, c: &f.s.captures, cp: cp}, nil
	}
	return file, nil
}

func (f slotFS) Remove(name string) error {
	f.s.captures.drop(name)
	f.s.mu.Lock()
	fs, ok := f.s.byPath[name]
	if ok {
		// The slot is released once a map without its table is
		// persisted (releaseLocked), with the others removed meanwhile.
		delete(f.s.byPath, name)
		f.s.releasing = append(f.s.releasing, fs.Slot)
		if f.s.releaseTimer == nil && !f.s.closed {
			f.s.releaseTimer = time.AfterFunc(releaseDelay, f.s.releaseLater)
		}
	}
	f.s.mu.Unlock()
	if !ok {
		return f.FS.Remove(name)
	}
	return nil
}
