package offloadfs

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	iofs "io/fs"
	"slices"
	"sync"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
)

// Grants, the owner's side (docs/PROTOCOL.md, "Grant Put"): the owner
// gives another host — an offloaded task, a peer — read or read-write
// access to the blocks of named files for a lease, and until the grant is
// released or has expired it does not move, free or overwrite them. The
// target refuses the grantee anything outside its grants.
//
// The owner keeps its side by pinning each granted file's first n bytes
// (its size when granted):
//
//   - a truncation below n fails with ErrGranted, and so does a write or
//     λ write into them; writes past them (appends) are fine, since
//     growing a file never moves its blocks;
//   - removing or renaming over the file is allowed: the grant holds the
//     inode open, so its blocks stay the file's (in the orphan directory)
//     until the last grant on it ends, and are freed then.
//
// Failing rather than waiting was chosen because a lease can be long and
// the caller is usually the one that can end it (Release); a caller that
// prefers to wait can retry on ErrGranted.
//
// When a lease runs out the owner releases the grant at the target (which
// waits for commands admitted before the expiry) and only then unpins, as
// the protocol requires; Close releases every grant still live. Grants
// are not written to the file system: an owner that crashed forgets them,
// so every read-write mount with a Remote first ends all grants its host
// holds at the target (Remote.ReleaseAllGrants), before it can reuse a
// block. Grantees of the crashed owner are then denied and must be
// granted again.

// grantRetryMax bounds the backoff of a release that fails at expiry.
const grantRetryMax = 5 * time.Second

// Grant is a live grant of files' blocks to another host.
type Grant struct {
	fsys    *FS
	id      uint64
	grantee string
	mode    pushdown.GrantMode
	extents []pushdown.Extent
	ins     []*inode
	maps    []pushdown.File // each of ins's map as granted
	expires time.Time
	timer   *time.Timer

	mu       sync.Mutex // serializes Release and expiry
	released bool
}

// ID returns the grant's ID at the target (the grantee has no use for
// it; the owner's Release names it).
func (g *Grant) ID() uint64 { return g.id }

// Grantee returns the host NQN the grant is for.
func (g *Grant) Grantee() string { return g.grantee }

// Mode returns the access granted.
func (g *Grant) Mode() pushdown.GrantMode { return g.mode }

// Extents returns the device extents granted: the files' maps, in order.
func (g *Grant) Extents() []pushdown.Extent { return slices.Clone(g.extents) }

// Expires returns when the lease ends, by this host's clock; the target's
// lease started no earlier, so it ends no later.
func (g *Grant) Expires() time.Time { return g.expires }

