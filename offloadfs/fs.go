package offloadfs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// Options configures a mount.
type Options struct {
	// ReadOnly mounts the committed state without changing the device:
	// the journal is replayed in memory only, and every change fails with
	// ErrReadOnly. Hosts other than the owner mount this way. Metadata is
	// loaded lazily and never refreshed, so while the owner keeps
	// committing, a read-only mount sees a mix of its mount-time state and
	// later ones (or fails a checksum on a block being checkpointed):
	// remount to catch up, and trust it fully only when the owner is
	// quiet. The target-side synchronizer is the consistent path.
	ReadOnly bool
	// CommitInterval is how often a read-write mount commits metadata
	// changes that nobody has synced (default 5s; negative: never, so
	// only Sync, Close and a full journal commit).
	CommitInterval time.Duration
	// OnCommit, if set, is called after each metadata commit with the
	// inodes whose extent maps it changed, in commit order. It runs on
	// the committing goroutine, while further commits wait: hand the
	// changes off (to the extent-map synchronizer, say) and return; do
	// not call Sync or Close from it.
	OnCommit func(Commit)
	// Logger receives mount, recovery and failure messages (default
	// slog.Default()).
	Logger *slog.Logger

	// Remote is the target the device is on. With it, a read-write mount
	// keeps the target's extent maps in step with its commits (a
	// background synchronizer), sends the file-level function calls
	// (Pushdown, LambdaRead, LambdaWrite) to the target when the target
	// holds the files' current maps, and can grant files' blocks to other
	// hosts (Grant). Without it, or on a read-only mount (whose host the
	// target holds no maps for), function calls run on the host.
	Remote Remote
	// Loader loads registered functions at the target
	// (RegisterFunction); *host.Controller is one.
	Loader FunctionLoader
	// Runtimes are the sandbox runtimes (sandbox/wasm, sandbox/ebpf)
	// registered functions load into on the host, so a request the
	// target cannot take runs here with the same result. The caller owns
	// them and closes them after the file system.
	Runtimes []sandbox.Runtime
	// FunctionLimits bound functions run on the host. Give them the
	// target's limits (the defaults, unless the target was configured
	// otherwise), or a request could succeed on one side and fail on the
	// other.
	FunctionLimits sandbox.Limits
	// Metrics, if set, receives the function-call, synchronizer and grant
	// counters (NewMetrics). Stats has them regardless.
	Metrics *Metrics
	// TakeOver lets a read-write mount on a device that takes
	// reservations (Reserver) preempt another host's: for taking over
	// from an owner known to be dead. Without it such a mount fails with
	// ErrOwned.
	TakeOver bool
}

// Commit describes one committed metadata transaction.
type Commit struct {
	// Seq is the transaction's sequence number; sequence numbers only
	// grow, across mounts too.
	Seq uint64
	// Changes lists the files whose extent map (allocation or size)
	// changed, or that were removed, with their versions as committed,
	// sorted by inode.
	Changes []Change
}

// Change is a new extent-map version of an inode.
type Change struct {
	Ino     uint64
	Version uint64
	// Removed is set when the inode was freed: blocks it had are no
	// longer the file's, and the version is that of the free inode.
	Removed bool
}

