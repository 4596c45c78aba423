package offloadfs

import (
	"sort"
)

// dirState is a loaded directory: its entries by name, and its blocks
// (the directory inode's extents, block by block) with the names each
// holds. A change re-encodes only the blocks it touched.
type dirState struct {
	entries map[string]*dentry
	blocks  []*dblock
	hint    int // a block that had room last time
}

type dentry struct {
	ino uint64
	typ uint8
	blk *dblock
}

type dblock struct {
	home  uint64
	names map[string]struct{}
	used  int // bytes of entries
}

func newDirState() *dirState { return &dirState{entries: map[string]*dentry{}} }

// names returns the entry names, sorted.
func (ds *dirState) names() []string {
	out := make([]string, 0, len(ds.entries))
	for n := range ds.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// entries returns the block's entries in name order (the order is not
// part of the format, but a deterministic encoding is easier to test).
func (b *dblock) entries(ds *dirState) []dirEntry {
	out := make([]dirEntry, 0, len(b.names))
	for n := range b.names {
		e := ds.entries[n]
		out = append(out, dirEntry{name: n, ino: e.ino, typ: e.typ})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// loadDir returns in's entries, reading its blocks if needed. Callers
// hold mu.
func (fsys *FS) loadDir(in *inode) (*dirState, error) {
	if in.typ != typeDir {
		return nil, ErrNotDir
	}
	if in.dir != nil {
		return in.dir, nil
	}
	ds := newDirState()
	for _, x := range in.ext {
		raw, err := fsys.readMeta(x.start, x.n)
		if err != nil {
			return nil, err
		}
		for i := range x.n {
			home := x.start + i
			owner, ents, err := decodeDirBlock(fsys.uuid, raw[i*fsys.bs:(i+1)*fsys.bs], home, fsys.sb.inodeCount)
			if err != nil {
				return nil, err
			}
			if owner != in.ino {
				return nil, corruptf("directory %d: block %d belongs to inode %d", in.ino, home, owner)
			}
			db := &dblock{home: home, names: make(map[string]struct{}, len(ents))}
			for _, e := range ents {
				if _, dup := ds.entries[e.name]; dup {
					return nil, corruptf("directory %d: name %q appears twice", in.ino, e.name)
				}
				ds.entries[e.name] = &dentry{ino: e.ino, typ: e.typ, blk: db}
				db.names[e.name] = struct{}{}
				db.used += direntSize(e.name)
			}
			ds.blocks = append(ds.blocks, db)
		}
	}
	in.dir = ds
	return ds, nil
}

// dirAdd adds an entry to a loaded directory, growing it by a block if no
// block has room. On error nothing changed.
func (fsys *FS) dirAdd(dir *inode, name string, ino uint64, typ uint8) error {
	ds := dir.dir
	sz := direntSize(name)
	room := int(fsys.bs) - dirHdrSize
	var db *dblock
	for i := range ds.blocks {
		k := (ds.hint + i) % len(ds.blocks)
		if room-ds.blocks[k].used >= sz {
			db, ds.hint = ds.blocks[k], k
			break
		}
	}
	if db == nil {
		if err := fsys.grow(dir, dir.alloc+1, dir.alloc+1); err != nil {
			return err
		}
		db = &dblock{home: dir.lastEnd() - 1, names: map[string]struct{}{}}
		ds.blocks = append(ds.blocks, db)
		ds.hint = len(ds.blocks) - 1
		dir.size = dir.alloc * fsys.bs
		fsys.touch(dir)
	}
	db.names[name] = struct{}{}
	db.used += sz
	ds.entries[name] = &dentry{ino: ino, typ: typ, blk: db}
	fsys.txn.dirBlocks[db.home] = dirRef{dir, db}
	return nil
}

// dirRemove removes an entry from a loaded directory.
func (fsys *FS) dirRemove(dir *inode, name string) {
	ds := dir.dir
	e := ds.entries[name]
	delete(ds.entries, name)
	delete(e.blk.names, name)
	e.blk.used -= direntSize(name)
	fsys.txn.dirBlocks[e.blk.home] = dirRef{dir, e.blk}
}

// dirReplace points an existing entry at another inode (same name, same
// size: it never needs room).
func (fsys *FS) dirReplace(dir *inode, name string, ino uint64, typ uint8) {
	e := dir.dir.entries[name]
	e.ino, e.typ = ino, typ
	fsys.txn.dirBlocks[e.blk.home] = dirRef{dir, e.blk}
}
