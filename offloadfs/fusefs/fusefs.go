// Package fusefs serves a mounted offloadfs through the kernel's FUSE, so
// ordinary tools (cp, md5sum, ls, mv, rm, editors) read and write its files.
//
// The FUSE side is go-fuse's node API. offloadfs is path-based, so every
// node finds its path from go-fuse's tree, which go-fuse keeps in step with
// lookups, renames and removals; open files are offloadfs handles, which
// follow the inode, not the name, so a file renamed or removed while open
// keeps working through its descriptors.
//
// What offloadfs does not have, the mount does not pretend to: there are no
// owners, permissions, timestamps other than the modification time, links
// or extended attributes. Files show as 0644 and directories as 0755, owned
// by the user serving the mount. Setting the modification time (touch -d,
// cp -p, tar -x, rsync -a) stores it. Access and change times are not
// stored and show as the modification time; setting the access time is
// accepted and ignored, as on a noatime mount, because the tools that copy
// times set both and would fail on the one that cannot be kept. chmod and
// chown fail with EPERM unless they ask for the mode and owner shown (or
// make a file private as its writer starts writing it, as rsync does: see
// makingPrivate); link and symlink fail with EPERM too (go-fuse's
// default for operations a file system lacks is ENOTSUP); extended
// attributes are switched off for the whole mount.
//
// Consistency: the mount is meant to be the file system's owner, its only
// writer, so the kernel may cache names and attributes for Options.Timeout.
// File data is not cached across opens. fsync commits offloadfs's metadata
// (one commit covers every file); close does not, but offloadfs commits on
// its own every few seconds, and unmounting commits everything.
package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nearstore/nearstore/offloadfs"
)

// Options configure Mount. The zero value is usable.
type Options struct {
	// FsName is the mount's source, shown by mount and df (default
	// "offloadfs").
	FsName string
	// Timeout is how long the kernel may cache names, attributes and
	// failed lookups (default 1 s; negative: no caching). Caching is
	// safe because every change goes through this mount.
	Timeout time.Duration
	// MaxWrite is the largest read or write the kernel sends in one
	// request (default and most: 1 MiB, Linux's limit).
	MaxWrite int
	// AllowOther lets users other than the one serving the mount use
	// it (needs user_allow_other in /etc/fuse.conf for non-root).
	AllowOther bool
	// Logger receives errors that reach the kernel as EIO and go-fuse's
	// own messages (default slog.Default()).
	Logger *slog.Logger
	// Debug logs every FUSE request and reply (through Logger, at debug
	// level).
	Debug bool
}

// Server is a mounted file system being served.
type Server struct {
	srv *fuse.Server
	dir string
}

// Mount mounts fsys on dir and serves it until it is unmounted: by
// Unmount, or by umount(8) from outside. A read-only offloadfs mount is
// mounted read-only. The caller keeps ownership of fsys and closes it
// after Wait returns (closing commits what the mount wrote).
//
// Mounting needs /dev/fuse and either root (go-fuse calls mount(2)
// itself) or the fusermount3 (or fusermount) helper. ErrUnavailable wraps
// the error when neither works.
func Mount(dir string, fsys *offloadfs.FS, opts Options) (*Server, error) {
	if opts.FsName == "" {
		opts.FsName = "offloadfs"
	}
	if opts.Timeout == 0 {
		opts.Timeout = time.Second
	}
	opts.Timeout = max(opts.Timeout, 0)
	if opts.MaxWrite <= 0 || opts.MaxWrite > 1<<20 {
		opts.MaxWrite = 1 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	abs, err := absDir(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("fusefs: mount %s: %w: %w", abs, ErrUnavailable, err)
	}
	m := &mount{
		fsys: fsys,
		bs:   uint64(fsys.Usage().BlockSize),
		log:  opts.Logger,
		uid:  uint32(os.Getuid()),
		gid:  uint32(os.Getgid()),
		gens: map[uint64]uint64{},
	}
	goLog := log.New(slogWriter{opts.Logger}, "", 0)
	mo := fuse.MountOptions{
		FsName:     opts.FsName,
		Name:       "offloadfs",
		AllowOther: opts.AllowOther,
		// Root can mount without the fusermount helper; others fall
		// back to it.
		DirectMount: true,
		MaxWrite:    opts.MaxWrite,
		// offloadfs has no extended attributes; saying so once stops
		// the kernel asking on every write (security.capability).
		DisableXAttrs: true,
		Debug:         opts.Debug,
		Logger:        goLog,
	}
	if fsys.ReadOnly() {
		mo.Options = append(mo.Options, "ro")
	}
	t := opts.Timeout
	srv, err := fs.Mount(abs, &node{m: m}, &fs.Options{
		MountOptions:    mo,
		EntryTimeout:    &t,
		AttrTimeout:     &t,
		NegativeTimeout: &t,
		RootStableAttr:  &fs.StableAttr{Ino: 1},
		Logger:          goLog,
	})
	if err != nil {
		return nil, fmt.Errorf("fusefs: mount %s: %w: %w", abs, ErrUnavailable, err)
	}
	return &Server{srv: srv, dir: abs}, nil
}

// ErrUnavailable means FUSE cannot be used here: no /dev/fuse, or
// mounting was not permitted (not root and no fusermount helper).
var ErrUnavailable = errors.New("fusefs: FUSE unavailable")

func absDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("fusefs: mount point: %w", err)
	}
	if err := CheckMountPoint(abs); err != nil {
		return "", fmt.Errorf("fusefs: %w", err)
	}
	return abs, nil
}

