package offloadfs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	iofs "io/fs"
	"time"
)

// MkfsOptions sets the geometry of a new file system. Zero values pick
// defaults.
type MkfsOptions struct {
	// BlockSize is the allocation unit in bytes: a power of two from 512
	// to 64 KiB and a multiple of the device's block size. Default 4 KiB
	// (or the device's block size if larger).
	BlockSize int
	// Inodes is the number of inodes, which bounds the number of files
	// and directories. Default one per 64 KiB of device, at least 256.
	Inodes uint64
	// JournalBlocks is the journal size in blocks. Default and minimum:
	// room for the largest transaction one operation can make, twice
	// over (at least 256 blocks).
	JournalBlocks uint64
	// TakeOver lets Mkfs on a device that takes reservations (Reserver)
	// preempt a host that holds one on a namespace whose file system is
	// not parked (owner.go): for reusing a namespace whose owner is
	// known to be dead.
	TakeOver bool
}

// Mkfs writes a new, empty file system on dev, destroying what was there.
// The superblock goes last, after a flush, so an interrupted Mkfs leaves
// no file system rather than a broken one.
//
// On a device that takes reservations (Reserver), Mkfs first claims the
// namespace as a read-write mount does, so it fails with ErrOwned while
// another host owns a file system there, and leaves the new file system
// parked with this host (owner.go).
func Mkfs(ctx context.Context, dev Device, opts MkfsOptions) error {
	r, ok := dev.(Reserver)
	if !ok {
		return mkfs(ctx, dev, opts)
	}
	o := newOwnership(r, dev)
	mode := claimParked
	if opts.TakeOver {
		mode = claimTakeOver
	}
	if err := o.claim(ctx, mode); err != nil {
		return fmt.Errorf("offloadfs: mkfs: %w", err)
	}
	if err := mkfs(ctx, dev, opts); err != nil {
		if rerr := o.release(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return err
	}
	return nil
}

// mkfs is Mkfs once the device is claimed.
func mkfs(ctx context.Context, dev Device, opts MkfsOptions) error {
	devBS := dev.BlockSize()
	bs := opts.BlockSize
	if bs == 0 {
		bs = max(4096, devBS)
	}
	if bs < 512 || bs > 64<<10 || bs&(bs-1) != 0 || devBS <= 0 || bs%devBS != 0 {
		return fmt.Errorf("offloadfs: mkfs: block size %d: want a power of two from 512 to 64 KiB and a multiple of the device's %d: %w",
			bs, devBS, iofs.ErrInvalid)
	}
	total := uint64(dev.Size()) / uint64(bs)
	total = min(total, maxTotalBlocks-1)
	inodes := opts.Inodes
	if inodes == 0 {
		inodes = max(256, total*uint64(bs)/(64<<10))
	}
	inodes = min(max(inodes, firstIno+1), 1<<32)
	sb := layout(uint32(bs), total, inodes, 0)
	sb.journalBlocks = max(opts.JournalBlocks, minJournalBlocks(sb))
	sb = layout(uint32(bs), total, inodes, sb.journalBlocks)
	// The journal minimum depends on the bitmap sizes, which do not depend
	// on the journal, so one recomputation settles it.
	sb.devBlockSize = uint32(devBS)
	sb.created = time.Now().UnixNano()
	sb.version, sb.clean = FormatVersion, true
	if _, err := rand.Read(sb.uuid[:]); err != nil {
		return fmt.Errorf("offloadfs: mkfs: uuid: %w", err)
	}
	if total == 0 || sb.dataStart+16 > total {
		return fmt.Errorf("offloadfs: mkfs: device of %d bytes too small (metadata alone takes %d blocks of %d): %w",
			dev.Size(), sb.dataStart, bs, ErrNoSpace)
	}
	if err := sb.validate(); err != nil {
		return fmt.Errorf("offloadfs: mkfs: %w", err)
	}
	w := func(blk uint64, b []byte) error {
		if _, err := dev.WriteAt(b, int64(blk)*int64(bs)); err != nil {
			return fmt.Errorf("offloadfs: mkfs: write block %d: %w", blk, err)
		}
		return nil
	}
	// Invalidate any old superblock first.
	if err := w(0, make([]byte, bs)); err != nil {
		return err
	}
	if err := dev.Flush(ctx); err != nil {
		return fmt.Errorf("offloadfs: mkfs: flush: %w", err)
	}

	// Journal: epoch 1 in slot 0, slot 1 and the first log block zero.
	jb := make([]byte, 3*bs)
	encodeJHeader(&sb.uuid, jb[:bs], sb.journalStart, jHeader{epoch: 1})
	if err := w(sb.journalStart, jb); err != nil {
		return err
	}

	// Block bitmap: metadata blocks, and bits past the end, are in use.
	bbits := newBitmap(sb.bitmapBlocks * bitsPerBitmap(sb.blockSize))
	bbits.setRange(0, sb.dataStart)
	bbits.setRange(total, uint64(len(bbits))*64-total)
	if err := writeBitmap(ctx, dev, sb, magicBitmap, sb.bitmapStart, bbits); err != nil {
		return err
	}
	ibits := newBitmap(sb.ibitmapBlocks * bitsPerBitmap(sb.blockSize))
	ibits.setRange(0, firstIno)
	ibits.setRange(inodes, uint64(len(ibits))*64-inodes)
	if err := writeBitmap(ctx, dev, sb, magicIBitmap, sb.ibitmapStart, ibits); err != nil {
		return err
	}

	// Inode table: zeroes (free, version 0), then the two directories.
	if err := writeZeroes(ctx, dev, int64(sb.itableStart)*int64(bs), int64(sb.itableBlocks)*int64(bs)); err != nil {
		return fmt.Errorf("offloadfs: mkfs: inode table: %w", err)
	}
	now := time.Now().UnixNano()
	ipb := uint64(bs / inodeSize)
	it := make([]byte, (orphanIno/ipb+1)*uint64(bs))
	for _, ino := range []uint64{rootIno, orphanIno} {
		encodeInode(&sb.uuid, it[ino*inodeSize:], ino, &inodeRec{typ: typeDir, nlink: 1, version: 1, mtime: now, parent: ino})
	}
	if err := w(sb.itableStart, it); err != nil {
		return err
	}
	if err := dev.Flush(ctx); err != nil {
		return fmt.Errorf("offloadfs: mkfs: flush: %w", err)
	}
	sbb := make([]byte, bs)
	copy(sbb, sb.encode())
	if err := w(0, sbb); err != nil {
		return err
	}
	if err := dev.Flush(ctx); err != nil {
		return fmt.Errorf("offloadfs: mkfs: flush: %w", err)
	}
	return nil
}

// writeBitmap writes a whole bitmap region.
func writeBitmap(ctx context.Context, dev Device, sb *superblock, magic uint32, start uint64, bits bitmap) error {
	bs := uint64(sb.blockSize)
	wpb := bitsPerBitmap(sb.blockSize) / 64
	n := uint64(len(bits)) / wpb
	buf := make([]byte, n*bs)
	for i := range n {
		encodeBitmap(&sb.uuid, buf[i*bs:(i+1)*bs], magic, start+i, bits[i*wpb:(i+1)*wpb])
	}
	if _, err := dev.WriteAt(buf, int64(start*bs)); err != nil {
		return fmt.Errorf("offloadfs: write bitmap: %w", err)
	}
	return ctx.Err()
}
