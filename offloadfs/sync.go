package offloadfs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
)

// The synchronizer keeps the target's copy of the file system's extent
// maps in step with its committed metadata, as BPF-oF's does: commits
// hand it the inodes whose maps changed (without waiting for it), and a
// background goroutine pushes their maps in batches (Extent Map Put).
//
// The rules it keeps:
//
//   - Only committed maps reach the target: a map is exported with the
//     commit lock held and only if the inode has no uncommitted change, so
//     every map the target holds is one a crash cannot take back. An inode
//     changed again since is skipped; its own commit will report it.
//   - Per inode the latest change wins: changes queue in a map keyed by
//     inode, so a file appended to a thousand times between rounds costs
//     one update.
//   - It knows what the target holds (acked): a version is acked once the
//     target confirmed the Put. Requests are sent only for files whose
//     current version is acked; everything else runs on the host.
//   - Failures are retried with backoff, resending freely (the target
//     ignores versions it has, so a resend is harmless).
//   - A target that lost its maps (restarted) is found by a request
//     refused as stale, a missing function or a broken connection, or by
//     a periodic check of a sample of inodes: the synchronizer queries the
//     versions of the inodes involved, and if the target holds other than
//     what was acked, forgets everything acked and pushes every live
//     file's map again. The same full push runs at mount.
//   - Maps the target holds from an earlier file system on the namespace
//     (same host NQN, newer versions) would make puts be ignored forever;
//     when a batch has ignored updates, the synchronizer checks what the
//     target holds and replaces foreign versions (removal with version 0,
//     then the put).

// Synchronizer tuning.
const (
	// syncBatch bounds the changes pushed in one round, so the commit
	// lock is held briefly while their maps are exported.
	syncBatch = 4096
	// walkChunk bounds the inodes examined per lock hold in a full push.
	walkChunk    = 1024
	syncRetryMin = 20 * time.Millisecond
	syncRetryMax = 5 * time.Second
	// syncCheckEvery is how often the synchronizer asks the target for
	// the versions of a sample of acked inodes (syncCheckSample of them),
	// so that a target that restarted while no request ran is caught up
	// before the next request finds out.
	syncCheckEvery  = 10 * time.Second
	syncCheckSample = 64
)

type syncer struct {
	fsys   *FS
	remote Remote
	log    *slog.Logger
	ctx    context.Context // canceled by close
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	pending map[uint64]Change   // committed changes not yet pushed, by inode
	acked   map[uint64]uint64   // versions the target confirmed holding, by inode
	suspect map[uint64]struct{} // inodes whose held versions to check
	resync  bool                // push every live file's map
	busy    bool                // a round is running
	idle    chan struct{}       // closed while there is nothing to do
	shown   int                 // pending count last reported to the gauge
}

func newSyncer(fsys *FS, r Remote) *syncer {
	ctx, cancel := context.WithCancel(context.Background())
	return &syncer{
		fsys:    fsys,
		remote:  r,
		log:     fsys.log,
		ctx:     ctx,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		pending: map[uint64]Change{},
		acked:   map[uint64]uint64{},
		suspect: map[uint64]struct{}{},
		resync:  true, // the first round pushes every map
		idle:    make(chan struct{}),
	}
}

// start runs the background goroutine; close stops it.
func (s *syncer) start() {
	go s.run()
	s.kick()
}

func (s *syncer) close() {
	s.cancel()
	<-s.done
	s.mu.Lock()
	s.fsys.opts.Metrics.pendingDelta(-s.shown)
	s.shown = 0
	s.mu.Unlock()
}

func (s *syncer) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// settleLocked updates the idle channel and the pending gauge.
func (s *syncer) settleLocked() {
	idle := len(s.pending) == 0 && len(s.suspect) == 0 && !s.resync && !s.busy
	select {
	case <-s.idle:
		if !idle {
			s.idle = make(chan struct{})
		}
	default:
		if idle {
			close(s.idle)
		}
	}
	s.fsys.opts.Metrics.pendingDelta(len(s.pending) - s.shown)
	s.shown = len(s.pending)
}

