package rubble

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/chain/lsmstore"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/vfs"
)

// Dialer connects a primary to another node's volume: the namespace its
// NVMe/TCP target exports, holding that node's slot pools.
type Dialer interface {
	Dial(ctx context.Context, node string) (SlotWriter, error)
	// Drop forgets node's connection after an error on it, so that the
	// next Dial connects again.
	Drop(node string)
}

// Fencer is a Dialer that fences the group's slot writes by the chain's
// epoch (TargetDialer, FenceSlots): the store tells it the epoch whose
// head this node is (0: none) whenever its view of the chain changes.
type Fencer interface {
	Fence(epoch uint64)
}

// Appender is the chain node a Store replicates through: Append puts a
// store record in the chain's order at the head and returns once every
// member holds it (chain.Node.Append).
type Appender interface {
	Append(ctx context.Context, record []byte) (uint64, error)
}

// StoreConfig configures OpenStore.
type StoreConfig struct {
	// ID is the node's ID in the cluster.
	ID string
	// FS is the node's offloadfs, on the volume its target exports; Dir
	// is the group's directory there: its pool in Dir/slots. Its store
	// is in Dir/db<N> on Local (a new N for each new store: Reset,
	// resync), default FS.
	FS    *offloadfs.FS
	Local vfs.FS
	Dir   string
	// Slots and SlotSize size the pool made on the first open; an
	// existing pool is used as it is.
	Slots    int
	SlotSize int64
	// Options are the store's kv/lsm options.
	Options lsm.Options
	// Dialer reaches the other nodes' volumes when this node is the
	// group's primary.
	Dialer Dialer
	// Fallback forces the fallback: the first edit this node makes as
	// primary is preceded by the fallback record, so every replica of
	// the group compacts for itself.
	Fallback bool
	// FallbackWindow is the period over which the primary compares the
	// time it spent shipping edits with the time its own flushes and
	// compactions took (default 30s); when shipping took longer, the
	// group falls back.
	FallbackWindow time.Duration
	// NoteWait bounds how long a primary's edit waits for a note from a
	// member it has none from (default 10s); past it the edit goes
	// without that member, which then compacts for itself.
	NoteWait time.Duration
	Log      *slog.Logger
}

// Store is one replica of a RubbleDB group as a chain.Store: a kv/lsm
// tree on the node's offloadfs in the layout of kv/chain/lsmstore, whose
// role follows the chain (Mode):
//
//   - The head is the primary: it flushes and compacts, and before each
//     edit is logged it writes the edit's new tables into a free slot of
//     every secondary's pool over NVMe/TCP and appends the edit, with
//     each secondary's file map, to the chain as a record
//     (chain.Node.Append), in one order with the writes. Its writes
//     carry its kv/lsm sequence numbers (chain.Op.Tag).
//   - A secondary applies each write at the primary's sequence number
//     and installs each edit record, never flushing or compacting; it
//     releases the slots of deleted tables once no version holds them
//     and says so in its note (chain.Noter), which the chain carries up
//     to the primary.
//   - A local replica flushes and compacts for itself: the fallback,
//     a replica that joined by COPY, and one that could not follow an
//     edit (its tree was not the primary's, a table was not shipped to
//     it or did not open). Any failure to follow makes a replica local:
//     it never holds a tree the primary did not have.
//
// The primary's free slots of a secondary: those its newest note does
// not hold, less those given out in records the note does not reflect
// yet (sequence number above the note's), less those being written. So
// a slot is reused only after the secondary let go of it.
type Store struct {
	cfg     StoreConfig
	log     *slog.Logger
	app     Appender
	applied atomic.Uint64
	sec     atomic.Pointer[Secondary]
	// ship is the context of the current tree's shipping, cancelled
	// before the tree closes (Reset, Close) so that an edit waiting on
	// the chain lets the close go on.
	ship       context.Context
	cancelShip context.CancelFunc

	// mu serializes the chain's writes (Apply, Reset, Import,
	// SetApplied) with role changes, and guards the fields below.
	mu       sync.Mutex
	mode     Mode
	chain    cluster.Chain
	notes    map[string]*note
	notesCh  chan struct{} // closed and replaced when notes change
	pending  []assigned
	fellBack bool // the group runs the fallback (this node sent or got its record)
	quiesced bool // Quiesce ran: no role change turns flushes or compactions on again
	stats    StoreStats
	window   windowStart
	fellAt   time.Time            // when the group fell back
	resyncAt map[string]time.Time // the primary's last resync try of each local replica
	dbName   string               // the store's directory in Dir, db<dbSeq>
	dbSeq    uint64
	closing  sync.WaitGroup // replaced stores being closed (retireLocked)
	// recent are a local replica's last writes with the primary's
	// sequence numbers (at most recentCap bytes): what a resync needs
	// besides the primary's tables (those its memtables hold).
	recent      []tagged
	recentBytes int
	// retired sums the flush and compaction work of the trees this
	// store closed (Reset, resync), so Work covers the process.
	retired lsm.Metrics
	// kept are the tables in this replica's slots that its tree before a
	// Reset held: their slots stay held (the note lists them) so that a
	// resync can map the primary's tables that are among them instead
	// of writing them again. The next resync, install as a secondary,
	// fallback or turn as primary lets them go, and so does keptFor
	// passing without a resync (a pool too full for the resync to fit
	// beside them, say): they only save writes.
	kept   []keptTable
	keptAt time.Time

	noteMu   sync.Mutex
	noteVer  uint64
	noteBody []byte
	noteAt   uint64 // noteVer the body was made at
	noteCh   chan struct{}
}

