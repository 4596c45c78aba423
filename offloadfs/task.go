package offloadfs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"time"

	"github.com/nearstore/nearstore/pushdown"
)

// Task offload, the owner's side (docs/OFFLOADFS.md, "Task offload"): the
// owner hands a whole task to an offload engine (package offload) on the
// storage node or a peer, which reads the task's input files and writes
// its output files through the blocks the owner grants, and nothing else.
// FS.Offload keeps these rules:
//
//  1. Outputs are made before anything is sent: each is a new inode that
//     lives only in the orphan directory, grown to the space the caller
//     reserves and zeroed (so no block of an earlier file is ever
//     exposed), and committed. A crash of the owner or the engine from
//     here until step 4 leaves it an orphan, which the next read-write
//     mount frees: garbage that is reclaimed, never visible data.
//  2. Inputs are granted read, outputs read-write, to the engine's host
//     NQN, and pinned (grant.go): the owner does not move, free or
//     overwrite any of their granted bytes until the grants end. The
//     request names each file by inode, extent-map version, contents tag
//     and its granted extents, so an engine's cache never serves bytes
//     of another version.
//  3. When the task ends, the grants are released at the target before
//     anything else: the release waits for the engine's admitted I/O, so
//     nothing the engine does can land after it.
//  4. On success each output is cut to the bytes the task wrote (the
//     unused reserved blocks are freed) and takes its name in the same
//     transaction that leaves the orphan directory, replacing a file of
//     that name atomically, and the owner commits. On failure the outputs
//     are freed and no name changes.

// A Peer runs offloaded tasks: an offload engine as its client sees it
// (package offload's Client, which also runs the tasks an engine turns
// away on this host).
type Peer interface {
	// Grantee returns the host NQN the engine reaches the volume as: the
	// grants are made to it.
	Grantee(ctx context.Context) (string, error)
	// RunTask runs the task to its end and returns its result. It must
	// not return before the engine has stopped touching the files, or
	// with an error, before the engine has been told to stop.
	RunTask(ctx context.Context, req TaskRequest) (TaskResult, error)
}

// TaskFile is a file as a task request names it: its map as granted
// (inode, version, size, device extents) and whether the task may write
// it (outputs: their size is the space reserved).
type TaskFile struct {
	pushdown.File
	Write bool
	// ContentTag differs whenever the file's bytes may have changed,
	// even when its version did not (an overwrite in place): an engine
	// caches under (inode, version, tag). Bypass asks the engine to read
	// the device, never its cache.
	ContentTag uint64
	Bypass     bool
}

// TaskRequest is what a Peer is asked to run.
type TaskRequest struct {
	Task string
	// Module, if not empty, is the task itself, a wasm module the peer
	// runs (Task then only names it).
	Module []byte
	Files  []TaskFile
	Args   []byte
}

// TaskResult is what a task returned.
type TaskResult struct {
	Output []byte
	// Written has, for each file of the request, the end of the highest
	// byte the task wrote (0 for inputs).
	Written []uint64
	// Local says the task ran on this host: the engine turned it away.
	Local bool
}

// OffloadFile is one file of an offloaded task: an input (In, read only)
// or an output (Out: the path it gets when the task succeeds, and
// Reserve: the bytes to reserve for it, the most the task may write).
type OffloadFile struct {
	In      *File
	Out     string
	Reserve int64
	// Bypass has the engine read an input from the device, not from its
	// cache (which is coherent anyway: see TaskFile.ContentTag).
	Bypass bool
}

// OffloadResult is an offloaded task's result.
type OffloadResult struct {
	Output []byte
	// Sizes has each output's committed size, in the order of the
	// request's files (0 for inputs).
	Sizes []int64
	// Local says the task ran on this host (the engine turned it away).
	Local bool
}

// ErrTaskOutput means a task claims to have written past the space
// reserved for an output; its outputs are discarded.
var ErrTaskOutput = errors.New("offloadfs: a task wrote past an output's reserved space")

