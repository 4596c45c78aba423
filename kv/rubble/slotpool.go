package rubble

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
)

// SlotDir is the directory of the slot files in a pool's file system;
// slot i is SlotDir/slot-<i>, i in decimal from 0.
const SlotDir = "rubble-slots"

// Slot is one slot of a pool: a file of exactly the pool's slot size
// whose blocks were allocated when the pool was made.
type Slot struct {
	Index int
	// Extents are the slot's blocks on the device, in file order; a
	// writer may write a table of up to the slot size into them
	// directly, since offloadfs never moves a file's blocks.
	Extents pushdown.File
}

// Pool is a secondary's slot pool on an offloadfs.
//
// Invariants (checked by Check): the pool has N slot files named
// slot-0…slot-(N-1), each exactly SlotSize bytes with all its blocks
// allocated, and no two slots share a block. A pool is made once
// (MakePool) and never grows or shrinks, so a slot's extents, once read,
// stay right for the life of the pool.
type Pool struct {
	fsys     *offloadfs.FS
	dir      string
	slotSize int64
	slots    []Slot
}

func (p *Pool) slotName(i int) string { return p.dir + "/slot-" + strconv.Itoa(i) }

// MakePool creates n slots of slotSize bytes each in SlotDir on fsys
// (which must have no pool there yet) and syncs them.
func MakePool(ctx context.Context, fsys *offloadfs.FS, n int, slotSize int64) (*Pool, error) {
	return MakePoolAt(ctx, fsys, SlotDir, n, slotSize)
}

// MakePoolAt is MakePool with the pool's directory dir: a node hosting
// several groups keeps one pool per group on its one file system.
func MakePoolAt(ctx context.Context, fsys *offloadfs.FS, dir string, n int, slotSize int64) (*Pool, error) {
	if n <= 0 || slotSize <= 0 {
		return nil, fmt.Errorf("rubble: pool of %d slots of %d bytes: want both > 0", n, slotSize)
	}
	if _, err := fsys.Stat(dir); err == nil {
		return nil, fmt.Errorf("rubble: %s exists: the volume has a pool there already", dir)
	}
	p := &Pool{dir: dir}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("rubble: make pool: %w", err)
	}
	for i := range n {
		f, err := fsys.Create(p.slotName(i))
		if err != nil {
			return nil, fmt.Errorf("rubble: make pool: %w", err)
		}
		err = f.Preallocate(0, slotSize)
		if err == nil {
			err = f.Truncate(slotSize)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("rubble: make pool: slot %d: %w", i, err)
		}
	}
	if err := fsys.Sync(ctx); err != nil {
		return nil, fmt.Errorf("rubble: make pool: %w", err)
	}
	return OpenPoolAt(ctx, fsys, dir)
}

// OpenPool reads the pool in SlotDir on fsys: every slot's extents,
// after checking the pool's invariants.
func OpenPool(ctx context.Context, fsys *offloadfs.FS) (*Pool, error) {
	return OpenPoolAt(ctx, fsys, SlotDir)
}

// OpenPoolAt is OpenPool of the pool in dir.
func OpenPoolAt(ctx context.Context, fsys *offloadfs.FS, dir string) (*Pool, error) {
	names, err := fsys.VFS().List(dir)
	if err != nil {
		return nil, fmt.Errorf("rubble: open pool: %w", err)
	}
	p := &Pool{fsys: fsys, dir: dir, slotSize: -1}
	idx := make([]int, 0, len(names))
	for _, nm := range names {
		s, ok := strings.CutPrefix(nm, "slot-")
		i, err := strconv.Atoi(s)
		if !ok || err != nil || i < 0 || strconv.Itoa(i) != s {
			return nil, fmt.Errorf("rubble: open pool: stray file %s/%s", dir, nm)
		}
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for want, i := range idx {
		if i != want {
			return nil, fmt.Errorf("rubble: open pool: slot %d missing", want)
		}
	}
	for i := range idx {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, err := fsys.Open(p.slotName(i))
		if err != nil {
			return nil, fmt.Errorf("rubble: open pool: %w", err)
		}
		st, err := f.Stat()
		var ext pushdown.File
		if err == nil {
			ext, err = f.Extents()
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("rubble: open pool: slot %d: %w", i, err)
		}
		if p.slotSize < 0 {
			p.slotSize = st.Size()
		}
		if st.Size() != p.slotSize || p.slotSize == 0 {
			return nil, fmt.Errorf("rubble: open pool: slot %d is %d bytes, slot 0 is %d", i, st.Size(), p.slotSize)
		}
		p.slots = append(p.slots, Slot{Index: i, Extents: ext})
	}
	if len(p.slots) == 0 {
		return nil, fmt.Errorf("rubble: open pool: no slots: %w", fs.ErrNotExist)
	}
	if err := p.checkExtents(); err != nil {
		return nil, err
	}
	return p, nil
}

// checkExtents checks that every slot's extents cover its size and no
// block belongs to two slots.
func (p *Pool) checkExtents() error {
	owner := map[uint64]int{}
	for _, s := range p.slots {
		var blocks uint64
		for _, e := range s.Extents.Extents {
			for b := e.LBA; b < e.LBA+uint64(e.Blocks); b++ {
				if o, dup := owner[b]; dup {
					return fmt.Errorf("rubble: pool: block %d in slots %d and %d", b, o, s.Index)
				}
				owner[b] = s.Index
			}
			blocks += uint64(e.Blocks)
		}
		if bs := uint64(p.fsys.DeviceBlockSize()); blocks*bs < uint64(p.slotSize) {
			return fmt.Errorf("rubble: pool: slot %d has %d device blocks of %d bytes, under its %d bytes", s.Index, blocks, bs, p.slotSize)
		}
	}
	return nil
}

// SlotSize is the size of every slot in bytes.
func (p *Pool) SlotSize() int64 { return p.slotSize }

// Slots returns the pool's slots in index order.
func (p *Pool) Slots() []Slot { return slices.Clone(p.slots) }

// Check is the pool's fsck: the file system's own check, then the pool's
// invariants read afresh from it.
func (p *Pool) Check(ctx context.Context) error {
	r, err := p.fsys.Fsck(ctx)
	if err != nil {
		return fmt.Errorf("rubble: fsck: %w", err)
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("rubble: fsck: %w", err)
	}
	q, err := OpenPoolAt(ctx, p.fsys, p.dir)
	if err != nil {
		return err
	}
	if q.slotSize != p.slotSize || len(q.slots) != len(p.slots) {
		return fmt.Errorf("rubble: fsck: pool is %d slots of %d bytes, was %d of %d", len(q.slots), q.slotSize, len(p.slots), p.slotSize)
	}
	for i, s := range q.slots {
		if !slices.Equal(s.Extents.Extents, p.slots[i].Extents.Extents) {
			return fmt.Errorf("rubble: fsck: slot %d moved", i)
		}
	}
	return nil
}