// Grant gives the host grantee (its host NQN) access to the blocks of
// files — each file's bytes as they are now — for lease: read, or read
// and write (pushdown.GrantRead, pushdown.GrantReadWrite). Until the
// grant is released (Release) or the lease ends, this file system will
// not move, free or overwrite those blocks (see ErrGranted). It needs a
// read-write mount with a Remote. The files' maps together may have at
// most 1024 extents.
func (fsys *FS) Grant(ctx context.Context, grantee string, files []*File, mode pushdown.GrantMode, lease time.Duration) (*Grant, error) {
	switch {
	case fsys.syncer == nil:
		return nil, fmt.Errorf("offloadfs: grant: %w", ErrNoRemote)
	case mode != pushdown.GrantRead && mode != pushdown.GrantReadWrite:
		return nil, fmt.Errorf("offloadfs: grant: mode %v: %w", mode, iofs.ErrInvalid)
	case lease < time.Millisecond || lease > pushdown.MaxLease:
		return nil, fmt.Errorf("offloadfs: grant: lease %v outside [1ms, %v]: %w", lease, pushdown.MaxLease, iofs.ErrInvalid)
	case len(files) == 0:
		return nil, fmt.Errorf("offloadfs: grant: no files: %w", iofs.ErrInvalid)
	}
	for i, f := range files {
		if f == nil || f.fsys != fsys {
			return nil, fmt.Errorf("offloadfs: grant: file %d is not a file of this file system: %w", i, iofs.ErrInvalid)
		}
		if err := f.check("grant", false); err != nil {
			return nil, err
		}
	}
	g := &Grant{fsys: fsys, id: fsys.grantSeq.Add(1), grantee: grantee, mode: mode}
	// Pin before telling the target: from here the extents sent stay the
	// files' whatever else happens.
	for _, f := range files {
		if slices.Contains(g.ins, f.in) {
			continue
		}
		m, err := fsys.pin(f.in, g.id)
		if err != nil {
			fsys.unpin(g)
			return nil, pathErr("grant", f.name, err)
		}
		g.ins = append(g.ins, f.in)
		g.maps = append(g.maps, m)
		g.extents = appendMerged(g.extents, m.Extents)
	}
	switch {
	case len(g.extents) == 0:
		fsys.unpin(g)
		return nil, fmt.Errorf("offloadfs: grant: the files are empty: nothing to grant: %w", iofs.ErrInvalid)
	case len(g.extents) > pushdown.MaxGrantExtents:
		fsys.unpin(g)
		return nil, fmt.Errorf("offloadfs: grant: the files have %d extents, a grant carries at most %d: %w",
			len(g.extents), pushdown.MaxGrantExtents, iofs.ErrInvalid)
	}
	err := fsys.opts.Remote.Grant(ctx, host.Grant{ID: g.id, Host: grantee, Mode: mode, Lease: lease, Extents: g.extents})
	if err != nil {
		// The target may have applied it before the error reached us;
		// release it before unpinning, as for an expired grant.
		if rerr := fsys.opts.Remote.ReleaseGrant(context.WithoutCancel(ctx), g.id); rerr != nil {
			fsys.log.Warn("offloadfs: releasing a grant whose put failed", "id", g.id, "err", rerr)
		}
		fsys.unpin(g)
		return nil, fmt.Errorf("offloadfs: grant to %s: %w", grantee, err)
	}
	// The target's lease started when it applied the Put, before now.
	g.expires = time.Now().Add(lease)
	// g.mu before grantMu, as everywhere: Release and expiry hold g.mu
	// when they drop the grant from the table. The timer is set before
	// anyone can look at it.
	g.mu.Lock()
	fsys.grantMu.Lock()
	select {
	case <-fsys.closing:
		fsys.grantMu.Unlock()
		g.mu.Unlock()
		if err := fsys.opts.Remote.ReleaseGrant(context.WithoutCancel(ctx), g.id); err != nil {
			fsys.log.Warn("offloadfs: releasing a grant made while closing", "id", g.id, "err", err)
		}
		fsys.unpin(g)
		return nil, fmt.Errorf("offloadfs: grant: %w", iofs.ErrClosed)
	default:
	}
	fsys.grants[g.id] = g
	fsys.grantWG.Add(1)
	fsys.grantMu.Unlock()
	g.timer = time.AfterFunc(lease, g.expire)
	g.mu.Unlock()
	fsys.opts.Metrics.grantsDelta(1)
	return g, nil
}

// appendMerged appends extents, merging each with the last when they are
// contiguous.
func appendMerged(dst, xs []pushdown.Extent) []pushdown.Extent {
	for _, x := range xs {
		if n := len(dst); n > 0 && dst[n-1].LBA+uint64(dst[n-1].Blocks) == x.LBA && uint64(dst[n-1].Blocks)+uint64(x.Blocks) <= 1<<32-1 {
			dst[n-1].Blocks += x.Blocks
			continue
		}
		dst = append(dst, x)
	}
	return dst
}

// pin records grant id on in, covering its bytes now, holds the inode
// open, and returns its map.
func (fsys *FS) pin(in *inode, id uint64) (pushdown.File, error) {
	in.io.Lock()
	defer in.io.Unlock()
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if err := fsys.usable(); err != nil {
		return pushdown.File{}, err
	}
	if in.typ != typeFile {
		return pushdown.File{}, ErrIsDir
	}
	if in.grantBy == nil {
		in.grantBy = map[uint64]uint64{}
	}
	in.grantBy[id] = in.size
	in.grantEnd = max(in.grantEnd, in.size)
	in.refs++
	return fsys.exported(in), nil
}

