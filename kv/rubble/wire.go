package rubble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/vfs"
)

// The three encodings of this file are explicit, little-endian, and
// decoded only after checking every length against the bytes present:
// the note and the record come off the network (the chain's Ship
// stream), the map off a disk.

// MapFileName is the persisted file map in a secondary's store
// directory (SecondaryConfig.Persist). Layout:
//
//	0       8  magic "RUBSLOT1"
//	8       4  N, the number of entries
//	12   12*N  entries: table (8 bytes), slot (4 bytes)
//	12+12N  4  CRC-32C of bytes [0, 12+12N)
const MapFileName = "SLOTMAP"

const mapMagic = "RUBSLOT1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeMap(files []FileSlot) []byte {
	b := append([]byte(mapMagic), make([]byte, 4)...)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(files)))
	for _, f := range files {
		b = binary.LittleEndian.AppendUint64(b, f.Table)
		b = binary.LittleEndian.AppendUint32(b, uint32(f.Slot))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeMap(b []byte) ([]FileSlot, error) {
	if len(b) < 16 || string(b[:8]) != mapMagic {
		return nil, errors.New("rubble: slot map: bad header")
	}
	n := binary.LittleEndian.Uint32(b[8:])
	if uint64(len(b)) != 16+12*uint64(n) {
		return nil, fmt.Errorf("rubble: slot map: %d bytes for %d entries", len(b), n)
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, errors.New("rubble: slot map: checksum mismatch")
	}
	files := make([]FileSlot, n)
	for i := range files {
		e := body[12+12*i:]
		files[i] = FileSlot{Table: binary.LittleEndian.Uint64(e), Slot: int(binary.LittleEndian.Uint32(e[8:]))}
	}
	return files, nil
}

// writeMap replaces the map file atomically: a new file, synced, then
// renamed over the old one.
func writeMap(fs vfs.FS, name string, files []FileSlot) error {
	tmp := name + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(encodeMap(files))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, name)
	}
	if err != nil {
		return fmt.Errorf("rubble: write slot map: %w", err)
	}
	return nil
}

func readMap(fs vfs.FS, name string) ([]FileSlot, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("rubble: read slot map: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("rubble: read slot map: %w", err)
	}
	return decodeMap(b)
}

// Mode is a replica's role in shipping.
type Mode uint8

const (
	// ModeSecondary: the store installs the primary's shipped edits and
	// never flushes or compacts.
	ModeSecondary Mode = iota
	// ModeLocal: the store flushes and compacts itself (the fallback,
	// or a replica that joined by COPY or could not follow an edit).
	ModeLocal
	// ModePrimary: the group's head, flushing, compacting and shipping.
	ModePrimary
)

