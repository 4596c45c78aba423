package offloadfs

import (
	"fmt"
	iofs "io/fs"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/pushdown"
)

// maxExtentsPerAlloc bounds the extents one allocation step adds, so one
// step dirties a bounded number of extent blocks (see maxOpBlocks); larger
// allocations on fragmented space take several steps.
const maxExtentsPerAlloc = 1024

// inode is a loaded inode.
//
// The extent map and size (ext, cum, extBlocks, alloc, size, version,
// flags) change only with both io held exclusively and FS.mu held, so the
// data path reads them under io shared and commits under FS.mu. Other
// fields are guarded by FS.mu.
type inode struct {
	ino uint64
	io  sync.RWMutex

	typ       uint8
	flags     uint8
	nlink     uint32
	size      uint64
	version   uint64
	mtime     int64
	parent    uint64
	seq       uint64
	ext       []extent
	cum       []uint64 // cum[i]: file block where ext[i] starts; len(ext)+1 entries
	alloc     uint64   // blocks in ext
	extBlocks []uint64 // extent block chain

	refs   int       // open handles, and grants (which hold the inode open)
	orphan bool      // removed while open: in the orphan directory
	dir    *dirState // directory entries, once loaded

	// grantEnd is how many of the file's first bytes live grants cover:
	// they may not be truncated away or overwritten (grant.go). grantBy
	// has each grant's bytes, by grant ID. Both change with io held
	// exclusively and FS.mu held, like the extent map.
	grantEnd uint64
	grantBy  map[uint64]uint64

	// writes counts the writes into the file's bytes since the mount
	// (overwrites included, which leave the version alone): with the
	// version it tells an offload engine's cache whether bytes it holds
	// are still the file's (contentTag).
	writes atomic.Uint64
}

// record returns the inode as stored.
func (in *inode) record() inodeRec {
	r := inodeRec{
		typ:      in.typ,
		flags:    in.flags,
		nlink:    in.nlink,
		nextents: uint32(len(in.ext)),
		size:     in.size,
		version:  in.version,
		mtime:    in.mtime,
		parent:   in.parent,
		seq:      in.seq,
		inline:   in.ext[:min(len(in.ext), inlineExtents)],
	}
	if len(in.extBlocks) > 0 {
		r.extBlock = in.extBlocks[0]
	}
	return r
}

// reindex recomputes cum and alloc after ext changed.
func (in *inode) reindex() {
	in.cum = in.cum[:0]
	var c uint64
	for _, x := range in.ext {
		in.cum = append(in.cum, c)
		c += x.n
	}
	in.cum = append(in.cum, c)
	in.alloc = c
}

// lastEnd returns the block after the last extent, the natural place to
// grow, or 0 for an empty map.
func (in *inode) lastEnd() uint64 {
	if len(in.ext) == 0 {
		return 0
	}
	return in.ext[len(in.ext)-1].end()
}

// find returns the index of the extent holding file block fb.
func (in *inode) find(fb uint64) int {
	return sort.Search(len(in.ext), func(i int) bool { return in.cum[i+1] > fb })
}

// itLoc returns the inode table block of inode ino and its offset there.
func (fsys *FS) itLoc(ino uint64) (uint64, int) {
	return fsys.sb.itableStart + ino/fsys.ipb, int(ino%fsys.ipb) * inodeSize
}

