package offloadfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
)

// File is an open file (or directory). ReadAt and WriteAt may be called
// concurrently; Read and Write share a cursor and serialize on it.
//
// Data goes straight between the caller's buffer and the device at the
// extent's offset. Overwrites inside the file change no metadata; writes
// past the end allocate (in runs of up to 1 MiB, reserved ahead so
// appends stay contiguous) and update the size, which the next commit
// makes durable. Files are dense: every byte up to the size is backed by
// blocks, gaps left by writes past the end read as zeroes.
type File struct {
	fsys   *FS
	in     *inode
	name   string
	read   bool
	write  bool
	append bool
	// dir is the inode's type when opened, which cannot change while the
	// handle is open (only its own Close can free the inode), so checks
	// need not read the inode's fields, which a concurrent Close changes.
	dir    bool
	closed atomic.Bool

	mu  sync.Mutex // guards pos
	pos int64
}

// Name returns the name the file was opened with.
func (f *File) Name() string { return f.name }

// Ino returns the file's inode number, which names it to the target and
// stays the same across renames while the file exists.
func (f *File) Ino() uint64 { return f.in.ino }

// check returns the error for an operation on f, if it may not proceed.
func (f *File) check(op string, write bool) error {
	var err error
	switch {
	case f.closed.Load():
		err = iofs.ErrClosed
	case f.fsys.down.Load():
		err = f.fsys.downErr(write)
	}
	if err == nil {
		switch {
		case f.dir:
			err = ErrIsDir
		case write && f.fsys.ro:
			err = ErrReadOnly
		case write && !f.write, !write && !f.read:
			err = fmt.Errorf("%w: file not open for %s", iofs.ErrPermission, op)
		}
	}
	if err != nil {
		return pathErr(op, f.name, err)
	}
	return nil
}

// ReadAt reads len(p) bytes at off; at the end of the file it returns the
// bytes there are and io.EOF.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", f.name, fmt.Errorf("%w: negative offset", iofs.ErrInvalid))
	}
	in := f.in
	in.io.RLock()
	defer in.io.RUnlock()
	if uint64(off) >= in.size {
		return 0, io.EOF
	}
	n := int(min(uint64(len(p)), in.size-uint64(off)))
	if err := f.fsys.dataIO(in, p[:n], uint64(off), false); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes p at off, extending the file if needed (with zeroes
// between the old end and off). On error (ErrNoSpace, say) the file's
// size is unchanged; bytes overwritten inside the file may or may not
// have been written, as on any disk. A write starting in bytes granted
// to another host fails with ErrGranted.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("write", f.name, fmt.Errorf("%w: negative offset", iofs.ErrInvalid))
	}
	if len(p) == 0 {
		return 0, nil
	}
	in := f.in
	end := uint64(off) + uint64(len(p))
	in.io.RLock()
	if uint64(off) < in.grantEnd {
		in.io.RUnlock()
		return 0, pathErr("write", f.name, ErrGranted)
	}
	if end <= in.size {
		// An overwrite: no metadata changes, nothing to wait for.
		err := f.fsys.dataIO(in, p, uint64(off), true)
		in.io.RUnlock()
		if err != nil {
			return 0, pathErr("write", f.name, err)
		}
		return len(p), nil
	}
	in.io.RUnlock()
	in.io.Lock()
	defer in.io.Unlock()
	if err := f.writeLocked(p, uint64(off)); err != nil {
		return 0, pathErr("write", f.name, err)
	}
	return len(p), nil
}

// writeLocked writes p at off with in.io held exclusively.
func (f *File) writeLocked(p []byte, off uint64) error {
	fsys, in := f.fsys, f.in
	end := off + uint64(len(p))
	if off < in.grantEnd {
		return ErrGranted
	}
	if end <= in.size {
		return fsys.dataIO(in, p, off, true)
	}
	if err := fsys.lockForChange(); err != nil {
		return err
	}
	if need := ceilDiv(end, fsys.bs); need > in.alloc {
		// Reserve ahead for files that keep growing; a file's first
		// allocation is exact, so small files written once waste nothing.
		want := need
		if in.flags&flagPrealloc == 0 && in.alloc > 0 {
			want += min(max(in.alloc, fsys.specMin), fsys.specMax)
		}
		if err := fsys.growFile(in, need, want); err != nil {
			fsys.mu.Unlock()
			return err
		}
		fsys.touch(in)
	}
	old := in.size
	fsys.mu.Unlock()
	// Data first, then the size that exposes it: a commit in between sees
	// the blocks allocated past the end, never unwritten bytes inside.
	if off > old {
		if err := fsys.zeroData(in, old, off-old); err != nil {
			return err
		}
	}
	if err := fsys.dataIO(in, p, off, true); err != nil {
		return err
	}
	fsys.mu.Lock()
	in.size = end
	fsys.touch(in)
	fsys.mu.Unlock()
	return nil
}