// unpin undoes pin for every inode of g: the blocks may be changed again,
// and an inode removed meanwhile is freed with its last reference.
func (fsys *FS) unpin(g *Grant) {
	for _, in := range g.ins {
		in.io.Lock()
		fsys.mu.Lock()
		delete(in.grantBy, g.id)
		in.grantEnd = 0
		for _, n := range in.grantBy {
			in.grantEnd = max(in.grantEnd, n)
		}
		in.refs--
		if in.refs == 0 && !fsys.closed && !fsys.ro && fsys.failed == nil {
			err := fsys.lastClose(in)
			if err == nil {
				err = fsys.relaxLocked()
			}
			if err != nil {
				fsys.log.Error("offloadfs: freeing blocks after a grant ended", "ino", in.ino, "err", err)
			}
		}
		fsys.mu.Unlock()
		in.io.Unlock()
	}
	g.ins = nil
}

// Release ends the grant: the target drops it and waits for the
// grantee's commands admitted under it to finish, then this file system
// may change the blocks again. Releasing a grant already released (or
// expired and released) does nothing. If the target cannot be told, the
// grant stays in force here and the error is returned; try again.
func (g *Grant) Release(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released {
		return nil
	}
	if err := g.fsys.opts.Remote.ReleaseGrant(ctx, g.id); err != nil {
		return fmt.Errorf("offloadfs: release grant %d: %w", g.id, err)
	}
	g.finishLocked()
	return nil
}

// finishLocked forgets the grant and unpins its files. Callers hold g.mu.
func (g *Grant) finishLocked() {
	fsys := g.fsys
	g.released = true
	if g.timer.Stop() {
		fsys.grantWG.Done() // expire will not run
	}
	fsys.grantMu.Lock()
	delete(fsys.grants, g.id)
	fsys.grantMu.Unlock()
	fsys.unpin(g)
	fsys.opts.Metrics.grantsDelta(-1)
}

// expire runs when the lease ends: the target admits nothing new under
// the grant, but commands admitted before may still run, so the grant is
// released (retrying until the target answers, or the file system
// closes) before its blocks are unpinned.
func (g *Grant) expire() {
	fsys := g.fsys
	defer fsys.grantWG.Done()
	delay := syncRetryMin
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := g.Release(ctx)
		cancel()
		if err == nil {
			return
		}
		fsys.log.Warn("offloadfs: releasing an expired grant; its blocks stay pinned until the target answers", "id", g.id, "err", err)
		select {
		case <-fsys.closing:
			return // Close releases it
		case <-time.After(delay):
		}
		delay = min(2*delay, grantRetryMax)
	}
}

// releaseAll releases every live grant, for Close. A grant the target
// cannot be told about is unpinned anyway (the file system is going
// away), and stays in force at the target until its lease ends.
func (fsys *FS) releaseAll() error {
	close(fsys.closing)
	fsys.grantMu.Lock()
	gs := make([]*Grant, 0, len(fsys.grants))
	for _, g := range fsys.grants {
		gs = append(gs, g)
	}
	fsys.grantMu.Unlock()
	var errs []error
	for _, g := range gs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := g.Release(ctx)
		cancel()
		if err != nil {
			g.mu.Lock()
			if !g.released {
				g.finishLocked()
			}
			g.mu.Unlock()
			errs = append(errs, fmt.Errorf("%w (the target keeps it until %v)", err, g.expires))
		}
	}
	fsys.grantWG.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("offloadfs: close: grants not released: %w", errors.Join(errs...))
	}
	return nil
}

// newGrantSeq returns a random starting point for grant IDs, so that a
// remount does not reuse the IDs of grants the target may still hold
// from before (a Put of a used ID replaces that grant).
func newGrantSeq() uint64 {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	// Keep clear of 0 and of wrapping.
	return binary.LittleEndian.Uint64(b[:]) >> 1
}
