package vfs

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// OS returns the local file system rooted at dir: every name is taken
// relative to dir (a leading '/' included, and ".." cannot climb above
// it). An empty dir means names are used as they are.
func OS(dir string) FS { return osFS{root: dir} }

type osFS struct{ root string }

// path maps a name to a local path.
func (o osFS) path(name string) string {
	if o.root == "" {
		return filepath.FromSlash(name)
	}
	return filepath.Join(o.root, filepath.FromSlash(path.Clean("/"+name)))
}

func (o osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(o.path(name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (o osFS) Open(name string) (File, error) {
	f, err := os.Open(o.path(name))
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (o osFS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(o.path(name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (o osFS) Remove(name string) error { return os.Remove(o.path(name)) }

func (o osFS) Rename(oldname, newname string) error {
	return os.Rename(o.path(oldname), o.path(newname))
}

func (o osFS) MkdirAll(dir string) error { return os.MkdirAll(o.path(dir), 0o755) }

func (o osFS) List(dir string) ([]string, error) { return Names(os.ReadDir(o.path(dir))) }

func (o osFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(o.path(name)) }

// SyncDir fsyncs the directory, which is what makes entries durable on
// POSIX file systems.
func (o osFS) SyncDir(dir string) error {
	d, err := os.Open(o.path(dir))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (o osFS) PathJoin(elem ...string) string { return path.Join(elem...) }

// osFile is an *os.File with Preallocate.
type osFile struct{ *os.File }

func (f osFile) Preallocate(off, length int64) error { return preallocate(f.File, off, length) }
