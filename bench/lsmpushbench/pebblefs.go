package lsmpushbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"

	pvfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/nearstore/nearstore/offloadfs"
)

// pebbleFS is Pebble's vfs.FS over an offloadfs: what a user would run
// Pebble on today to keep its data on a nearstore target. Directory syncs
// commit the file system (one transaction covers every directory, as in
// offloadfs's own VFS); locks are the process's (one store per mount);
// hard links are not supported (Pebble uses them only for ingestion and
// checkpoints, which the benchmark does not do).
type pebbleFS struct{ fsys *offloadfs.FS }

var _ pvfs.FS = pebbleFS{}

// pebbleFile adds what Pebble's files have beyond offloadfs's.
type pebbleFile struct{ *offloadfs.File }

func (f pebbleFile) Stat() (pvfs.FileInfo, error) { return fileInfo(f.File.Stat()) }

// SyncTo syncs the whole file: offloadfs has no partial sync.
func (f pebbleFile) SyncTo(int64) (bool, error)  { return true, f.File.Sync() }
func (f pebbleFile) SyncData() error             { return f.File.Sync() }
func (f pebbleFile) Prefetch(int64, int64) error { return nil }
func (f pebbleFile) Fd() uintptr                 { return pvfs.InvalidFd }

// pebbleDirFile is an open directory: syncing it commits the file system.
type pebbleDirFile struct {
	fsys *offloadfs.FS
	name string
}

func (d pebbleDirFile) Close() error { return nil }
func (d pebbleDirFile) Sync() error  { return d.fsys.Sync(context.Background()) }
func (d pebbleDirFile) SyncTo(int64) (bool, error) {
	return true, d.Sync()
}
func (d pebbleDirFile) SyncData() error                   { return d.Sync() }
func (d pebbleDirFile) Prefetch(int64, int64) error       { return nil }
func (d pebbleDirFile) Fd() uintptr                       { return pvfs.InvalidFd }
func (d pebbleDirFile) Preallocate(int64, int64) error    { return nil }
func (d pebbleDirFile) Read([]byte) (int, error)          { return 0, d.isDir("read") }
func (d pebbleDirFile) ReadAt([]byte, int64) (int, error) { return 0, d.isDir("read") }
func (d pebbleDirFile) Write([]byte) (int, error)         { return 0, d.isDir("write") }
func (d pebbleDirFile) WriteAt([]byte, int64) (int, error) {
	return 0, d.isDir("write")
}
func (d pebbleDirFile) Stat() (pvfs.FileInfo, error) { return fileInfo(d.fsys.Stat(d.name)) }
func (d pebbleDirFile) isDir(op string) error {
	return &iofs.PathError{Op: op, Path: d.name, Err: offloadfs.ErrIsDir}
}

// deviceInfo is a FileInfo with the one device an offloadfs is.
type deviceInfo struct{ iofs.FileInfo }

func (deviceInfo) DeviceID() pvfs.DeviceID { return pvfs.DeviceID{} }

func fileInfo(fi iofs.FileInfo, err error) (pvfs.FileInfo, error) {
	if err != nil {
		return nil, err
	}
	return deviceInfo{fi}, nil
}

func file(f *offloadfs.File, err error) (pvfs.File, error) {
	if err != nil {
		return nil, err
	}
	return pebbleFile{f}, nil
}

func (p pebbleFS) Create(name string, _ pvfs.DiskWriteCategory) (pvfs.File, error) {
	return file(p.fsys.Create(name))
}

func (p pebbleFS) Link(oldname, newname string) error {
	return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: errors.ErrUnsupported}
}

func (p pebbleFS) Open(name string, opts ...pvfs.OpenOption) (pvfs.File, error) {
	f, err := p.fsys.Open(name)
	return openedWith(f, err, opts)
}

func (p pebbleFS) OpenReadWrite(name string, _ pvfs.DiskWriteCategory, opts ...pvfs.OpenOption) (pvfs.File, error) {
	f, err := p.fsys.OpenFile(name, os.O_RDWR|os.O_CREATE)
	return openedWith(f, err, opts)
}

// openedWith is file(f, err) with Pebble's open options applied.
func openedWith(f *offloadfs.File, err error, opts []pvfs.OpenOption) (pvfs.File, error) {
	pf, err := file(f, err)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o.Apply(pf)
	}
	return pf, nil
}

func (p pebbleFS) OpenDir(name string) (pvfs.File, error) {
	fi, err := p.fsys.Stat(name)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &iofs.PathError{Op: "opendir", Path: name, Err: fmt.Errorf("not a directory")}
	}
	return pebbleDirFile{fsys: p.fsys, name: name}, nil
}

func (p pebbleFS) Remove(name string) error             { return p.fsys.Remove(name) }
func (p pebbleFS) RemoveAll(name string) error          { return p.fsys.RemoveAll(name) }
func (p pebbleFS) Rename(oldname, newname string) error { return p.fsys.Rename(oldname, newname) }

func (p pebbleFS) ReuseForWrite(oldname, newname string, c pvfs.DiskWriteCategory) (pvfs.File, error) {
	if err := p.fsys.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return p.OpenReadWrite(newname, c)
}

func (p pebbleFS) MkdirAll(dir string, _ os.FileMode) error { return p.fsys.MkdirAll(dir) }

// Lock hands out the lock: one process, one store per mount.
func (p pebbleFS) Lock(string) (io.Closer, error) { return io.NopCloser(nil), nil }

// List is offloadfs's own VFS listing: the names in dir.
func (p pebbleFS) List(dir string) ([]string, error) { return p.fsys.VFS().List(dir) }

func (p pebbleFS) Stat(name string) (pvfs.FileInfo, error) { return fileInfo(p.fsys.Stat(name)) }
func (p pebbleFS) PathBase(s string) string                { return path.Base(s) }
func (p pebbleFS) PathJoin(elem ...string) string          { return path.Join(elem...) }
func (p pebbleFS) PathDir(s string) string                 { return path.Dir(s) }

func (p pebbleFS) GetDiskUsage(string) (pvfs.DiskUsage, error) {
	u := p.fsys.Usage()
	bs := uint64(u.BlockSize)
	return pvfs.DiskUsage{AvailBytes: u.FreeBlocks * bs, TotalBytes: u.Blocks * bs, UsedBytes: (u.Blocks - u.FreeBlocks) * bs}, nil
}

func (p pebbleFS) Unwrap() pvfs.FS { return nil }
