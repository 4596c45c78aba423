package offload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nearstore/nearstore/nvme"
)

// Device is the volume as an engine reaches it: a *host.Namespace on a
// peer, the target's volume (offloadfs.VolumeDevice) in its process.
// ReadAt and WriteAt accept any byte range inside the device.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	BlockSize() int
	Flush(ctx context.Context) error
}

// Admit decides, before an engine touches device blocks [lba, lba+n),
// whether the grants allow it; done is called when the I/O is over. The
// in-target engine admits through the target's grants
// (target.Server.AdmitGranted); a peer needs none (the target checks its
// commands).
type Admit func(lba, n uint64, write bool) (done func(), err error)

// Env is a running task's only way to the volume: offload_read (ReadAt)
// and offload_write (WriteAt) on its request's files, by index, inside
// their sizes, writes only to files granted for writing.
type Env struct {
	ctx   context.Context
	files []File
	dev   Device
	bs    uint64
	admit Admit
	cache *Cache

	// mu makes close a barrier: I/O holds it shared and checks ended;
	// close takes it exclusively and sets ended.
	mu    sync.RWMutex
	ended bool

	// statMu guards what I/O under mu shared updates.
	statMu  sync.Mutex
	pinned  map[pageKey]*page // cache pages this task uses, unpinned at close
	written []uint64
	stats   Stats
}

// NumFiles returns how many files the request names.
func (e *Env) NumFiles() int { return len(e.files) }

// Size returns file i's size: an input's bytes, or an output's reserved
// space; -1 for no such file.
func (e *Env) Size(i int) int64 {
	if i < 0 || i >= len(e.files) {
		return -1
	}
	return int64(e.files[i].Size)
}

// Writable reports whether the task may write file i.
func (e *Env) Writable(i int) bool { return i >= 0 && i < len(e.files) && e.files[i].Write }

// ReadAt is offload_read: it reads len(p) bytes of file i at off, all
// inside the file's size, or fails with ErrOutsideGrant and reads nothing.
func (e *Env) ReadAt(ctx context.Context, i int, p []byte, off int64) (int, error) {
	f, err := e.begin(ctx, i, off, len(p), false)
	if err != nil {
		return 0, err
	}
	defer e.mu.RUnlock()
	if e.cache != nil && !f.Write && !f.Bypass {
		return e.readCached(ctx, f, p, uint64(off))
	}
	if err := e.deviceIO(f, p, uint64(off), false); err != nil {
		return 0, err
	}
	e.count(func(s *Stats) { s.BytesRead += uint64(len(p)) })
	return len(p), nil
}

// WriteAt is offload_write: it writes p into file i at off, all inside
// the space reserved for it, or fails with ErrOutsideGrant and writes
// nothing.
func (e *Env) WriteAt(ctx context.Context, i int, p []byte, off int64) (int, error) {
	f, err := e.begin(ctx, i, off, len(p), true)
	if err != nil {
		return 0, err
	}
	defer e.mu.RUnlock()
	if err := e.deviceIO(f, p, uint64(off), true); err != nil {
		return 0, err
	}
	e.count(func(s *Stats) {
		s.BytesWritten += uint64(len(p))
		e.written[i] = max(e.written[i], uint64(off)+uint64(len(p)))
	})
	return len(p), nil
}

// begin checks an I/O of n bytes at off in file i and, unless the task
// has ended, takes mu shared for it: the caller releases it when the I/O
// is over. On an error mu is not held.
func (e *Env) begin(ctx context.Context, i int, off int64, n int, write bool) (*File, error) {
	f, err := e.check(i, off, n, write)
	if err != nil {
		return nil, err
	}
	e.mu.RLock()
	if e.ended {
		e.mu.RUnlock()
		return nil, ErrTaskEnded
	}
	if err := firstErr(ctx, e.ctx); err != nil {
		e.mu.RUnlock()
		return nil, err
	}
	return f, nil
}

