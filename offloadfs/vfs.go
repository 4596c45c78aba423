package offloadfs

import (
	"context"
	iofs "io/fs"
	"os"
	"path"

	"github.com/nearstore/nearstore/vfs"
)

// VFS returns the file system as a vfs.FS, for stores written against
// that interface.
func (fsys *FS) VFS() vfs.FS { return vfsFS{fsys} }

var _ vfs.File = (*File)(nil)

type vfsFS struct{ fsys *FS }

// file converts without turning a nil *File into a non-nil vfs.File.
func file(f *File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (v vfsFS) Create(name string) (vfs.File, error) { return file(v.fsys.Create(name)) }
func (v vfsFS) Open(name string) (vfs.File, error)   { return file(v.fsys.Open(name)) }

func (v vfsFS) OpenReadWrite(name string) (vfs.File, error) {
	return file(v.fsys.OpenFile(name, os.O_RDWR|os.O_CREATE))
}

func (v vfsFS) Remove(name string) error             { return v.fsys.Remove(name) }
func (v vfsFS) Rename(oldname, newname string) error { return v.fsys.Rename(oldname, newname) }
func (v vfsFS) MkdirAll(dir string) error            { return v.fsys.MkdirAll(dir) }
func (v vfsFS) Stat(name string) (iofs.FileInfo, error) {
	return v.fsys.Stat(name)
}

func (v vfsFS) List(dir string) ([]string, error) { return vfs.Names(v.fsys.ReadDir(dir)) }

// SyncDir commits: one transaction covers every directory.
func (v vfsFS) SyncDir(string) error { return v.fsys.Sync(context.Background()) }

func (v vfsFS) PathJoin(elem ...string) string { return path.Join(elem...) }