// loadInode returns inode ino, reading it (and its extent chain) if it is
// not loaded. Free inodes load too (allocation needs their versions).
// Callers hold mu.
func (fsys *FS) loadInode(ino uint64) (*inode, error) {
	if in, ok := fsys.inodes[ino]; ok {
		return in, nil
	}
	if ino == 0 || ino >= fsys.sb.inodeCount {
		return nil, corruptf("inode %d out of range (%d inodes)", ino, fsys.sb.inodeCount)
	}
	blk, off := fsys.itLoc(ino)
	b, ok := fsys.itCache[blk]
	if !ok {
		var err error
		if b, err = fsys.readMeta(blk, 1); err != nil {
			return nil, err
		}
		fsys.itCache[blk] = b
	}
	lo, hi := fsys.sb.dataStart, fsys.sb.totalBlocks
	r, err := decodeInode(fsys.uuid, b[off:off+inodeSize], ino, lo, hi)
	if err != nil {
		return nil, err
	}
	in := &inode{
		ino: ino, typ: r.typ, flags: r.flags, nlink: r.nlink, size: r.size,
		version: r.version, mtime: r.mtime, parent: r.parent, seq: r.seq,
		ext: r.inline,
	}
	// The chain is canonical: every block full but the last.
	for next := r.extBlock; next != 0; {
		if len(in.extBlocks) >= fsys.chainBlocks(int(r.nextents)) {
			return nil, corruptf("inode %d: extent chain longer than its %d extents need", ino, r.nextents)
		}
		raw, err := fsys.readMeta(next, 1)
		if err != nil {
			return nil, err
		}
		owner, nx, xs, err := decodeExtentBlock(fsys.uuid, raw, next, lo, hi)
		if err != nil {
			return nil, err
		}
		if owner != ino {
			return nil, corruptf("inode %d: extent block %d belongs to inode %d", ino, next, owner)
		}
		if len(in.extBlocks) > 0 && len(in.ext) != inlineExtents+len(in.extBlocks)*fsys.epb {
			return nil, corruptf("inode %d: extent block %d follows a partly filled one", ino, next)
		}
		in.ext = append(in.ext, xs...)
		in.extBlocks = append(in.extBlocks, next)
		next = nx
	}
	if uint64(len(in.ext)) != uint64(r.nextents) {
		return nil, corruptf("inode %d: %d extents recorded, %d found", ino, r.nextents, len(in.ext))
	}
	in.reindex()
	if in.size > in.alloc*fsys.bs {
		return nil, corruptf("inode %d: size %d beyond its %d blocks", ino, in.size, in.alloc)
	}
	fsys.inodes[ino] = in
	return in, nil
}

// dirtyInode queues inode in's record for the running transaction.
func (fsys *FS) dirtyInode(in *inode) {
	t := fsys.txn
	t.inodes[in.ino] = in
	blk, _ := fsys.itLoc(in.ino)
	t.itBlocks[blk] = struct{}{}
}

// touch records a change of in's extent map or size: a new version and
// modification time, and an entry in the change feed.
func (fsys *FS) touch(in *inode) {
	in.version++
	in.mtime = time.Now().UnixNano()
	fsys.dirtyInode(in)
	fsys.txn.changed[in.ino] = struct{}{}
}

// setModTime sets in's modification time, as stored, without a new
// extent-map version: the blocks are the same, so nothing the target
// holds goes stale. Callers hold mu, from lockForChange.
func (fsys *FS) setModTime(in *inode, mtime time.Time) error {
	if mtime.Before(minModTime) || mtime.After(maxModTime) {
		return fmt.Errorf("%w: modification time %v is outside what is stored (%d to %d)",
			iofs.ErrInvalid, mtime, minModTime.Year(), maxModTime.Year())
	}
	in.mtime = mtime.UnixNano()
	fsys.dirtyInode(in)
	return nil
}

// The modification time is stored in Unix nanoseconds, an int64.
var (
	minModTime = time.Unix(0, math.MinInt64)
	maxModTime = time.Unix(0, math.MaxInt64)
)

// FreeBlocks returns the free data blocks as df should see them: free,
// the blocks Usage calls free, and pinned, those freed by changes not
// committed yet (removed and truncated files), which no allocation may
// reuse before the commit, since a crash would give them back to their
// old owner. Counting pinned blocks as free is what ext4 does too, and it
// is true for writers: a file's allocation that finds no other room
// commits and takes them (growFile; metadata allocations, a directory's
// new block or an extent block, do not retry, so a device full to the
// last block can still refuse those). Reporting only free blocks made df
// lag rm by up to the commit interval.
//
// Both numbers are read at one moment: commitMu keeps a commit from
// moving blocks from pinned to free in between, and means no commit is
// in flight, so the running transaction's list is every pinned block.
// It waits for a commit under way, and so must not be called from
// Options.OnCommit.
func (fsys *FS) FreeBlocks() (free, pinned uint64) {
	fsys.commitMu.Lock()
	defer fsys.commitMu.Unlock()
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	for _, x := range fsys.txn.freed {
		pinned += x.n
	}
	return fsys.alloc.free, pinned
}