// enqueue takes a commit's changes. It runs on the committing goroutine,
// with commits held up, so it only records them.
func (s *syncer) enqueue(changes []Change) {
	s.mu.Lock()
	for _, c := range changes {
		if p, ok := s.pending[c.Ino]; !ok || c.Version >= p.Version {
			s.pending[c.Ino] = c
		}
	}
	s.settleLocked()
	s.mu.Unlock()
	s.kick()
}

// holds reports whether the target holds exactly the planned version of
// every file, as far as the synchronizer knows.
func (s *syncer) holds(snaps []fileSnap) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range snaps {
		if v, ok := s.acked[snaps[i].in.ino]; !ok || v != snaps[i].version {
			return false
		}
	}
	return true
}

// suspectInodes asks for the target's versions of the inodes to be
// checked: a request naming them was refused as stale, or its connection
// broke.
func (s *syncer) suspectInodes(snaps []fileSnap) {
	s.mu.Lock()
	for i := range snaps {
		s.suspect[snaps[i].in.ino] = struct{}{}
	}
	s.settleLocked()
	s.mu.Unlock()
	s.kick()
}

// sample marks a few acked inodes for checking (see syncCheckEvery).
func (s *syncer) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for ino := range s.acked { // map order: a different sample each time
		if n == syncCheckSample {
			break
		}
		s.suspect[ino] = struct{}{}
		n++
	}
	s.settleLocked()
}

func (s *syncer) pendingCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// wait returns once the synchronizer has nothing left to do: every change
// queued before the call is pushed and acked.
func (s *syncer) wait(ctx context.Context) error {
	s.mu.Lock()
	ch := s.idle
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return iofs.ErrClosed
	}
}

func (s *syncer) run() {
	defer close(s.done)
	check := time.NewTicker(syncCheckEvery)
	defer check.Stop()
	var delay time.Duration
	failing := false
	for {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		} else {
			select {
			case <-s.ctx.Done():
				return
			case <-s.wake:
			case <-check.C:
				s.sample()
			}
		}
		more, err := s.round()
		if s.ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			s.fsys.ctr.syncErrors.Add(1)
			s.fsys.opts.Metrics.syncError()
			delay = min(max(2*delay, syncRetryMin), syncRetryMax)
			// Say so once per streak of failures, not on every retry.
			lvl := slog.LevelDebug
			if !failing {
				lvl = slog.LevelWarn
			}
			s.log.Log(s.ctx, lvl, "offloadfs: extent map sync failed; retrying", "err", err, "retry_in", delay)
			failing = true
		default:
			if failing {
				s.log.Info("offloadfs: extent map sync recovered")
			}
			failing, delay = false, 0
			if more {
				s.kick()
			}
		}
	}
}

// round does one unit of work: check suspect inodes, then push every map
// (after a loss, or at mount) or a batch of pending changes. On error
// the work goes back for the next round.
func (s *syncer) round() (more bool, err error) {
	s.mu.Lock()
	s.busy = true
	suspects := slices.Collect(maps.Keys(s.suspect))
	clear(s.suspect)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy = false
		more = len(s.pending) > 0 || len(s.suspect) > 0 || s.resync
		s.settleLocked()
		s.mu.Unlock()
	}()

	if len(suspects) > 0 {
		lost, err := s.verify(suspects)
		if err != nil {
			s.mu.Lock()
			for _, ino := range suspects {
				s.suspect[ino] = struct{}{}
			}
			s.mu.Unlock()
			return false, err
		}
		if lost {
			s.log.Warn("offloadfs: the target lost extent maps (restarted?); pushing every map again")
			s.fsys.ctr.resyncs.Add(1)
			s.fsys.opts.Metrics.resync()
			s.mu.Lock()
			clear(s.acked)
			s.resync = true
			s.mu.Unlock()
		}
	}

	s.mu.Lock()
	resync := s.resync
	s.resync = false
	var batch []Change
	if !resync {
		for ino, c := range s.pending {
			if len(batch) == syncBatch {
				break
			}
			batch = append(batch, c)
			delete(s.pending, ino)
		}
	}
	s.mu.Unlock()

	if resync {
		if err := s.pushAll(); err != nil {
			s.mu.Lock()
			s.resync = true
			s.mu.Unlock()
			return false, err
		}
		return false, nil
	}
	if len(batch) == 0 {
		return false, nil
	}
	slices.SortFunc(batch, func(a, b Change) int { return cmpUint(a.Ino, b.Ino) })
	if err := s.push(s.fsys.committedUpdates(batch)); err != nil {
		s.mu.Lock()
		for _, c := range batch {
			if p, ok := s.pending[c.Ino]; !ok || p.Version < c.Version {
				s.pending[c.Ino] = c
			}
		}
		s.mu.Unlock()
		return false, err
	}
	return false, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// verify asks the target which versions it holds of inodes and reports