func (e *Env) count(f func(*Stats)) {
	e.statMu.Lock()
	f(&e.stats)
	e.statMu.Unlock()
}

func firstErr(ctxs ...context.Context) error {
	for _, c := range ctxs {
		if err := c.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrTaskEnded, err)
		}
	}
	return nil
}

// check refuses a range outside file i.
func (e *Env) check(i int, off int64, n int, write bool) (*File, error) {
	if i < 0 || i >= len(e.files) {
		return nil, fmt.Errorf("%w: file %d of %d", ErrOutsideGrant, i, len(e.files))
	}
	f := &e.files[i]
	if write && !f.Write {
		return nil, fmt.Errorf("%w: file %d (inode %d) is granted for reading", ErrOutsideGrant, i, f.ID)
	}
	if off < 0 || uint64(off)+uint64(n) > f.Size {
		return nil, fmt.Errorf("%w: [%d, +%d) of file %d (inode %d), %d bytes", ErrOutsideGrant, off, n, i, f.ID, f.Size)
	}
	return f, nil
}

// deviceIO moves p to or from file bytes [off, off+len(p)), which check
// has put inside the file, through its extents.
func (e *Env) deviceIO(f *File, p []byte, off uint64, write bool) error {
	bs := e.bs
	var fileBlock uint64 // first file block of the extent
	for _, x := range f.Extents {
		if len(p) == 0 {
			return nil
		}
		xBytes := uint64(x.Blocks) * bs
		start := fileBlock * bs
		fileBlock += uint64(x.Blocks)
		if off >= start+xBytes {
			continue
		}
		within := off - start
		k := min(uint64(len(p)), xBytes-within)
		at := x.LBA*bs + within
		if e.admit != nil {
			first := at / bs
			done, err := e.admit(first, (at+k+bs-1)/bs-first, write)
			if err != nil {
				return fmt.Errorf("%w: inode %d: %w", ErrOutsideGrant, f.ID, err)
			}
			err = e.move(p[:k], int64(at), write)
			done()
			if err != nil {
				return fmt.Errorf("offload: inode %d: %w", f.ID, err)
			}
		} else if err := e.move(p[:k], int64(at), write); err != nil {
			return fmt.Errorf("offload: inode %d: %w", f.ID, err)
		}
		p = p[k:]
		off += k
	}
	if len(p) > 0 {
		// validate keeps extents at least as long as the size.
		return fmt.Errorf("%w: inode %d: extents end before byte %d", ErrBadRequest, f.ID, off)
	}
	return nil
}

// errAccessDenied is the target's refusal of a task host's command
// outside its grants.
var errAccessDenied error = &nvme.StatusError{Status: nvme.StatusAccessDenied}

// contextDevice is a Device whose I/O a context can cancel
// (*host.Namespace): a task's I/O then ends with its run.
type contextDevice interface {
	ReadAtContext(ctx context.Context, p []byte, off int64) (int, error)
	WriteAtContext(ctx context.Context, p []byte, off int64) (int, error)
}

func (e *Env) move(p []byte, at int64, write bool) error {
	var err error
	cd, ok := e.dev.(contextDevice)
	switch {
	case ok && write:
		_, err = cd.WriteAtContext(e.ctx, p, at)
	case ok:
		_, err = cd.ReadAtContext(e.ctx, p, at)
	case write:
		_, err = e.dev.WriteAt(p, at)
	default:
		_, err = e.dev.ReadAt(p, at)
	}
	if errors.Is(err, errAccessDenied) {
		return fmt.Errorf("%w: the target refused it: %w", ErrOutsideGrant, err)
	}
	return err
}

// close ends the task's I/O: it waits for I/O under way, refuses all
// later I/O, and unpins the cache pages the task used.
func (e *Env) close() {
	e.mu.Lock()
	e.ended = true
	e.mu.Unlock()
	e.statMu.Lock()
	pinned := e.pinned
	e.pinned = nil
	e.statMu.Unlock()
	for _, pg := range pinned {
		e.cache.unpin(pg)
	}
}