// offloadLease is the grants' lease when ctx has no deadline; a deadline
// makes it the time left plus offloadLeaseSlack.
const (
	offloadLease      = 10 * time.Minute
	offloadLeaseSlack = 10 * time.Second
)

// Offload runs the registered task on peer over files, with args, as the
// rules above say: outputs are reserved, granted with the inputs,
// written by the task and committed under their names only if it
// succeeds. Inputs are open handles of this file system; outputs' parent
// directories must exist. It needs a read-write mount with a Remote (the
// grants go through it). The result's Output is what the task returned.
func (fsys *FS) Offload(ctx context.Context, peer Peer, task string, files []OffloadFile, args []byte) (*OffloadResult, error) {
	return fsys.offload(ctx, peer, TaskRequest{Task: task, Args: args}, files)
}

// OffloadModule is Offload with the task sent along: module is a wasm
// module the peer runs (package offload states what it may import),
// named task in errors, under the same rules.
func (fsys *FS) OffloadModule(ctx context.Context, peer Peer, task string, module []byte, files []OffloadFile, args []byte) (*OffloadResult, error) {
	if len(module) == 0 {
		return nil, fmt.Errorf("offloadfs: offload %s: no module: %w", task, iofs.ErrInvalid)
	}
	return fsys.offload(ctx, peer, TaskRequest{Task: task, Module: module, Args: args}, files)
}