// tagged is a write as the primary numbered it.
type tagged struct {
	seq uint64
	op  chain.Op
}

// recentCap bounds a local replica's recent writes: room for more
// memtables than the primary lets wait for a flush (WaitForRoom).
func (s *Store) recentCap() int {
	m := s.cfg.Options.MemTableSize
	if m <= 0 {
		m = 4 << 20
	}
	return 10 * m
}

// assigned is a slot of node given to a table by the record at seq.
type assigned struct {
	seq  uint64
	node string
	slot int
}

type windowStart struct {
	at                 time.Time
	ship, flush, compa time.Duration
}

// StoreStats count a replica's shipping work.
type StoreStats struct {
	Mode Mode
	// Shipped: edits shipped as primary, their tables (counted once per
	// secondary) and bytes, and the time spent reading and writing them
	// into the secondaries (not the wait for the chain to take the edit).
	ShippedEdits, ShippedTables, ShippedBytes uint64
	ShipTime                                  time.Duration
	// ShippedCaptured: the tables of those edits shipped from the bytes
	// captured as they were written, not read back (capture.go).
	ShippedCaptured uint64
	// Installed: edits installed as a secondary; Resyncs: times a local
	// replica became a secondary again by installing the primary's
	// whole tree; Reused: the tables of those trees found in the
	// replica's slots already (kept across a Reset), not written again.
	Installed, Resyncs, Reused uint64
	// FellBack: the group runs the fallback.
	FellBack bool
}

var (
	_ chain.Store        = (*Store)(nil)
	_ chain.HeadStore    = (*Store)(nil)
	_ chain.Throttler    = (*Store)(nil)
	_ chain.ChainWatcher = (*Store)(nil)
	_ chain.Noter        = (*Store)(nil)
	_ chain.RangeScanner = (*Store)(nil)
)

