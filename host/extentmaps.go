package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
)

// Extent maps and grants: how the host that owns a file system on a
// namespace keeps the target in step (docs/PROTOCOL.md). The target holds
// maps per host, so a host's pushdown and λ requests can name files by
// inode and version; grants give other hosts (offloaded tasks, peers)
// access to chosen extents.

// ErrStaleExtentMap matches, with errors.Is, the error of a function
// request the target refused because it does not hold the extent-map
// version of a file the request names. Put the map and retry, or read the
// ordinary way.
var ErrStaleExtentMap error = &nvme.StatusError{Status: nvme.StatusStaleExtentMap}

// ErrAccessDenied matches, with errors.Is, the error of a command the
// target refused because this host is a task host on the namespace and
// the command goes outside its grants, or because a task host tried to
// grant.
var ErrAccessDenied error = &nvme.StatusError{Status: nvme.StatusAccessDenied}

// ErrBadExtentMap matches the error of an Extent Map Put, Query or Grant
// Put the target found malformed or not fitting the namespace.
var ErrBadExtentMap error = &nvme.StatusError{Status: nvme.StatusBadExtentMap}

// Grant is a grant of extents to another host; see pushdown.Grant.
type Grant = pushdown.Grant

// Grant modes.
const (
	GrantRead      = pushdown.GrantRead
	GrantReadWrite = pushdown.GrantReadWrite
)

// maxPutBytes caps one Extent Map Put below large controller transfer
// sizes, so a big batch holds the admin queue no longer than a big read;
// it still fits the largest map (pushdown.MaxMapExtents extents).
const maxPutBytes = 512 << 10

// PutExtentMaps sends the target new extent maps of files on the
// namespace: for each, the inode (ID), version, size and extents. The
// target ignores a map whose version is not newer than the one it holds,
// so resending is harmless. Large batches go in several commands.
func (ns *Namespace) PutExtentMaps(ctx context.Context, maps []pushdown.File) error {
	ups := make([]pushdown.MapUpdate, len(maps))
	for i, f := range maps {
		ups[i].File = f
	}
	_, _, err := ns.UpdateExtentMaps(ctx, ups)
	return err
}

// RemoveExtentMaps tells the target that files are gone: for each, the
// inode (ID) and the version of its removal (offloadfs gives a freed
// inode a new version). The target then refuses requests naming the
// inode until a newer map arrives, and ignores older maps sent late.
// Version 0 removes whatever the target holds for the inode,
// unconditionally.
func (ns *Namespace) RemoveExtentMaps(ctx context.Context, removed []pushdown.File) error {
	ups := make([]pushdown.MapUpdate, len(removed))
	for i, f := range removed {
		ups[i] = pushdown.MapUpdate{File: pushdown.File{ID: f.ID, Version: f.Version}, Remove: true}
	}
	_, _, err := ns.UpdateExtentMaps(ctx, ups)
	return err
}

// UpdateExtentMaps sends puts and removals in order and returns how many
// the target applied and how many it ignored as not newer than what it
// holds. The updates go in as few commands as fit; if one fails, the
// commands before it have been applied and the rest are not sent.
func (ns *Namespace) UpdateExtentMaps(ctx context.Context, ups []pushdown.MapUpdate) (applied, ignored int, err error) {
	limit := min(ns.c.MaxTransfer(), maxPutBytes)
	for len(ups) > 0 {
		n, size := 0, pushdown.MapPutHeaderSize
		for n < len(ups) && n < pushdown.MaxMapsPerPut {
			k := pushdown.MapUpdatesSize(ups[n])
			if size+k > limit {
				break
			}
			size += k
			n++
		}
		if n == 0 {
			return applied, ignored, fmt.Errorf("host: extent map of inode %d: %d extents do not fit one command of %d bytes",
				ups[0].ID, len(ups[0].Extents), limit)
		}
		cmd := nvme.Command{Opcode: nvme.AdminExtentMapPut, NSID: ns.ID()}
		cpl, err := ns.c.Admin(ctx, &cmd, pushdown.MarshalMapUpdates(ups[:n]), nil)
		if err != nil {
			if errors.Is(err, ErrBadExtentMap) && cpl.DW0 != 0xFFFFFFFF && int(cpl.DW0) < n {
				return applied, ignored, fmt.Errorf("host: extent map put: inode %d: %w", ups[cpl.DW0].ID, err)
			}
			return applied, ignored, fmt.Errorf("host: extent map put: %w", err)
		}
		applied += int(cpl.DW0)
		ignored += int(cpl.DW1)
		ups = ups[n:]
	}
	return applied, ignored, nil
}