// offload runs req (its files filled in here) on peer.
func (fsys *FS) offload(ctx context.Context, peer Peer, req TaskRequest, files []OffloadFile) (*OffloadResult, error) {
	task := req.Task
	if fsys.syncer == nil {
		return nil, fmt.Errorf("offloadfs: offload %s: %w", task, ErrNoRemote)
	}
	if len(files) == 0 || len(files) > pushdown.MaxFiles {
		return nil, fmt.Errorf("offloadfs: offload %s: %d files (want 1 to %d): %w", task, len(files), pushdown.MaxFiles, iofs.ErrInvalid)
	}
	for i, f := range files {
		switch {
		case (f.In == nil) == (f.Out == ""):
			return nil, fmt.Errorf("offloadfs: offload %s: file %d must be an input or an output: %w", task, i, iofs.ErrInvalid)
		case f.In != nil && f.In.fsys != fsys:
			return nil, fmt.Errorf("offloadfs: offload %s: file %d is not a file of this file system: %w", task, i, iofs.ErrInvalid)
		case f.In != nil:
			if err := f.In.check("offload", false); err != nil {
				return nil, err
			}
		case f.Reserve <= 0:
			return nil, fmt.Errorf("offloadfs: offload %s: output %s reserves %d bytes: %w", task, f.Out, f.Reserve, iofs.ErrInvalid)
		default:
			if err := fsys.checkOutputName(f.Out); err != nil {
				return nil, pathErr("offload", f.Out, err)
			}
		}
	}
	grantee, err := peer.Grantee(ctx)
	if err != nil {
		return nil, fmt.Errorf("offloadfs: offload %s: %w", task, err)
	}

	// Rule 1: outputs, as committed orphans.
	outs := make([]*File, len(files))
	defer func() {
		for _, o := range outs {
			if o != nil {
				o.Close() // frees an output not linked (or, pinned, when its grant ends)
			}
		}
	}()
	var ins, wr []*File
	for i, f := range files {
		if f.In != nil {
			if f.In.size() > 0 {
				ins = append(ins, f.In)
			}
			continue
		}
		o, err := fsys.createOrphan(f.Out)
		if err != nil {
			return nil, pathErr("offload", f.Out, err)
		}
		outs[i] = o
		if err := o.truncate(uint64(f.Reserve), false); err != nil {
			return nil, pathErr("offload", f.Out, err)
		}
		wr = append(wr, o)
	}
	if len(wr) > 0 {
		if err := fsys.commit(ctx, false); err != nil {
			return nil, fmt.Errorf("offloadfs: offload %s: committing the outputs' space: %w", task, err)
		}
	}

	// Rule 2: grants.
	lease := offloadLease
	if d, ok := ctx.Deadline(); ok {
		lease = time.Until(d) + offloadLeaseSlack
	}
	lease = min(max(lease, time.Second), pushdown.MaxLease)
	var grants []*Grant
	release := func() error {
		var errs []error
		for _, g := range grants {
			if err := g.Release(context.WithoutCancel(ctx)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, set := range []struct {
		files []*File
		mode  pushdown.GrantMode
	}{{ins, pushdown.GrantRead}, {wr, pushdown.GrantReadWrite}} {
		if len(set.files) == 0 {
			continue
		}
		g, err := fsys.Grant(ctx, grantee, set.files, set.mode, lease)
		if err != nil {
			if rerr := release(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, fmt.Errorf("offloadfs: offload %s: %w", task, err)
		}
		grants = append(grants, g)
	}
	req.Files = make([]TaskFile, len(files))
	for i, f := range files {
		in, write := outs[i], true
		if f.In != nil {
			in, write = f.In, false
		}
		req.Files[i] = TaskFile{File: grantedMap(grants, in.in), Write: write, ContentTag: fsys.contentTag(in.in), Bypass: f.Bypass}
	}

	res, err := peer.RunTask(ctx, req)
	// Rule 3: nothing the engine does lands after this.
	if rerr := release(); rerr != nil {
		// The grants stay in force until they expire; so do the pins,
		// and the outputs stay orphans until then.
		return nil, fmt.Errorf("offloadfs: offload %s: %w", task, errors.Join(err, rerr))
	}
	if err != nil {
		return nil, fmt.Errorf("offloadfs: offload %s: %w", task, err)
	}
	if len(res.Written) != len(files) {
		return nil, fmt.Errorf("offloadfs: offload %s: the result accounts for %d files of %d: %w", task, len(res.Written), len(files), ErrTaskOutput)
	}

	// Rule 4: outputs take their names.
	out := &OffloadResult{Output: res.Output, Sizes: make([]int64, len(files)), Local: res.Local}
	for i, f := range files {
		if outs[i] == nil {
			continue
		}
		if res.Written[i] > uint64(f.Reserve) {
			return nil, pathErr("offload", f.Out, fmt.Errorf("%w: %d bytes of %d", ErrTaskOutput, res.Written[i], f.Reserve))
		}
		if err := outs[i].truncate(res.Written[i], false); err != nil {
			return nil, pathErr("offload", f.Out, err)
		}
		out.Sizes[i] = int64(res.Written[i])
	}
	if err := fsys.linkOrphans(outs, files); err != nil {
		return nil, fmt.Errorf("offloadfs: offload %s: %w", task, err)
	}
	if err := fsys.commit(ctx, false); err != nil {
		return nil, fmt.Errorf("offloadfs: offload %s: committing the outputs: %w", task, err)
	}
	return out, nil
}

// size returns the file's size.
func (f *File) size() uint64 {
	in := f.in
	in.io.RLock()
	defer in.io.RUnlock()
	return in.size
}

// grantedMap returns in's map as one of gs granted it; a file no grant
// covers (an empty input) is named with its version and size only.
func grantedMap(gs []*Grant, in *inode) pushdown.File {
	for _, g := range gs {
		for i, x := range g.ins {
			if x == in {
				return g.maps[i]
			}
		}
	}
	in.io.RLock()
	defer in.io.RUnlock()
	return pushdown.File{ID: in.ino, Version: in.version, Size: in.size}
}

// contentTag is in's contents tag for an engine's cache: a function of
// the mount (random) and of the writes to its bytes since, different
// after every write (splitmix64's finaliser is a bijection).
func (fsys *FS) contentTag(in *inode) uint64 {
	z := fsys.tagBase + in.writes.Load()*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// checkOutputName checks, before a task runs, that name could be an
// output's: its directory exists and it names no directory. (linkOrphans
// checks again.)
func (fsys *FS) checkOutputName(name string) error {
	comps, err := splitPath(name)
	if err != nil {
		return err
	}
	if len(comps) == 0 {
		return ErrIsDir
	}
	if err := fsys.lockForRead(); err != nil {
		return err
	}
	defer fsys.mu.Unlock()
	dir, err := fsys.parent(comps)
	if err != nil {
		return err
	}
	if in, err := fsys.lookup(dir, comps[len(comps)-1]); err == nil && in.typ == typeDir {
		return ErrIsDir
	} else if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return err
	}
	return nil
}

// createOrphan creates a file that lives only in the orphan directory,
// open read-write (name is for errors): freed when its last handle
// closes, or at the next read-write mount after a crash, unless
// linkOrphans gives it a name first.
func (fsys *FS) createOrphan(name string) (*File, error) {
	if err := fsys.lockForChange(); err != nil {
		return nil, err
	}
	defer fsys.mu.Unlock()
	od := fsys.inodes[orphanIno]
	if _, err := fsys.loadDir(od); err != nil {
		return nil, err
	}
	in, err := fsys.allocInode(typeFile, 0)
	if err != nil {
		return nil, err
	}
	if err := fsys.dirAdd(od, orphanName(in.ino), in.ino, typeFile); err != nil {
		fsys.freeInode(in)
		return nil, err
	}
	in.orphan, in.nlink = true, 0
	fsys.dirtyInode(in)
	in.refs++
	return &File{fsys: fsys, in: in, name: name, read: true, write: true}, nil
}

// linkOrphans names each non-nil outs[i] files[i].Out, replacing a file
// of that name, and takes it out of the orphan directory, all in one
// transaction (mu is held throughout, so no commit splits it). Names are
// checked before anything changes; only running out of space for a
// directory block can fail after, leaving the outputs linked so far
// named and the rest orphans.
func (fsys *FS) linkOrphans(outs []*File, files []OffloadFile) error {
	if err := fsys.lockForChange(); err != nil {
		return err
	}
	defer fsys.mu.Unlock()
	od := fsys.inodes[orphanIno]
	if _, err := fsys.loadDir(od); err != nil {
		return err
	}
	// Check every name before changing anything.
	type link struct {
		dir, dst *inode
		name     string
	}
	links := make([]link, len(outs))
	for i, o := range outs {
		if o == nil {
			continue
		}
		comps, err := splitPath(files[i].Out)
		if err != nil {
			return pathErr("offload", files[i].Out, err)
		}
		if len(comps) == 0 {
			return pathErr("offload", files[i].Out, ErrIsDir)
		}
		dir, err := fsys.parent(comps)
		if err != nil {
			return pathErr("offload", files[i].Out, err)
		}
		l := link{dir: dir, name: comps[len(comps)-1]}
		switch dst, err := fsys.lookup(dir, l.name); {
		case errors.Is(err, iofs.ErrNotExist):
		case err != nil:
			return pathErr("offload", files[i].Out, err)
		case dst.typ == typeDir:
			return pathErr("offload", files[i].Out, ErrIsDir)
		default:
			l.dst = dst
		}
		for _, prev := range links[:i] {
			if prev.dir == l.dir && prev.name == l.name {
				return pathErr("offload", files[i].Out, fmt.Errorf("%w: named twice", iofs.ErrInvalid))
			}
		}
		links[i] = l
	}
	for i, o := range outs {
		if o == nil {
			continue
		}
		l, in := links[i], o.in
		if l.dst != nil {
			if err := fsys.unlink(l.dst); err != nil {
				return err
			}
			fsys.dirReplace(l.dir, l.name, in.ino, typeFile)
		} else if err := fsys.dirAdd(l.dir, l.name, in.ino, typeFile); err != nil {
			return err
		}
		fsys.dirRemove(od, orphanName(in.ino))
		in.orphan, in.nlink = false, 1
		fsys.dirtyInode(in)
	}
	return nil
}
