package offloadfs

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// The journal makes metadata changes atomic and durable. It is a redo log
// of whole metadata blocks: a transaction is one or more descriptor blocks,
// each followed by the images it lists, and a commit record holding a
// checksum of all of them. A commit is
//
//  1. Flush: file data written so far, and the previous transaction's
//     checkpoint, are durable. Data therefore never lags the metadata
//     that points at it, and only the newest transaction can still be
//     needed at recovery.
//  2. Write the transaction in one sequential write, then Flush. Once the
//     flush returns the transaction is committed.
//  3. Checkpoint: write the images to their home blocks, without a flush
//     (step 1 of the next commit provides it).
//
// Because of 1, recovery replays only the last valid transaction of the
// log, whose images are the newest committed versions of their blocks.
// Older transactions are already home, and replaying them could even be
// wrong: a directory block freed since and reused for file data would be
// overwritten. The log is circular: when a transaction does not fit before
// the end, the other header slot is written with a new epoch (the
// transaction's sequence number, to be found at log block 0) and flushed
// before the log is overwritten from the start.
type journal struct {
	dev    Device
	uuid   *[16]byte
	bs     uint64
	start  uint64 // first block of the journal (header slot 0)
	logCap uint64 // log blocks, after the two header slots

	// Guarded by FS.commitMu.
	slot    int    // header slot holding the current epoch
	head    uint64 // next free log block
	nextSeq uint64 // sequence number of the next transaction
}

// image is a metadata block's new contents and its home.
type image struct {
	home uint64
	data []byte
}

func newJournal(dev Device, sb *superblock) *journal {
	return &journal{
		dev:    dev,
		uuid:   &sb.uuid,
		bs:     uint64(sb.blockSize),
		start:  sb.journalStart,
		logCap: sb.journalBlocks - 2,
	}
}

// blk is the device block of log block i.
func (j *journal) blk(i uint64) uint64 { return j.start + 2 + i }

func (j *journal) read(first, n uint64) ([]byte, error) {
	b := make([]byte, n*j.bs)
	if _, err := j.dev.ReadAt(b, int64(first*j.bs)); err != nil {
		return nil, fmt.Errorf("offloadfs: read journal blocks [%d, +%d): %w", first, n, err)
	}
	return b, nil
}

// recover reads the journal headers and the log, leaves the journal ready
// to append after the last valid transaction, and returns that
// transaction's images (nil if the log is empty).
func (j *journal) recover() ([]image, error) {
	hb, err := j.read(j.start, 2)
	if err != nil {
		return nil, err
	}
	h0, err0 := decodeJHeader(j.uuid, hb[:j.bs], j.start)
	h1, err1 := decodeJHeader(j.uuid, hb[j.bs:], j.start+1)
	switch {
	case err0 != nil && err1 != nil:
		return nil, fmt.Errorf("offloadfs: no valid journal header: %w; slot 1: %v", err0, err1)
	case err1 != nil || (err0 == nil && h0.epoch >= h1.epoch):
		j.slot = 0
		j.nextSeq = h0.epoch
	default:
		j.slot = 1
		j.nextSeq = h1.epoch
	}
	var last []image
	for j.head = 0; ; {
		imgs, n, err := j.readTxn(j.head, j.nextSeq)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		last = imgs
		j.head += n
		j.nextSeq++
	}
	if err := j.checkTail(); err != nil {
		return nil, err
	}
	return last, nil
}

// checkTail looks past the end of the valid log for a later transaction.
// A torn transaction is always the last one (each is flushed before the
// next is written), so one that does not verify but is followed by a
// later one means the journal is damaged, and replaying up to the damage
// would silently drop committed changes.
func (j *journal) checkTail() error {
	const chunk = 256
	for p := j.head + 1; p < j.logCap; p += chunk {
		n := min(chunk, j.logCap-p)
		b, err := j.read(j.blk(p), n)
		if err != nil {
			return err
		}
		for i := range n {
			blk := b[i*j.bs : (i+1)*j.bs]
			if le.Uint32(blk) != magicJDesc {
				continue
			}
			if d, err := decodeJDesc(j.uuid, blk, j.blk(p+i)); err == nil && d.seq > j.nextSeq {
				return corruptf("journal: transaction %d at log block %d does not verify, but transaction %d follows at block %d",
					j.nextSeq, j.head, d.seq, p+i)
			}
		}
	}
	return nil
}