// CheckMountPoint checks that dir can be mounted on: it exists and is a
// directory. Mount checks it too; a command calls it first to fail before
// it takes the file system over. A FUSE mount whose serving process ended
// without unmounting (killed, crashed) fails every access with ENOTCONN,
// "transport endpoint is not connected"; the error then says so and how
// to clear it, and wraps syscall.ENOTCONN.
func CheckMountPoint(dir string) error {
	shown := dir
	if abs, err := filepath.Abs(dir); err == nil {
		shown = abs
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, syscall.ENOTCONN):
		return fmt.Errorf("%s is a dead FUSE mount (the process serving it ended); "+
			"run `fusermount3 -u %s` (or `umount %s` as root) and mount again: %w",
			shown, shown, shown, syscall.ENOTCONN)
	case err != nil:
		return fmt.Errorf("mount point: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("mount point %s: %w", shown, syscall.ENOTDIR)
	}
	return nil
}

// Dir is the absolute mount point.
func (s *Server) Dir() string { return s.dir }

// Wait returns when the file system has been unmounted and every request
// answered.
func (s *Server) Wait() { s.srv.Wait() }

// Unmount unmounts the file system and waits for the serving to end. It
// fails with EBUSY, leaving the mount in place, while files are open or a
// process has its working directory there.
func (s *Server) Unmount() error {
	err := syscall.Unmount(s.dir, 0)
	switch {
	case err == nil:
		s.srv.Wait()
		return nil
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("fusefs: unmount %s: %w (files are open, or a process is in it)", s.dir, err)
	case errors.Is(err, syscall.EINVAL):
		// Not mounted any more: unmounted from outside.
		s.srv.Wait()
		return nil
	}
	// Not root: the fusermount helper unmounts.
	if err := s.srv.Unmount(); err != nil {
		return fmt.Errorf("fusefs: unmount %s: %w", s.dir, err)
	}
	return nil
}

// Detach unmounts lazily (umount -l): the mount disappears from the
// directory tree at once and is served until the last open file closes.
func (s *Server) Detach() error {
	if err := syscall.Unmount(s.dir, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("fusefs: detach %s: %w", s.dir, err)
	}
	return nil
}

// slogWriter turns go-fuse's log.Logger lines into slog debug records.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := string(p)
	if n := len(msg); n > 0 && msg[n-1] == '\n' {
		msg = msg[:n-1]
	}
	w.l.Debug("fuse: " + msg)
	return len(p), nil
}

// Errno maps an offloadfs error to the errno the kernel should see.
// offloadfs's errors match their errnos through errors.Is; the io/fs
// sentinels map as the os package would map them.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	// The specific errnos first: ENOTEMPTY also matches fs.ErrExist.
	for _, e := range []syscall.Errno{syscall.ENOTEMPTY, syscall.ENOSPC, syscall.ENOTDIR,
		syscall.EISDIR, syscall.ENAMETOOLONG, syscall.EROFS} {
		if errors.Is(err, e) {
			return e
		}
	}
	var en syscall.Errno
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, iofs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, iofs.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, iofs.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, offloadfs.ErrCorrupt):
		// What Linux file systems return for damaged metadata
		// (EFSCORRUPTED).
		return syscall.EUCLEAN
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return syscall.EINTR
	case errors.As(err, &en):
		return en
	}
	return syscall.EIO
}

