package offloadfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// File-level function calls: FS.Pushdown, File.LambdaRead and
// File.LambdaWrite run a function on files' blocks at the target, named by
// inode and extent-map version, under BPF-oF's rules:
//
//  1. Before sending, each file's version is taken (under its inode's
//     lock) and the request goes out only if the target holds exactly
//     that version, as far as the synchronizer knows: a file with
//     uncommitted map changes, or committed ones not yet pushed, is not
//     sent. The request names the files by inode and version with no
//     extents, so the target runs it on the map it holds.
//  2. The target refuses a request whose versions it does not hold
//     (Stale Extent Map): the synchronizer is told to check, and the
//     request runs on the host.
//  3. After completion the versions are compared again; if any changed
//     (truncation, reallocation, removal), the blocks read may have
//     stopped being the file's while the target read them, so the result
//     is discarded and the request runs on the host.
//
// Running on the host is the same function in a local sandbox
// (Options.Runtimes) driven by the same pushdown.Executor, over a device
// made of the files: ordinary reads of their current blocks, each checked
// against the planned version (a change restarts the run; after a few
// restarts the run holds the files' locks, so it always finishes). The
// output and return code are the same wherever a request ran; the work
// counters count the side's own reads.
//
// A λ write cannot be discarded after the fact, so it holds its file's
// inode lock shared for the whole call: the map cannot change under it
// (changes wait), while reads and overwrites go on.

// fileSnap is a file as a request was planned with: its inode, and its
// extent-map version and size then.
type fileSnap struct {
	in      *inode
	version uint64
	size    uint64
}

// optimisticRuns is how many host-side runs may be restarted by a
// concurrent map change before the run takes the files' locks.
const optimisticRuns = 3

// errChanged ends a host-side run whose file changed version under it.
var errChanged = errors.New("offloadfs: file changed while a function read it")

// call is one function request.
type call struct {
	op     string // opPushdown, opLambdaRead, opLambdaWrite
	fn     sandbox.ID
	files  []*File
	start  host.Start
	params []byte // the scratch of a pushdown
	data   []byte // λ write
	outCap int    // λ read
	// buf, when set, receives a pushdown's Output (PushdownInto).
	buf []byte
}

// functions are the modules registered for host-side runs.
type functions struct {
	mu   sync.Mutex
	byID map[sandbox.ID]*function
}

type function struct {
	module []byte
	local  sandbox.Module // nil without a host runtime of its kind
}