// dirtyBits marks the bitmap blocks covering x as changed.
func (fsys *FS) dirtyBits(x extent) {
	for idx := x.start / fsys.bpb; idx <= (x.end()-1)/fsys.bpb; idx++ {
		fsys.txn.bitmap[idx] = struct{}{}
	}
}

// freeExtent returns x to the free space when the running transaction
// commits; until then it stays pinned.
func (fsys *FS) freeExtent(x extent) {
	if !fsys.alloc.release(x) {
		fsys.failLocked(corruptf("blocks [%d, +%d) freed but not in use: two owners?", x.start, x.n))
		return
	}
	fsys.txn.freed = append(fsys.txn.freed, x)
	fsys.dirtyBits(x)
	// A freed block's pending image must not be committed: the block may
	// hold file data by the time the image would be replayed.
	forgetRange(fsys.txn.dirBlocks, x)
	forgetRange(fsys.txn.extBlocks, x)
}

// forgetRange deletes the keys in x from m, by whichever is smaller.
func forgetRange[V any](m map[uint64]V, x extent) {
	if uint64(len(m)) < x.n {
		for b := range m {
			if b >= x.start && b < x.end() {
				delete(m, b)
			}
		}
		return
	}
	for b := x.start; b < x.end(); b++ {
		delete(m, b)
	}
}

// allocInode takes a free inode for a new file or directory. Inodes need
// no pinning: an inode freed and reused within one transaction commits
// only as its new self, and one freed by a committed transaction is free.
func (fsys *FS) allocInode(typ uint8, parent uint64) (*inode, error) {
	if fsys.freeInodes == 0 {
		return nil, ErrNoSpace
	}
	n := fsys.sb.inodeCount
	ino := fsys.ibits.nextClear(fsys.inoCursor, n)
	if ino >= n {
		ino = fsys.ibits.nextClear(firstIno, n)
	}
	if ino >= n {
		return nil, corruptf("inode bitmap: no free inode although %d are counted free", fsys.freeInodes)
	}
	in, err := fsys.loadInode(ino)
	if err != nil {
		return nil, err
	}
	if in.typ != typeFree {
		return nil, corruptf("inode %d: marked free in the bitmap but type %d", ino, in.typ)
	}
	// The version continues from the free record, so (inode, version)
	// never names two different maps.
	in.typ, in.flags, in.nlink, in.size, in.parent = typ, 0, 1, 0, parent
	in.ext, in.extBlocks, in.dir, in.orphan = nil, nil, nil, false
	in.reindex()
	if typ == typeDir {
		in.dir = newDirState()
	}
	fsys.ibits.setRange(ino, 1)
	fsys.txn.ibitmap[ino/fsys.bpb] = struct{}{}
	fsys.freeInodes--
	fsys.inoCursor = ino + 1
	fsys.touch(in)
	return in, nil
}

// freeInode frees in and all its blocks. The record stays, free, with a
// new version.
func (fsys *FS) freeInode(in *inode) {
	fsys.shrink(in, 0, false)
	in.typ, in.flags, in.nlink, in.size, in.parent = typeFree, 0, 0, 0, 0
	in.dir, in.orphan = nil, false
	fsys.ibits.clearRange(in.ino, 1)
	fsys.txn.ibitmap[in.ino/fsys.bpb] = struct{}{}
	fsys.freeInodes++
	fsys.touch(in)
}

// grow extends in's allocation to at least need blocks, and to want if
// that comes contiguously. On error the allocation is as it was.
func (fsys *FS) grow(in *inode, need, want uint64) error {
	orig, t0 := in.alloc, fsys.txn
	for in.alloc < need {
		exts, err := fsys.alloc.allocate(in.lastEnd(), need-in.alloc, max(want, need)-in.alloc, maxExtentsPerAlloc)
		if err == nil {
			fsys.appendExtents(in, exts)
			err = fsys.fixChain(in)
			if err == nil && in.alloc < need {
				err = fsys.relaxLocked()
			}
		}
		if err != nil {
			fsys.shrink(in, orig, fsys.txn == t0)
			return err
		}
	}
	return nil
}