// mount is the state the nodes of one mount share.
type mount struct {
	fsys     *offloadfs.FS
	bs       uint64 // block size
	log      *slog.Logger
	uid, gid uint32

	// gens counts, per inode number, the files that had it and were
	// removed: offloadfs reuses inode numbers, and go-fuse tells a reused
	// number from a node the kernel may still hold by the generation.
	mu   sync.Mutex
	gens map[uint64]uint64
}

func (m *mount) gen(ino uint64) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gens[ino]
}

// retire notes that inode ino no longer names the object it did.
func (m *mount) retire(ino uint64) {
	m.mu.Lock()
	m.gens[ino]++
	m.mu.Unlock()
}

// errno maps err and logs what the kernel can only report as EIO.
func (m *mount) errno(op, name string, err error) syscall.Errno {
	e := Errno(err)
	if e == syscall.EIO || e == syscall.EUCLEAN {
		m.log.Error("fusefs: "+op, "path", "/"+name, "err", err)
	}
	return e
}

// fill sets a FUSE attribute from offloadfs's description of a file.
func (m *mount) fill(fi iofs.FileInfo, a *fuse.Attr) {
	ofi, _ := fi.Sys().(*offloadfs.FileInfo)
	a.Size = uint64(fi.Size())
	a.Mode = syscall.S_IFREG | 0o644
	a.Nlink = 1
	if fi.IsDir() {
		// Link count 1: "unknown", so tree walkers do not use it to
		// skip subdirectories.
		a.Mode = syscall.S_IFDIR | 0o755
	}
	if ofi != nil {
		a.Ino = ofi.Ino()
		a.Blocks = ofi.AllocatedBlocks() * m.bs / 512
		a.Blksize = uint32(m.bs)
	}
	t := fi.ModTime()
	a.SetTimes(&t, &t, &t)
	a.Uid, a.Gid = m.uid, m.gid
}

func stableAttr(fi iofs.FileInfo, gen uint64) fs.StableAttr {
	st := fs.StableAttr{Mode: syscall.S_IFREG, Gen: gen}
	if fi.IsDir() {
		st.Mode = syscall.S_IFDIR
	}
	if ofi, ok := fi.Sys().(*offloadfs.FileInfo); ok {
		st.Ino = ofi.Ino()
	}
	return st
}

// node is a file or directory of the mount.
type node struct {
	fs.Inode
	m *mount

	// open holds the node's open handles, so attribute requests that
	// come without one (the kernel does not always send it) still reach
	// a file that has been removed while open.
	mu   sync.Mutex
	open map[*handle]struct{}
}

var (
	_ fs.NodeLookuper    = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeSetattrer   = (*node)(nil)
	_ fs.NodeReaddirer   = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeReader      = (*node)(nil)
	_ fs.NodeWriter      = (*node)(nil)
	_ fs.NodeFsyncer     = (*node)(nil)
	_ fs.NodeFlusher     = (*node)(nil)
	_ fs.NodeReleaser    = (*node)(nil)
	_ fs.NodeAllocater   = (*node)(nil)
	_ fs.NodeMkdirer     = (*node)(nil)
	_ fs.NodeRmdirer     = (*node)(nil)
	_ fs.NodeUnlinker    = (*node)(nil)
	_ fs.NodeRenamer     = (*node)(nil)
	_ fs.NodeStatfser    = (*node)(nil)
	_ fs.NodeLinker      = (*node)(nil)
	_ fs.NodeSymlinker   = (*node)(nil)
	_ fs.NodeMknoder     = (*node)(nil)
	_ fs.NodeOnForgetter = (*node)(nil)
)

// path is the node's path in offloadfs, from go-fuse's tree ("" is the
// root). A node removed from the tree gets a path that names nothing.
func (n *node) path() string { return n.Path(n.Root()) }

func (n *node) child(name string) string { return path.Join(n.path(), name) }

// newChild makes (or finds) the go-fuse node for fi, a child of n, and
// fills out.
func (n *node) newChild(ctx context.Context, fi iofs.FileInfo, out *fuse.EntryOut) *fs.Inode {
	n.m.fill(fi, &out.Attr)
	st := stableAttr(fi, 0)
	st.Gen = n.m.gen(st.Ino)
	return n.NewInode(ctx, &node{m: n.m}, st)
}