// ExtentMapVersions returns the versions of the given inodes' maps that
// the target holds for this host: 0 where it holds none, or holds only a
// removal. It is the check a host makes before it sends a request naming
// those versions.
func (ns *Namespace) ExtentMapVersions(ctx context.Context, inodes []uint64) ([]uint64, error) {
	const (
		perCommand = adminInline / 8 // the inodes travel in the capsule
		header     = 16
		entry      = 16
	)
	out := make([]uint64, 0, len(inodes))
	for len(inodes) > 0 {
		n := min(len(inodes), perCommand)
		q := make([]byte, 8*n)
		for i, ino := range inodes[:n] {
			binary.LittleEndian.PutUint64(q[8*i:], ino)
		}
		res := make([]byte, header+entry*n)
		cmd := nvme.Command{Opcode: nvme.AdminExtentMapQuery, NSID: ns.ID()}
		if _, err := ns.c.Admin(ctx, &cmd, q, res); err != nil {
			return nil, fmt.Errorf("host: extent map query: %w", err)
		}
		if got := int(binary.LittleEndian.Uint32(res)); got != n {
			return nil, fmt.Errorf("host: extent map query: %d answers for %d inodes", got, n)
		}
		for i := range n {
			e := res[header+entry*i:]
			v := binary.LittleEndian.Uint64(e)
			if binary.LittleEndian.Uint32(e[8:])&1 != 0 { // a removal
				v = 0
			}
			out = append(out, v)
		}
		inodes = inodes[n:]
	}
	return out, nil
}

// Grant gives another host access to extents of the namespace for a
// lease; docs/PROTOCOL.md ("Grant Put") gives the policy. Putting a grant
// ID this host already used replaces that grant; the call returns once
// commands admitted under the old one have finished. From the first grant
// on, the grantee may touch nothing on the namespace outside its grants.
// The caller must not move, free or overwrite the granted extents until
// ReleaseGrant returns.
func (ns *Namespace) Grant(ctx context.Context, g Grant) error {
	switch {
	case g.Lease < time.Millisecond || g.Lease > pushdown.MaxLease:
		return fmt.Errorf("host: grant %d: lease %v outside [1ms, %v]", g.ID, g.Lease, pushdown.MaxLease)
	case len(g.Extents) == 0 || len(g.Extents) > pushdown.MaxGrantExtents:
		return fmt.Errorf("host: grant %d: %d extents (want 1 to %d)", g.ID, len(g.Extents), pushdown.MaxGrantExtents)
	}
	cmd := nvme.Command{Opcode: nvme.AdminGrantPut, NSID: ns.ID()}
	if _, err := ns.c.Admin(ctx, &cmd, g.Marshal(), nil); err != nil {
		return fmt.Errorf("host: grant %d to %s: %w", g.ID, g.Host, err)
	}
	return nil
}

// ReleaseAllGrants ends every grant this host holds on the namespace
// (Grant Release with CDW12 bit 0) and returns how many there were. It
// returns once nothing admitted under them is still running: an owner
// that restarted calls it before reusing any block, since the grants it
// made before are no longer remembered anywhere else.
func (ns *Namespace) ReleaseAllGrants(ctx context.Context) (int, error) {
	cmd := nvme.Command{Opcode: nvme.AdminGrantRelease, NSID: ns.ID(), CDW12: 1}
	cqe, err := ns.c.Admin(ctx, &cmd, nil, nil)
	if err != nil {
		return 0, fmt.Errorf("host: release all grants: %w", err)
	}
	return int(cqe.DW0), nil
}

// ReleaseGrant ends a grant this host made. It returns once no command
// admitted under the grant is still running at the target, so the blocks
// may then be reused. Releasing a grant that is not held (released
// already, or expired and forgotten) succeeds.
func (ns *Namespace) ReleaseGrant(ctx context.Context, id uint64) error {
	cmd := nvme.Command{Opcode: nvme.AdminGrantRelease, NSID: ns.ID(), CDW10: uint32(id), CDW11: uint32(id >> 32)}
	if _, err := ns.c.Admin(ctx, &cmd, nil, nil); err != nil {
		return fmt.Errorf("host: release grant %d: %w", id, err)
	}
	return nil
}
