package rubble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/vfs"
)

// SlotWriter is the primary's way into a secondary's volume: the
// namespace its target exports, over NVMe/TCP (a host.Namespace).
type SlotWriter interface {
	WriteAtContext(ctx context.Context, p []byte, off int64) (int, error)
	Flush(ctx context.Context) error
	BlockSize() int
}

// Replica is one secondary as its primary sees it.
type Replica struct {
	// Dev writes into the secondary's volume.
	Dev SlotWriter
	// Slots and SlotSize are the secondary's pool (Pool.Slots,
	// Pool.SlotSize), read from it once: slots never move.
	Slots    []Slot
	SlotSize int64
	// Send delivers an edit (lsm.VersionEdit.Encode) and the slots of
	// its new tables to the secondary, down the chain, and returns once
	// the secondary has installed it (Secondary.Install).
	Send func(ctx context.Context, edit []byte, files []FileSlot) error
}

// ShipperConfig configures NewShipper.
type ShipperConfig struct {
	// FS and Dir are the primary store's: where its tables are read.
	FS  vfs.FS
	Dir string
	// Replicas are the secondaries, in chain order.
	Replicas []Replica
	// SlotWait bounds how long shipping a table waits for a secondary to
	// release a slot when its pool is full (default 30s); past it the
	// edit fails.
	SlotWait time.Duration
}

// Shipper ships the primary's flushes and compactions: plugged in as the
// primary store's lsm.Options.BeforeEdit, for each table an edit adds it
// takes a free slot in every secondary's pool, writes the table into it
// by the slot's extents, flushes, and sends the edit with the file-map
// update to every secondary. The edit is installed on the primary only
// after every secondary has installed it.
//
// Invariant: a slot is free to the primary only if it was never given
// out or the secondary has released it (Release), so a table a
// secondary may still read is never overwritten.
type Shipper struct {
	cfg  ShipperConfig
	reps []*replicaState

	mu    sync.Mutex
	stats ShipStats
}

type replicaState struct {
	Replica
	mu       sync.Mutex
	free     []int // slots the secondary does not hold, last given out first
	released chan struct{}
}

// ShipStats count what a shipper has shipped.
type ShipStats struct {
	Edits, Tables uint64
	// Bytes is table bytes written to secondaries (the sum over them).
	Bytes uint64
}

// NewShipper makes a shipper; every slot of every pool starts free.
func NewShipper(cfg ShipperConfig) (*Shipper, error) {
	if cfg.SlotWait <= 0 {
		cfg.SlotWait = 30 * time.Second
	}
	s := &Shipper{cfg: cfg}
	for i, r := range cfg.Replicas {
		if r.Dev == nil || r.Send == nil || len(r.Slots) == 0 || r.SlotSize <= 0 {
			return nil, fmt.Errorf("rubble: shipper: replica %d: want a device, a sender and a pool", i)
		}
		rs := &replicaState{Replica: r, released: make(chan struct{})}
		for j := len(r.Slots) - 1; j >= 0; j-- {
			rs.free = append(rs.free, r.Slots[j].Index)
		}
		s.reps = append(s.reps, rs)
	}
	return s, nil
}

// Stats returns the running totals.
func (s *Shipper) Stats() ShipStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Release frees slot on replica i: the secondary no longer holds a table
// there (SecondaryConfig.Released).
func (s *Shipper) Release(i, slot int) {
	r := s.reps[i]
	r.mu.Lock()
	r.free = append(r.free, slot)
	close(r.released)
	r.released = make(chan struct{})
	r.mu.Unlock()
}

// take takes a free slot of r, waiting for a release until ctx ends.
func (r *replicaState) take(ctx context.Context) (Slot, error) {
	for {
		r.mu.Lock()
		if n := len(r.free); n > 0 {
			i := r.free[n-1]
			r.free = r.free[:n-1]
			r.mu.Unlock()
			return r.Slots[i], nil
		}
		ch := r.released
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Slot{}, fmt.Errorf("rubble: no free slot of %d: %w", len(r.Slots), ctx.Err())
		}
	}
}

func (r *replicaState) put(slot int) {
	r.mu.Lock()
	r.free = append(r.free, slot)
	r.mu.Unlock()
}

// BeforeEdit ships e (lsm.Options.BeforeEdit).
func (s *Shipper) BeforeEdit(e *lsm.VersionEdit) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SlotWait)
	defer cancel()
	return s.Ship(ctx, e)
}