// anyHandle returns one of the node's open handles, or nil.
func (n *node) anyHandle() *handle {
	n.mu.Lock()
	defer n.mu.Unlock()
	for h := range n.open {
		return h
	}
	return nil
}

func (n *node) addHandle(h *handle) {
	n.mu.Lock()
	if n.open == nil {
		n.open = map[*handle]struct{}{}
	}
	n.open[h] = struct{}{}
	n.mu.Unlock()
}

func (n *node) dropHandle(h *handle) {
	n.mu.Lock()
	delete(n.open, h)
	n.mu.Unlock()
}

// OnForget is called when the kernel forgets the node; nothing is held.
func (n *node) OnForget() {}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	p := n.child(name)
	fi, err := n.m.fsys.Stat(p)
	if err != nil {
		return nil, n.m.errno("lookup", p, err)
	}
	return n.newChild(ctx, fi, out), 0
}

// stat describes the node, through an open handle if it has one.
func (n *node) stat(fh fs.FileHandle) (iofs.FileInfo, error) {
	h, _ := fh.(*handle)
	if h == nil {
		h = n.anyHandle()
	}
	if h != nil {
		return h.f.Stat()
	}
	return n.m.fsys.Stat(n.path())
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fi, err := n.stat(fh)
	if err != nil {
		return n.m.errno("getattr", n.path(), err)
	}
	n.m.fill(fi, &out.Attr)
	return 0
}

// Setattr changes the size and the modification time. A mode, owner or
// group other than the one shown fails with EPERM before anything
// changes: offloadfs stores none of them. The access time is not stored
// either, and setting it is accepted and ignored (see the package doc).
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.checkUnstored(fh, in); e != 0 {
		return e
	}
	if size, ok := in.GetSize(); ok {
		if err := n.truncate(fh, size); err != nil {
			return n.m.errno("truncate", n.path(), err)
		}
	}
	// After the size: a truncation sets the time to the present, and an
	// explicit time in the same request wins.
	if mtime, ok := in.GetMTime(); ok {
		if err := n.setModTime(fh, mtime); err != nil {
			return n.m.errno("chtimes", n.path(), err)
		}
	}
	return n.Getattr(ctx, fh, out)
}

// checkUnstored refuses, with EPERM, a change of what offloadfs does not
// store: a mode, owner or group other than the one the mount shows.
func (n *node) checkUnstored(fh fs.FileHandle, in *fuse.SetAttrIn) syscall.Errno {
	mode, setMode := in.GetMode()
	uid, setUID := in.GetUID()
	gid, setGID := in.GetGID()
	if !setMode && !setUID && !setGID {
		return 0
	}
	fi, err := n.stat(fh)
	if err != nil {
		return n.m.errno("setattr", n.path(), err)
	}
	var a fuse.Attr
	n.m.fill(fi, &a)
	if setMode && mode&0o7777 != a.Mode&0o7777 && !n.makingPrivate(mode) {
		return syscall.EPERM
	}
	if (setUID && uid != a.Uid) || (setGID && gid != a.Gid) {
		return syscall.EPERM
	}
	return 0
}

