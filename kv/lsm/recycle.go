package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/vfs"
)

// Log recycling (docs/LSM.md, "Log recycling"), OffloadDB's second
// change: with OffloadOptions.Recycle, the commit leader notes where in
// the WAL each batch's record starts, and a flush sends, instead of the
// memtable's entries, where each one is in the WAL — record offset and
// index in its batch, in the memtable's key order — as the task
// FlushTaskName, with the WAL as its input and one preallocated output.
// The engine reads the WAL, checks every record's CRC, rebuilds the
// entries in the order given (checking it is ascending), and writes the
// L0 table with the code a local flush uses. The records cross the
// network once, into the WAL, not twice. The rules of offloaded
// compaction hold: the host checks the answer, its MANIFEST edit is the
// commit point, and a flush the engine does not run runs here.

// FlushTaskName is the offload task that writes a memtable's L0 table
// from its WAL: the request's files are the WAL, then the output.
const FlushTaskName = "lsm.flush"

// WALRef locates an entry in a WAL: the offset of its batch's record and
// its index in the batch.
type WALRef struct {
	Off   uint64
	Index uint32
}

// FlushArgs are an offloaded flush's arguments. Encoding (docs/LSM.md),
// little-endian:
//
//	+0   magic            uint32 = 0x66736c6e ("nlsf")
//	+4   version          uint8  = 1
//	+5   reserved         3 bytes = 0
//	+8   output           uint64 (the table's file number)
//	+16  block size       uint32
//	+20  restart interval uint32
//	+24  bloom bits/key   int32
//	+28  snapshots        uint32 (s)
//	+32  entries          uint32 (n)
//	+36  range dels       uint32 (r)
//	+40  s snapshots, 8 bytes each: seq uint64, ascending
//	     n entries, then r range deletions, 12 bytes each: record offset
//	     uint64, index uint32
//
// The encoding is exactly that long.
type FlushArgs struct {
	Output    uint64
	Snapshots []SeqNum
	Table     TableOptions
	// Entries are the point entries in key order; RangeDels the range
	// tombstones, in any order.
	Entries, RangeDels []WALRef
}

const (
	flushArgsMagic   = 0x66736c6e
	flushArgsVersion = 1
	flushArgsHeader  = 40
)

// Encode appends a's encoding to dst.
func (a *FlushArgs) Encode(dst []byte) []byte {
	le := binary.LittleEndian
	dst = le.AppendUint32(dst, flushArgsMagic)
	dst = append(dst, flushArgsVersion, 0, 0, 0)
	dst = le.AppendUint64(dst, a.Output)
	dst = le.AppendUint32(dst, uint32(a.Table.BlockSize))
	dst = le.AppendUint32(dst, uint32(a.Table.BlockRestartInterval))
	dst = le.AppendUint32(dst, uint32(int32(a.Table.BloomBitsPerKey)))
	dst = le.AppendUint32(dst, uint32(len(a.Snapshots)))
	dst = le.AppendUint32(dst, uint32(len(a.Entries)))
	dst = le.AppendUint32(dst, uint32(len(a.RangeDels)))
	for _, s := range a.Snapshots {
		dst = le.AppendUint64(dst, s)
	}
	for _, refs := range [][]WALRef{a.Entries, a.RangeDels} {
		for _, r := range refs {
			dst = le.AppendUint64(dst, r.Off)
			dst = le.AppendUint32(dst, r.Index)
		}
	}
	return dst
}

// DecodeFlushArgs decodes and checks an encoding from another machine.
func DecodeFlushArgs(b []byte) (*FlushArgs, error) {
	le := binary.LittleEndian
	if len(b) < flushArgsHeader {
		return nil, fmt.Errorf("%w: %d bytes, the header is %d", errBadArgs, len(b), flushArgsHeader)
	}
	if m := le.Uint32(b); m != flushArgsMagic || b[4] != flushArgsVersion || b[5]|b[6]|b[7] != 0 {
		return nil, fmt.Errorf("%w: magic %#x, version %d", errBadArgs, m, b[4])
	}
	a := &FlushArgs{
		Output: le.Uint64(b[8:]),
		Table: TableOptions{
			BlockSize:            int(le.Uint32(b[16:])),
			BlockRestartInterval: int(le.Uint32(b[20:])),
			BloomBitsPerKey:      int(int32(le.Uint32(b[24:]))),
		},
	}
	if bs, ri := a.Table.BlockSize, a.Table.BlockRestartInterval; bs < 0 || bs > 1<<30 || ri < 0 || ri > 1<<20 {
		return nil, fmt.Errorf("%w: block size %d, restart interval %d", errBadArgs, bs, ri)
	}
	s, n, r := uint64(le.Uint32(b[28:])), uint64(le.Uint32(b[32:])), uint64(le.Uint32(b[36:]))
	if want := flushArgsHeader + s*8 + (n+r)*12; uint64(len(b)) != want {
		return nil, fmt.Errorf("%w: %d bytes, want %d", errBadArgs, len(b), want)
	}
	p := b[flushArgsHeader:]
	for range s {
		a.Snapshots = append(a.Snapshots, le.Uint64(p))
		p = p[8:]
	}
	if !slices.IsSorted(a.Snapshots) {
		return nil, fmt.Errorf("%w: snapshots not ascending", errBadArgs)
	}
	refs := func(k uint64) []WALRef {
		out := make([]WALRef, 0, k)
		for range k {
			out = append(out, WALRef{Off: le.Uint64(p), Index: le.Uint32(p[8:])})
			p = p[12:]
		}
		return out
	}
	a.Entries = refs(n)
	a.RangeDels = refs(r)
	return a, nil
}

