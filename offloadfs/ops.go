package offloadfs

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/nearstore/nearstore/pushdown"
)

// Paths are slash-separated and taken relative to the root whether or not
// they start with '/'; "." and ".." are resolved lexically (path.Clean), as
// there are no symbolic links to make that differ from a walk.

// splitPath cleans name and splits it into components; the root has none.
func splitPath(name string) ([]string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return nil, fmt.Errorf("%w: path contains NUL", iofs.ErrInvalid)
	}
	p := path.Clean("/" + name)
	if p == "/" {
		return nil, nil
	}
	comps := strings.Split(p[1:], "/")
	for _, c := range comps {
		if err := checkName(c); err != nil {
			if errors.Is(err, ErrNameTooLong) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", iofs.ErrInvalid, err)
		}
	}
	return comps, nil
}

func pathErr(op, name string, err error) error {
	return &iofs.PathError{Op: op, Path: name, Err: err}
}

// walk resolves components from the root. Callers hold mu.
func (fsys *FS) walk(comps []string) (*inode, error) {
	in, err := fsys.loadInode(rootIno)
	if err != nil {
		return nil, err
	}
	for _, c := range comps {
		if in.typ != typeDir {
			return nil, ErrNotDir
		}
		if in, err = fsys.lookup(in, c); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// lookup finds name in directory dir.
func (fsys *FS) lookup(dir *inode, name string) (*inode, error) {
	ds, err := fsys.loadDir(dir)
	if err != nil {
		return nil, err
	}
	e, ok := ds.entries[name]
	if !ok {
		return nil, iofs.ErrNotExist
	}
	in, err := fsys.loadInode(e.ino)
	if err != nil {
		return nil, err
	}
	if in.typ != e.typ || !fsys.ibits.get(e.ino) {
		return nil, corruptf("directory %d: entry %q names inode %d of type %d (entry says %d)", dir.ino, name, e.ino, in.typ, e.typ)
	}
	// A directory is reachable only from its parent, so damaged entries
	// can never make the tree a loop.
	if in.typ == typeDir && in.parent != dir.ino {
		return nil, corruptf("directory %d: entry %q names directory %d, whose parent is %d", dir.ino, name, e.ino, in.parent)
	}
	return in, nil
}

// parent resolves all but the last component to a loaded directory.
func (fsys *FS) parent(comps []string) (*inode, error) {
	dir, err := fsys.walk(comps[:len(comps)-1])
	if err != nil {
		return nil, err
	}
	if _, err := fsys.loadDir(dir); err != nil {
		return nil, err
	}
	return dir, nil
}

// Create creates or truncates the named file and opens it read-write.
func (fsys *FS) Create(name string) (*File, error) {
	return fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
}

// Open opens the named file (or directory) read-only.
func (fsys *FS) Open(name string) (*File, error) { return fsys.OpenFile(name, os.O_RDONLY) }

// ReadFile returns the named file's contents: as many bytes as its size
// when opened, read in one ReadAt, so a concurrent truncation is an error
// rather than a short result. An empty file gives no bytes and no error.
func (fsys *FS) ReadFile(name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	// ReadAt may say io.EOF with every byte read, as at a file's end.
	if n, err := f.ReadAt(b, 0); err != nil && (n < len(b) || !errors.Is(err, io.EOF)) {
		return nil, err
	}
	return b, nil
}

// OpenFile opens the named file with os.O_* flags: O_RDONLY, O_WRONLY or
// O_RDWR, and O_CREATE, O_EXCL, O_TRUNC, O_APPEND. Other flags are
// ignored. Directories open read-only, for Stat and Sync.
func (fsys *FS) OpenFile(name string, flag int) (*File, error) {
	f, err := fsys.openFile(name, flag)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if flag&os.O_TRUNC != 0 && f.write {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

func (fsys *FS) openFile(name string, flag int) (*File, error) {
	comps, err := splitPath(name)
	if err != nil {
		return nil, err
	}
	write := flag&(os.O_WRONLY|os.O_RDWR) != 0
	create := flag&os.O_CREATE != 0
	if write || create {
		if err := fsys.lockForChange(); err != nil {
			return nil, err
		}
	} else if err := fsys.lockForRead(); err != nil {
		return nil, err
	}
	defer fsys.mu.Unlock()
	var in *inode
	if len(comps) == 0 {
		if in, err = fsys.loadInode(rootIno); err != nil {
			return nil, err
		}
	} else {
		dir, err := fsys.parent(comps)
		if err != nil {
			return nil, err
		}
		last := comps[len(comps)-1]
		in, err = fsys.lookup(dir, last)
		switch {
		case errors.Is(err, iofs.ErrNotExist) && create:
			if in, err = fsys.allocInode(typeFile, 0); err != nil {
				return nil, err
			}
			if err := fsys.dirAdd(dir, last, in.ino, typeFile); err != nil {
				fsys.freeInode(in)
				return nil, err
			}
		case err != nil:
			return nil, err
		case create && flag&os.O_EXCL != 0:
			return nil, iofs.ErrExist
		}
	}
	if in.typ == typeDir && (write || flag&os.O_TRUNC != 0) {
		return nil, ErrIsDir
	}
	in.refs++
	return &File{
		fsys:   fsys,
		in:     in,
		name:   name,
		read:   flag&os.O_WRONLY == 0,
		write:  write,
		append: flag&os.O_APPEND != 0,
		dir:    in.typ == typeDir,
	}, nil
}

// Mkdir creates a directory; its parent must exist.
func (fsys *FS) Mkdir(name string) error {
	comps, err := splitPath(name)
	if err == nil && len(comps) == 0 {
		err = iofs.ErrExist
	}
	if err == nil {
		err = fsys.lockForChange()
	}
	if err != nil {
		return pathErr("mkdir", name, err)
	}
	defer fsys.mu.Unlock()
	if err := fsys.mkdir(comps); err != nil {
		return pathErr("mkdir", name, err)
	}
	return nil
}

// mkdir creates the directory named by comps. Callers hold mu.
func (fsys *FS) mkdir(comps []string) error {
	dir, err := fsys.parent(comps)
	if err != nil {
		return err
	}
	last := comps[len(comps)-1]
	if _, err := fsys.lookup(dir, last); err == nil {
		return iofs.ErrExist
	} else if !errors.Is(err, iofs.ErrNotExist) {
		return err
	}
	in, err := fsys.allocInode(typeDir, dir.ino)
	if err != nil {
		return err
	}
	if err := fsys.dirAdd(dir, last, in.ino, typeDir); err != nil {
		fsys.freeInode(in)
		return err
	}
	return nil
}

// MkdirAll creates a directory and any missing parents.
func (fsys *FS) MkdirAll(name string) error {
	comps, err := splitPath(name)
	if err == nil {
		err = fsys.lockForChange()
	}
	if err != nil {
		return pathErr("mkdir", name, err)
	}
	defer fsys.mu.Unlock()
	for i := 1; i <= len(comps); i++ {
		in, err := fsys.walk(comps[:i])
		switch {
		case errors.Is(err, iofs.ErrNotExist):
			err = fsys.mkdir(comps[:i])
		case err == nil && in.typ != typeDir:
			err = ErrNotDir
		}
		if err != nil {
			return pathErr("mkdir", name, err)
		}
	}
	return nil
}

// Remove removes a file or an empty directory. A file still open stays
// readable and writable through its handles and is freed when the last
// one closes (or at the next mount, after a crash).
func (fsys *FS) Remove(name string) error {
	comps, err := splitPath(name)
	if err == nil && len(comps) == 0 {
		err = fmt.Errorf("%w: cannot remove the root", iofs.ErrInvalid)
	}
	if err == nil {
		err = fsys.lockForChange()
	}
	if err != nil {
		return pathErr("remove", name, err)
	}
	defer fsys.mu.Unlock()
	if err := fsys.remove(comps); err != nil {
		return pathErr("remove", name, err)
	}
	return nil
}

func (fsys *FS) remove(comps []string) error {
	dir, err := fsys.parent(comps)
	if err != nil {
		return err
	}
	last := comps[len(comps)-1]
	in, err := fsys.lookup(dir, last)
	if err != nil {
		return err
	}
	if in.typ == typeDir {
		ds, err := fsys.loadDir(in)
		if err != nil {
			return err
		}
		if len(ds.entries) > 0 {
			return ErrNotEmpty
		}
	}
	if err := fsys.unlink(in); err != nil {
		return err
	}
	fsys.dirRemove(dir, last)
	return nil
}

// orphanName is the name of an inode in the orphan directory.
func orphanName(ino uint64) string { return fmt.Sprintf("%016x", ino) }

// unlink drops an inode's last name: it is freed, or, if open, moved to
// the orphan directory until its last handle closes. On error nothing
// changed. The caller removes the name.
func (fsys *FS) unlink(in *inode) error {
	if in.refs == 0 {
		fsys.freeInode(in)
		return nil
	}
	od := fsys.inodes[orphanIno]
	if _, err := fsys.loadDir(od); err != nil {
		return err
	}
	if err := fsys.dirAdd(od, orphanName(in.ino), in.ino, in.typ); err != nil {
		return err
	}
	in.orphan, in.nlink = true, 0
	if in.typ == typeDir {
		in.parent = orphanIno
	}
	fsys.dirtyInode(in)
	return nil
}

// Rename moves oldname to newname, replacing newname if it exists and is
// a file (when oldname is a file) or an empty directory (when oldname is
// a directory). Replacing is atomic: after a crash newname names either
// the old or the new inode.
func (fsys *FS) Rename(oldname, newname string) error {
	oc, err := splitPath(oldname)
	var nc []string
	if err == nil {
		nc, err = splitPath(newname)
	}
	if err == nil && (len(oc) == 0 || len(nc) == 0) {
		err = fmt.Errorf("%w: cannot rename the root", iofs.ErrInvalid)
	}
	if err == nil {
		err = fsys.lockForChange()
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	defer fsys.mu.Unlock()
	if err := fsys.rename(oc, nc); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return nil
}

func (fsys *FS) rename(oc, nc []string) error {
	op, err := fsys.parent(oc)
	if err != nil {
		return err
	}
	oldName := oc[len(oc)-1]
	src, err := fsys.lookup(op, oldName)
	if err != nil {
		return err
	}
	np, err := fsys.parent(nc)
	if err != nil {
		return err
	}
	newName := nc[len(nc)-1]
	if src.typ == typeDir {
		// A directory cannot move below itself.
		for d, steps := np, 0; ; steps++ {
			if steps > int(fsys.sb.inodeCount) {
				return corruptf("directory %d: parent chain loops", np.ino)
			}
			if d.ino == src.ino {
				return fmt.Errorf("%w: cannot move a directory below itself", iofs.ErrInvalid)
			}
			if d.ino == rootIno {
				break
			}
			if d, err = fsys.loadInode(d.parent); err != nil {
				return err
			}
			if d.typ != typeDir {
				return corruptf("inode %d: parent is not a directory", d.ino)
			}
		}
	}
	dst, err := fsys.lookup(np, newName)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		if err := fsys.dirAdd(np, newName, src.ino, src.typ); err != nil {
			return err
		}
	case err != nil:
		return err
	case dst.ino == src.ino:
		return nil
	default:
		if src.typ == typeDir {
			if dst.typ != typeDir {
				return ErrNotDir
			}
			ds, err := fsys.loadDir(dst)
			if err != nil {
				return err
			}
			if len(ds.entries) > 0 {
				return ErrNotEmpty
			}
		} else if dst.typ == typeDir {
			return ErrIsDir
		}
		if err := fsys.unlink(dst); err != nil {
			return err
		}
		fsys.dirReplace(np, newName, src.ino, src.typ)
	}
	fsys.dirRemove(op, oldName)
	if src.typ == typeDir && src.parent != np.ino {
		src.parent = np.ino
		fsys.dirtyInode(src)
	}
	return nil
}

// Stat describes the named file or directory.
func (fsys *FS) Stat(name string) (iofs.FileInfo, error) {
	comps, err := splitPath(name)
	if err == nil {
		err = fsys.lockForRead()
	}
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	defer fsys.mu.Unlock()
	in, err := fsys.walk(comps)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	base := "/"
	if len(comps) > 0 {
		base = comps[len(comps)-1]
	}
	return fsys.info(base, in), nil
}

// SetModTime sets the modification time of the named file or directory,
// as touch -d, cp -p, tar -x and rsync -a do; the next commit makes it
// durable, like any metadata change. It is the only time offloadfs
// stores: writes and truncations that change a file's size set it to
// the present, and overwrites in place leave it alone. The extent-map
// version does not change. Times outside 1678–2262 (Unix nanoseconds in
// an int64) fail with ErrInvalid.
func (fsys *FS) SetModTime(name string, mtime time.Time) error {
	comps, err := splitPath(name)
	if err == nil {
		err = fsys.lockForChange()
	}
	if err != nil {
		return pathErr("chtimes", name, err)
	}
	defer fsys.mu.Unlock()
	in, err := fsys.walk(comps)
	if err == nil {
		err = fsys.setModTime(in, mtime)
	}
	if err != nil {
		return pathErr("chtimes", name, err)
	}
	return nil
}

// ReadDir lists a directory, sorted by name.
func (fsys *FS) ReadDir(name string) ([]iofs.DirEntry, error) {
	comps, err := splitPath(name)
	if err == nil {
		err = fsys.lockForRead()
	}
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	defer fsys.mu.Unlock()
	dir, err := fsys.walk(comps)
	var ds *dirState
	if err == nil {
		ds, err = fsys.loadDir(dir)
	}
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	out := make([]iofs.DirEntry, 0, len(ds.entries))
	for _, n := range ds.names() {
		in, err := fsys.lookup(dir, n)
		if err != nil {
			return nil, pathErr("readdir", path.Join(name, n), err)
		}
		out = append(out, iofs.FileInfoToDirEntry(fsys.info(n, in)))
	}
	return out, nil
}

// ExtentMap returns the current extent map of file inode ino, for a
// synchronizer that learned of a change from the change feed.
func (fsys *FS) ExtentMap(ino uint64) (pushdown.File, error) {
	if err := fsys.lockForRead(); err != nil {
		return pushdown.File{}, err
	}
	defer fsys.mu.Unlock()
	if ino < firstIno || ino >= fsys.sb.inodeCount {
		return pushdown.File{}, fmt.Errorf("offloadfs: inode %d: %w", ino, iofs.ErrNotExist)
	}
	in, err := fsys.loadInode(ino)
	if err != nil {
		return pushdown.File{}, err
	}
	switch in.typ {
	case typeFree:
		return pushdown.File{ID: ino, Version: in.version}, fmt.Errorf("offloadfs: inode %d: %w", ino, iofs.ErrNotExist)
	case typeDir:
		return pushdown.File{}, fmt.Errorf("offloadfs: inode %d: %w", ino, ErrIsDir)
	}
	return fsys.exported(in), nil
}

// FileInfo describes a file or directory. Sys returns the *FileInfo
// itself, whose Ino and Version methods name the extent map.
type FileInfo struct {
	name    string
	size    int64
	mode    iofs.FileMode
	mtime   int64
	ino     uint64
	version uint64
	blocks  uint64
}

// info snapshots in. Callers hold mu.
func (fsys *FS) info(name string, in *inode) *FileInfo {
	fi := &FileInfo{name: name, size: int64(in.size), mode: 0o644, mtime: in.mtime, ino: in.ino, version: in.version, blocks: in.alloc}
	if in.typ == typeDir {
		fi.mode = iofs.ModeDir | 0o755
	}
	return fi
}

func (fi *FileInfo) Name() string            { return fi.name }
func (fi *FileInfo) Size() int64             { return fi.size }
func (fi *FileInfo) Mode() iofs.FileMode     { return fi.mode }
func (fi *FileInfo) ModTime() time.Time      { return time.Unix(0, fi.mtime) }
func (fi *FileInfo) IsDir() bool             { return fi.mode.IsDir() }
func (fi *FileInfo) Sys() any                { return fi }
func (fi *FileInfo) Ino() uint64             { return fi.ino }
func (fi *FileInfo) Version() uint64         { return fi.version }
func (fi *FileInfo) AllocatedBlocks() uint64 { return fi.blocks }