// makingPrivate reports whether a chmod to mode is a writer making a file
// private before it writes it: mode grants nothing to group or others,
// and the file has a handle open for writing that has neither written
// nor been closed. rsync -a does this to every file it copies (mkstemp,
// then fchmod 0600 or 0700, then the data) and skips the file if that
// fails, so refusing it made rsync -a copy nothing. Such a chmod succeeds
// without effect: on this mount a file is private to the user serving it
// anyway, unless it was mounted with AllowOther. The mode the writer
// gives the file once it is written (cp -p's, rsync's last chmod) is
// checked like any other.
//
// A handle counts as closed from close(2)'s FLUSH, which close waits
// for, not from RELEASE, which the kernel sends after close returns: a
// chmod right after close must not find the handle still open.
func (n *node) makingPrivate(mode uint32) bool {
	if mode&0o7077 != 0 {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for h := range n.open {
		if h.write && !h.used.Load() {
			return true
		}
	}
	return false
}

// setModTime sets the modification time, through an open handle if the
// node has one (its path names nothing once it is removed while open).
func (n *node) setModTime(fh fs.FileHandle, mtime time.Time) error {
	h, _ := fh.(*handle)
	if h == nil {
		h = n.anyHandle()
	}
	if h != nil {
		return h.f.SetModTime(mtime)
	}
	return n.m.fsys.SetModTime(n.path(), mtime)
}

func (n *node) truncate(fh fs.FileHandle, size uint64) error {
	if size > 1<<62 {
		return syscall.EFBIG
	}
	if h, ok := fh.(*handle); ok && h.write {
		return h.f.Truncate(int64(size))
	}
	f, err := n.m.fsys.OpenFile(n.path(), os.O_WRONLY)
	if err != nil {
		return err
	}
	err = f.Truncate(int64(size))
	return errors.Join(err, f.Close())
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	p := n.path()
	ents, err := n.m.fsys.ReadDir(p)
	if err != nil {
		return nil, n.m.errno("readdir", p, err)
	}
	// "." and ".." are the file system's to list; go-fuse answers their
	// lookups itself.
	self := n.StableAttr().Ino
	up := self
	if _, parent := n.Parent(); parent != nil {
		up = parent.StableAttr().Ino
	}
	list := make([]fuse.DirEntry, 0, len(ents)+2)
	list = append(list, fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: self},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: up})
	for _, e := range ents {
		d := fuse.DirEntry{Name: e.Name(), Mode: syscall.S_IFREG}
		if e.IsDir() {
			d.Mode = syscall.S_IFDIR
		}
		if fi, err := e.Info(); err == nil {
			if ofi, ok := fi.Sys().(*offloadfs.FileInfo); ok {
				d.Ino = ofi.Ino()
			}
		}
		list = append(list, d)
	}
	return fs.NewListDirStream(list), 0
}

// openFlags keeps the open(2) flags offloadfs understands. Write-only
// opens are read-write to offloadfs: the kernel enforces the access mode,
// and may itself need to read through the handle. O_APPEND is dropped:
// the kernel already sends appends at the end of the file.
func openFlags(flags uint32) int {
	f := int(flags) & (syscall.O_ACCMODE | syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC)
	if f&syscall.O_ACCMODE == syscall.O_WRONLY {
		f = f&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return f
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	p := n.path()
	f, err := n.m.fsys.OpenFile(p, openFlags(flags))
	if err != nil {
		return nil, 0, n.m.errno("open", p, err)
	}
	h := &handle{f: f, write: flags&syscall.O_ACCMODE != syscall.O_RDONLY}
	n.addHandle(h)
	return h, 0, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	p := n.child(name)
	f, err := n.m.fsys.OpenFile(p, openFlags(flags)|os.O_CREATE)
	if err != nil {
		return nil, nil, 0, n.m.errno("create", p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, 0, n.m.errno("create", p, err)
	}
	ch := n.newChild(ctx, fi, out)
	h := &handle{f: f, write: flags&syscall.O_ACCMODE != syscall.O_RDONLY}
	ch.Operations().(*node).addHandle(h)
	return ch, h, 0, 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	k, err := h.f.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, n.m.errno("read", n.path(), err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	h.used.Store(true)
	k, err := h.f.WriteAt(data, off)
	if err != nil {
		return uint32(k), n.m.errno("write", n.path(), err)
	}
	return uint32(k), 0
}

// Fsync commits: one offloadfs commit makes every file's data and
// metadata durable, so fsync and fdatasync of a file or a directory are
// the same.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	// Not cancellable: an interrupted commit fails the whole file
	// system, and the kernel interrupts requests of any process that
	// gets a signal (Go programs get them all the time).
	if err := n.m.fsys.Sync(context.WithoutCancel(ctx)); err != nil {
		return n.m.errno("fsync", n.path(), err)
	}
	return 0
}

// Flush (close(2) of a descriptor) only notes the close (see
// makingPrivate): writes reach the device before they return, and
// metadata is committed by fsync, by the periodic commit and at unmount.
func (n *node) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		h.used.Store(true)
	}
	return 0
}

func (n *node) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	h, ok := fh.(*handle)
	if !ok {
		return syscall.EBADF
	}
	n.dropHandle(h)
	if err := h.f.Close(); err != nil {
		return n.m.errno("release", n.path(), err)
	}
	return 0
}