// whether it holds anything other than what it acked: it lost its maps.
func (s *syncer) verify(inos []uint64) (lost bool, err error) {
	held, err := s.remote.ExtentMapVersions(s.ctx, inos)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ino := range inos {
		if a, ok := s.acked[ino]; ok && held[i] != a {
			return true, nil
		}
	}
	return false, nil
}

// pushAll pushes the committed map of every live file, a chunk of inodes
// at a time. It runs at mount and after the target lost the maps (it
// restarted), so first it claims the owner's reservation again, which a
// restart drops too: if another host took it meanwhile, this mount is no
// longer the owner and the file system fails.
func (s *syncer) pushAll() error {
	if o := s.fsys.owner; o != nil {
		if err := o.claim(s.ctx, claimFree); err != nil {
			if errors.Is(err, ErrOwned) {
				return s.fsys.fail(fmt.Errorf("%w (%w)", ErrFenced, err))
			}
			return err
		}
		// Reservations do not survive a target restart: the generation
		// says whether another host mounted meanwhile.
		s.fsys.commitMu.Lock()
		err := s.fsys.checkFence()
		s.fsys.commitMu.Unlock()
		if err != nil {
			return err
		}
	}
	for next := uint64(firstIno); ; {
		ups, after, err := s.fsys.liveMaps(next, walkChunk)
		if err != nil {
			return err
		}
		if err := s.push(ups); err != nil {
			return err
		}
		if after == 0 {
			return nil
		}
		next = after
	}
}