func (t *functions) get(id sandbox.ID) *function {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

func (t *functions) close(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for id, fn := range t.byID {
		if fn.local != nil {
			errs = append(errs, fn.local.Close(ctx))
		}
		delete(t.byID, id)
	}
	return errors.Join(errs...)
}

// RegisterFunction makes a function module (wasm, or an eBPF ELF object)
// available to the file-level calls: it is loaded at the target
// (Options.Loader, on read-write mounts with a Remote) and into the host
// runtime of its kind (Options.Runtimes), so that a request that cannot
// run at the target runs on the host with the same result. It returns the
// function's ID, the SHA-256 of the module. Registering a module again
// loads it at the target again (harmless), which is also how to restore
// a restarted target's functions.
//
// A function used without being registered still runs at the target if
// it is loaded there; when it cannot, the call fails with ErrNoFallback.
func (fsys *FS) RegisterFunction(ctx context.Context, module []byte) (sandbox.ID, error) {
	kind, err := sandbox.DetectKind(module)
	if err != nil {
		return sandbox.ID{}, fmt.Errorf("offloadfs: register function: %w", err)
	}
	id := sandbox.IDOf(module)
	remote := fsys.opts.Loader != nil && fsys.syncer != nil
	if fsys.funcs.get(id) == nil {
		fn := &function{module: bytes.Clone(module)}
		for _, rt := range fsys.opts.Runtimes {
			if rt.Kind() == kind {
				if fn.local, err = rt.Load(ctx, module, fsys.opts.FunctionLimits); err != nil {
					return id, fmt.Errorf("offloadfs: register function %s on the host: %w", id, err)
				}
				break
			}
		}
		if fn.local == nil && !remote {
			return id, fmt.Errorf("offloadfs: register function %s: no %s runtime on the host (Options.Runtimes) and no target to load it at (Options.Loader): %w",
				id, kind, iofs.ErrInvalid)
		}
		fsys.funcs.mu.Lock()
		if fsys.funcs.byID[id] == nil {
			fsys.funcs.byID[id] = fn
			fn = nil
		}
		fsys.funcs.mu.Unlock()
		if fn != nil && fn.local != nil { // registered meanwhile
			_ = fn.local.Close(ctx)
		}
	}
	if remote {
		if _, err := fsys.opts.Loader.LoadFunction(ctx, module); err != nil {
			return id, fmt.Errorf("offloadfs: register function %s at the target: %w", id, err)
		}
	}
	return id, nil
}

// reload loads a registered function at the target again, after the
// target said it does not have it (it restarted).
func (fsys *FS) reload(ctx context.Context, id sandbox.ID) {
	fn := fsys.funcs.get(id)
	if fn == nil || fsys.opts.Loader == nil {
		return
	}
	if _, err := fsys.opts.Loader.LoadFunction(ctx, fn.module); err != nil {
		fsys.log.Warn("offloadfs: loading a function at the target again", "id", id.String(), "err", err)
	}
}

// Pushdown runs a pushdown request over files: the function fn is called
// with the start range's bytes and the scratch, reads what it asks for
// (only inside the files, only before their ends), and its final scratch
// is the result's Output. It runs at the target when the target holds the
// files' current extent maps, and on the host otherwise, with the same
// result (see the rules above). files are 1 to 16 open handles of this
// file system, readable; start.File indexes them; scratch is at most
// 4096 bytes.
//
// Errors are the function's own (errors.Is sandbox.ErrFunction, with the
// code in a *sandbox.FunctionError, sandbox.ErrTimeout,
// pushdown.ErrOutsideFile, ...) wherever it ran, a handle's error, or
// ErrNoFallback when the request could run neither at the target nor on
// the host.
func (fsys *FS) Pushdown(ctx context.Context, fn sandbox.ID, files []*File, start host.Start, scratch []byte) (pushdown.Result, error) {
	return fsys.PushdownInto(ctx, fn, files, start, scratch, nil)
}

// PushdownInto is Pushdown with the result's Output copied into buf's
// array, as append(buf[:0], ...) would, wherever the request ran: it
// aliases buf when it fits (a whole scratch, sandbox.ScratchSize bytes,
// always does), so a caller that reuses buf allocates nothing for
// results. With buf nil it is Pushdown.
func (fsys *FS) PushdownInto(ctx context.Context, fn sandbox.ID, files []*File, start host.Start, scratch, buf []byte) (pushdown.Result, error) {
	if err := fsys.checkCall(opPushdown, files, start, false); err != nil {
		return pushdown.Result{}, err
	}
	if len(scratch) > sandbox.ScratchSize {
		return pushdown.Result{}, fmt.Errorf("offloadfs: pushdown: %d bytes of scratch, at most %d: %w", len(scratch), sandbox.ScratchSize, iofs.ErrInvalid)
	}
	return fsys.read(ctx, &call{op: opPushdown, fn: fn, files: files, start: start, params: scratch, buf: buf})
}

// intoRemote is a Remote that receives a pushdown's Output into the
// caller's buffer (*host.Namespace does).
type intoRemote interface {
	PushdownInto(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, scratch, buf []byte) (pushdown.Result, error)
}

var _ intoRemote = (*host.Namespace)(nil)

// LambdaRead runs fn's compute entry on params followed by the file's
// bytes [off, off+n), and returns its output (at most outCap bytes) as the
// result's Output: at the target when it holds the file's current map, on
// the host otherwise, as Pushdown does (the result's TargetMicros is zero
// when it ran on the host). It does not weigh one side against the other:
// package lambda's Dispatcher does that, and calls this for its target side.
func (f *File) LambdaRead(ctx context.Context, fn sandbox.ID, off int64, n int, params []byte, outCap int) (pushdown.Result, error) {
	if off < 0 || n < 0 || uint64(n) > math.MaxUint32 || outCap < 0 {
		return pushdown.Result{}, pathErr("lambda read", f.name, fmt.Errorf("%w: range [%d, +%d), output %d", iofs.ErrInvalid, off, n, outCap))
	}
	start := host.Start{Offset: uint64(off), Length: uint32(n)}
	if err := f.fsys.checkCall(opLambdaRead, []*File{f}, start, false); err != nil {
		return pushdown.Result{}, err
	}
	return f.fsys.read(ctx, &call{op: opLambdaRead, fn: fn, files: []*File{f}, start: start, params: params, outCap: outCap})
}

// LambdaWrite runs fn's compute entry on params followed by data and
// writes its output into the file's bytes [off, off+n), padded with
// zeroes to whole device blocks, and returns the output's length. The
// range must be aligned to the device's block size (DeviceBlockSize).
// An output longer than n fails the call and writes nothing. It runs at
// the target when the target holds the file's current map, on the host
// otherwise; the file's map cannot change while it runs. Bytes granted to
// another host are refused (ErrGranted).
//
// A range past the file's end first grows the file to off+n, as
// Truncate would: blocks come from the space Preallocate reserved (λ-IO
// writes into fallocated extents) or are allocated, and the new bytes
// are zeroed with Write Zeroes where the device has it, so no data
// crosses the network for them and no stale block is ever exposed. The
// growth is committed and the call waits (at most lambdaSyncWait) for
// the synchronizer to give the target the new map, so the write can run
// there. The file keeps its new size even if the call then fails. A
// caller writing a file λ write by λ write saves a commit per call by
// growing it once (Truncate) beforehand.
func (f *File) LambdaWrite(ctx context.Context, fn sandbox.ID, off int64, n int, params, data []byte) (int, error) {
	fsys, in := f.fsys, f.in
	const op = "lambda write"
	bs := int64(fsys.devBS)
	if off < 0 || n <= 0 || uint64(n) > math.MaxUint32 || off%bs != 0 || int64(n)%bs != 0 {
		return 0, pathErr(op, f.name, fmt.Errorf("%w: range [%d, +%d) is not a non-empty run of whole %d-byte blocks", iofs.ErrInvalid, off, n, bs))
	}
	start := host.Start{Offset: uint64(off), Length: uint32(n)}
	if err := fsys.checkCall(opLambdaWrite, []*File{f}, start, true); err != nil {
		return 0, err
	}
	c := &call{op: opLambdaWrite, fn: fn, files: []*File{f}, start: start, params: params, data: data}
	// Counted once the write is over, wherever it ran (contentTag); a
	// grant, which takes the tag, waits for the inode lock this call holds.
	defer in.writes.Add(1)
	fsys.ctr.requests.Add(1)
	if err := f.growForLambda(ctx, uint64(off)+uint64(n)); err != nil {
		return 0, pathErr(op, f.name, err)
	}
	in.io.RLock()
	defer in.io.RUnlock()
	if uint64(off)+uint64(n) > in.size {
		return 0, pathErr(op, f.name, fmt.Errorf("%w: range [%d, +%d) beyond the file's %d bytes (it shrank while the call grew it)",
			iofs.ErrInvalid, off, n, in.size))
	}
	if uint64(off) < in.grantEnd {
		return 0, pathErr(op, f.name, ErrGranted)
	}
	snaps := []fileSnap{{in: in, version: in.version, size: in.size}}
	if fsys.syncer != nil {
		if !fsys.syncer.holds(snaps) {
			fsys.ctr.notSynced.Add(1)
			fsys.opts.Metrics.mismatch(c.op, "before")
		} else {
			fsys.ctr.sent.Add(1)
			// The command must finish before the lock goes: a caller
			// giving up must not let the map change under a write the
			// target may still be doing.
			k, err := fsys.opts.Remote.LambdaWrite(context.WithoutCancel(ctx), fn, snapTable(snaps), start, params, data)
			switch classify(err) {
			case outcomeStale:
				fsys.refused(c, snaps)
			case outcomeNoFunction:
				fsys.reload(ctx, fn)
				fsys.syncer.suspectInodes(snaps)
			case outcomeLost:
				// Whether the target wrote is unknown; the host writes the
				// same output to the same blocks.
				fsys.syncer.suspectInodes(snaps)
			default:
				fsys.ctr.remote.Add(1)
				fsys.opts.Metrics.ran(c.op, true)
				if err != nil {
					return 0, pathErr(op, f.name, remoteError(err))
				}
				return k, nil
			}
		}
	}
	res, err := fsys.runHost(ctx, c, true)
	if err != nil {
		return 0, pathErr(op, f.name, err)
	}
	return int(res.written), nil
}

// lambdaSyncWait bounds how long a λ write that grew its file waits for
// the target to learn the new map; after it the write runs on the host.
const lambdaSyncWait = 5 * time.Second

// growForLambda grows the file to at least end bytes for a λ write, and
// with a remote, commits the growth and waits for the target to hold it.
func (f *File) growForLambda(ctx context.Context, end uint64) error {
	in := f.in
	in.io.RLock()
	size := in.size
	in.io.RUnlock()
	if end <= size {
		return nil
	}
	if err := f.truncate(end, true); err != nil {
		return err
	}
	fsys := f.fsys
	if fsys.syncer == nil {
		return nil
	}
	if err := fsys.commit(ctx, false); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, lambdaSyncWait)
	defer cancel()
	if err := fsys.syncer.wait(wctx); err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	// A target that did not confirm in time (or a closing synchronizer)
	// only means the write runs on the host.
	return nil
}