// RunFlush writes the L0 table of a flush whose WAL is wal (all of it)
// into out, as args say, and returns the table (nil if nothing was left
// to write). It is the engine's side of FlushTaskName; out is written in
// order, synced and closed.
func RunFlush(ctx context.Context, args *FlushArgs, wal []byte, out vfs.File) (*FileMeta, error) {
	batches := map[uint64][]batchEntry{}
	seqs := map[uint64]SeqNum{}
	entry := func(r WALRef) (batchEntry, SeqNum, error) {
		ents, ok := batches[r.Off]
		if !ok {
			if r.Off >= uint64(len(wal)) {
				return batchEntry{}, 0, fmt.Errorf("%w: record at %d, past the WAL's %d bytes", errBadArgs, r.Off, len(wal))
			}
			rr := recordReader{buf: wal[r.Off:]}
			rec, err := rr.next()
			if err != nil {
				return batchEntry{}, 0, fmt.Errorf("lsm: WAL record at %d: %w", r.Off, err)
			}
			var seq SeqNum
			if seq, ents, err = decodeBatch(rec); err != nil {
				return batchEntry{}, 0, fmt.Errorf("lsm: WAL record at %d: %w", r.Off, err)
			}
			batches[r.Off], seqs[r.Off] = ents, seq
		}
		if uint64(r.Index) >= uint64(len(ents)) {
			return batchEntry{}, 0, fmt.Errorf("%w: entry %d of a %d-entry batch", errBadArgs, r.Index, len(ents))
		}
		return ents[r.Index], seqs[r.Off] + SeqNum(r.Index), nil
	}
	it := &sliceIter{}
	for _, r := range args.Entries {
		e, seq, err := entry(r)
		if err != nil {
			return nil, err
		}
		if e.kind == KindRangeDelete {
			return nil, fmt.Errorf("%w: a range deletion among the point entries", errBadArgs)
		}
		k := makeInternalKey(e.key, seq, e.kind)
		if n := len(it.kvs); n > 0 && compareInternal(it.kvs[n-1].key, k) >= 0 {
			return nil, fmt.Errorf("%w: entries out of key order", errBadArgs)
		}
		it.kvs = append(it.kvs, kv{key: k, value: e.value})
	}
	var tombs []tombstone
	for _, r := range args.RangeDels {
		e, seq, err := entry(r)
		if err != nil {
			return nil, err
		}
		if e.kind != KindRangeDelete || bytes.Compare(e.key, e.value) >= 0 {
			return nil, fmt.Errorf("%w: range deletion %d is not one", errBadArgs, r.Index)
		}
		tombs = append(tombs, tombstone{start: e.key, end: e.value, seq: seq})
	}
	used := false
	create := func() (uint64, vfs.File, error) {
		if used {
			return 0, nil, errors.New("lsm: a flush writes one table")
		}
		used = true
		return args.Output, out, nil
	}
	outs, _, err := writeOutputs(ctx, it, tombs, outputParams{level: 0, snapshots: args.Snapshots, table: args.Table}, create)
	if err != nil {
		return nil, err
	}
	if len(outs) == 0 {
		return nil, nil
	}
	return outs[0], nil
}

// sliceIter iterates over entries in key order.
type sliceIter struct {
	kvs []kv
	i   int
}

