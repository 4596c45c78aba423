package rubble

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/pushdown"
)

// target is one secondary an edit is shipped to, as the primary's last
// note from it describes it.
type target struct {
	id   string
	note *note
	free []int // its free slots at the start of the edit, last taken first
}

// beforeEdit is the primary's lsm.Options.BeforeEdit: it ships e to the
// group's secondaries and appends it to the chain, returning once every
// member holds the record (installed it, or turned local). A record the
// chain could not take (this node is no longer the head) fails the
// edit, and the store with it: the node then rejoins by COPY.
func (s *Store) beforeEdit(e *lsm.VersionEdit) error {
	sec := s.sec.Load()
	// The edit's tables not shipped from their captures (none shipped at
	// all in the fallback) are captured no longer.
	defer sec.dropCaptures(e)
	m := s.DB().Metrics()
	s.mu.Lock()
	ctx, fellBack := s.ship, s.fellBack
	if fellBack && !s.cfg.Fallback && time.Since(s.fellAt) > 4*s.cfg.FallbackWindow {
		// Try shipping again: the local replicas are resynced, and the
		// next window measures it anew.
		s.log.Info("trying shipping again after the fallback", "since", time.Since(s.fellAt))
		s.fellBack, fellBack = false, false
		s.window = windowStart{at: time.Now(), ship: s.stats.ShipTime, flush: m.Flush.Duration, compa: m.Compact.Duration}
	}
	s.mu.Unlock()
	if fellBack {
		return nil
	}
	if s.cfg.Fallback || s.fallbackDue() {
		return s.fallBack(ctx)
	}
	if len(e.NewFiles) == 0 && len(e.DeletedFiles) == 0 {
		return nil // the tree does not change
	}
	start := time.Now()
	targets, resync := s.targets(ctx)
	shipped := shippedFiles(e)
	var tables [][]byte
	var size uint64
	var captured int
	reuse := func() {}
	if len(targets) > 0 {
		var err error
		if tables, size, captured, reuse, err = sec.shippedTables(shipped); err != nil {
			return err
		}
	}
	rc := &record{kind: recEdit, prev: s.DB().Fingerprint(), edit: e.Encode(nil), files: map[string][]FileSlot{}}
	var baseFiles []lsm.NewFile
	var baseTables [][]byte
	if len(resync) > 0 {
		// The local replicas get the whole tree as it is after e.
		base, err := s.DB().VersionAfter(e)
		if err == nil {
			baseFiles = base.NewFiles
			baseTables, _, err = readTables(sec.FS(), s.dbDir(), baseFiles)
		}
		if err != nil {
			s.log.Warn("resync: no base", "err", err)
			resync = nil
		} else {
			rc.base = base.Encode(nil)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := false // a slot write of the edit's tables failed
	send := func(t *target, files []lsm.NewFile, tables [][]byte, reused []FileSlot, what string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.shipTo(ctx, t, files, tables)
			if err != nil {
				mu.Lock()
				failed = true
				mu.Unlock()
			}
			if err == nil && len(reused) > 0 {
				err = s.fenceKept(ctx, t)
			}
			got = append(got, reused...)
			if err != nil {
				// The record goes without it: a secondary turns local
				// on it, a local replica stays so.
				s.log.Warn("ship: replica left out of the edit", "node", t.id, "what", what, "err", err)
				return
			}
			mu.Lock()
			rc.files[t.id] = got
			mu.Unlock()
		}()
	}
	for _, t := range targets {
		send(t, shipped, tables, nil, "edit")
	}
	for _, t := range resync {
		files, tables, reused := reuseKept(t.note, baseFiles, baseTables, rc)
		send(t, files, tables, reused, "resync")
	}
	wg.Wait()
	if !failed {
		reuse() // no slot write holds the captured tables any more
	}
	// The shipping the fallback weighs against local compaction: reading
	// and writing the tables, not the wait for the chain to take the
	// record (a replicated write waits as long).
	shipTime := time.Since(start)
	_, err := s.app.Append(ctx, rc.encode())
	s.mu.Lock()
	if err == nil {
		s.stats.ShippedEdits++
		s.stats.ShippedTables += uint64(len(shipped) * len(rc.files))
		s.stats.ShippedBytes += size * uint64(len(rc.files))
		s.stats.ShippedCaptured += uint64(captured)
		s.stats.ShipTime += shipTime
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("rubble: append edit: %w", err)
	}
	return nil
}

// shipTo writes the tables into free slots of t's pool over NVMe/TCP.
func (s *Store) shipTo(ctx context.Context, t *target, shipped []lsm.NewFile, tables [][]byte) ([]FileSlot, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	dev, err := s.cfg.Dialer.Dial(ctx, t.id)
	if err != nil {
		return nil, err
	}
	slots := make([]Slot, len(t.note.slots))
	for i, ext := range t.note.slots {
		slots[i] = Slot{Index: i, Extents: pushdown.File{Extents: ext}}
	}
	take := func(context.Context) (Slot, error) {
		n := len(t.free)
		if n == 0 {
			return Slot{}, fmt.Errorf("no free slot of %d", len(slots))
		}
		i := t.free[n-1]
		t.free = t.free[:n-1]
		return slots[i], nil
	}
	files, err := writeTables(ctx, dev, t.note.slotSize, take, shipped, tables)
	if err != nil && !errors.Is(err, context.Canceled) {
		s.cfg.Dialer.Drop(t.id)
	}
	return files, err
}

// targets are the members after this node (and a joining node) whose
// newest note says they are secondaries, each with its free slots (one
// edit is shipped at a time: the store calls BeforeEdit so); resync are
// those that compact locally and are due a resync (at most one try per
// resyncEvery each). It first waits, up to NoteWait, for a note from
// every member it has none from.
func (s *Store) targets(ctx context.Context) (ship, resync []*target) {
	deadline := time.Now().Add(s.cfg.NoteWait)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		missing := false
		for _, m := range s.chain.Members {
			if _, ok := s.notes[m]; !ok && m != s.cfg.ID {
				missing = true
			}
		}
		wait := time.Until(deadline)
		if !missing || wait <= 0 {
			break
		}
		ch := s.notesCh
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		case <-time.After(wait):
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			break
		}
	}
	for _, id := range append(slices.Clone(s.chain.Members), s.chain.Joining) {
		n, ok := s.notes[id]
		if id == "" || id == s.cfg.ID || !ok || n.mode == ModePrimary {
			continue
		}
		if n.mode == ModeLocal && (s.fellBack || s.cfg.Fallback || time.Since(s.resyncAt[id]) < resyncEvery) {
			continue
		}
		taken := map[int]bool{}
		for _, a := range s.pending {
			if a.node == id && a.seq > n.applied {
				taken[a.slot] = true
			}
		}
		t := &target{id: id, note: n}
		for i := len(n.held) - 1; i >= 0; i-- {
			if !n.held[i] && !taken[i] {
				t.free = append(t.free, i)
			}
		}
		if n.mode == ModeLocal {
			s.resyncAt[id] = time.Now()
			resync = append(resync, t)
		} else {
			ship = append(ship, t)
		}
	}
	return ship, resync
}