// Ship writes e's new tables into a free slot of every secondary and has
// every secondary install e, all secondaries at once (the primary holds
// its version lock meanwhile, so the time must not grow with their
// number). On failure, slots taken for e and not installed by their
// secondary are freed again; secondaries that did install e are then
// ahead of the primary, which turns read-only (lsm.Options.BeforeEdit),
// so the group must be reconfigured (docs/CLUSTER.md: no fallback yet).
func (s *Shipper) Ship(ctx context.Context, e *lsm.VersionEdit) error {
	shipped := shippedFiles(e)
	tables, size, err := readTables(s.cfg.FS, s.cfg.Dir, shipped)
	if err != nil {
		return err
	}
	enc := e.Encode(nil)
	errs := make([]error, len(s.reps))
	var wg sync.WaitGroup
	for ri, r := range s.reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			files, err := r.write(ctx, shipped, tables)
			if err == nil {
				err = r.Send(ctx, enc, files)
			}
			if err != nil {
				for _, f := range files {
					r.put(f.Slot)
				}
				errs[ri] = fmt.Errorf("rubble: ship to replica %d: %w", ri, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.mu.Lock()
	s.stats.Edits++
	s.stats.Tables += uint64(len(tables))
	s.stats.Bytes += size * uint64(len(s.reps))
	s.mu.Unlock()
	return nil
}

// write writes the tables into free slots of r and flushes r's device;
// it returns the slots taken (even on error, for the caller to free).
func (r *replicaState) write(ctx context.Context, shipped []lsm.NewFile, tables [][]byte) ([]FileSlot, error) {
	return writeTables(ctx, r.Dev, r.SlotSize, r.take, shipped, tables)
}

// writeTables writes each table (of shipped) into a slot take gives,
// then flushes dev; it returns the slots taken (even on error, for the
// caller to free).
func writeTables(ctx context.Context, dev SlotWriter, slotSize int64, take func(context.Context) (Slot, error),
	shipped []lsm.NewFile, tables [][]byte) ([]FileSlot, error) {
	var files []FileSlot
	for i, t := range tables {
		if int64(len(t)) > slotSize {
			return files, fmt.Errorf("table %d is %d bytes, over the %d-byte slot", shipped[i].Meta.FileNum, len(t), slotSize)
		}
		sl, err := take(ctx)
		if err != nil {
			return files, err
		}
		files = append(files, FileSlot{Table: shipped[i].Meta.FileNum, Slot: sl.Index})
		if err := writeExtents(ctx, dev, sl, t); err != nil {
			return files, fmt.Errorf("table %d into slot %d: %w", shipped[i].Meta.FileNum, sl.Index, err)
		}
	}
	if len(files) > 0 {
		if err := dev.Flush(ctx); err != nil {
			return files, err
		}
	}
	return files, nil
}

// writeExtents writes b at the start of the slot: the slot's extents in
// file order, the last block padded with zeros. The whole blocks are
// written from b itself and only a partial last block is copied (into a
// zeroed block): copying a table to pad it cost the primary a memmove
// and an allocation of every table for every secondary.
func writeExtents(ctx context.Context, dev SlotWriter, sl Slot, b []byte) error {
	bs := dev.BlockSize()
	for _, x := range sl.Extents.Extents {
		if len(b) == 0 {
			return nil
		}
		n := min(len(b), int(x.Blocks)*bs)
		off := int64(x.LBA) * int64(bs)
		whole := n - n%bs
		if whole > 0 {
			if _, err := dev.WriteAtContext(ctx, b[:whole], off); err != nil {
				return err
			}
		}
		if whole < n {
			last := make([]byte, bs)
			copy(last, b[whole:n])
			if _, err := dev.WriteAtContext(ctx, last, off+int64(whole)); err != nil {
				return err
			}
		}
		b = b[n:]
	}
	if len(b) > 0 {
		return fmt.Errorf("%d bytes past the slot's extents", len(b))
	}
	return nil
}

// readTables reads the tables of files whole, and their total size.
func readTables(fsys vfs.FS, dir string, files []lsm.NewFile) ([][]byte, uint64, error) {
	tables := make([][]byte, len(files))
	var size uint64
	for i, nf := range files {
		b, err := readTable(fsys, dir, nf.Meta)
		if err != nil {
			return nil, 0, err
		}
		tables[i] = b
		size += uint64(len(b))
	}
	return tables, size, nil
}

// readTable reads a new table of the primary (in dir on fsys) whole.
func readTable(fsys vfs.FS, dir string, m *lsm.FileMeta) ([]byte, error) {
	name := fsys.PathJoin(dir, lsm.TableName(m.FileNum))
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("rubble: ship: %w", err)
	}
	defer f.Close()
	b := make([]byte, m.Size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("rubble: ship: read %s: %w", name, err)
	}
	return b, nil
}