func (s *sliceIter) seek(i int) bool { s.i = i; return s.Valid() }
func (s *sliceIter) SeekGE(key []byte) bool {
	return s.seek(sort.Search(len(s.kvs), func(i int) bool { return compareInternal(s.kvs[i].key, key) >= 0 }))
}
func (s *sliceIter) SeekLT(key []byte) bool {
	return s.seek(sort.Search(len(s.kvs), func(i int) bool { return compareInternal(s.kvs[i].key, key) >= 0 }) - 1)
}
func (s *sliceIter) First() bool   { return s.seek(0) }
func (s *sliceIter) Last() bool    { return s.seek(len(s.kvs) - 1) }
func (s *sliceIter) Next() bool    { return s.seek(s.i + 1) }
func (s *sliceIter) Prev() bool    { return s.seek(s.i - 1) }
func (s *sliceIter) Valid() bool   { return s.i >= 0 && s.i < len(s.kvs) }
func (s *sliceIter) Key() []byte   { return s.kvs[s.i].key }
func (s *sliceIter) Value() []byte { return s.kvs[s.i].value }
func (s *sliceIter) Error() error  { return nil }
func (s *sliceIter) Close() error  { return nil }

// walRef is where a batch's record starts in its memtable's WAL.
type walRef struct {
	seq SeqNum // the batch's first
	off uint64
}

// writeL0Table writes m's L0 table: at the engine from the WAL with log
// recycling on (and m's records noted), else here.
func (d *DB) writeL0Table(ctx context.Context, m *memTable, snaps []SeqNum) (*FileMeta, error) {
	if o := d.opts.Offload; o != nil && o.Recycle && m.walRefs != nil {
		meta, err := d.offloadFlush(ctx, m, snaps)
		if err == nil {
			return meta, nil
		}
		d.offloadCtr.localFlushes.Add(1)
		d.log.Warn("offloaded flush failed; flushing here", "err", err)
	}
	return d.writeL0(ctx, m, snaps)
}

// refOf returns where the entry with seq is in m's WAL.
func (m *memTable) refOf(seq SeqNum) (WALRef, bool) {
	i := sort.Search(len(m.walRefs), func(i int) bool { return m.walRefs[i].seq > seq }) - 1
	if i < 0 {
		return WALRef{}, false
	}
	return WALRef{Off: m.walRefs[i].off, Index: uint32(seq - m.walRefs[i].seq)}, true
}

// offloadFlush has the engine write m's L0 table from its WAL.
func (d *DB) offloadFlush(ctx context.Context, m *memTable, snaps []SeqNum) (*FileMeta, error) {
	o := d.opts.Offload
	args := FlushArgs{Snapshots: snaps, Table: d.opts.Table}
	it := m.newIter()
	for ok := it.First(); ok; ok = it.Next() {
		r, ok := m.refOf(keySeq(it.Key()))
		if !ok {
			return nil, errors.New("lsm: a memtable entry has no WAL record")
		}
		args.Entries = append(args.Entries, r)
	}
	for _, t := range m.tombstones() {
		r, ok := m.refOf(t.seq)
		if !ok {
			return nil, errors.New("lsm: a memtable range deletion has no WAL record")
		}
		args.RangeDels = append(args.RangeDels, r)
	}
	f, err := d.fs.Open(d.path(logFileName(m.logNum)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	wal, ok := f.(*offloadfs.File)
	if !ok {
		return nil, fmt.Errorf("lsm: WAL %06d is not on offloadfs", m.logNum)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	args.Output = d.nextFileNum
	d.nextFileNum++
	d.mu.Unlock()
	name := d.path(tableFileName(args.Output))
	size := uint64(st.Size())
	res, err := o.FS.Offload(ctx, o.Peer, FlushTaskName, []offloadfs.OffloadFile{
		{In: wal}, {Out: name, Reserve: outputReserve(size, size)},
	}, args.Encode(nil))
	if err != nil {
		return nil, err
	}
	e, err := DecodeVersionEdit(res.Output)
	if err == nil {
		switch {
		case e.LogNumber != 0 || e.NextFileNum != 0 || e.LastSeq != 0 || len(e.DeletedFiles) != 0 || len(e.NewFiles) > 1:
			err = errors.New("lsm: offloaded flush's result is more than one table")
		case len(e.NewFiles) == 1 && (e.NewFiles[0].Level != 0 || e.NewFiles[0].Meta.FileNum != args.Output ||
			e.NewFiles[0].Meta.Size == 0 || e.NewFiles[0].Meta.Size != uint64(res.Sizes[1])):
			err = fmt.Errorf("lsm: offloaded flush's table is not its output of %d bytes", res.Sizes[1])
		}
	}
	if err != nil || len(e.NewFiles) == 0 {
		d.fs.Remove(name)
		return nil, err
	}
	if res.Local {
		d.offloadCtr.localFlushes.Add(1)
	} else {
		d.offloadCtr.flushes.Add(1)
	}
	return e.NewFiles[0].Meta, nil
}