func (m Mode) String() string {
	switch m {
	case ModeSecondary:
		return "secondary"
	case ModeLocal:
		return "local"
	case ModePrimary:
		return "primary"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// note is what a replica tells its primary (chain.Noter), up the chain:
// its role, the chain position its state reflects, its pool and which
// slots it holds. Layout:
//
//	0   1  format: 1, or 2 with the kept tables
//	1   1  mode (Mode)
//	2   8  applied: the chain sequence number the note was made at
//	10  8  slot size in bytes
//	18  4  N, the number of slots
//	22     N slots: E (4 bytes), then E extents of LBA (8) and blocks (4)
//	...    held: ceil(N/8) bytes, bit i%8 of byte i/8 set if slot i is held
//	format 2:
//	...    K (4), then K kept tables: table (8), slot (4), size (8),
//	       smallest seq (8), largest seq (8); each slot is held
type note struct {
	mode     Mode
	applied  uint64
	slotSize int64
	slots    [][]pushdown.Extent
	held     []bool
	// kept are tables a replica that started over (a COPY's Reset)
	// still has in its slots from its store before: a resync may map a
	// table of the primary's tree that is one of them (keptTable.same)
	// to its slot instead of writing it again.
	kept []keptTable
}

// keptTable is a table in a replica's slot that no tree of the replica
// holds, kept for a resync, with what identifies it.
type keptTable struct {
	table                   uint64
	slot                    int
	size                    uint64
	smallestSeq, largestSeq uint64
}

// keptSize is the encoded size of a keptTable.
const keptSize = 36

// same reports whether m is the table k describes: the same number,
// size and sequence bounds. A number alone does not identify a table
// across a restart: a replica may keep one from a record the chain lost
// (it and its predecessor died before the tail had it) under a number a
// later primary gave another table.
func (k keptTable) same(m *lsm.FileMeta) bool {
	return m.FileNum == k.table && m.Size == k.size && uint64(m.SmallestSeq) == k.smallestSeq && uint64(m.LargestSeq) == k.largestSeq
}

// maxNoteSlots bounds a note's pool, so a decoder never allocates more
// than the bytes present could describe.
const maxNoteSlots = 1 << 20

func (n *note) encode() []byte {
	format := byte(1)
	if len(n.kept) > 0 {
		format = 2
	}
	b := []byte{format, byte(n.mode)}
	b = binary.LittleEndian.AppendUint64(b, n.applied)
	b = binary.LittleEndian.AppendUint64(b, uint64(n.slotSize))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(n.slots)))
	for _, ext := range n.slots {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(ext)))
		for _, x := range ext {
			b = binary.LittleEndian.AppendUint64(b, x.LBA)
			b = binary.LittleEndian.AppendUint32(b, x.Blocks)
		}
	}
	held := make([]byte, (len(n.slots)+7)/8)
	for i, h := range n.held {
		if h {
			held[i/8] |= 1 << (i % 8)
		}
	}
	b = append(b, held...)
	if format == 1 {
		return b
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(n.kept)))
	for _, k := range n.kept {
		b = binary.LittleEndian.AppendUint64(b, k.table)
		b = binary.LittleEndian.AppendUint32(b, uint32(k.slot))
		b = binary.LittleEndian.AppendUint64(b, k.size)
		b = binary.LittleEndian.AppendUint64(b, k.smallestSeq)
		b = binary.LittleEndian.AppendUint64(b, k.largestSeq)
	}
	return b
}

// reader takes fixed-size fields off a byte slice; a short read sets err.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n uint64) []byte {
	if r.err != nil || uint64(len(r.b)) < n {
		r.err = io.ErrUnexpectedEOF
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if b := r.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func decodeNote(b []byte) (*note, error) {
	r := &reader{b: b}
	format := r.u8()
	if format != 1 && format != 2 && r.err == nil {
		return nil, fmt.Errorf("rubble: note format %d", format)
	}
	n := &note{mode: Mode(r.u8()), applied: r.u64(), slotSize: int64(r.u64())}
	cnt := r.u32()
	if r.err == nil && (n.mode > ModePrimary || cnt > maxNoteSlots || n.slotSize <= 0 || uint64(cnt)*4 > uint64(len(r.b))) {
		return nil, fmt.Errorf("rubble: note: mode %d, %d slots of %d bytes", n.mode, cnt, n.slotSize)
	}
	for range cnt {
		e := r.u32()
		if r.err != nil || uint64(e)*12 > uint64(len(r.b)) {
			return nil, fmt.Errorf("rubble: note: slot of %d extents: %w", e, io.ErrUnexpectedEOF)
		}
		ext := make([]pushdown.Extent, e)
		for j := range ext {
			ext[j] = pushdown.Extent{LBA: r.u64(), Blocks: r.u32()}
		}
		n.slots = append(n.slots, ext)
	}
	held := r.take(uint64(cnt+7) / 8)
	if r.err != nil {
		return nil, fmt.Errorf("rubble: note: %w", r.err)
	}
	n.held = make([]bool, cnt)
	for i := range n.held {
		n.held[i] = held[i/8]&(1<<(i%8)) != 0
	}
	if format == 2 {
		k := r.u32()
		if r.err != nil || k == 0 || uint64(k)*keptSize > uint64(len(r.b)) {
			return nil, fmt.Errorf("rubble: note: %d kept tables in %d bytes", k, len(r.b))
		}
		n.kept = make([]keptTable, k)
		for i := range n.kept {
			kt := keptTable{table: r.u64(), slot: int(r.u32()), size: r.u64(), smallestSeq: r.u64(), largestSeq: r.u64()}
			if kt.slot >= int(cnt) || !n.held[kt.slot] {
				return nil, fmt.Errorf("rubble: note: kept table %d in slot %d, not a held slot of %d", kt.table, kt.slot, cnt)
			}
			n.kept[i] = kt
		}
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("rubble: note: %d bytes past its end", len(r.b))
	}
	return n, nil
}

// Record kinds.
const (
	recEdit     = 1
	recFallback = 2
)

// record is a store record on the chain (chain.Op.Record): a shipped
// edit, or the group's fallback to compaction on every replica. Layout:
//
//	0   1  kind: 1 edit, 2 fallback (nothing follows)
//	edit:
//	1   8  prev: the fingerprint of the primary's tree before the edit
//	9   4  L, then L bytes: the edit (lsm.VersionEdit.Encode)
//	    4  R, then R replicas: ID length (2), ID, F (4), then F
//	       files: table (8), slot (4)
//	    4  B, then B bytes: the base (0: none), an lsm.VersionEdit
//	       building the primary's whole tree after the edit, for the
//	       local replicas it resyncs (their files: every base table)
//	    4  K, then K sums: table (8), CRC-32C of its bytes (4): the
//	       base tables mapped to a slot a replica kept (record.sums)
type record struct {
	kind  uint8
	prev  uint64
	edit  []byte
	files map[string][]FileSlot
	base  []byte
	// sums are the checksums of the base tables some replica keeps in a
	// slot (note.kept) and is not sent again: it checks its slot's bytes
	// against them before it installs the base.
	sums map[uint64]uint32
}

func (rc *record) encode() []byte {
	b := []byte{rc.kind}
	if rc.kind != recEdit {
		return b
	}
	b = binary.LittleEndian.AppendUint64(b, rc.prev)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rc.edit)))
	b = append(b, rc.edit...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rc.files)))
	ids := make([]string, 0, len(rc.files))
	for id := range rc.files {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(id)))
		b = append(b, id...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(rc.files[id])))
		for _, f := range rc.files[id] {
			b = binary.LittleEndian.AppendUint64(b, f.Table)
			b = binary.LittleEndian.AppendUint32(b, uint32(f.Slot))
		}
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rc.base)))
	b = append(b, rc.base...)
	tables := make([]uint64, 0, len(rc.sums))
	for t := range rc.sums {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(tables)))
	for _, t := range tables {
		b = binary.LittleEndian.AppendUint64(b, t)
		b = binary.LittleEndian.AppendUint32(b, rc.sums[t])
	}
	return b
}

