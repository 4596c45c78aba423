package lsm

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nearstore/nearstore/vfs"
)

// memFS is an in-memory vfs.FS that models what survives a crash: a
// file's bytes survive only up to its last Sync, and a directory entry
// (creation, removal, rename) only once SyncDir has run on its directory.
// A crash point makes the n-th mutating operation and every one after it
// fail, as if the process died there; crashImage returns the file system a
// restarted process would find.
type memFS struct {
	mu      sync.Mutex
	names   map[string]*memNode // current namespace
	durable map[string]*memNode // namespace as of each directory's last SyncDir
	dirs    map[string]bool
	left    int // mutating operations before the crash; < 0: never
	crashed bool
}

type memNode struct {
	data   []byte
	synced []byte
}

var errCrashed = errors.New("memfs: crashed")

func newMemFS() *memFS {
	return &memFS{names: map[string]*memNode{}, durable: map[string]*memNode{}, dirs: map[string]bool{"/": true}, left: -1}
}

func clean(name string) string { return path.Clean("/" + name) }

// op counts a mutating operation; it fails once the crash point is hit.
// Caller holds mu.
func (m *memFS) op() error {
	if m.crashed {
		return errCrashed
	}
	if m.left == 0 {
		m.crashed = true
		return errCrashed
	}
	if m.left > 0 {
		m.left--
	}
	return nil
}

// crashAfter arms the crash point: n more mutating operations succeed.
func (m *memFS) crashAfter(n int) {
	m.mu.Lock()
	m.left = n
	m.mu.Unlock()
}

func (m *memFS) hasCrashed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashed
}

// crashImage returns what survives: durable names with synced bytes, and
// if torn, each file's unsynced appended bytes cut at a random length (a
// write in flight when power failed).
func (m *memFS) crashImage(rng *rand.Rand, torn bool) *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := newMemFS()
	for d := range m.dirs {
		n.dirs[d] = true
	}
	copied := map[*memNode]*memNode{}
	for name, nd := range m.durable {
		c, ok := copied[nd]
		if !ok {
			data := slices.Clone(nd.synced)
			if torn && rng != nil && len(nd.data) > len(nd.synced) && string(nd.data[:len(nd.synced)]) == string(nd.synced) {
				extra := rng.IntN(len(nd.data) - len(nd.synced) + 1)
				data = append(data, nd.data[len(nd.synced):len(nd.synced)+extra]...)
			}
			c = &memNode{data: data, synced: slices.Clone(data)}
			copied[nd] = c
		}
		n.names[name] = c
		n.durable[name] = c
	}
	return n
}

func (m *memFS) Create(name string) (vfs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(); err != nil {
		return nil, err
	}
	name = clean(name)
	if !m.dirs[path.Dir(name)] {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrNotExist}
	}
	nd := &memNode{}
	m.names[name] = nd
	return &memFile{fs: m, nd: nd, name: name}, nil
}

func (m *memFS) Open(name string) (vfs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	nd, ok := m.names[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{fs: m, nd: nd, name: name, ro: true}, nil
}

func (m *memFS) OpenReadWrite(name string) (vfs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	if nd, ok := m.names[name]; ok {
		return &memFile{fs: m, nd: nd, name: name}, nil
	}
	if err := m.op(); err != nil {
		return nil, err
	}
	nd := &memNode{}
	m.names[name] = nd
	return &memFile{fs: m, nd: nd, name: name}, nil
}

func (m *memFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(); err != nil {
		return err
	}
	name = clean(name)
	if m.dirs[name] {
		for n := range m.names {
			if strings.HasPrefix(n, name+"/") {
				return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
			}
		}
		for d := range m.dirs {
			if strings.HasPrefix(d, name+"/") {
				return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
			}
		}
		delete(m.dirs, name)
		return nil
	}
	if _, ok := m.names[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(m.names, name)
	return nil
}

func (m *memFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(); err != nil {
		return err
	}
	oldname, newname = clean(oldname), clean(newname)
	nd, ok := m.names[oldname]
	if !ok {
		return &fs.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	delete(m.names, oldname)
	m.names[newname] = nd
	return nil
}

func (m *memFS) MkdirAll(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := clean(dir); ; d = path.Dir(d) {
		m.dirs[d] = true
		if d == "/" {
			return nil
		}
	}
}

func (m *memFS) List(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir = clean(dir)
	if !m.dirs[dir] {
		return nil, &fs.PathError{Op: "list", Path: dir, Err: fs.ErrNotExist}
	}
	var out []string
	for n := range m.names {
		if path.Dir(n) == dir {
			out = append(out, path.Base(n))
		}
	}
	for d := range m.dirs {
		if d != "/" && path.Dir(d) == dir {
			out = append(out, path.Base(d))
		}
	}
	slices.Sort(out)
	return out, nil
}

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }

func (m *memFS) Stat(name string) (fs.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	if m.dirs[name] {
		return memInfo{name: path.Base(name), dir: true}, nil
	}
	nd, ok := m.names[name]
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return memInfo{name: path.Base(name), size: int64(len(nd.data))}, nil
}

func (m *memFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(); err != nil {
		return err
	}
	dir = clean(dir)
	for n := range m.durable {
		if path.Dir(n) == dir {
			if _, ok := m.names[n]; !ok {
				delete(m.durable, n)
			}
		}
	}
	for n, nd := range m.names {
		if path.Dir(n) == dir {
			m.durable[n] = nd
		}
	}
	return nil
}

func (m *memFS) PathJoin(elem ...string) string { return path.Join(elem...) }

type memFile struct {
	fs   *memFS
	nd   *memNode
	name string
	pos  int64
	ro   bool
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if off >= int64(len(f.nd.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.nd.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.ro {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: fs.ErrPermission}
	}
	if err := f.fs.op(); err != nil {
		return 0, err
	}
	if end := off + int64(len(p)); end > int64(len(f.nd.data)) {
		f.nd.data = append(f.nd.data, make([]byte, end-int64(len(f.nd.data)))...)
	}
	copy(f.nd.data[off:], p)
	return len(p), nil
}

func (f *memFile) Write(p []byte) (int, error) {
	n, err := f.WriteAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *memFile) Close() error { return nil }

func (f *memFile) Stat() (fs.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return memInfo{name: path.Base(f.name), size: int64(len(f.nd.data))}, nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.op(); err != nil {
		return err
	}
	f.nd.synced = slices.Clone(f.nd.data)
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.op(); err != nil {
		return err
	}
	if size < int64(len(f.nd.data)) {
		f.nd.data = f.nd.data[:size]
	} else {
		f.nd.data = append(f.nd.data, make([]byte, size-int64(len(f.nd.data)))...)
	}
	return nil
}

func (f *memFile) Preallocate(off, length int64) error { return nil }
