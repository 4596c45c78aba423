package offloadtask

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"sync"
	"time"

	"github.com/nearstore/nearstore/offload"
)

// readAhead is how much an input read past the window fetches: a
// compaction reads its inputs' blocks in order, and one large device
// read costs about what one block's does.
const readAhead = 1 << 20

// envFile is file i of a task as a vfs.File: an input is read through a
// read-ahead window (ReadAt), an output written in order (Write; the
// table writer buffers). Both go through the task's Env, so its grant
// bounds them. Sync does nothing: the engine flushes the device before
// it answers, and the host commits the outputs after.
type envFile struct {
	ctx context.Context
	env *offload.Env
	i   int

	mu     sync.Mutex
	win    []byte // bytes [winOff, winOff+len(win)) of the file
	winOff int64
	off    int64 // the next Write's offset
}

var errNotSupported = errors.New("lsm.compact: operation not supported on a task's file")

func (f *envFile) ReadAt(p []byte, off int64) (int, error) {
	size := f.env.Size(f.i)
	if off < 0 || off >= size {
		return 0, io.EOF
	}
	want := len(p)
	if rest := size - off; int64(want) > rest {
		p = p[:rest]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(p) >= readAhead {
		if _, err := f.env.ReadAt(f.ctx, f.i, p, off); err != nil {
			return 0, err
		}
	} else {
		if off < f.winOff || off+int64(len(p)) > f.winOff+int64(len(f.win)) {
			n := min(int64(readAhead), size-off)
			if cap(f.win) < int(n) {
				f.win = make([]byte, readAhead)
			}
			f.win = f.win[:n]
			if _, err := f.env.ReadAt(f.ctx, f.i, f.win, off); err != nil {
				f.win = f.win[:0]
				return 0, err
			}
			f.winOff = off
		}
		copy(p, f.win[off-f.winOff:])
	}
	if len(p) < want {
		return len(p), io.EOF
	}
	return len(p), nil
}

func (f *envFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.env.WriteAt(f.ctx, f.i, p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *envFile) WriteAt(p []byte, off int64) (int, error) { return f.env.WriteAt(f.ctx, f.i, p, off) }
func (f *envFile) Read([]byte) (int, error)                 { return 0, errNotSupported }
func (f *envFile) Close() error                             { return nil }
func (f *envFile) Sync() error                              { return nil }
func (f *envFile) Truncate(int64) error                     { return errNotSupported }
func (f *envFile) Preallocate(int64, int64) error           { return nil }
func (f *envFile) Stat() (iofs.FileInfo, error) {
	return fileInfo{name: fmt.Sprintf("file%d", f.i), size: f.env.Size(f.i)}, nil
}

// fileInfo describes a task's file: its name in errors, and its size
// (an output's: the space reserved).
type fileInfo struct {
	name string
	size int64
}

func (fi fileInfo) Name() string        { return fi.name }
func (fi fileInfo) Size() int64         { return fi.size }
func (fi fileInfo) Mode() iofs.FileMode { return 0o444 }
func (fi fileInfo) ModTime() time.Time  { return time.Time{} }
func (fi fileInfo) IsDir() bool         { return false }
func (fi fileInfo) Sys() any            { return nil }