// checkCall checks a request's files before anything runs.
func (fsys *FS) checkCall(op string, files []*File, start host.Start, write bool) error {
	if len(files) == 0 || len(files) > pushdown.MaxFiles {
		return fmt.Errorf("offloadfs: %s: %d files (want 1 to %d): %w", op, len(files), pushdown.MaxFiles, iofs.ErrInvalid)
	}
	if int(start.File) >= len(files) {
		return fmt.Errorf("offloadfs: %s: start file %d of %d: %w", op, start.File, len(files), iofs.ErrInvalid)
	}
	for i, f := range files {
		if f == nil || f.fsys != fsys {
			return fmt.Errorf("offloadfs: %s: file %d is not a file of this file system: %w", op, i, iofs.ErrInvalid)
		}
		if err := f.check(op, write && i == int(start.File)); err != nil {
			return err
		}
	}
	return nil
}

// read runs a pushdown or λ read: at the target if it can, else on the
// host.
func (fsys *FS) read(ctx context.Context, c *call) (pushdown.Result, error) {
	fsys.ctr.requests.Add(1)
	if fsys.syncer != nil {
		if res, err, ok := fsys.readRemote(ctx, c); ok {
			return res, err
		}
		if err := ctx.Err(); err != nil {
			return pushdown.Result{}, err
		}
	}
	res, err := fsys.runHost(ctx, c, false)
	c.into(&res.Result)
	return res.Result, err
}