// FS is a mounted offloadfs. It is safe for concurrent use: data I/O on
// files proceeds in parallel, straight to the device; metadata operations
// are serialized by one lock and committed in group transactions.
//
// Lock order: File.mu, then inode.io, then FS.commitMu, then FS.mu. The
// data path takes only inode.io (shared), so I/O never waits for metadata
// except on the file whose map is changing. On the target side, Grant.mu
// comes before inode.io and FS.grantMu; the synchronizer's own mutex and
// FS.grantMu are taken last. No call to the Remote is made holding any of
// these but Grant.mu (a release) and a λ write's inode.io (shared).
type FS struct {
	dev Device
	// remoteBufs recycles readRemote's snapshots and file tables
	// (*remoteBufs, offload.go).
	remoteBufs sync.Pool
	sb         *superblock
	uuid       *[16]byte
	bs         uint64 // block size
	devBS      uint64 // device block size, the unit of exported extents
	ipb        uint64 // inodes per inode table block
	bpb        uint64 // bits per bitmap block
	epb        int    // extents per extent block
	ro         bool
	opts       Options
	log        *slog.Logger
	maxTxn     uint64 // commit before a transaction may exceed this many blocks
	specMin    uint64 // speculative preallocation bounds, in blocks
	specMax    uint64

	// down is set once the file system is closed or has failed, so the
	// data path can notice without the metadata lock.
	down atomic.Bool

	// owner is a read-write mount's reservation on a Reserver device.
	owner *ownership

	commitMu sync.Mutex // serializes commits; guards jnl
	jnl      *journal

	stopTimer chan struct{}
	timerDone chan struct{}

	mu         sync.Mutex // guards everything below
	alloc      *allocator
	ibits      bitmap // inode bitmap (no pinning: see allocInode)
	freeInodes uint64
	inoCursor  uint64
	inodes     map[uint64]*inode // loaded inodes, never evicted
	itCache    map[uint64][]byte // inode table block images
	overlay    map[uint64][]byte // read-only mounts: replayed journal images
	txn        *txn              // the running transaction
	committed  uint64            // sequence of the last commit
	changes    map[uint64]changeRec
	failed     error // set when a commit failed: no more changes
	closed     bool
	// closeStarted makes a second Close fail at once while the first
	// releases grants and stops the synchronizer.
	closeStarted bool

	// The target side (offload.go, sync.go, grant.go).
	syncer   *syncer // nil without a Remote, and on read-only mounts
	funcs    functions
	exec     pushdown.Executor
	ctr      counters
	grantSeq atomic.Uint64
	tagBase  uint64     // random per mount: contentTag's
	grantMu  sync.Mutex // guards grants
	grants   map[uint64]*Grant
	grantWG  sync.WaitGroup // expiry goroutines
	closing  chan struct{}  // closed when Close starts
}

type changeRec struct {
	seq uint64
	c   Change
}

// txn is the running transaction: the metadata blocks changed since the
// last commit, by kind, encoded only at commit.
type txn struct {
	bitmap    map[uint64]struct{} // block bitmap blocks, by index
	ibitmap   map[uint64]struct{} // inode bitmap blocks, by index
	inodes    map[uint64]*inode   // inode records to write
	itBlocks  map[uint64]struct{} // their inode table blocks
	extBlocks map[uint64]extRef   // extent blocks, by home
	dirBlocks map[uint64]dirRef   // directory blocks, by home
	freed     []extent            // blocks freed: pinned until commit
	changed   map[uint64]struct{} // inodes whose map version changed
}

type extRef struct {
	in  *inode
	idx int // index in in.extBlocks
}

type dirRef struct {
	dir *inode
	blk *dblock
}

func newTxn() *txn {
	return &txn{
		bitmap:    map[uint64]struct{}{},
		ibitmap:   map[uint64]struct{}{},
		inodes:    map[uint64]*inode{},
		itBlocks:  map[uint64]struct{}{},
		extBlocks: map[uint64]extRef{},
		dirBlocks: map[uint64]dirRef{},
		changed:   map[uint64]struct{}{},
	}
}

// blocks is the number of images the transaction would commit.
func (t *txn) blocks() uint64 {
	return uint64(len(t.bitmap) + len(t.ibitmap) + len(t.itBlocks) + len(t.extBlocks) + len(t.dirBlocks))
}

func (t *txn) empty() bool { return t.blocks() == 0 && len(t.freed) == 0 }

// MountReadOnly mounts dev read-only: Mount with opts.ReadOnly set.
func MountReadOnly(ctx context.Context, dev Device, opts Options) (*FS, error) {
	opts.ReadOnly = true
	return Mount(ctx, dev, opts)
}

