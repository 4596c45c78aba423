package offloadfs

import (
	"context"
	"fmt"
	"strings"
)

// maxProblems bounds a report; a badly damaged device would otherwise
// list every block.
const maxProblems = 200

// Report is what Fsck found.
type Report struct {
	Files      uint64 // files reachable from the root
	Dirs       uint64 // directories reachable from the root, the root included
	Orphans    uint64 // inodes removed while open, awaiting their last close
	UsedBlocks uint64 // data-area blocks in use
	FreeBlocks uint64
	// Problems describes each inconsistency, empty when the file system
	// is consistent.
	Problems []string
	// Truncated is set when more problems were found than listed.
	Truncated bool
}

// OK reports whether no problems were found.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Err returns nil for a clean report, or an error wrapping ErrCorrupt
// that lists the problems.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	more := ""
	if r.Truncated {
		more = "\n..."
	}
	return fmt.Errorf("%w: fsck found %d problems:\n%s%s", ErrCorrupt, len(r.Problems), strings.Join(r.Problems, "\n"), more)
}

func (r *Report) add(format string, args ...any) {
	if len(r.Problems) >= maxProblems {
		r.Truncated = true
		return
	}
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Fsck checks the file system's consistency without changing it: every
// reachable inode and directory decodes and verifies; every block is
// referenced exactly once and the bitmap says so; every allocated inode
// is reachable exactly once and every inode record agrees with the inode
// bitmap. On a read-write mount it checks the current state (including
// changes not yet committed); run it after Sync, or on a fresh mount, to
// check what is on the device. Problems go in the report; the error is
// for device errors and cancellation.
func (fsys *FS) Fsck(ctx context.Context) (*Report, error) {
	if err := fsys.lockForRead(); err != nil {
		return nil, err
	}
	defer fsys.mu.Unlock()
	sb := fsys.sb
	r := &Report{}
	seen := newBitmap(sb.totalBlocks)
	seen.setRange(0, sb.dataStart)
	claim := func(x extent, what string) {
		if x.n == 0 || x.start < sb.dataStart || x.end() > sb.totalBlocks || x.end() < x.start {
			r.add("%s: blocks [%d, +%d) outside the data area", what, x.start, x.n)
			return
		}
		if seen.anySet(x.start, x.n) {
			r.add("%s: blocks [%d, +%d) also belong to something else", what, x.start, x.n)
		}
		seen.setRange(x.start, x.n)
	}

	type item struct {
		ino, parent uint64
		typ         uint8
		path        string
	}
	reached := map[uint64]bool{}
	queue := []item{{rootIno, rootIno, typeDir, "/"}, {orphanIno, orphanIno, typeDir, "(orphans)"}}
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		it := queue[0]
		queue = queue[1:]
		in, err := fsys.loadInode(it.ino)
		if err != nil {
			r.add("%s: %v", it.path, err)
			continue
		}
		if reached[it.ino] {
			r.add("%s: inode %d has more than one name", it.path, it.ino)
			continue
		}
		reached[it.ino] = true
		if !fsys.ibits.get(it.ino) {
			r.add("%s: inode %d is in use but free in the inode bitmap", it.path, it.ino)
		}
		if in.typ != it.typ {
			r.add("%s: inode %d is of type %d, its entry says %d", it.path, it.ino, in.typ, it.typ)
			continue
		}
		what := fmt.Sprintf("%s (inode %d)", it.path, it.ino)
		for _, x := range in.ext {
			claim(x, what)
		}
		for _, b := range in.extBlocks {
			claim(extent{b, 1}, what+" extent block")
		}
		if in.size > in.alloc*fsys.bs {
			r.add("%s: size %d beyond its %d blocks", what, in.size, in.alloc)
		}
		if it.parent == orphanIno && it.ino != orphanIno {
			r.Orphans++
		}
		if in.typ == typeFile {
			r.Files++
			continue
		}
		if in.parent != it.parent && !(it.parent == orphanIno && in.orphan) {
			r.add("%s: directory's parent is inode %d, but it is listed in inode %d", what, in.parent, it.parent)
		}
		if it.ino != orphanIno && it.parent != orphanIno {
			r.Dirs++
		}
		ds, err := fsys.loadDir(in)
		if err != nil {
			r.add("%s: %v", what, err)
			continue
		}
		for _, name := range ds.names() {
			e := ds.entries[name]
			p := it.path + name
			if it.ino == orphanIno {
				p = "(orphan " + name + ")"
			}
			if e.typ == typeDir {
				p += "/"
			}
			queue = append(queue, item{e.ino, it.ino, e.typ, p})
		}
	}

	// Blocks: referenced exactly when marked in use.
	onDisk := fsys.alloc.onDisk
	for i := sb.dataStart; i < sb.totalBlocks; {
		used, ref := onDisk.get(i), seen.get(i)
		j := i + 1
		for j < sb.totalBlocks && onDisk.get(j) == used && seen.get(j) == ref {
			j++
		}
		switch {
		case used && !ref:
			r.add("blocks [%d, %d) are marked in use but belong to nothing", i, j)
		case ref && !used:
			r.add("blocks [%d, %d) are in use but marked free", i, j)
		}
		if used {
			r.UsedBlocks += j - i
		}
		i = j
	}
	r.FreeBlocks = sb.totalBlocks - sb.dataStart - r.UsedBlocks

	// Inodes: the bitmap, the records and reachability agree.
	for blk := range sb.itableBlocks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		home := sb.itableStart + blk
		b, ok := fsys.itCache[home]
		if !ok {
			var err error
			if b, err = fsys.readMeta(home, 1); err != nil {
				return nil, err
			}
		}
		for slot := range fsys.ipb {
			ino := blk*fsys.ipb + slot
			if ino < firstIno || ino >= sb.inodeCount {
				continue
			}
			var typ uint8
			if in, ok := fsys.inodes[ino]; ok {
				typ = in.typ
			} else {
				rec, err := decodeInode(fsys.uuid, b[slot*inodeSize:(slot+1)*inodeSize], ino, sb.dataStart, sb.totalBlocks)
				if err != nil {
					r.add("inode table: %v", err)
					continue
				}
				typ = rec.typ
			}
			bit := fsys.ibits.get(ino)
			switch {
			case bit && typ == typeFree:
				r.add("inode %d is free but marked in use in the inode bitmap", ino)
			case !bit && typ != typeFree:
				r.add("inode %d is of type %d but marked free in the inode bitmap", ino, typ)
			case bit && !reached[ino]:
				r.add("inode %d is in use but has no name", ino)
			}
		}
	}
	return r, nil
}