// Read reads from the cursor.
func (f *File) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	if n > 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

// Write writes at the cursor, or at the end of the file if it was opened
// with O_APPEND.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.append {
		n, err := f.WriteAt(p, f.pos)
		f.pos += int64(n)
		return n, err
	}
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	in := f.in
	in.io.Lock()
	defer in.io.Unlock()
	off := in.size
	if err := f.writeLocked(p, off); err != nil {
		return 0, pathErr("write", f.name, err)
	}
	f.pos = int64(off) + int64(len(p))
	return len(p), nil
}

// Seek sets the cursor for Read and Write, as io.Seeker.
func (f *File) Seek(offset int64, whence int) (int64, error) {
	if f.closed.Load() {
		return 0, pathErr("seek", f.name, iofs.ErrClosed)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch whence {
	case io.SeekCurrent:
		offset += f.pos
	case io.SeekEnd:
		f.in.io.RLock()
		offset += int64(f.in.size)
		f.in.io.RUnlock()
	case io.SeekStart:
	default:
		return 0, pathErr("seek", f.name, iofs.ErrInvalid)
	}
	if offset < 0 {
		return 0, pathErr("seek", f.name, fmt.Errorf("%w: negative position", iofs.ErrInvalid))
	}
	f.pos = offset
	return offset, nil
}

// Truncate changes the file's size. Shrinking frees the blocks past the
// new end (including preallocated ones); growing allocates and zeroes.
// Shrinking below bytes granted to another host fails with ErrGranted.
func (f *File) Truncate(size int64) error {
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, fmt.Errorf("%w: negative size", iofs.ErrInvalid))
	}
	if err := f.truncate(uint64(size), false); err != nil {
		return pathErr("truncate", f.name, err)
	}
	return nil
}

// truncate sets the file's size; with growOnly, a file already at least
// size bytes long is left alone (λ writes grow files this way, racing
// nothing that made them longer meanwhile).
func (f *File) truncate(size uint64, growOnly bool) error {
	fsys, in := f.fsys, f.in
	in.io.Lock()
	defer in.io.Unlock()
	if err := fsys.lockForChange(); err != nil {
		return err
	}
	old := in.size
	if growOnly && size <= old {
		fsys.mu.Unlock()
		return nil
	}
	if size < in.grantEnd {
		fsys.mu.Unlock()
		return ErrGranted
	}
	if size <= old {
		if size < old || in.alloc > ceilDiv(size, fsys.bs) {
			fsys.shrink(in, ceilDiv(size, fsys.bs), false)
			in.flags &^= flagPrealloc
			in.size = size
			fsys.touch(in)
		}
		fsys.mu.Unlock()
		return nil
	}
	if need := ceilDiv(size, fsys.bs); need > in.alloc {
		if err := fsys.growFile(in, need, need); err != nil {
			fsys.mu.Unlock()
			return err
		}
		fsys.touch(in)
	}
	fsys.mu.Unlock()
	if err := fsys.zeroData(in, old, size-old); err != nil {
		return err
	}
	fsys.mu.Lock()
	in.size = size
	fsys.touch(in)
	fsys.mu.Unlock()
	return nil
}

// Preallocate reserves blocks for bytes [off, off+length) without changing
// the size, so later writes there need no allocation; the blocks stay
// reserved until the file is truncated.
func (f *File) Preallocate(off, length int64) error {
	if err := f.check("preallocate", true); err != nil {
		return err
	}
	if off < 0 || length < 0 {
		return pathErr("preallocate", f.name, fmt.Errorf("%w: negative range", iofs.ErrInvalid))
	}
	fsys, in := f.fsys, f.in
	in.io.Lock()
	defer in.io.Unlock()
	if err := fsys.lockForChange(); err != nil {
		return pathErr("preallocate", f.name, err)
	}
	defer fsys.mu.Unlock()
	need := ceilDiv(uint64(off)+uint64(length), fsys.bs)
	if need <= in.alloc {
		return nil
	}
	if err := fsys.growFile(in, need, need); err != nil {
		return pathErr("preallocate", f.name, err)
	}
	in.flags |= flagPrealloc
	fsys.touch(in)
	return nil
}