// appendExtents adds newly allocated extents to in's map, merging with the
// last extent when contiguous.
func (fsys *FS) appendExtents(in *inode, exts []extent) {
	first := max(len(in.ext)-1, 0)
	for _, x := range exts {
		fsys.dirtyBits(x)
		if n := len(in.ext); n > 0 && in.ext[n-1].end() == x.start && in.ext[n-1].n+x.n <= maxExtentBlocks {
			in.ext[n-1].n += x.n
		} else {
			in.ext = append(in.ext, x)
		}
	}
	in.reindex()
	fsys.dirtyExtents(in, first)
}

// shrink cuts in's allocation to target blocks. With undo the blocks were
// allocated in the running transaction and never committed, so they are
// free at once; otherwise they are pinned until the commit.
func (fsys *FS) shrink(in *inode, target uint64, undo bool) {
	if in.alloc <= target {
		return
	}
	for in.alloc > target {
		last := &in.ext[len(in.ext)-1]
		k := min(last.n, in.alloc-target)
		x := extent{last.end() - k, k}
		if undo {
			fsys.alloc.undo(x)
			fsys.dirtyBits(x)
		} else {
			fsys.freeExtent(x)
		}
		last.n -= k
		in.alloc -= k
		if last.n == 0 {
			in.ext = in.ext[:len(in.ext)-1]
		}
	}
	in.reindex()
	// Chain blocks only go away here, which cannot fail.
	_ = fsys.fixChain(in)
	fsys.dirtyExtents(in, max(len(in.ext)-1, 0))
}

// chainBlocks is the extent blocks a map of n extents needs.
func (fsys *FS) chainBlocks(n int) int {
	if n <= inlineExtents {
		return 0
	}
	return (n - inlineExtents + fsys.epb - 1) / fsys.epb
}

// fixChain allocates or frees extent blocks so in's chain fits its map.
func (fsys *FS) fixChain(in *inode) error {
	need := fsys.chainBlocks(len(in.ext))
	for len(in.extBlocks) > need {
		b := in.extBlocks[len(in.extBlocks)-1]
		in.extBlocks = in.extBlocks[:len(in.extBlocks)-1]
		fsys.freeExtent(extent{b, 1})
	}
	for len(in.extBlocks) < need {
		goal := in.lastEnd()
		if k := len(in.extBlocks); k > 0 {
			goal = in.extBlocks[k-1] + 1
		}
		exts, err := fsys.alloc.allocate(goal, 1, 1, 1)
		if err != nil {
			return err
		}
		fsys.dirtyBits(exts[0])
		in.extBlocks = append(in.extBlocks, exts[0].start)
		fsys.txn.extBlocks[exts[0].start] = extRef{in, len(in.extBlocks) - 1}
	}
	fsys.dirtyInode(in)
	return nil
}

// dirtyExtents marks the parts of in's map from extent index i on as
// changed: the inode record, and the extent blocks holding them.
func (fsys *FS) dirtyExtents(in *inode, i int) {
	fsys.dirtyInode(in)
	if len(in.extBlocks) == 0 {
		return
	}
	k := 0
	if i > inlineExtents {
		k = (i - inlineExtents) / fsys.epb
	}
	for ; k < len(in.extBlocks); k++ {
		fsys.txn.extBlocks[in.extBlocks[k]] = extRef{in, k}
	}
}

// exported returns in's extent map as a pushdown file: device blocks,
// covering exactly the file's bytes. Callers hold in.io or FS.mu.
func (fsys *FS) exported(in *inode) pushdown.File {
	f := pushdown.File{ID: in.ino, Version: in.version, Size: in.size}
	r := fsys.bs / fsys.devBS
	left := (in.size + fsys.devBS - 1) / fsys.devBS // device blocks to cover
	maxRun := uint64(maxExtentBlocks) / r * r
	for _, x := range in.ext {
		lba, n := x.start*r, x.n*r
		for n > 0 && left > 0 {
			k := min(n, maxRun, left)
			f.Extents = append(f.Extents, pushdown.Extent{LBA: lba, Blocks: uint32(k)})
			lba += k
			n -= k
			left -= k
		}
	}
	return f
}