// into copies a pushdown's Output into c.buf, if it has one.
func (c *call) into(res *pushdown.Result) {
	if c.buf != nil && res.Output != nil {
		res.Output = append(c.buf[:0], res.Output...)
	}
}

// readRemote sends a read request to the target if the target holds the
// files' versions, and returns its result if the versions still hold
// after it. ok false means: run it on the host.
func (fsys *FS) readRemote(ctx context.Context, c *call) (_ pushdown.Result, _ error, ok bool) {
	b := fsys.getRemoteBufs()
	defer fsys.putRemoteBufs(b)
	snaps := snapshotInto(b.snaps[:0], c.files)
	table := snapTableInto(b.table[:0], snaps)
	if !fsys.syncer.holds(snaps) {
		fsys.ctr.notSynced.Add(1)
		fsys.opts.Metrics.mismatch(c.op, "before")
		return pushdown.Result{}, nil, false
	}
	fsys.ctr.sent.Add(1)
	var res pushdown.Result
	var err error
	if c.op == opPushdown {
		if ir, ok := fsys.opts.Remote.(intoRemote); ok && c.buf != nil {
			res, err = ir.PushdownInto(ctx, c.fn, table, c.start, c.params, c.buf)
		} else {
			res, err = fsys.opts.Remote.Pushdown(ctx, c.fn, table, c.start, c.params)
			c.into(&res)
		}
	} else {
		res, err = fsys.opts.Remote.LambdaRead(ctx, c.fn, table, c.start, c.params, c.outCap)
	}
	switch classify(err) {
	case outcomeStale:
		fsys.refused(c, snaps)
		return res, nil, false
	case outcomeNoFunction:
		// A target without the function has likely restarted, and lost
		// the maps too: check.
		fsys.reload(ctx, c.fn)
		fsys.syncer.suspectInodes(snaps)
		return res, nil, false
	case outcomeLost:
		fsys.syncer.suspectInodes(snaps)
		return res, nil, false
	}
	if err != nil && ctx.Err() != nil {
		return res, ctx.Err(), true
	}
	if !unchanged(snaps) {
		fsys.ctr.discarded.Add(1)
		fsys.opts.Metrics.mismatch(c.op, "after")
		return res, nil, false
	}
	fsys.ctr.remote.Add(1)
	fsys.opts.Metrics.ran(c.op, true)
	return res, remoteError(err), true
}