// Sync makes the file's data and all metadata changes so far durable
// (one commit covers every file: see FS.Sync).
func (f *File) Sync() error {
	if f.closed.Load() {
		return pathErr("sync", f.name, iofs.ErrClosed)
	}
	if err := f.fsys.Sync(context.Background()); err != nil {
		return pathErr("sync", f.name, err)
	}
	return nil
}

// Stat describes the file.
func (f *File) Stat() (iofs.FileInfo, error) {
	if f.closed.Load() {
		return nil, pathErr("stat", f.name, iofs.ErrClosed)
	}
	f.fsys.mu.Lock()
	defer f.fsys.mu.Unlock()
	return f.fsys.info(baseName(f.name), f.in), nil
}

func baseName(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			return name[i+1:]
		}
	}
	return name
}

// SetModTime sets the file's modification time, as FS.SetModTime does
// by name; it works on a handle of any access mode, and on a file removed
// while open.
func (f *File) SetModTime(mtime time.Time) error {
	if f.closed.Load() {
		return pathErr("chtimes", f.name, iofs.ErrClosed)
	}
	fsys := f.fsys
	if err := fsys.lockForChange(); err != nil {
		return pathErr("chtimes", f.name, err)
	}
	defer fsys.mu.Unlock()
	if f.closed.Load() {
		// Closed meanwhile: the inode may be free now.
		return pathErr("chtimes", f.name, iofs.ErrClosed)
	}
	if err := fsys.setModTime(f.in, mtime); err != nil {
		return pathErr("chtimes", f.name, err)
	}
	return nil
}

// Extents returns the file's versioned extent map, in device blocks,
// covering exactly its bytes: ready for a pushdown request's file table.
func (f *File) Extents() (pushdown.File, error) {
	switch {
	case f.closed.Load():
		return pushdown.File{}, pathErr("extents", f.name, iofs.ErrClosed)
	case f.dir:
		return pushdown.File{}, pathErr("extents", f.name, ErrIsDir)
	}
	f.in.io.RLock()
	defer f.in.io.RUnlock()
	return f.fsys.exported(f.in), nil
}

// Generation identifies a file's contents at one moment: its extent
// map's version, its size, and how many writes into its bytes had
// completed (overwrites included, which leave the version alone). Two
// equal Generations of one file mean that no write, λ write, truncation
// or map change by this host completed between them, so a λ read run
// after the first computed what one run after the second would: what a
// caller that reads ahead checks before it uses the result. Bytes another
// host may write under a read-write grant are outside what this host
// counts: Granted says the file has live grants, and then equal
// Generations prove nothing.
type Generation struct {
	Version, Size, Writes uint64
	Granted               bool
}

// Generation returns the file's Generation now. It is taken under the
// inode's lock, so a write holding it exclusively is wholly before or
// wholly after.
func (f *File) Generation() Generation {
	in := f.in
	in.io.RLock()
	defer in.io.RUnlock()
	return Generation{Version: in.version, Size: in.size, Writes: in.writes.Load(), Granted: in.grantEnd > 0}
}

// Close releases the handle. The last handle of a removed file frees it;
// the last handle of a file with blocks reserved speculatively past its
// end trims them.
func (f *File) Close() error {
	if !f.closed.CompareAndSwap(false, true) {
		return pathErr("close", f.name, iofs.ErrClosed)
	}
	fsys, in := f.fsys, f.in
	in.io.Lock()
	defer in.io.Unlock()
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if fsys.closed {
		return nil
	}
	in.refs--
	if in.refs > 0 || fsys.ro || fsys.failed != nil {
		return nil
	}
	if err := fsys.lastClose(in); err != nil {
		return pathErr("close", f.name, err)
	}
	// Closing changed metadata without lockForChange's check: commit now
	// if the transaction has grown too large.
	if err := fsys.relaxLocked(); err != nil {
		return pathErr("close", f.name, err)
	}
	return nil
}

// lastClose frees a removed inode or trims speculative blocks. Callers
// hold in.io and mu.
func (fsys *FS) lastClose(in *inode) error {
	if in.orphan {
		od := fsys.inodes[orphanIno]
		if _, err := fsys.loadDir(od); err != nil {
			return err
		}
		fsys.dirRemove(od, orphanName(in.ino))
		fsys.freeInode(in)
		return nil
	}
	if in.typ == typeFile && in.flags&flagPrealloc == 0 {
		if keep := ceilDiv(in.size, fsys.bs); in.alloc > keep {
			fsys.shrink(in, keep, false)
			fsys.touch(in)
		}
	}
	return nil
}