// Allocate implements fallocate(2): plain (mode 0) and FALLOC_FL_KEEP_SIZE
// reserve blocks; punching holes and the like do not exist in a file
// system without holes.
func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	const keepSize = 0x01 // FALLOC_FL_KEEP_SIZE
	h, ok := fh.(*handle)
	switch {
	case !ok:
		return syscall.EBADF
	case mode&^keepSize != 0:
		return syscall.EOPNOTSUPP
	case off > 1<<62 || size > 1<<62:
		return syscall.EFBIG
	}
	err := h.f.Preallocate(int64(off), int64(size))
	if err == nil && mode&keepSize == 0 {
		var fi iofs.FileInfo
		if fi, err = h.f.Stat(); err == nil && uint64(fi.Size()) < off+size {
			err = h.f.Truncate(int64(off + size))
		}
	}
	if err != nil {
		return n.m.errno("fallocate", n.path(), err)
	}
	return 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	p := n.child(name)
	if err := n.m.fsys.Mkdir(p); err != nil {
		return nil, n.m.errno("mkdir", p, err)
	}
	fi, err := n.m.fsys.Stat(p)
	if err != nil {
		return nil, n.m.errno("mkdir", p, err)
	}
	return n.newChild(ctx, fi, out), 0
}

// remove removes the child name, which must be a directory or not as dir
// says. The kernel checks the type too, from its cache; this check is
// against offloadfs itself.
func (n *node) remove(name string, dir bool) syscall.Errno {
	p := n.child(name)
	fi, err := n.m.fsys.Stat(p)
	switch {
	case err != nil:
		return n.m.errno("remove", p, err)
	case dir && !fi.IsDir():
		return syscall.ENOTDIR
	case !dir && fi.IsDir():
		return syscall.EISDIR
	}
	if err := n.m.fsys.Remove(p); err != nil {
		return n.m.errno("remove", p, err)
	}
	n.m.retire(stableAttr(fi, 0).Ino)
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno  { return n.remove(name, true) }
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno { return n.remove(name, false) }

// Rename supports renameat2's RENAME_NOREPLACE; RENAME_EXCHANGE and
// RENAME_WHITEOUT fail with EINVAL, as on file systems without them.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	const noReplace = 0x1 // RENAME_NOREPLACE
	np, ok := newParent.(*node)
	if !ok || flags&^noReplace != 0 {
		return syscall.EINVAL
	}
	oldPath, newPath := n.child(name), np.child(newName)
	src, err := n.m.fsys.Stat(oldPath)
	if err != nil {
		return n.m.errno("rename", oldPath, err)
	}
	// The kernel holds both directories locked, so what is at newPath
	// now is what the rename replaces.
	dst, err := n.m.fsys.Stat(newPath)
	switch {
	case err == nil && flags&noReplace != 0:
		return syscall.EEXIST
	case err != nil && !errors.Is(err, iofs.ErrNotExist):
		return n.m.errno("rename", newPath, err)
	}
	if err := n.m.fsys.Rename(oldPath, newPath); err != nil {
		return n.m.errno("rename", oldPath, err)
	}
	if dst != nil {
		if ino := stableAttr(dst, 0).Ino; ino != stableAttr(src, 0).Ino {
			n.m.retire(ino)
		}
	}
	return 0
}

// Statfs counts blocks freed by changes not yet committed as free (see
// offloadfs's FS.FreeBlocks), so df shows an rm at once rather than at
// the next commit; committing here instead would cost a journal write
// and two flushes for every df.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	u := n.m.fsys.Usage()
	free, pinned := n.m.fsys.FreeBlocks()
	out.Bsize = uint32(u.BlockSize)
	out.Frsize = uint32(u.BlockSize)
	out.Blocks = u.Blocks
	out.Bfree = free + pinned
	out.Bavail = free + pinned
	out.Files = u.Inodes
	out.Ffree = u.FreeInodes
	out.NameLen = offloadfs.MaxNameLen
	return 0
}

// Link and Symlink: offloadfs has one name per file and no symbolic
// links. EPERM is what link(2) returns on file systems without hard
// links.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Mknod makes regular files only (mknod(2) with S_IFREG, which the
// kernel sends instead of Create for some callers).
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, syscall.EPERM
	}
	p := n.child(name)
	f, err := n.m.fsys.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return nil, n.m.errno("mknod", p, err)
	}
	fi, err := f.Stat()
	if err = errors.Join(err, f.Close()); err != nil {
		return nil, n.m.errno("mknod", p, err)
	}
	return n.newChild(ctx, fi, out), 0
}

// handle is an open file.
type handle struct {
	f     *offloadfs.File
	write bool
	// used is set once the handle has written or its descriptor has been
	// closed (makingPrivate).
	used atomic.Bool
}