// refused counts a request the target refused as stale and has the
// synchronizer check what the target holds.
func (fsys *FS) refused(c *call, snaps []fileSnap) {
	fsys.ctr.stale.Add(1)
	fsys.opts.Metrics.mismatch(c.op, "refused")
	fsys.syncer.suspectInodes(snaps)
}

// snapshot takes each file's version and size, under its inode's lock.
func snapshot(files []*File) []fileSnap {
	return snapshotInto(make([]fileSnap, 0, len(files)), files)
}

// snapshotInto is snapshot appending to out.
func snapshotInto(out []fileSnap, files []*File) []fileSnap {
	for _, f := range files {
		in := f.in
		in.io.RLock()
		out = append(out, fileSnap{in: in, version: in.version, size: in.size})
		in.io.RUnlock()
	}
	return out
}

// remoteBufs hold a request's snapshots and file table while it is sent
// (readRemote), recycled from request to request (FS.remoteBufs): a
// Remote keeps neither.
type remoteBufs struct {
	snaps [pushdown.MaxFiles]fileSnap
	table [pushdown.MaxFiles]pushdown.File
}

// getRemoteBufs returns a recycled remoteBufs or a new one.
func (fsys *FS) getRemoteBufs() *remoteBufs {
	if b, _ := fsys.remoteBufs.Get().(*remoteBufs); b != nil {
		return b
	}
	return new(remoteBufs)
}

// putRemoteBufs recycles b, holding no inode.
func (fsys *FS) putRemoteBufs(b *remoteBufs) {
	clear(b.snaps[:])
	fsys.remoteBufs.Put(b)
}

// snapshotLocked is snapshot for a caller holding the inodes' locks.
func snapshotLocked(files []*File) []fileSnap {
	out := make([]fileSnap, len(files))
	for i, f := range files {
		out[i] = fileSnap{in: f.in, version: f.in.version, size: f.in.size}
	}
	return out
}

// unchanged reports whether every file still has its planned version.
func unchanged(snaps []fileSnap) bool {
	for i := range snaps {
		in := snaps[i].in
		in.io.RLock()
		v := in.version
		in.io.RUnlock()
		if v != snaps[i].version {
			return false
		}
	}
	return true
}

// snapTable is a request's file table naming the files by inode and
// version only: the target runs it on the maps it holds.
func snapTable(snaps []fileSnap) []pushdown.File {
	return snapTableInto(make([]pushdown.File, 0, len(snaps)), snaps)
}

// snapTableInto is snapTable appending to t.
func snapTableInto(t []pushdown.File, snaps []fileSnap) []pushdown.File {
	for _, s := range snaps {
		t = append(t, pushdown.File{ID: s.in.ino, Version: s.version, Size: s.size})
	}
	return t
}

// hostResult is a host-side run's result, with a λ write's output length.
type hostResult struct {
	pushdown.Result
	written int64
}

// runHost runs a request on the host. locked means the caller holds the
// files' inode locks (shared); otherwise the run reads optimistically and
// starts again if a file changes under it, taking the locks after
// optimisticRuns tries.
func (fsys *FS) runHost(ctx context.Context, c *call, locked bool) (hostResult, error) {
	fn := fsys.funcs.get(c.fn)
	if fn == nil || fn.local == nil {
		return hostResult{}, fmt.Errorf("offloadfs: %s: function %s: %w", c.op, c.fn, ErrNoFallback)
	}
	fsys.ctr.fallbacks.Add(1)
	for try := 0; ; try++ {
		hold := !locked && try >= optimisticRuns
		var unlock func()
		if hold {
			unlock = rlockFiles(c.files)
		}
		res, err := fsys.runHostOnce(ctx, c, fn.local, locked || hold)
		if unlock != nil {
			unlock()
		}
		if errors.Is(err, errChanged) && ctx.Err() == nil {
			continue
		}
		fsys.opts.Metrics.ran(c.op, false)
		return res, err
	}
}

