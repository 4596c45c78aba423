package offloadfs

import (
	"errors"
	"io"
	iofs "io/fs"
	"slices"
)

// IOFS returns the file system's read side as an io/fs file system, so
// the standard library's tools work on it: fs.WalkDir, fs.Glob,
// fs.ReadFile, http.FileServerFS, template.ParseFS, testing/fstest. Names
// are io/fs's: slash-separated and unrooted ("a/b", "." for the root), as
// fs.ValidPath says; the file system's own methods take rooted ones too.
// Opening a directory gives an fs.ReadDirFile. It sees what FS sees: on a
// read-write mount, the latest changes, committed or not.
func (fsys *FS) IOFS() iofs.FS { return ioFS{fsys} }

// ioFS is the io/fs view of an FS.
type ioFS struct{ fsys *FS }

var (
	_ iofs.ReadDirFS  = ioFS{}
	_ iofs.StatFS     = ioFS{}
	_ iofs.ReadFileFS = ioFS{}
)

// path turns an io/fs name into the FS's, or fails as io/fs requires for
// an invalid one.
func (ioFS) path(op, name string) (string, error) {
	if !iofs.ValidPath(name) {
		return "", &iofs.PathError{Op: op, Path: name, Err: iofs.ErrInvalid}
	}
	return "/" + name, nil
}

// rename gives err, a *PathError from FS, the name the caller used.
func rename(err error, name string) error {
	var pe *iofs.PathError
	if errors.As(err, &pe) {
		return &iofs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	return err
}

func (f ioFS) Open(name string) (iofs.File, error) {
	p, err := f.path("open", name)
	if err != nil {
		return nil, err
	}
	fi, err := f.fsys.Stat(p)
	if err != nil {
		return nil, rename(err, name)
	}
	if fi.IsDir() {
		des, err := f.fsys.ReadDir(p)
		if err != nil {
			return nil, rename(err, name)
		}
		return &ioDir{info: named(fi, name), entries: des}, nil
	}
	h, err := f.fsys.Open(p)
	if err != nil {
		return nil, rename(err, name)
	}
	return &ioFile{File: h, name: name}, nil
}

func (f ioFS) Stat(name string) (iofs.FileInfo, error) {
	p, err := f.path("stat", name)
	if err != nil {
		return nil, err
	}
	fi, err := f.fsys.Stat(p)
	if err != nil {
		return nil, rename(err, name)
	}
	return named(fi, name), nil
}

func (f ioFS) ReadDir(name string) ([]iofs.DirEntry, error) {
	p, err := f.path("readdir", name)
	if err != nil {
		return nil, err
	}
	des, err := f.fsys.ReadDir(p)
	if err != nil {
		return nil, rename(err, name)
	}
	return des, nil
}

func (f ioFS) ReadFile(name string) ([]byte, error) {
	file, err := f.Open(name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	if _, ok := file.(*ioDir); ok {
		return nil, &iofs.PathError{Op: "read", Path: name, Err: ErrIsDir}
	}
	return io.ReadAll(file)
}

// named is fi under the base name io/fs gives name ("." for the root).
func named(fi iofs.FileInfo, name string) iofs.FileInfo {
	base := name
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			base = name[i+1:]
			break
		}
	}
	if base == fi.Name() {
		return fi
	}
	return renamedInfo{fi, base}
}

type renamedInfo struct {
	iofs.FileInfo
	name string
}

func (r renamedInfo) Name() string { return r.name }

// ioFile is an open regular file: a read-only *File under its io/fs name.
type ioFile struct {
	*File
	name string
}

func (f *ioFile) Stat() (iofs.FileInfo, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return nil, rename(err, f.name)
	}
	return named(fi, f.name), nil
}

func (f *ioFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	if err != nil && err != io.EOF {
		err = rename(err, f.name)
	}
	return n, err
}

// ioDir is an open directory: its entries as of Open, handed out by
// ReadDir as fs.ReadDirFile says.
type ioDir struct {
	info    iofs.FileInfo
	entries []iofs.DirEntry
	closed  bool
}

func (d *ioDir) Stat() (iofs.FileInfo, error) { return d.info, nil }

func (d *ioDir) Read([]byte) (int, error) {
	return 0, &iofs.PathError{Op: "read", Path: d.info.Name(), Err: ErrIsDir}
}

func (d *ioDir) Close() error {
	if d.closed {
		return &iofs.PathError{Op: "close", Path: d.info.Name(), Err: iofs.ErrClosed}
	}
	d.closed = true
	return nil
}

// ReadDir returns the next n entries (all that are left if n <= 0), and
// io.EOF after the last when n > 0.
func (d *ioDir) ReadDir(n int) ([]iofs.DirEntry, error) {
	if d.closed {
		return nil, &iofs.PathError{Op: "readdir", Path: d.info.Name(), Err: iofs.ErrClosed}
	}
	if n <= 0 {
		out := d.entries
		d.entries = nil
		return slices.Clip(out), nil
	}
	if len(d.entries) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(d.entries))
	out := d.entries[:n:n]
	d.entries = d.entries[n:]
	return out, nil
}