// OpenStore opens the group's replica in cfg.Dir, making its pool on
// the first open. An existing store reopens with its persisted file map
// (as a local replica: whether it still matches its group's primary is
// not known); one that cannot be reopened is wiped, and the node gets
// the group's state by COPY when it joins, as every (re)started node
// does.
func OpenStore(ctx context.Context, cfg StoreConfig) (*Store, error) {
	if cfg.ID == "" || cfg.FS == nil || cfg.Dir == "" || cfg.Dialer == nil {
		return nil, errors.New("rubble: store needs an ID, a file system, a directory and a dialer")
	}
	if cfg.FallbackWindow <= 0 {
		cfg.FallbackWindow = 30 * time.Second
	}
	if cfg.NoteWait <= 0 {
		cfg.NoteWait = 10 * time.Second
	}
	lg := cfg.Log
	if lg == nil {
		lg = slog.Default()
	}
	s := &Store{cfg: cfg, log: lg.With("rubble", cfg.Dir), notes: map[string]*note{}, resyncAt: map[string]time.Time{}, notesCh: make(chan struct{}),
		noteVer: uint64(time.Now().UnixNano()), noteCh: make(chan struct{})}
	s.window.at = time.Now()
	if s.cfg.Local == nil {
		s.cfg.Local = cfg.FS.VFS()
	}
	local := s.cfg.Local
	if _, err := cfg.FS.Stat(s.poolDir()); err != nil {
		if err := cfg.FS.VFS().MkdirAll(cfg.Dir); err != nil {
			return nil, fmt.Errorf("rubble: %w", err)
		}
		if _, err := MakePoolAt(ctx, cfg.FS, s.poolDir(), cfg.Slots, cfg.SlotSize); err != nil {
			return nil, err
		}
	}
	// The store is in db<N>; a new one (Reset, resync) gets the next N
	// and the old one is removed once closed. More than one exist only
	// if that was cut short, and then none is trusted.
	if err := local.MkdirAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("rubble: %w", err)
	}
	names, err := local.List(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("rubble: %w", err)
	}
	var dbs []string
	for _, nm := range names {
		if n, ok := strings.CutPrefix(nm, "db"); ok {
			if k, err := strconv.ParseUint(n, 10, 64); err == nil {
				dbs = append(dbs, nm)
				s.dbSeq = max(s.dbSeq, k)
			}
		}
	}
	switch len(dbs) {
	case 0:
		s.dbName = s.nextDB()
	case 1:
		s.dbName = dbs[0]
	default:
		s.log.Warn("several stores (a reset or resync was cut short): starting empty", "stores", dbs)
		for _, nm := range dbs {
			if err := s.wipe(nm); err != nil {
				return nil, err
			}
		}
		s.dbName = s.nextDB()
	}
	sec, err := s.openSecondary(ctx, s.dbName)
	if err != nil {
		s.log.Warn("store does not reopen: starting empty", "err", err)
		if err := s.wipe(s.dbName); err != nil {
			return nil, err
		}
		if sec, err = s.openSecondary(ctx, s.dbName); err != nil {
			return nil, err
		}
	}
	s.sec.Store(sec)
	s.ship, s.cancelShip = context.WithCancel(context.Background())
	a, err := lsmstore.ReadApplied(sec.DB())
	if err != nil {
		sec.Close()
		return nil, err
	}
	s.applied.Store(a)
	if a > 0 {
		s.toLocalLocked("reopened a store holding writes")
	}
	return s, nil
}

func (s *Store) poolDir() string { return s.cfg.Dir + "/slots" }
func (s *Store) dbDir() string   { return s.cfg.Dir + "/" + s.dbName }

// nextDB names a new store directory.
func (s *Store) nextDB() string {
	s.dbSeq++
	return "db" + strconv.FormatUint(s.dbSeq, 10)
}

// retireLocked adds the work of old's tree to retired and closes and
// removes it in the background: closing waits for its flushes and
// compactions, and a primary's may wait on the chain node, whose lock
// the caller may hold (a COPY's Reset). Its context was cancelled, so
// they fail out.
func (s *Store) retireLocked(old *Secondary, name string) {
	addWork(&s.retired, old.DB().Metrics())
	s.closing.Add(1)
	go func() {
		defer s.closing.Done()
		if err := old.Close(); err != nil && !errors.Is(err, lsm.ErrClosed) {
			s.log.Info("closing a replaced store", "err", err)
		}
		if err := s.wipe(name); err != nil {
			s.log.Warn("removing a replaced store", "err", err)
		}
	}()
}

func (s *Store) openSecondary(ctx context.Context, name string) (*Secondary, error) {
	o := s.cfg.Options
	o.Logger = s.log
	return OpenSecondary(ctx, SecondaryConfig{FS: s.cfg.FS, Local: s.cfg.Local, Dir: s.cfg.Dir + "/" + name, PoolDir: s.poolDir(), Persist: true,
		Options: o, Released: func(int) { s.bumpNote() }})
}

// wipe removes the store in the group's directory name (not the pool),
// the directory itself included.
func (s *Store) wipe(name string) error {
	vfs := s.cfg.Local
	dir := s.cfg.Dir + "/" + name
	names, err := vfs.List(dir)
	if err != nil {
		return nil // no store
	}
	for _, nm := range names {
		if err := vfs.Remove(vfs.PathJoin(dir, nm)); err != nil {
			return fmt.Errorf("rubble: wipe %s: %w", dir, err)
		}
	}
	if err := vfs.Remove(dir); err != nil {
		return fmt.Errorf("rubble: wipe %s: %w", dir, err)
	}
	return nil
}

// Attach gives the store its chain node, through which a primary
// appends its edit records; call it before the node runs.
func (s *Store) Attach(a Appender) { s.app = a }

// Close closes the store, after the stores it replaced.
func (s *Store) Close() error {
	s.mu.Lock()
	s.cancelShip()
	s.mu.Unlock()
	err := s.sec.Load().Close()
	s.closing.Wait()
	return err
}