func (fsys *FS) runHostOnce(ctx context.Context, c *call, m sandbox.Module, locked bool) (hostResult, error) {
	for _, f := range c.files {
		if f.closed.Load() {
			return hostResult{}, pathErr(c.op, f.name, iofs.ErrClosed)
		}
	}
	var snaps []fileSnap
	if locked {
		snaps = snapshotLocked(c.files)
	} else {
		snaps = snapshot(c.files)
	}
	dev, table := newFilesDevice(fsys, snaps, locked)
	req := &pushdown.Request{
		Function: c.fn, Files: table,
		StartFile: c.start.File, StartOffset: c.start.Offset, StartLength: c.start.Length,
		Params: c.params, Data: c.data,
	}
	var out hostResult
	var err error
	switch c.op {
	case opPushdown:
		out.Result, err = fsys.exec.Pushdown(ctx, dev, m, req)
	case opLambdaRead:
		out.Result, err = fsys.exec.LambdaRead(ctx, dev, m, req, c.outCap)
	case opLambdaWrite:
		out.Result, out.written, err = fsys.exec.LambdaWrite(ctx, dev, m, req)
	}
	return out, err
}

// rlockFiles takes the inode locks of files, shared, in inode order, and
// returns the function that releases them.
func rlockFiles(files []*File) func() {
	ins := make([]*inode, 0, len(files))
	for _, f := range files {
		ins = append(ins, f.in)
	}
	sort.Slice(ins, func(i, j int) bool { return ins[i].ino < ins[j].ino })
	uniq := ins[:0]
	for i, in := range ins {
		if i == 0 || in != ins[i-1] {
			uniq = append(uniq, in)
		}
	}
	for _, in := range uniq {
		in.io.RLock()
	}
	return func() {
		for _, in := range uniq {
			in.io.RUnlock()
		}
	}
}

// filesDevice is the device a host-side run reads: the request's files
// laid end to end, each starting on a device block, each read going to
// the file's current blocks through its extent map. Unless the caller
// holds the files' locks, every access checks that the file still has its
// planned version and fails with errChanged if not, so a run never mixes
// bytes of two versions of a file.
type filesDevice struct {
	fsys   *FS
	snaps  []fileSnap
	bases  []int64 // each file's first byte on the device
	size   int64
	locked bool
}

// newFilesDevice lays the files out and returns the device and the file
// table that maps them (raw extents, so the executor checks no versions:
// the device does).
func newFilesDevice(fsys *FS, snaps []fileSnap, locked bool) (*filesDevice, []pushdown.File) {
	bs := fsys.devBS
	d := &filesDevice{fsys: fsys, snaps: snaps, bases: make([]int64, len(snaps)), locked: locked}
	table := make([]pushdown.File, len(snaps))
	var base uint64
	for i, s := range snaps {
		blocks := (s.size + bs - 1) / bs
		f := pushdown.File{Size: s.size}
		for lba, left := base/bs, blocks; left > 0; {
			k := min(left, math.MaxUint32)
			f.Extents = append(f.Extents, pushdown.Extent{LBA: lba, Blocks: uint32(k)})
			lba += k
			left -= k
		}
		table[i] = f
		d.bases[i] = int64(base)
		base += blocks * bs
	}
	d.size = int64(base)
	return d, table
}

func (d *filesDevice) Size() int64    { return d.size }
func (d *filesDevice) BlockSize() int { return int(d.fsys.devBS) }

func (d *filesDevice) ReadAt(p []byte, off int64) (int, error) { return d.access(p, off, false) }

func (d *filesDevice) WriteAt(p []byte, off int64) (int, error) { return d.access(p, off, true) }

func (d *filesDevice) access(p []byte, off int64, write bool) (int, error) {
	// The last file starting at or before off; empty files share their
	// base with the next, and are never read.
	i := sort.Search(len(d.bases), func(i int) bool { return d.bases[i] > off }) - 1
	if i < 0 || off < 0 {
		return 0, fmt.Errorf("offloadfs: files device: offset %d: %w", off, pushdown.ErrOutsideFile)
	}
	s := &d.snaps[i]
	fo := uint64(off - d.bases[i])
	if fo+uint64(len(p)) > s.size {
		// The executor keeps reads inside the files' sizes; this is a
		// second fence.
		return 0, fmt.Errorf("offloadfs: files device: [%d, +%d) of a %d-byte file: %w", fo, len(p), s.size, pushdown.ErrOutsideFile)
	}
	in := s.in
	if !d.locked {
		in.io.RLock()
		defer in.io.RUnlock()
		if in.version != s.version {
			return 0, errChanged
		}
	}
	if err := d.fsys.dataIO(in, p, fo, write); err != nil {
		return 0, err
	}
	return len(p), nil
}