func decodeRecord(b []byte) (*record, error) {
	r := &reader{b: b}
	rc := &record{kind: r.u8()}
	switch {
	case r.err != nil:
		return nil, fmt.Errorf("rubble: record: empty")
	case rc.kind == recFallback && len(r.b) == 0:
		return rc, nil
	case rc.kind != recEdit:
		return nil, fmt.Errorf("rubble: record kind %d with %d bytes", rc.kind, len(r.b))
	}
	rc.prev = r.u64()
	rc.edit = r.take(uint64(r.u32()))
	nrep := r.u32()
	if r.err == nil && uint64(nrep)*6 > uint64(len(r.b)) {
		return nil, fmt.Errorf("rubble: record: %d replicas: %w", nrep, io.ErrUnexpectedEOF)
	}
	rc.files = make(map[string][]FileSlot, nrep)
	for range nrep {
		id := string(r.take(uint64(r.u16())))
		nf := r.u32()
		if r.err != nil || uint64(nf)*12 > uint64(len(r.b)) {
			return nil, fmt.Errorf("rubble: record: %d files: %w", nf, io.ErrUnexpectedEOF)
		}
		if _, dup := rc.files[id]; dup {
			return nil, fmt.Errorf("rubble: record: replica %q twice", id)
		}
		fs := make([]FileSlot, nf)
		for i := range fs {
			fs[i] = FileSlot{Table: r.u64(), Slot: int(r.u32())}
		}
		rc.files[id] = fs
	}
	if base := r.take(uint64(r.u32())); len(base) > 0 {
		rc.base = base
	}
	if k := r.u32(); r.err == nil && k > 0 {
		if uint64(k)*12 > uint64(len(r.b)) {
			return nil, fmt.Errorf("rubble: record: %d table sums in %d bytes", k, len(r.b))
		}
		rc.sums = make(map[uint64]uint32, k)
		for range k {
			t := r.u64()
			if _, dup := rc.sums[t]; dup {
				return nil, fmt.Errorf("rubble: record: table %d summed twice", t)
			}
			rc.sums[t] = r.u32()
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("rubble: record: %w", r.err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("rubble: record: %d bytes past its end", len(r.b))
	}
	return rc, nil
}