// resyncEvery spaces a primary's tries to resync a local replica: each
// writes its whole tree into the replica's pool.
const resyncEvery = 5 * time.Second

// fallbackDue reports whether, over the last window, shipping took
// longer than the primary's own flushes and compactions; it starts a
// new window when one has passed.
func (s *Store) fallbackDue() bool {
	m := s.DB().Metrics()
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &s.window
	if time.Since(w.at) < s.cfg.FallbackWindow {
		return false
	}
	ship := s.stats.ShipTime - w.ship
	local := (m.Flush.Duration - w.flush) + (m.Compact.Duration - w.compa)
	*w = windowStart{at: time.Now(), ship: s.stats.ShipTime, flush: m.Flush.Duration, compa: m.Compact.Duration}
	if ship > local && ship > time.Second {
		s.log.Warn("shipping is slower than compacting locally: the group falls back", "ship", ship, "local", local, "window", s.cfg.FallbackWindow)
		return true
	}
	return false
}

// fallBack appends the fallback record: from it on every replica
// compacts for itself, and this primary ships nothing.
func (s *Store) fallBack(ctx context.Context) error {
	if _, err := s.app.Append(ctx, (&record{kind: recFallback}).encode()); err != nil {
		return fmt.Errorf("rubble: append fallback: %w", err)
	}
	s.mu.Lock()
	s.fellBack, s.fellAt = true, time.Now()
	s.mu.Unlock()
	return nil
}