// readTxn reads the transaction at log block pos and checks that it is
// transaction seq, whole and committed. It returns its images and length
// in blocks, or length 0 if there is none. Only device errors are errors:
// anything that does not verify marks the end of the log.
func (j *journal) readTxn(pos, seq uint64) ([]image, uint64, error) {
	var (
		raw   []byte
		homes []uint64
		offs  []uint64 // offsets in raw of the images
	)
	p := pos
	for {
		if p >= j.logCap {
			return nil, 0, nil
		}
		b, err := j.read(j.blk(p), 1)
		if err != nil {
			return nil, 0, err
		}
		d, err := decodeJDesc(j.uuid, b, j.blk(p))
		if err != nil || d.seq != seq {
			return nil, 0, nil
		}
		n := uint64(len(d.homes))
		if n > j.logCap-p-1 {
			return nil, 0, nil
		}
		data, err := j.read(j.blk(p+1), n)
		if err != nil {
			return nil, 0, err
		}
		raw = append(raw, b...)
		for i, h := range d.homes {
			homes = append(homes, h)
			offs = append(offs, uint64(len(raw))+uint64(i)*j.bs)
		}
		raw = append(raw, data...)
		p += 1 + n
		if !d.more {
			break
		}
	}
	if p >= j.logCap {
		return nil, 0, nil
	}
	cb, err := j.read(j.blk(p), 1)
	if err != nil {
		return nil, 0, err
	}
	c, err := decodeJCommit(j.uuid, cb, j.blk(p))
	if err != nil || c.seq != seq || uint64(c.blocks) != p-pos || c.sum != txSum(j.uuid, raw) {
		return nil, 0, nil
	}
	imgs := make([]image, len(homes))
	for i, h := range homes {
		imgs[i] = image{home: h, data: raw[offs[i] : offs[i]+j.bs]}
	}
	return imgs, p + 1 - pos, nil
}

// writeHeader starts a new epoch at log block 0 in the slot not holding
// the current one, and flushes it.
func (j *journal) writeHeader(ctx context.Context, epoch uint64) error {
	slot := 1 - j.slot
	b := make([]byte, j.bs)
	encodeJHeader(j.uuid, b, j.start+uint64(slot), jHeader{epoch: epoch})
	if _, err := j.dev.WriteAt(b, int64((j.start+uint64(slot))*j.bs)); err != nil {
		return fmt.Errorf("offloadfs: write journal header: %w", err)
	}
	if err := j.dev.Flush(ctx); err != nil {
		return fmt.Errorf("offloadfs: flush journal header: %w", err)
	}
	j.slot, j.head = slot, 0
	return nil
}

// txnBlocks is the log space a transaction of n images takes.
func (j *journal) txnBlocks(n int) uint64 {
	per := descCapacity(uint32(j.bs))
	return uint64(n + (n+per-1)/per + 1)
}

// commit writes transaction j.nextSeq with the given images (sorted by
// home block), makes it durable, and checkpoints it. See the type comment
// for the protocol.
func (j *journal) commit(ctx context.Context, imgs []image) error {
	seq := j.nextSeq
	total := j.txnBlocks(len(imgs))
	if total > j.logCap {
		return fmt.Errorf("offloadfs: transaction of %d blocks exceeds the %d-block journal", total, j.logCap)
	}
	if err := j.dev.Flush(ctx); err != nil {
		return fmt.Errorf("offloadfs: flush before commit: %w", err)
	}
	if j.head+total > j.logCap {
		if err := j.writeHeader(ctx, seq); err != nil {
			return err
		}
	}
	buf := make([]byte, total*j.bs)
	per := descCapacity(uint32(j.bs))
	p := uint64(0)
	for i := 0; i < len(imgs); i += per {
		chunk := imgs[i:min(i+per, len(imgs))]
		d := &jDesc{seq: seq, more: i+per < len(imgs)}
		for _, im := range chunk {
			d.homes = append(d.homes, im.home)
		}
		encodeJDesc(j.uuid, buf[p*j.bs:(p+1)*j.bs], j.blk(j.head+p), d)
		p++
		for _, im := range chunk {
			copy(buf[p*j.bs:], im.data)
			p++
		}
	}
	c := &jCommit{seq: seq, blocks: uint32(p), sum: txSum(j.uuid, buf[:p*j.bs]), time: time.Now().UnixNano()}
	encodeJCommit(j.uuid, buf[p*j.bs:], j.blk(j.head+p), c)
	if _, err := j.dev.WriteAt(buf, int64(j.blk(j.head)*j.bs)); err != nil {
		return fmt.Errorf("offloadfs: write journal transaction %d: %w", seq, err)
	}
	if err := j.dev.Flush(ctx); err != nil {
		return fmt.Errorf("offloadfs: flush journal transaction %d: %w", seq, err)
	}
	j.head += total
	j.nextSeq = seq + 1
	return checkpoint(j.dev, j.bs, imgs)
}

// checkpoint writes images to their homes, coalescing neighbours into one
// write. imgs must be sorted by home.
func checkpoint(dev Device, bs uint64, imgs []image) error {
	for i := 0; i < len(imgs); {
		k := i + 1
		for k < len(imgs) && imgs[k].home == imgs[k-1].home+1 {
			k++
		}
		var b []byte
		if k == i+1 {
			b = imgs[i].data
		} else {
			b = make([]byte, 0, uint64(k-i)*bs)
			for _, im := range imgs[i:k] {
				b = append(b, im.data...)
			}
		}
		if _, err := dev.WriteAt(b, int64(imgs[i].home*bs)); err != nil {
			return fmt.Errorf("offloadfs: checkpoint blocks [%d, +%d): %w", imgs[i].home, k-i, err)
		}
		i = k
	}
	return nil
}

// sortImages orders images by home block, for the journal and for
// coalesced checkpoint writes.
func sortImages(imgs []image) {
	slices.SortFunc(imgs, func(a, b image) int { return cmp.Compare(a.home, b.home) })
}
