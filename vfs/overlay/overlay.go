// Package overlay is a vfs.FS that takes writes in memory over a base
// file system it never changes: reads fall through to the base until a
// name is created, removed or renamed over there, and whatever is written
// lives in memory, lost when the FS is dropped. It lets a store that
// writes as it opens (a fresh log, a MANIFEST, a recovery flush) open on
// a file system mounted read-only, leaving the base exactly as it was.
package overlay

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/nearstore/nearstore/vfs"
)

// FS is the overlay: base below, what was written through it in memory.
// Its methods may be called concurrently. Sync and SyncDir do nothing:
// nothing it holds outlives it.
type FS struct {
	base  vfs.FS
	mu    sync.Mutex
	files map[string]*data // written here
	gone  map[string]bool  // hidden in base
	dirs  map[string]bool  // made here
}

// New returns an empty overlay over base.
func New(base vfs.FS) *FS {
	return &FS{base: base, files: map[string]*data{}, gone: map[string]bool{}, dirs: map[string]bool{}}
}

type data struct {
	mu   sync.Mutex
	name string
	b    []byte
}

// file is one open handle, with its own cursor.
type file struct {
	d        *data
	pos      int64
	readOnly bool
}

func (o *FS) clean(name string) string { return path.Clean(name) }

// isDir says whether name is a directory here; o.mu is held.
func (o *FS) isDir(name string) bool {
	switch {
	case name == "." || name == "/":
		return true
	case o.gone[name]:
		return false
	case o.dirs[name]:
		return true
	}
	if _, ok := o.files[name]; ok {
		return false
	}
	st, err := o.base.Stat(name)
	return err == nil && st.IsDir()
}

// parentOK fails unless name's directory exists; o.mu is held.
func (o *FS) parentOK(op, name string) error {
	if !o.isDir(path.Dir(name)) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return nil
}

// copyUp brings base's name into memory; o.mu is held.
func (o *FS) copyUp(name string) (*data, error) {
	if d, ok := o.files[name]; ok {
		return d, nil
	}
	if o.gone[name] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	f, err := o.base.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, math.MaxInt64))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	d := &data{name: name, b: b}
	o.files[name] = d
	return d, nil
}

func (o *FS) Create(name string) (vfs.File, error) {
	name = o.clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.parentOK("create", name); err != nil {
		return nil, err
	}
	d := &data{name: name}
	o.files[name] = d
	delete(o.gone, name)
	return &file{d: d}, nil
}

func (o *FS) Open(name string) (vfs.File, error) {
	name = o.clean(name)
	o.mu.Lock()
	d, ok := o.files[name]
	gone := o.gone[name]
	o.mu.Unlock()
	switch {
	case ok:
		return &file{d: d, readOnly: true}, nil
	case gone:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return o.base.Open(name)
}

func (o *FS) OpenReadWrite(name string) (vfs.File, error) {
	name = o.clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	d, err := o.copyUp(name)
	if errors.Is(err, fs.ErrNotExist) {
		if err = o.parentOK("open", name); err == nil {
			d = &data{name: name}
			o.files[name] = d
			delete(o.gone, name)
		}
	}
	if err != nil {
		return nil, err
	}
	return &file{d: d}, nil
}

func (o *FS) Remove(name string) error {
	name = o.clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.files[name]; ok {
		delete(o.files, name)
		o.gone[name] = true
		return nil
	}
	if o.gone[name] {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if o.isDir(name) {
		names, err := o.listLocked(name)
		if err != nil {
			return err
		}
		if len(names) > 0 {
			return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
		}
		delete(o.dirs, name)
		o.gone[name] = true
		return nil
	}
	if _, err := o.base.Stat(name); err != nil {
		return err
	}
	o.gone[name] = true
	return nil
}

func (o *FS) Rename(oldname, newname string) error {
	oldname, newname = o.clean(oldname), o.clean(newname)
	o.mu.Lock()
	defer o.mu.Unlock()
	d, err := o.copyUp(oldname)
	if err != nil {
		return err
	}
	if err := o.parentOK("rename", newname); err != nil {
		return err
	}
	delete(o.files, oldname)
	o.gone[oldname] = true
	d.name = newname
	o.files[newname] = d
	delete(o.gone, newname)
	return nil
}

func (o *FS) MkdirAll(dir string) error {
	dir = o.clean(dir)
	if st, err := o.base.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for d := dir; d != "." && d != "/"; d = path.Dir(d) {
		if o.isDir(d) {
			break
		}
		if _, ok := o.files[d]; ok {
			return &fs.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
		}
		o.dirs[d] = true
		delete(o.gone, d)
	}
	return nil
}

func (o *FS) List(dir string) ([]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.listLocked(o.clean(dir))
}

// listLocked is List with o.mu held.
func (o *FS) listLocked(dir string) ([]string, error) {
	names, err := o.base.List(dir)
	if o.gone[dir] {
		return nil, &fs.PathError{Op: "list", Path: dir, Err: fs.ErrNotExist}
	}
	if err != nil && !(errors.Is(err, fs.ErrNotExist) && o.dirs[dir]) {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if !o.gone[path.Join(dir, n)] {
			out = append(out, n)
		}
	}
	for p := range o.files {
		if path.Dir(p) == dir {
			out = append(out, path.Base(p))
		}
	}
	for p := range o.dirs {
		if path.Dir(p) == dir {
			out = append(out, path.Base(p))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (o *FS) Stat(name string) (fs.FileInfo, error) {
	name = o.clean(name)
	o.mu.Lock()
	d, ok := o.files[name]
	gone, isDir := o.gone[name], o.dirs[name]
	o.mu.Unlock()
	switch {
	case ok:
		return d.stat(), nil
	case gone:
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	case isDir:
		return info{name: path.Base(name), dir: true}, nil
	}
	return o.base.Stat(name)
}

func (o *FS) SyncDir(string) error           { return nil }
func (o *FS) PathJoin(elem ...string) string { return o.base.PathJoin(elem...) }

type info struct {
	name string
	size int64
	dir  bool
}

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.size }
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.dir }
func (i info) Sys() any           { return nil }
func (i info) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}

func (d *data) stat() fs.FileInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return info{name: path.Base(d.name), size: int64(len(d.b))}
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if off >= int64(len(f.d.b)) {
		return 0, io.EOF
	}
	n := copy(p, f.d.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// errReadOnlyHandle is a write through a handle Open returned.
var errReadOnlyHandle = errors.New("file opened read-only")

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if f.readOnly {
		return 0, &fs.PathError{Op: "write", Path: f.d.name, Err: errReadOnlyHandle}
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if end := off + int64(len(p)); end > int64(len(f.d.b)) {
		f.d.b = append(f.d.b, make([]byte, end-int64(len(f.d.b)))...)
	}
	return copy(f.d.b[off:], p), nil
}

func (f *file) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	if n > 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

func (f *file) Write(p []byte) (int, error) {
	n, err := f.WriteAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *file) Truncate(size int64) error {
	if f.readOnly {
		return &fs.PathError{Op: "truncate", Path: f.d.name, Err: errReadOnlyHandle}
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if size <= int64(len(f.d.b)) {
		f.d.b = f.d.b[:size]
	} else {
		f.d.b = append(f.d.b, make([]byte, size-int64(len(f.d.b)))...)
	}
	return nil
}

func (f *file) Stat() (fs.FileInfo, error) { return f.d.stat(), nil }
func (f *file) Sync() error                { return nil }
func (f *file) Close() error               { return nil }
func (f *file) Preallocate(int64, int64) error {
	return nil
}

var _ vfs.FS = (*FS)(nil)