// Mount opens the file system on dev. A read-write mount replays the
// journal to the device, frees the inodes of files that were removed
// while open, and starts a new journal epoch; a read-only mount replays
// the journal in memory and writes nothing. Only one host may mount a
// device read-write: on a device that takes reservations (Reserver) a
// read-write mount first claims the namespace and fails with ErrOwned
// if another host owns it (see Options.TakeOver).
func Mount(ctx context.Context, dev Device, opts Options) (*FS, error) {
	var o *ownership
	if r, ok := dev.(Reserver); ok && !opts.ReadOnly {
		// Before anything is written, replaying the journal included.
		o = newOwnership(r, dev)
		mode := claimParked
		if opts.TakeOver {
			mode = claimTakeOver
		}
		if err := o.claim(ctx, mode); err != nil {
			return nil, err
		}
	}
	fsys, err := mount(ctx, dev, opts, o)
	if err != nil && o != nil {
		if rerr := o.release(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return fsys, err
}

// mount is Mount once a read-write mount owns the device (o, nil if the
// device takes no reservations).
func mount(ctx context.Context, dev Device, opts Options, o *ownership) (*FS, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CommitInterval == 0 {
		opts.CommitInterval = 5 * time.Second
	}
	sb, err := readSuperblock(dev)
	if err != nil {
		return nil, err
	}
	if dev.BlockSize() <= 0 || sb.blockSize%uint32(dev.BlockSize()) != 0 {
		return nil, fmt.Errorf("offloadfs: block size %d is not a multiple of the device's %d: %w", sb.blockSize, dev.BlockSize(), iofs.ErrInvalid)
	}
	if uint64(dev.Size())/uint64(sb.blockSize) < sb.totalBlocks {
		return nil, corruptf("superblock: %d blocks of %d bytes, but the device has %d bytes", sb.totalBlocks, sb.blockSize, dev.Size())
	}
	if !opts.ReadOnly {
		// A new generation before anything else is written (owner.go,
		// rule 3): from here on an earlier owner's commits are refused.
		sb.version, sb.gen, sb.clean = FormatVersion, sb.gen+1, false
		if err := writeOwnerState(ctx, dev, sb); err != nil {
			return nil, err
		}
	}
	fsys := &FS{
		dev:       dev,
		sb:        sb,
		uuid:      &sb.uuid,
		bs:        uint64(sb.blockSize),
		devBS:     uint64(dev.BlockSize()),
		ipb:       uint64(sb.blockSize / inodeSize),
		bpb:       bitsPerBitmap(sb.blockSize),
		epb:       extentsPerBlock(sb.blockSize),
		ro:        opts.ReadOnly,
		opts:      opts,
		log:       opts.Logger,
		jnl:       newJournal(dev, sb),
		inodes:    map[uint64]*inode{},
		itCache:   map[uint64][]byte{},
		txn:       newTxn(),
		changes:   map[uint64]changeRec{},
		inoCursor: firstIno,
		funcs:     functions{byID: map[sandbox.ID]*function{}},
		exec:      pushdown.Executor{Limits: opts.FunctionLimits},
		grants:    map[uint64]*Grant{},
		closing:   make(chan struct{}),
	}
	fsys.owner = o
	fsys.grantSeq.Store(newGrantSeq())
	fsys.tagBase = newGrantSeq()
	fsys.specMin = max(1, (64<<10)/fsys.bs)
	fsys.specMax = max(1, (1<<20)/fsys.bs)
	logCap := sb.journalBlocks - 2
	fsys.maxTxn = logCap/2 - maxOpBlocks(sb)

	imgs, err := fsys.jnl.recover()
	if err != nil {
		return nil, err
	}
	for _, im := range imgs {
		if im.home < sb.bitmapStart || im.home >= sb.totalBlocks {
			return nil, corruptf("journal transaction %d: image for block %d, outside the metadata it may hold", fsys.jnl.nextSeq-1, im.home)
		}
	}
	fsys.committed = fsys.jnl.nextSeq - 1
	if len(imgs) > 0 {
		fsys.log.Info("offloadfs: replaying journal", "seq", fsys.committed, "blocks", len(imgs), "read_only", fsys.ro)
	}
	if fsys.ro {
		fsys.overlay = make(map[uint64][]byte, len(imgs))
		for _, im := range imgs {
			fsys.overlay[im.home] = im.data
		}
	} else if len(imgs) > 0 {
		sortImages(imgs)
		if err := checkpoint(dev, fsys.bs, imgs); err != nil {
			return nil, err
		}
		if err := dev.Flush(ctx); err != nil {
			return nil, fmt.Errorf("offloadfs: flush after replay: %w", err)
		}
	}
	if err := fsys.loadBitmaps(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The root must be a directory; everything else loads on demand.
	for _, ino := range []uint64{rootIno, orphanIno} {
		in, err := fsys.loadInode(ino)
		if err != nil {
			return nil, err
		}
		if in.typ != typeDir || !fsys.ibits.get(ino) {
			return nil, corruptf("inode %d: reserved directory is type %d", ino, in.typ)
		}
	}
	if fsys.ro {
		return fsys, nil
	}
	// A fresh epoch: the replayed transaction is home, the log restarts.
	fsys.commitMu.Lock()
	err = fsys.jnl.writeHeader(ctx, fsys.jnl.nextSeq)
	fsys.commitMu.Unlock()
	if err != nil {
		return nil, err
	}
	if opts.Remote != nil {
		// Grants an earlier mount made and did not end (it crashed) are
		// remembered only by the target; end them before any block can
		// be reused (reaping orphans frees some next), or a grantee could
		// still write blocks that now belong to another file.
		n, err := opts.Remote.ReleaseAllGrants(ctx)
		if err != nil {
			return nil, fmt.Errorf("offloadfs: mount: ending an earlier mount's grants: %w", err)
		}
		if n > 0 {
			fsys.log.Warn("offloadfs: ended grants an earlier mount left at the target", "grants", n)
		}
		// Before the orphans' commit, so it reaches the queue; the
		// goroutine starts once the mount has succeeded.
		fsys.syncer = newSyncer(fsys, opts.Remote)
	}
	if err := fsys.reapOrphans(ctx); err != nil {
		return nil, err
	}
	if fsys.opts.CommitInterval > 0 {
		fsys.stopTimer = make(chan struct{})
		fsys.timerDone = make(chan struct{})
		go fsys.commitLoop(fsys.opts.CommitInterval)
	}
	if fsys.syncer != nil {
		fsys.syncer.start()
	}
	return fsys, nil
}

// loadBitmaps reads both bitmaps whole.
func (fsys *FS) loadBitmaps() error {
	sb := fsys.sb
	wpb := fsys.bpb / 64
	load := func(start, n uint64, magic uint32) (bitmap, error) {
		raw, err := fsys.readMeta(start, n)
		if err != nil {
			return nil, err
		}
		bits := make(bitmap, n*wpb)
		for i := range n {
			if err := decodeBitmap(fsys.uuid, raw[i*fsys.bs:(i+1)*fsys.bs], magic, start+i, bits[i*wpb:(i+1)*wpb]); err != nil {
				return nil, err
			}
		}
		return bits, nil
	}
	bbits, err := load(sb.bitmapStart, sb.bitmapBlocks, magicBitmap)
	if err != nil {
		return err
	}
	total := sb.totalBlocks
	if !bbits.allSet(0, sb.dataStart) || !bbits.allSet(total, uint64(len(bbits))*64-total) {
		return corruptf("block bitmap: metadata blocks or blocks past the end marked free")
	}
	ibits, err := load(sb.ibitmapStart, sb.ibitmapBlocks, magicIBitmap)
	if err != nil {
		return err
	}
	if !ibits.allSet(0, firstIno) || !ibits.allSet(sb.inodeCount, uint64(len(ibits))*64-sb.inodeCount) {
		return corruptf("inode bitmap: reserved inodes or inodes past the end marked free")
	}
	fsys.alloc = newAllocator(bbits, sb.dataStart, total, (1<<20)/fsys.bs)
	fsys.ibits = ibits
	for i := uint64(firstIno); i < sb.inodeCount; {
		s := ibits.nextClear(i, sb.inodeCount)
		e := ibits.nextSet(s, sb.inodeCount)
		fsys.freeInodes += e - s
		i = e
	}
	return nil
}

// readMeta reads n metadata blocks starting at blk, with the replayed
// journal images of a read-only mount laid over them.
func (fsys *FS) readMeta(blk, n uint64) ([]byte, error) {
	b := make([]byte, n*fsys.bs)
	if _, err := fsys.dev.ReadAt(b, int64(blk*fsys.bs)); err != nil {
		return nil, fmt.Errorf("offloadfs: read metadata blocks [%d, +%d): %w", blk, n, err)
	}
	if len(fsys.overlay) > 0 {
		for i := range n {
			if im, ok := fsys.overlay[blk+i]; ok {
				copy(b[i*fsys.bs:], im)
			}
		}
	}
	return b, nil
}

// commitLoop commits unsynced changes every interval.
func (fsys *FS) commitLoop(interval time.Duration) {
	defer close(fsys.timerDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-fsys.stopTimer:
			return
		case <-t.C:
			if err := fsys.commit(context.Background(), false); err != nil && !errors.Is(err, iofs.ErrClosed) {
				fsys.log.Error("offloadfs: periodic commit", "err", err)
			}
		}
	}
}

// usable reports why the file system accepts no changes, if it does not.
// Callers hold mu.
func (fsys *FS) usable() error {
	switch {
	case fsys.closed:
		return iofs.ErrClosed
	case fsys.failed != nil:
		return fsys.failed
	}
	return nil
}

// downErr is why a file operation may not proceed once the file system
// is down (closed or failed): nil for a read on a fenced mount, which
// turns read-only and may still read what it sees, as a read-only mount
// of a changing file system does.
func (fsys *FS) downErr(write bool) error {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	err := fsys.usable()
	switch {
	case err == nil:
		return iofs.ErrClosed
	case !write && errors.Is(err, ErrFenced):
		return nil
	}
	return err
}

// lockForChange takes mu for an operation that changes metadata, first
// committing the running transaction if it is too large to take another
// operation.
func (fsys *FS) lockForChange() error {
	if fsys.ro {
		return ErrReadOnly
	}
	for {
		fsys.mu.Lock()
		if err := fsys.usable(); err != nil {
			fsys.mu.Unlock()
			return err
		}
		if fsys.txn.blocks() <= fsys.maxTxn {
			return nil
		}
		fsys.mu.Unlock()
		if err := fsys.commit(context.Background(), false); err != nil {
			return err
		}
	}
}

// lockForRead takes mu for an operation that only looks.
func (fsys *FS) lockForRead() error {
	fsys.mu.Lock()
	if fsys.closed {
		fsys.mu.Unlock()
		return iofs.ErrClosed
	}
	return nil
}

// relaxLocked commits the running transaction in the middle of an
// operation that changes many blocks, if it has grown too large. The
// caller holds mu and must be at a consistent point; mu is released
// during the commit.
func (fsys *FS) relaxLocked() error {
	if fsys.txn.blocks() <= fsys.maxTxn {
		return nil
	}
	fsys.mu.Unlock()
	err := fsys.commit(context.Background(), false)
	fsys.mu.Lock()
	if err != nil {
		return err
	}
	return fsys.usable()
}

// fail records a commit failure: the in-memory state is ahead of the
// device and cannot be rolled back, so no further change is accepted.
func (fsys *FS) fail(err error) error {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	return fsys.failLocked(err)
}

// failLocked is fail with mu held. Damaged metadata found while changing
// the file system fails it the same way: nothing more is committed.
func (fsys *FS) failLocked(err error) error {
	switch {
	case errors.Is(err, ErrFenced):
	case fsys.owner != nil && errors.Is(err, host.ErrReservationConflict):
		// The owner's key was preempted (owner.go, rule 3).
		err = fmt.Errorf("%w (the target refused a write: %w)", ErrFenced, err)
	default:
		err = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	if fsys.failed == nil {
		fsys.failed = err
		fsys.down.Store(true)
		fsys.log.Error("offloadfs: file system failed; no more changes until remounted", "err", err)
	}
	return err
}

// DeviceBlockSize is the device's block size in bytes: the unit of
// extents the target is told about, and the alignment λ writes need.
func (fsys *FS) DeviceBlockSize() int { return int(fsys.devBS) }

// Sync commits every metadata change made so far, after making all file
// data written so far durable. When it returns, a crash loses none of it.
func (fsys *FS) Sync(ctx context.Context) error {
	if fsys.ro {
		return nil
	}
	return fsys.commit(ctx, true)
}

// commit commits the running transaction. With an empty transaction it
// only flushes the device, if flushEmpty is set (Sync wants file data
// durable even when no metadata changed).
//
// A caller's cancellation is honoured only before the commit starts. Once
// the transaction is taken, the in-memory state is ahead of the device
// and cannot be rolled back, so the journal write runs to the end
// whatever happens to ctx: otherwise a cancelled Sync (a FUSE fsync
// interrupted by a signal, say) would fail the whole file system.
func (fsys *FS) commit(ctx context.Context, flushEmpty bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("offloadfs: commit: %w", err)
	}
	fsys.commitMu.Lock()
	defer fsys.commitMu.Unlock()
	fsys.mu.Lock()
	if err := fsys.usable(); err != nil {
		fsys.mu.Unlock()
		return err
	}
	if fsys.txn.empty() {
		fsys.mu.Unlock()
		if !flushEmpty {
			return nil
		}
		if err := fsys.dev.Flush(ctx); err != nil {
			return fmt.Errorf("offloadfs: flush: %w", err)
		}
		return nil
	}
	fsys.mu.Unlock()
	start := time.Now()
	// Still the owner? (owner.go, rule 3.) Only commit replaces the
	// transaction, and it holds commitMu, so it is still non-empty after.
	if err := fsys.checkFence(); err != nil {
		if errors.Is(err, ErrFenced) {
			fsys.opts.Metrics.committed(0, 0, err)
		}
		return err
	}
	fsys.mu.Lock()
	if err := fsys.usable(); err != nil {
		fsys.mu.Unlock()
		return err
	}
	t := fsys.txn
	fsys.txn = newTxn()
	seq := fsys.jnl.nextSeq
	imgs, changes := fsys.encodeTxn(t, seq)
	fsys.mu.Unlock()

	if err := fsys.jnl.commit(context.WithoutCancel(ctx), imgs); err != nil {
		err = fsys.fail(err)
		fsys.opts.Metrics.committed(0, 0, err)
		return err
	}
	fsys.opts.Metrics.committed(time.Since(start).Seconds(), len(imgs), nil)

	fsys.mu.Lock()
	for _, x := range t.freed {
		fsys.alloc.unpin(x)
	}
	fsys.committed = seq
	for _, c := range changes {
		fsys.changes[c.Ino] = changeRec{seq: seq, c: c}
	}
	fsys.mu.Unlock()
	if fsys.opts.OnCommit != nil && len(changes) > 0 {
		fsys.opts.OnCommit(Commit{Seq: seq, Changes: changes})
	}
	if fsys.syncer != nil && len(changes) > 0 {
		fsys.syncer.enqueue(changes)
	}
	return nil
}

// encodeTxn turns a transaction into block images, sorted by home. The
// caller holds mu.
func (fsys *FS) encodeTxn(t *txn, seq uint64) ([]image, []Change) {
	bs := fsys.bs
	wpb := fsys.bpb / 64
	imgs := make([]image, 0, t.blocks())
	for idx := range t.bitmap {
		b := make([]byte, bs)
		encodeBitmap(fsys.uuid, b, magicBitmap, fsys.sb.bitmapStart+idx, fsys.alloc.onDisk[idx*wpb:(idx+1)*wpb])
		imgs = append(imgs, image{fsys.sb.bitmapStart + idx, b})
	}
	for idx := range t.ibitmap {
		b := make([]byte, bs)
		encodeBitmap(fsys.uuid, b, magicIBitmap, fsys.sb.ibitmapStart+idx, fsys.ibits[idx*wpb:(idx+1)*wpb])
		imgs = append(imgs, image{fsys.sb.ibitmapStart + idx, b})
	}
	for ino, in := range t.inodes {
		blk, off := fsys.itLoc(ino)
		in.seq = seq
		r := in.record()
		encodeInode(fsys.uuid, fsys.itCache[blk][off:], ino, &r)
	}
	for blk := range t.itBlocks {
		imgs = append(imgs, image{blk, append([]byte(nil), fsys.itCache[blk]...)})
	}
	for home, ref := range t.extBlocks {
		b := make([]byte, bs)
		in, k := ref.in, ref.idx
		lo := inlineExtents + k*fsys.epb
		hi := min(lo+fsys.epb, len(in.ext))
		var next uint64
		if k+1 < len(in.extBlocks) {
			next = in.extBlocks[k+1]
		}
		encodeExtentBlock(fsys.uuid, b, home, in.ino, next, in.ext[lo:hi])
		imgs = append(imgs, image{home, b})
	}
	for home, ref := range t.dirBlocks {
		b := make([]byte, bs)
		encodeDirBlock(fsys.uuid, b, home, ref.dir.ino, ref.blk.entries(ref.dir.dir))
		imgs = append(imgs, image{home, b})
	}
	sortImages(imgs)
	changes := make([]Change, 0, len(t.changed))
	for ino := range t.changed {
		// Directories have maps too, but no one reads them remotely.
		if in := fsys.inodes[ino]; in.typ != typeDir {
			changes = append(changes, Change{Ino: ino, Version: in.version, Removed: in.typ == typeFree})
		}
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].Ino < changes[j].Ino })
	return imgs, changes
}