// push sends updates and records what the target confirmed.
func (s *syncer) push(ups []pushdown.MapUpdate) error {
	if len(ups) == 0 {
		return nil
	}
	_, ignored, err := s.remote.UpdateExtentMaps(s.ctx, ups)
	if errors.Is(err, host.ErrBadExtentMap) {
		// The target refuses one of them: send them one by one so the
		// others get through. A map it will not take stays unacked, so
		// requests naming that file run on the host.
		if len(ups) > 1 {
			for i := range ups {
				if err := s.push(ups[i : i+1]); err != nil {
					return err
				}
			}
			return nil
		}
		s.log.Error("offloadfs: the target refuses an extent map; requests naming the file will run on the host",
			"ino", ups[0].ID, "version", ups[0].Version, "extents", len(ups[0].Extents), "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	if ignored > 0 {
		if err := s.replaceForeign(ups); err != nil {
			return err
		}
	}
	s.mu.Lock()
	var puts, removes int
	for _, u := range ups {
		if u.Remove {
			delete(s.acked, u.ID)
			removes++
		} else {
			s.acked[u.ID] = u.Version
			puts++
		}
	}
	s.mu.Unlock()
	s.fsys.ctr.mapsPut.Add(uint64(puts))
	s.fsys.ctr.mapsRemoved.Add(uint64(removes))
	s.fsys.opts.Metrics.mapUpdates(puts, removes)
	return nil
}

// replaceForeign checks the puts of a batch the target partly ignored.
// An ignored put of a version the target already holds is fine (a
// resend); one ignored because the target holds a newer version, or a
// newer removal, met maps of an earlier file system on the namespace,
// which are dropped (removal with version 0) and replaced.
func (s *syncer) replaceForeign(ups []pushdown.MapUpdate) error {
	var puts []pushdown.MapUpdate
	var inos []uint64
	for _, u := range ups {
		if !u.Remove {
			puts = append(puts, u)
			inos = append(inos, u.ID)
		}
	}
	if len(puts) == 0 {
		return nil
	}
	held, err := s.remote.ExtentMapVersions(s.ctx, inos)
	if err != nil {
		return err
	}
	var fix []pushdown.MapUpdate
	for i, u := range puts {
		if held[i] != u.Version {
			fix = append(fix, pushdown.MapUpdate{File: pushdown.File{ID: u.ID}, Remove: true}, u)
		}
	}
	if len(fix) == 0 {
		return nil
	}
	s.log.Info("offloadfs: replacing extent maps the target held from an earlier file system", "inodes", len(fix)/2)
	_, _, err = s.remote.UpdateExtentMaps(s.ctx, fix)
	return err
}

// committedUpdates returns the updates that bring the target to the
// committed state of the changed inodes. It holds the commit lock, so no
// commit is half done: an inode with no change in the running
// transaction is exactly as last committed, and durable. Inodes changed
// again since are left out; their commit will report them.
func (fsys *FS) committedUpdates(changes []Change) []pushdown.MapUpdate {
	fsys.commitMu.Lock()
	defer fsys.commitMu.Unlock()
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if fsys.failed != nil {
		return nil
	}
	ups := make([]pushdown.MapUpdate, 0, len(changes))
	for _, c := range changes {
		if _, dirty := fsys.txn.changed[c.Ino]; dirty {
			continue
		}
		in, err := fsys.loadInode(c.Ino)
		if err != nil {
			fsys.log.Error("offloadfs: extent map sync: loading inode", "ino", c.Ino, "err", err)
			continue
		}
		if u, ok := fsys.committedUpdate(in); ok {
			ups = append(ups, u)
		}
	}
	return ups
}

// committedUpdate is the update for one inode not changed since its last
// commit. Callers hold commitMu and mu.
func (fsys *FS) committedUpdate(in *inode) (pushdown.MapUpdate, bool) {
	if in.typ != typeFile {
		// Freed (or reused as a directory): no map. The version is the
		// removal's, so a late older map does not come back.
		return pushdown.MapUpdate{File: pushdown.File{ID: in.ino, Version: in.version}, Remove: true}, in.version != 0
	}
	m := fsys.exported(in)
	if len(m.Extents) > pushdown.MaxMapExtents {
		// Too fragmented for the target's maps: requests naming it run on
		// the host.
		return pushdown.MapUpdate{}, false
	}
	return pushdown.MapUpdate{File: m}, true
}

// liveMaps returns the committed maps of live files among the allocated
// inodes from ino on, examining at most limit of them, and the inode to
// continue from (0 when done).
func (fsys *FS) liveMaps(ino uint64, limit int) ([]pushdown.MapUpdate, uint64, error) {
	fsys.commitMu.Lock()
	defer fsys.commitMu.Unlock()
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if err := fsys.usable(); err != nil {
		return nil, 0, err
	}
	n := fsys.sb.inodeCount
	var ups []pushdown.MapUpdate
	for seen := 0; seen < limit; seen++ {
		if ino = fsys.ibits.nextSet(ino, n); ino >= n {
			return ups, 0, nil
		}
		in, err := fsys.loadInode(ino)
		ino++
		if err != nil {
			fsys.log.Error("offloadfs: extent map sync: loading inode", "ino", ino-1, "err", err)
			continue
		}
		if _, dirty := fsys.txn.changed[in.ino]; dirty || in.typ != typeFile {
			continue
		}
		if u, ok := fsys.committedUpdate(in); ok {
			ups = append(ups, u)
		}
	}
	return ups, ino, nil
}

// SyncRemote commits every change made so far (as Sync does) and waits
// until the synchronizer has pushed the resulting extent maps to the
// target and the target has confirmed them: function requests planned
// after it returns are sent to the target rather than run on the host.
// It is for tests, benchmarks and callers about to offload a burst of
// work; nothing else needs it. It fails with ErrNoRemote without a
// Remote.
func (fsys *FS) SyncRemote(ctx context.Context) error {
	if fsys.syncer == nil {
		return ErrNoRemote
	}
	if err := fsys.Sync(ctx); err != nil {
		return err
	}
	return fsys.syncer.wait(ctx)
}