// Quiesce stops the store's flushes and compactions and waits, until ctx
// ends, for those running to finish: a node stopping gracefully calls it
// while its chain node still serves, before the node's view of the chain
// is closed. A primary's running flush or compaction ships its tables
// and appends its edit through the chain (BeforeEdit), so it must end
// while the node is still the head; one started after the chain view
// closed could not append its edit and would turn the store read-only.
// After Quiesce no role change turns them on again; writes still apply
// (to the memtables and WAL, which the next open replays), and Close
// then has no background work to wait for.
func (s *Store) Quiesce(ctx context.Context) error {
	s.mu.Lock()
	s.quiesced = true
	var before func(*lsm.VersionEdit) error
	if s.mode == ModePrimary {
		before = s.beforeEdit // the running work still ships
	}
	s.mu.Unlock()
	// SetReplica waits for an edit being logged, whose BeforeEdit may
	// wait on a chain that does not commit: the wait ends with ctx, and
	// the switch then happens when the edit ends (Close cancels its
	// shipping). New work does not start, but a running flush goes on
	// through the memtables queued.
	db := s.DB()
	switched := make(chan struct{})
	go func() {
		defer close(switched)
		db.SetReplica(true, before)
	}()
	select {
	case <-switched:
	case <-ctx.Done():
		return fmt.Errorf("rubble: quiesce: an edit still being logged: %w", ctx.Err())
	}
	for {
		m := db.Metrics()
		if !m.Flush.InProgress && m.Compact.InProgress == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rubble: quiesce: %d compactions and a flush (%v) still running: %w", m.Compact.InProgress, m.Flush.InProgress, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// DB is the store's tree (for metrics).
func (s *Store) DB() *lsm.DB { return s.sec.Load().DB() }

// Pool is the store's slot pool.
func (s *Store) Pool() *Pool { return s.sec.Load().Pool() }

// Work returns the current tree's metrics with the flush and
// compaction work of every tree the store had before added in: what the
// replica spent on flushing and compacting since it opened.
func (s *Store) Work() lsm.Metrics {
	s.mu.Lock()
	r := s.retired
	s.mu.Unlock()
	m := s.DB().Metrics()
	addWork(&m, r)
	return m
}

func addWork(m *lsm.Metrics, r lsm.Metrics) {
	m.Flush.Count += r.Flush.Count
	m.Flush.BytesWritten += r.Flush.BytesWritten
	m.Flush.Duration += r.Flush.Duration
	m.Compact.Count += r.Compact.Count
	m.Compact.BytesRead += r.Compact.BytesRead
	m.Compact.BytesWritten += r.Compact.BytesWritten
	m.Compact.Duration += r.Compact.Duration
}

// Stats returns the running totals.
func (s *Store) Stats() StoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Mode, st.FellBack = s.mode, s.fellBack
	return st
}

// bumpNote marks the note changed (the held slots or the mode).
func (s *Store) bumpNote() {
	s.noteMu.Lock()
	s.noteVer++
	close(s.noteCh)
	s.noteCh = make(chan struct{})
	s.noteMu.Unlock()
}

// toLocalLocked makes this replica compact for itself.
func (s *Store) toLocalLocked(why string) {
	if s.mode == ModeLocal {
		return
	}
	s.log.Info("compacting locally", "was", s.mode, "why", why)
	if !s.quiesced {
		s.sec.Load().SetReplica(false, nil)
	}
	s.mode = ModeLocal
	s.bumpNote()
}

// Note implements chain.Noter.
func (s *Store) Note() ([]byte, uint64, <-chan struct{}) {
	s.noteMu.Lock()
	v, ch := s.noteVer, s.noteCh
	if s.noteAt == v && s.noteBody != nil {
		b := s.noteBody
		s.noteMu.Unlock()
		return b, v, ch
	}
	s.noteMu.Unlock()
	// Made under mu, between two of the chain's writes, so the applied
	// point and the held slots agree.
	s.mu.Lock()
	sec := s.sec.Load()
	n := &note{mode: s.mode, applied: s.applied.Load(), slotSize: sec.Pool().SlotSize()}
	for _, sl := range sec.Pool().Slots() {
		n.slots = append(n.slots, sl.Extents.Extents)
	}
	n.held = make([]bool, len(n.slots))
	sec.mu.Lock()
	for sl := range sec.inUse {
		n.held[sl] = true
	}
	sec.mu.Unlock()
	for _, k := range s.kept {
		n.held[k.slot] = true
	}
	n.kept = slices.Clone(s.kept)
	s.mu.Unlock()
	b := n.encode()
	s.noteMu.Lock()
	defer s.noteMu.Unlock()
	if s.noteVer == v {
		s.noteBody, s.noteAt = b, v
	}
	return b, v, ch
}

// Noted implements chain.Noter: a member's note, and the assignments it
// now reflects dropped.
func (s *Store) Noted(from string, _ uint64, body []byte) {
	n, err := decodeNote(body)
	if err != nil {
		s.log.Warn("bad note", "from", from, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes[from] = n
	s.pending = slices.DeleteFunc(s.pending, func(a assigned) bool { return a.node == from && a.seq <= n.applied })
	close(s.notesCh)
	s.notesCh = make(chan struct{})
}

// SetChain implements chain.ChainWatcher: the head becomes the primary.
func (s *Store) SetChain(c cluster.Chain, self string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chain = c
	if f, ok := s.cfg.Dialer.(Fencer); ok {
		if c.Head() == self {
			f.Fence(c.Epoch)
		} else {
			f.Fence(0)
		}
	}
	if c.Epoch == 0 || c.Head() != self || s.mode == ModePrimary || s.quiesced {
		return
	}
	s.log.Info("primary: flushing and compacting", "was", s.mode, "epoch", c.Epoch)
	s.sec.Load().SetReplica(false, s.beforeEdit)
	s.mode, s.kept = ModePrimary, nil
	s.bumpNote()
}

// WaitForRoom implements chain.Throttler: the primary's writes never
// stall in Apply (its flushes wait for the chain), so they wait here.
func (s *Store) WaitForRoom(ctx context.Context) error {
	for {
		imm, l0 := s.DB().WriteBacklog()
		if imm < 6 && l0 < 24 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// ApplyHead implements chain.HeadStore: a write gets the primary's
// kv/lsm sequence number as its tag.
func (s *Store) ApplyHead(ctx context.Context, seq uint64, op chain.Op) (chain.Op, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if op.Record != nil {
		if rc, err := decodeRecord(op.Record); err == nil {
			s.noteAssignedLocked(seq, rc)
		}
		s.applied.Store(seq)
		return op, nil
	}
	b := lsmstore.WriteBatch(seq, op)
	if err := s.DB().Apply(ctx, b, nil); err != nil {
		return op, fmt.Errorf("rubble: apply %d: %w", seq, err)
	}
	op.Tag = uint64(b.Seq())
	s.applied.Store(seq)
	return op, nil
}

func (s *Store) noteAssignedLocked(seq uint64, rc *record) {
	for node, files := range rc.files {
		for _, f := range files {
			s.pending = append(s.pending, assigned{seq, node, f.Slot})
		}
	}
}

// Apply implements chain.Store.
func (s *Store) Apply(ctx context.Context, seq uint64, op chain.Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if want := s.applied.Load() + 1; seq != want {
		return fmt.Errorf("rubble: write %d out of order (next is %d)", seq, want)
	}
	if op.Record != nil {
		s.applyRecordLocked(ctx, seq, op.Record)
		s.applied.Store(seq)
		return nil
	}
	b := lsmstore.WriteBatch(seq, op)
	db := s.DB()
	if s.mode == ModeSecondary {
		if op.Tag > uint64(db.LastSeq()) {
			if err := s.sec.Load().applyBatch(ctx, b, lsm.SeqNum(op.Tag)); err != nil {
				return err
			}
			s.applied.Store(seq)
			return nil
		}
		s.toLocalLocked(fmt.Sprintf("write %d carries primary seq %d, this store is at %d", seq, op.Tag, db.LastSeq()))
	}
	if err := db.Apply(ctx, b, nil); err != nil {
		return fmt.Errorf("rubble: apply %d: %w", seq, err)
	}
	s.applied.Store(seq)
	if op.Tag != 0 {
		s.recent = append(s.recent, tagged{seq, op})
		s.recentBytes += len(op.Key) + len(op.Value) + 32
		for s.recentBytes > s.recentCap() {
			w := s.recent[0]
			s.recent = s.recent[1:]
			s.recentBytes -= len(w.op.Key) + len(w.op.Value) + 32
		}
	}
	return nil
}

// applyRecordLocked follows the primary's record at seq; a secondary
// that cannot turns local.
func (s *Store) applyRecordLocked(ctx context.Context, seq uint64, body []byte) {
	if len(s.kept) > 0 && time.Since(s.keptAt) > keptFor {
		s.log.Info("letting kept tables go: no resync came", "tables", len(s.kept), "since", s.keptAt)
		s.kept = nil
		s.bumpNote()
	}
	rc, err := decodeRecord(body)
	if err != nil {
		s.toLocalLocked(err.Error())
		return
	}
	if rc.kind == recFallback {
		s.fellBack, s.fellAt, s.kept = true, time.Now(), nil
		s.toLocalLocked("the group falls back")
		s.bumpNote()
		return
	}
	s.noteAssignedLocked(seq, rc)
	if files, ok := rc.files[s.cfg.ID]; ok && s.mode == ModeLocal && rc.base != nil {
		if err := s.resyncLocked(ctx, rc.base, files, rc.sums); err != nil {
			s.log.Info("resync refused: still compacting locally", "record", seq, "err", err)
		}
		return
	}
	if s.mode != ModeSecondary {
		return
	}
	files, ok := rc.files[s.cfg.ID]
	if !ok {
		s.toLocalLocked(fmt.Sprintf("edit %d shipped no tables here", seq))
		return
	}
	sec := s.sec.Load()
	e, err := lsm.DecodeVersionEdit(rc.edit)
	if err != nil {
		s.toLocalLocked(err.Error())
		return
	}
	var covered lsm.SeqNum
	for _, nf := range e.NewFiles {
		covered = max(covered, nf.Meta.LargestSeq)
	}
	if fp := sec.DB().Fingerprint(); fp != rc.prev || covered > sec.DB().LastSeq() {
		s.toLocalLocked(fmt.Sprintf("edit %d: tree %x, the primary's %x; writes to seq %d, applied %d", seq, fp, rc.prev, covered, sec.DB().LastSeq()))
		return
	}
	if err := sec.Install(ctx, rc.edit, files); err != nil {
		s.toLocalLocked(err.Error())
		return
	}
	s.stats.Installed++
	s.kept = nil // a secondary following its primary needs no resync
	s.bumpNote()
}

// Get implements chain.Store. A read that fails because its tree was
// replaced under it (closed by a resync or Reset) is read again from
// the new tree, which holds what the replica applied: the replacement
// is invisible to readers.
func (s *Store) Get(_ context.Context, key []byte) ([]byte, bool, error) {
	for {
		db := s.DB()
		v, found, err := lsmstore.Get(db, key)
		if err != nil && s.DB() != db {
			continue
		}
		return v, found, err
	}
}

// Applied implements chain.Store.
func (s *Store) Applied() uint64 { return s.applied.Load() }

// Snapshot implements chain.Store.
func (s *Store) Snapshot() (chain.Snapshot, error) {
	return lsmstore.NewSnapshot(s.DB(), s.applied.Load()), nil
}

// Scan implements chain.RangeScanner. A scan whose tree was replaced
// under it before it gave fn anything starts again on the new tree (as
// Get); one that gave fn some keys fails, since fn would see them twice.
func (s *Store) Scan(ctx context.Context, start, end []byte, fn func(key, value []byte) error) error {
	for {
		db := s.DB()
		gave := false
		err := lsmstore.Scan(ctx, db, start, end, func(k, v []byte) error {
			gave = true
			return fn(k, v)
		})
		if err != nil && !gave && ctx.Err() == nil && s.DB() != db {
			continue
		}
		return err
	}
}

// Reset implements chain.Store: the store starts over empty, every slot
// free, as a secondary (a COPY that brings data makes it local).
func (s *Store) Reset(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelShip()
	name := s.nextDB()
	sec, err := s.openSecondary(ctx, name)
	if err != nil {
		if werr := s.wipe(name); werr != nil {
			s.log.Warn("reset: clean up", "err", werr)
		}
		return err
	}
	if s.kept = append(s.kept, keptOf(s.sec.Load())...); len(s.kept) > 0 {
		s.keptAt = time.Now()
	}
	// The new tree is published before the old one is closed: a read
	// that fails on the closed tree then finds a new one to read again.
	old, oldName := s.sec.Swap(sec), s.dbName
	s.retireLocked(old, oldName)
	s.recent, s.recentBytes, s.dbName = nil, 0, name
	s.ship, s.cancelShip = context.WithCancel(context.Background())
	s.applied.Store(0)
	s.mode, s.pending, s.fellBack = ModeSecondary, nil, false
	s.bumpNote()
	return nil
}

// Import implements chain.Store: the KVs of a COPY, which the primary's
// tables do not hold, so the replica compacts for itself.
func (s *Store) Import(ctx context.Context, kvs []chain.KV) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(kvs) == 0 {
		return nil
	}
	s.toLocalLocked("joined by a COPY of the group's data")
	return s.DB().Apply(ctx, lsmstore.ImportBatch(kvs), nil)
}

// SetApplied implements chain.Store.
func (s *Store) SetApplied(ctx context.Context, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq == 0 && s.mode == ModeSecondary {
		// A COPY of an empty group: nothing to record, and the store
		// takes the primary's first write at the primary's numbers.
		return nil
	}
	if seq > 0 {
		s.toLocalLocked("joined by a COPY at a chain position past the start")
	}
	if err := s.DB().Apply(ctx, lsmstore.AppliedBatch(seq), &lsm.WriteOptions{Sync: true}); err != nil {
		return fmt.Errorf("rubble: set applied: %w", err)
	}
	s.applied.Store(seq)
	return nil
}

// resyncLocked makes a local replica a secondary again: a new store (in
// a new directory) gets the primary's writes past its tables
// from the recent writes, at the primary's numbers, then the primary's
// whole tree (base, written into this node's slots: files), and
// replaces the old store, whose slots it frees. Any failure leaves the
// old store as it was.
func (s *Store) resyncLocked(ctx context.Context, base []byte, files []FileSlot, sums map[uint64]uint32) error {
	e, err := lsm.DecodeVersionEdit(base)
	if err != nil {
		return err
	}
	var upTo lsm.SeqNum // every write of the primary up to it is in base
	for _, nf := range e.NewFiles {
		upTo = max(upTo, nf.Meta.LargestSeq)
	}
	if len(s.recent) == 0 || s.recent[0].op.Tag > uint64(upTo) {
		return fmt.Errorf("the writes past the primary's tables (seq %d) are not all among the recent ones", upTo)
	}
	reused, err := s.checkKeptLocked(e, files, sums)
	if err != nil {
		s.kept = nil // the next resync writes every table
		s.bumpNote()
		return err
	}
	name := s.nextDB()
	sec, err := s.openSecondary(ctx, name)
	if err == nil {
		sec.DB().AdvanceSeq(upTo)
		for _, w := range s.recent {
			if lsm.SeqNum(w.op.Tag) > upTo && err == nil {
				err = sec.Apply(ctx, lsmstore.WriteBatch(w.seq, w.op).Repr(), lsm.SeqNum(w.op.Tag))
			}
		}
		if err == nil {
			err = sec.Install(ctx, base, files)
		}
		if err != nil {
			sec.Close()
		}
	}
	if err != nil {
		if werr := s.wipe(name); werr != nil {
			s.log.Warn("resync: clean up", "err", werr)
		}
		return err
	}
	s.retireLocked(s.sec.Swap(sec), s.dbName) // published first, as in Reset
	s.dbName, s.mode, s.recent, s.recentBytes, s.kept = name, ModeSecondary, nil, 0, nil
	s.stats.Resyncs++
	s.stats.Reused += uint64(reused)
	s.log.Info("resynced: a secondary again", "tables", len(files), "reused", reused, "upTo", upTo)
	s.bumpNote()
	return nil
}

// keptFor bounds how long a replica keeps tables for a resync
// (Store.kept): a few of the primary's resync tries (resyncEvery).
const keptFor = 6 * resyncEvery

// keptOf are the tables of sec's tree that are in its slots: what a
// replica starting over (Reset) keeps for a resync (Store.kept).
func keptOf(sec *Secondary) []keptTable {
	v, err := sec.DB().VersionAfter(&lsm.VersionEdit{})
	if err != nil {
		return nil
	}
	sec.mu.Lock()
	defer sec.mu.Unlock()
	var out []keptTable
	for _, nf := range v.NewFiles {
		m := nf.Meta
		if f, ok := sec.byPath[sec.tablePath(m.FileNum)]; ok {
			out = append(out, keptTable{table: m.FileNum, slot: f.Slot, size: m.Size, smallestSeq: uint64(m.SmallestSeq), largestSeq: uint64(m.LargestSeq)})
		}
	}
	return out
}

// checkKeptLocked checks a resync's file map against the kept tables:
// a kept slot may carry only the very table kept in it (keptTable.same
// the base's table), since the primary did not write it, and only if
// its bytes are the primary's table's (sums, checkSums). A table with a
// sum in a slot this replica does not keep is checked too: the primary
// made the record from a note that may be older than this replica's
// letting its kept tables go (keptFor passing, which the record that
// resyncs may itself trigger), so it may not have written that slot
// either; a slot it did write holds the table, whose bytes match. It
// returns how many tables the map takes from kept slots.
func (s *Store) checkKeptLocked(base *lsm.VersionEdit, files []FileSlot, sums map[uint64]uint32) (int, error) {
	bySlot := map[int]keptTable{}
	for _, k := range s.kept {
		bySlot[k.slot] = k
	}
	metas := map[uint64]*lsm.FileMeta{}
	for _, nf := range base.NewFiles {
		metas[nf.Meta.FileNum] = nf.Meta
	}
	var check []FileSlot
	fromKept := 0
	for _, f := range files {
		k, ok := bySlot[f.Slot]
		if !ok {
			if _, summed := sums[f.Table]; summed {
				if metas[f.Table] == nil {
					return 0, fmt.Errorf("table %d mapped to slot %d is not in the primary's tree", f.Table, f.Slot)
				}
				check = append(check, f)
			}
			continue
		}
		if m := metas[f.Table]; m == nil || !k.same(m) {
			return 0, fmt.Errorf("table %d mapped to slot %d, which keeps table %d (size %d, seqs %d-%d)", f.Table, f.Slot, k.table, k.size, k.smallestSeq, k.largestSeq)
		}
		check = append(check, f)
		fromKept++
	}
	if err := s.checkSums(check, metas, sums); err != nil {
		return 0, err
	}
	return fromKept, nil
}

// reuseKept splits a resync's base tables for the replica n describes:
// those it keeps in a slot already (keptTable.same) are mapped to that
// slot, their checksums added to rc.sums, and the rest, with their
// bytes, are to be written.
func reuseKept(n *note, files []lsm.NewFile, tables [][]byte, rc *record) (ship []lsm.NewFile, shipTables [][]byte, reused []FileSlot) {
	if len(n.kept) == 0 {
		return files, tables, nil
	}
	byTable := map[uint64]keptTable{}
	for _, k := range n.kept {
		byTable[k.table] = k
	}
	for i, nf := range files {
		if k, ok := byTable[nf.Meta.FileNum]; ok && k.same(nf.Meta) {
			reused = append(reused, FileSlot{Table: k.table, Slot: k.slot})
			if rc.sums == nil {
				rc.sums = map[uint64]uint32{}
			}
			rc.sums[k.table] = crc32.Checksum(tables[i], castagnoli)
			continue
		}
		ship = append(ship, nf)
		shipTables = append(shipTables, tables[i])
	}
	return ship, shipTables, reused
}

// fenceKept fences t's target (Dialer.Dial) before a record maps tables
// to slots t kept: the replica checks those slots' bytes (record.sums)
// when the record arrives, after this, so no deposed head's write can
// land in them later (FenceSlots). A resync that writes tables has
// fenced already; one that writes none would not have.
func (s *Store) fenceKept(ctx context.Context, t *target) error {
	if _, err := s.cfg.Dialer.Dial(ctx, t.id); err != nil {
		s.cfg.Dialer.Drop(t.id)
		return err
	}
	return nil
}

// checkSums checks the bytes of the kept slots files maps to against
// the primary's checksums: a kept slot a deposed head wrote into while
// this node's target held no reservation (it restarted) is not taken.
func (s *Store) checkSums(files []FileSlot, metas map[uint64]*lsm.FileMeta, sums map[uint64]uint32) error {
	pool := s.sec.Load().Pool()
	for _, f := range files {
		sum, ok := sums[f.Table]
		if !ok {
			return fmt.Errorf("kept table %d in slot %d has no checksum", f.Table, f.Slot)
		}
		b, err := readSlot(pool, f.Slot, int64(metas[f.Table].Size))
		if err != nil {
			return fmt.Errorf("kept table %d in slot %d: %w", f.Table, f.Slot, err)
		}
		if got := crc32.Checksum(b, castagnoli); got != sum {
			return fmt.Errorf("kept table %d in slot %d: checksum %08x, the primary's %08x", f.Table, f.Slot, got, sum)
		}
	}
	return nil
}

// readSlot reads the first n bytes of slot i of p.
func readSlot(p *Pool, i int, n int64) ([]byte, error) {
	if n > p.slotSize {
		return nil, fmt.Errorf("%d bytes, over the %d-byte slot", n, p.slotSize)
	}
	f, err := p.fsys.VFS().Open(p.slotName(i))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}