// ChangedSince returns the inodes whose extent maps changed in commits
// after seq, with their latest committed versions, and the sequence
// number of the last commit (pass it next time). It knows the commits of
// this mount only: a synchronizer starting afresh (seq below the first
// commit of the mount) should walk the tree instead.
func (fsys *FS) ChangedSince(seq uint64) ([]Change, uint64) {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	var out []Change
	for _, r := range fsys.changes {
		if r.seq > seq {
			out = append(out, r.c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ino < out[j].Ino })
	return out, fsys.committed
}

// Close commits outstanding changes and unmounts. Blocks speculatively
// reserved past the end of open files are trimmed, and files removed
// while open are freed; handles still open fail afterwards. Grants still
// live are released first, the synchronizer stops (the next mount pushes
// every map again), and registered functions are unloaded from the host
// runtimes. Close does not close the device.
func (fsys *FS) Close() error {
	fsys.mu.Lock()
	if fsys.closed || fsys.closeStarted {
		fsys.mu.Unlock()
		return iofs.ErrClosed
	}
	fsys.closeStarted = true
	fsys.mu.Unlock()
	var errs []error
	if !fsys.ro {
		errs = append(errs, fsys.releaseAll())
	}
	if fsys.syncer != nil {
		fsys.syncer.close()
	}
	errs = append(errs, fsys.funcs.close(context.Background()))
	uerr := fsys.unmount()
	errs = append(errs, uerr)
	switch {
	case fsys.owner == nil, uerr == nil:
		// A clean unmount keeps the reservation (owner.go, rule 1).
	case errors.Is(uerr, ErrFenced):
		// The key is gone: preempted.
	default:
		// Not clean: let the next mount, from any host, replay the
		// journal without a take-over, as after any failure.
		errs = append(errs, fsys.owner.release(context.Background()))
	}
	return errors.Join(errs...)
}

// unmount is Close's file-system part.
func (fsys *FS) unmount() error {
	fsys.mu.Lock()
	if fsys.ro {
		fsys.closed = true
		fsys.down.Store(true)
		fsys.mu.Unlock()
		return nil
	}
	var open []*inode
	for _, in := range fsys.inodes {
		if in.refs > 0 {
			open = append(open, in)
		}
	}
	fsys.mu.Unlock()
	if fsys.stopTimer != nil {
		close(fsys.stopTimer)
		<-fsys.timerDone
	}
	var errs []error
	for _, in := range open {
		in.io.Lock()
		fsys.mu.Lock()
		if fsys.usable() == nil && in.refs > 0 {
			errs = append(errs, fsys.lastClose(in), fsys.relaxLocked())
		}
		fsys.mu.Unlock()
		in.io.Unlock()
	}
	errs = append(errs, fsys.commit(context.Background(), true))
	// A clean unmount leaves an empty log: the checkpoint is flushed,
	// then a new epoch starts, so the next mount has nothing to replay.
	if err := errors.Join(errs...); err == nil {
		fsys.commitMu.Lock()
		err = fsys.dev.Flush(context.Background())
		if err == nil {
			err = fsys.jnl.writeHeader(context.Background(), fsys.jnl.nextSeq)
		}
		if err == nil {
			// Last: the next mount may take the reservation over
			// (owner.go, rule 2).
			fsys.sb.clean = true
			err = writeOwnerState(context.Background(), fsys.dev, fsys.sb)
		}
		fsys.commitMu.Unlock()
		errs = append(errs, err)
	}
	fsys.mu.Lock()
	fsys.closed = true
	fsys.down.Store(true)
	fsys.mu.Unlock()
	return errors.Join(errs...)
}

// reapOrphans frees the inodes of files that were removed while open
// when the file system last went down.
func (fsys *FS) reapOrphans(ctx context.Context) error {
	fsys.mu.Lock()
	od, err := fsys.loadInode(orphanIno)
	var ds *dirState
	if err == nil {
		ds, err = fsys.loadDir(od)
	}
	if err != nil {
		fsys.mu.Unlock()
		return err
	}
	names := ds.names()
	for _, name := range names {
		e := ds.entries[name]
		in, err := fsys.loadInode(e.ino)
		if err == nil && (in.typ != e.typ || !fsys.ibits.get(e.ino)) {
			err = corruptf("orphan %s: inode %d is type %d", name, e.ino, in.typ)
		}
		if err != nil {
			fsys.mu.Unlock()
			return err
		}
		fsys.dirRemove(od, name)
		fsys.freeInode(in)
		if err := fsys.relaxLocked(); err != nil {
			fsys.mu.Unlock()
			return err
		}
	}
	fsys.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	fsys.log.Info("offloadfs: freed inodes of files removed while open", "count", len(names))
	return fsys.commit(ctx, false)
}

// Usage is a summary of space.
type Usage struct {
	BlockSize   int
	Blocks      uint64 // data blocks
	FreeBlocks  uint64 // free now (blocks freed by uncommitted changes excluded)
	Inodes      uint64 // inodes for files and directories
	FreeInodes  uint64
	CommitSeq   uint64 // sequence of the last commit
	JournalSize uint64 // bytes
}

// Usage reports space and inode use.
func (fsys *FS) Usage() Usage {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	return Usage{
		BlockSize:   int(fsys.bs),
		Blocks:      fsys.sb.totalBlocks - fsys.sb.dataStart,
		FreeBlocks:  fsys.alloc.free,
		Inodes:      fsys.sb.inodeCount - firstIno,
		FreeInodes:  fsys.freeInodes,
		CommitSeq:   fsys.committed,
		JournalSize: fsys.sb.journalBlocks * fsys.bs,
	}
}

// ReadOnly reports whether the mount is read-only.
func (fsys *FS) ReadOnly() bool { return fsys.ro }