// growFile is grow for file data. If space runs out while blocks freed
// by the running transaction wait for its commit, it commits and tries
// again, so a full device that has just had a file removed accepts
// writes. Callers hold in.io and mu, at a consistent point.
func (fsys *FS) growFile(in *inode, need, want uint64) error {
	err := fsys.grow(in, need, want)
	if !errors.Is(err, ErrNoSpace) || len(fsys.txn.freed) == 0 {
		return err
	}
	fsys.mu.Unlock()
	err = fsys.commit(context.Background(), false)
	fsys.mu.Lock()
	if err == nil {
		err = fsys.usable()
	}
	if err != nil {
		return err
	}
	return fsys.grow(in, need, want)
}

// dataIO reads or writes p at file offset off, which the caller has
// checked lies inside the allocation; callers hold in.io.
func (fsys *FS) dataIO(in *inode, p []byte, off uint64, write bool) error {
	bs := fsys.bs
	if write {
		in.writes.Add(1)
	}
	i := in.find(off / bs)
	for len(p) > 0 {
		if i >= len(in.ext) {
			return fmt.Errorf("offloadfs: inode %d: offset %d beyond its %d blocks", in.ino, off, in.alloc)
		}
		x := in.ext[i]
		within := off - in.cum[i]*bs
		k := min(uint64(len(p)), x.n*bs-within)
		at := int64(x.start*bs + within)
		var err error
		if write {
			_, err = fsys.dev.WriteAt(p[:k], at)
		} else {
			err = fsys.readExtent(p[:k], at, x.start*bs, (x.start+x.n)*bs)
		}
		if err != nil {
			op := "read"
			if write {
				op = "write"
			}
			err = fmt.Errorf("offloadfs: inode %d: %s %d bytes at device offset %d: %w", in.ino, op, k, at, err)
			if write && fsys.owner != nil && errors.Is(err, host.ErrReservationConflict) {
				// Preempted: fenced for good (owner.go, rule 3).
				return fsys.fail(err)
			}
			return err
		}
		p = p[k:]
		off += k
		i++
	}
	return nil
}

// readExtent reads p at device offset at, inside the extent [lo, hi). A
// read of at most maxWholeRead bytes that does not start and end on block
// boundaries goes to the device as one read of the whole blocks it
// touches (the extent holds them all), copied out of a buffer: a device
// that reads partial blocks as separate commands (host.Namespace reads
// each partial edge block on its own) would otherwise send two, and a
// table's block with its checksum trailer, a kv/lsm Get's only read,
// straddles a block boundary. Larger reads go as they are: the copy would
// cost more than the commands it saves.
func (fsys *FS) readExtent(p []byte, at int64, lo, hi uint64) error {
	bs := int64(fsys.bs)
	start := at - at%bs
	end := at + int64(len(p))
	if r := end % bs; r != 0 {
		end += bs - r
	}
	if start == at && end == at+int64(len(p)) || end-start > maxWholeRead || start < int64(lo) || end > int64(hi) {
		_, err := fsys.dev.ReadAt(p, at)
		return err
	}
	buf := make([]byte, end-start)
	if _, err := fsys.dev.ReadAt(buf, start); err != nil {
		return err
	}
	copy(p, buf[at-start:])
	return nil
}

// maxWholeRead bounds the unaligned reads readExtent widens to whole
// blocks.
const maxWholeRead = 64 << 10

// zeroData zeroes file bytes [off, off+n), inside the allocation.
func (fsys *FS) zeroData(in *inode, off, n uint64) error {
	bs := fsys.bs
	in.writes.Add(1)
	i := in.find(off / bs)
	for n > 0 {
		if i >= len(in.ext) {
			return fmt.Errorf("offloadfs: inode %d: offset %d beyond its %d blocks", in.ino, off, in.alloc)
		}
		x := in.ext[i]
		within := off - in.cum[i]*bs
		k := min(n, x.n*bs-within)
		if err := writeZeroes(context.Background(), fsys.dev, int64(x.start*bs+within), int64(k)); err != nil {
			return fmt.Errorf("offloadfs: inode %d: %w", in.ino, err)
		}
		n -= k
		off += k
		i++
	}
	return nil
}
