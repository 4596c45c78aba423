package lsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nearstore/nearstore/vfs"
)

// Table layout (docs/LSM.md, "Tables"), front to back:
//
//	data blocks             internal key → value, each + CRC32C trailer
//	index partitions        last key of a data block → its handle
//	top-level index block   last key of a partition → its handle
//	filter block            bloom filter over user keys
//	range-deletion block    internal key (start, seq, RANGEDEL) → end
//	properties block        property name → uvarint
//	footer (64 bytes)
//
// Footer:
//
//	+0  top-level index handle  (uint64 offset, uint32 length)
//	+12 filter handle
//	+24 range-deletion handle
//	+36 properties handle
//	+48 format version uint32 (1)
//	+52 CRC32C of bytes [0, 52)
//	+56 magic uint64 0x6e73_6c73_6d54_6231 ("1bTmslsn" little-endian)
//
// Index and properties blocks use restart interval 1, so every entry can
// be binary searched by a walker that reads one block at a time.

const (
	footerLen     = 64
	tableMagic    = 0x6e736c736d546231
	formatVersion = 1
)

// footer holds the handles of a table's meta blocks.
type footer struct {
	index, filter, rangeDel, props blockHandle
}

func (f footer) encode() []byte {
	b := make([]byte, 0, footerLen)
	b = f.index.append(b)
	b = f.filter.append(b)
	b = f.rangeDel.append(b)
	b = f.props.append(b)
	b = binary.LittleEndian.AppendUint32(b, formatVersion)
	b = binary.LittleEndian.AppendUint32(b, crc(b[:52]))
	return binary.LittleEndian.AppendUint64(b, tableMagic)
}

// decodeFooter checks and decodes a footer of a table of size bytes; the
// handles it returns lie within the table before the footer.
func decodeFooter(b []byte, size int64) (footer, error) {
	if len(b) != footerLen {
		return footer{}, fmt.Errorf("footer is %d bytes, want %d", len(b), footerLen)
	}
	if m := binary.LittleEndian.Uint64(b[56:]); m != tableMagic {
		return footer{}, fmt.Errorf("bad magic %#x", m)
	}
	if v := binary.LittleEndian.Uint32(b[48:]); v != formatVersion {
		return footer{}, fmt.Errorf("unknown format version %d", v)
	}
	if c := binary.LittleEndian.Uint32(b[52:]); c != crc(b[:52]) {
		return footer{}, fmt.Errorf("footer checksum %#x, want %#x", c, crc(b[:52]))
	}
	var f footer
	hs := []*blockHandle{&f.index, &f.filter, &f.rangeDel, &f.props}
	for i, h := range hs {
		*h, _ = decodeBlockHandle(b[12*i : 12*i+12])
		if h.offset+uint64(h.length)+blockTrailerLen > uint64(size)-footerLen || h.offset > uint64(size) {
			return footer{}, fmt.Errorf("handle %d (%d, %d) outside table of %d bytes", i, h.offset, h.length, size)
		}
	}
	return f, nil
}

// TableOptions shape the tables a writer makes.
type TableOptions struct {
	// BlockSize is the size data blocks and index partitions are cut at
	// (default 4096). A block exceeds it by at most its last entry.
	BlockSize int
	// BlockRestartInterval is the number of keys between restart points
	// in data blocks (default 16).
	BlockRestartInterval int
	// BloomBitsPerKey sizes the bloom filter (default 10: about 1%
	// false positives).
	BloomBitsPerKey int
}

// tableProps are a table's properties.
type tableProps struct {
	NumEntries        uint64
	NumDeletions      uint64
	NumRangeDeletions uint64
	NumDataBlocks     uint64
	RawKeySize        uint64
	RawValueSize      uint64
	SmallestSeq       uint64
	LargestSeq        uint64
}

func (p *tableProps) fields() []struct {
	name string
	v    *uint64
} {
	return []struct {
		name string
		v    *uint64
	}{
		{"largest_seq", &p.LargestSeq},
		{"num_data_blocks", &p.NumDataBlocks},
		{"num_deletions", &p.NumDeletions},
		{"num_entries", &p.NumEntries},
		{"num_range_deletions", &p.NumRangeDeletions},
		{"raw_key_size", &p.RawKeySize},
		{"raw_value_size", &p.RawValueSize},
		{"smallest_seq", &p.SmallestSeq},
	} // sorted by name
}

// tableWriter writes one table. Point entries must be added in increasing
// internal-key order; range tombstones in any order.
type tableWriter struct {
	f       vfs.File
	w       *bufio.Writer
	opts    TableOptions
	off     uint64
	data    blockBuilder
	index   blockBuilder // current index partition
	top     blockBuilder
	lastKey []byte
	pending bool // a data block was finished and its index entry is lastKey
	pendH   blockHandle
	hashes  []uint32
	lastUK  []byte
	tombs   []tombstone
	props   tableProps
	first   []byte
	err     error
}

func newTableWriter(f vfs.File, opts TableOptions) *tableWriter {
	if opts.BlockSize <= 0 {
		opts.BlockSize = 4096
	}
	if opts.BlockRestartInterval <= 0 {
		opts.BlockRestartInterval = 16
	}
	if opts.BloomBitsPerKey == 0 {
		opts.BloomBitsPerKey = 10
	}
	w := &tableWriter{f: f, w: bufio.NewWriterSize(f, 256<<10), opts: opts}
	w.data.restartInterval = opts.BlockRestartInterval
	w.index.restartInterval = 1
	w.top.restartInterval = 1
	w.props.SmallestSeq = MaxSeqNum
	return w
}

func (w *tableWriter) noteSeq(s SeqNum) {
	w.props.SmallestSeq = min(w.props.SmallestSeq, s)
	w.props.LargestSeq = max(w.props.LargestSeq, s)
}

// add appends a point entry.
func (w *tableWriter) add(ikey, value []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.props.NumEntries > 0 && compareInternal(ikey, w.lastKey) <= 0 {
		return fmt.Errorf("lsm: table keys out of order: %s after %s", formatKey(ikey), formatKey(w.lastKey))
	}
	if w.pending {
		w.addIndexEntry()
	}
	if w.first == nil {
		w.first = slices.Clone(ikey)
	}
	uk := userKey(ikey)
	if w.props.NumEntries == 0 || !bytes.Equal(uk, w.lastUK) {
		w.hashes = append(w.hashes, bloomHash(uk))
		w.lastUK = append(w.lastUK[:0], uk...)
	}
	w.data.add(ikey, value)
	w.lastKey = append(w.lastKey[:0], ikey...)
	w.props.NumEntries++
	if keyKind(ikey) == KindDelete {
		w.props.NumDeletions++
	}
	w.props.RawKeySize += uint64(len(ikey))
	w.props.RawValueSize += uint64(len(value))
	w.noteSeq(keySeq(ikey))
	if w.data.estimatedSize() >= w.opts.BlockSize {
		w.finishDataBlock()
	}
	return w.err
}

func (w *tableWriter) addTombstone(t tombstone) {
	w.tombs = append(w.tombs, t.clone())
	w.props.NumRangeDeletions++
	w.noteSeq(t.seq)
}

// writeBlock writes contents and its trailer and returns its handle.
func (w *tableWriter) writeBlock(contents []byte) blockHandle {
	h := blockHandle{offset: w.off, length: uint32(len(contents))}
	if w.err != nil {
		return h
	}
	var tr [blockTrailerLen]byte
	binary.LittleEndian.PutUint32(tr[:], crc(contents))
	if _, err := w.w.Write(contents); err != nil {
		w.err = err
	} else if _, err := w.w.Write(tr[:]); err != nil {
		w.err = err
	}
	w.off += uint64(len(contents)) + blockTrailerLen
	return h
}

func (w *tableWriter) finishDataBlock() {
	if w.data.empty() {
		return
	}
	w.pendH = w.writeBlock(w.data.finish())
	w.props.NumDataBlocks++
	w.pending = true
}

// addIndexEntry indexes the finished data block under its last key.
func (w *tableWriter) addIndexEntry() {
	w.index.add(w.lastKey, w.pendH.append(nil))
	w.pending = false
	if w.index.estimatedSize() >= w.opts.BlockSize {
		w.finishIndexPartition()
	}
}

func (w *tableWriter) finishIndexPartition() {
	if w.index.empty() {
		return
	}
	last := slices.Clone(w.index.lastKey)
	h := w.writeBlock(w.index.finish())
	w.top.add(last, h.append(nil))
}

// tableInfo describes a finished table.
type tableInfo struct {
	Size     uint64
	Smallest []byte // internal key; for range tombstones the start key at the tombstone's seq
	Largest  []byte // internal key, or a range-deletion sentinel (end key, MaxSeqNum, RANGEDEL) when a tombstone ends last
	Props    tableProps
}

// finish writes the meta blocks and footer and syncs the file. It does not
// close the file.
func (w *tableWriter) finish() (tableInfo, error) {
	w.finishDataBlock()
	if w.pending {
		w.addIndexEntry()
	}
	w.finishIndexPartition()
	var ft footer
	ft.index = w.writeBlock(w.top.finish())
	ft.filter = w.writeBlock(buildBloom(w.hashes, w.opts.BloomBitsPerKey))
	slices.SortFunc(w.tombs, func(a, b tombstone) int {
		return compareInternal(makeInternalKey(a.start, a.seq, KindRangeDelete), makeInternalKey(b.start, b.seq, KindRangeDelete))
	})
	var rd blockBuilder
	rd.restartInterval = 1
	for _, t := range w.tombs {
		rd.add(makeInternalKey(t.start, t.seq, KindRangeDelete), t.end)
	}
	ft.rangeDel = w.writeBlock(rd.finish())
	if w.props.SmallestSeq > w.props.LargestSeq {
		w.props.SmallestSeq = 0
	}
	var pb blockBuilder
	pb.restartInterval = 1
	for _, fl := range w.props.fields() {
		pb.add([]byte(fl.name), binary.AppendUvarint(nil, *fl.v))
	}
	ft.props = w.writeBlock(pb.finish())
	if w.err == nil {
		if _, err := w.w.Write(ft.encode()); err != nil {
			w.err = err
		}
		w.off += footerLen
	}
	if w.err == nil {
		w.err = w.w.Flush()
	}
	if w.err == nil {
		w.err = w.f.Sync()
	}
	if w.err != nil {
		return tableInfo{}, w.err
	}
	info := tableInfo{Size: w.off, Props: w.props}
	info.Smallest, info.Largest = w.first, slices.Clone(w.lastKey)
	for _, t := range w.tombs {
		s := makeInternalKey(t.start, t.seq, KindRangeDelete)
		if info.Smallest == nil || compareInternal(s, info.Smallest) < 0 {
			info.Smallest = s
		}
		e := makeInternalKey(t.end, MaxSeqNum, KindRangeDelete)
		if len(info.Largest) == 0 || compareInternal(e, info.Largest) > 0 {
			info.Largest = e
		}
	}
	return info, nil
}

// indexEntry is one data block in a table's in-memory index.
type indexEntry struct {
	lastKey []byte
	h       blockHandle
}

// tableReader reads one table. Its index (flattened from the partitions),
// bloom filter, range tombstones and properties are loaded at open and
// kept in memory; data blocks are read through the block cache. Safe for
// concurrent use.
type tableReader struct {
	f       vfs.File
	name    string
	fileNum uint64
	size    int64
	cache   *blockCache
	index   []indexEntry
	// The index's user keys all begin with keyPre; wins[i] holds the
	// window of index[i]'s user key after it (indexWindow) and its
	// handle, so that a search compares one dense array of integers,
	// reads a key only where two windows are equal (blockIndex), and
	// finds the handle next to the windows it compared last.
	keyPre  []byte
	wins    []indexWin
	filter  bloom
	tombs   []tombstone
	frags   []fragment // tombs, fragmented for point lookups
	props   tableProps
	metaLen int         // bytes of index, filter and range deletions held
	top     blockHandle // the top-level index block, for walkers that start there
}

// readRaw reads and checks the block at h.
func readBlockAt(f vfs.File, name string, h blockHandle) ([]byte, error) {
	buf := make([]byte, int(h.length)+blockTrailerLen)
	if _, err := f.ReadAt(buf, int64(h.offset)); err != nil {
		return nil, fmt.Errorf("lsm: read %s at %d: %w", name, h.offset, err)
	}
	data := buf[:h.length]
	if got, want := crc(data), binary.LittleEndian.Uint32(buf[h.length:]); got != want {
		return nil, &CorruptionError{File: name, Offset: int64(h.offset),
			Reason: fmt.Sprintf("block checksum %#x, want %#x", got, want)}
	}
	return data, nil
}

// openTable reads a table's footer and meta blocks.
func openTable(f vfs.File, name string, fileNum uint64, size int64, cache *blockCache) (*tableReader, error) {
	if size < footerLen {
		return nil, &CorruptionError{File: name, Offset: 0, Reason: fmt.Sprintf("%d bytes is too small for a table", size)}
	}
	fb := make([]byte, footerLen)
	if _, err := f.ReadAt(fb, size-footerLen); err != nil {
		return nil, fmt.Errorf("lsm: read footer of %s: %w", name, err)
	}
	ft, err := decodeFooter(fb, size)
	if err != nil {
		return nil, &CorruptionError{File: name, Offset: size - footerLen, Reason: err.Error()}
	}
	r := &tableReader{f: f, name: name, fileNum: fileNum, size: size, cache: cache, top: ft.index}
	corrupt := func(h blockHandle, err error) error {
		return &CorruptionError{File: name, Offset: int64(h.offset), Reason: err.Error()}
	}
	load := func(h blockHandle) (block, error) {
		data, err := readBlockAt(f, name, h)
		if err != nil {
			return block{}, err
		}
		b, err := parseBlock(data)
		if err != nil {
			return block{}, corrupt(h, err)
		}
		return b, nil
	}
	top, err := load(ft.index)
	if err != nil {
		return nil, err
	}
	// Blocks are laid out in order without overlap: data blocks, then
	// partitions. Checking that bounds the work a hostile table can
	// cause to its size.
	var partEnd, dataEnd uint64
	ti := newBlockIter(top, compareInternalChecked)
	for ok := ti.First(); ok; ok = ti.Next() {
		ph, ok := decodeBlockHandle(ti.Value())
		if !ok || !r.handleOK(ph) || ph.offset < partEnd {
			return nil, corrupt(ft.index, errors.New("bad partition handle"))
		}
		partEnd = ph.offset + uint64(ph.length) + blockTrailerLen
		part, err := load(ph)
		if err != nil {
			return nil, err
		}
		pi := newBlockIter(part, compareInternalChecked)
		for ok := pi.First(); ok; ok = pi.Next() {
			dh, ok := decodeBlockHandle(pi.Value())
			if !ok || !r.handleOK(dh) || !validInternalKey(pi.Key()) || dh.offset < dataEnd {
				return nil, corrupt(ph, errors.New("bad index entry"))
			}
			dataEnd = dh.offset + uint64(dh.length) + blockTrailerLen
			r.index = append(r.index, indexEntry{lastKey: slices.Clone(pi.Key()), h: dh})
			r.metaLen += len(pi.Key()) + blockHandleLen
		}
		if pi.Error() != nil {
			return nil, corrupt(ph, pi.Error())
		}
	}
	if ti.Error() != nil {
		return nil, corrupt(ft.index, ti.Error())
	}
	for i := 1; i < len(r.index); i++ {
		if compareInternal(r.index[i-1].lastKey, r.index[i].lastKey) >= 0 {
			return nil, corrupt(ft.index, errors.New("index keys out of order"))
		}
	}
	r.indexWindows()
	fdata, err := readBlockAt(f, name, ft.filter)
	if err != nil {
		return nil, err
	}
	r.filter = bloom(fdata)
	r.metaLen += len(fdata)
	rd, err := load(ft.rangeDel)
	if err != nil {
		return nil, err
	}
	ri := newBlockIter(rd, compareInternalChecked)
	for ok := ri.First(); ok; ok = ri.Next() {
		k := ri.Key()
		if !validInternalKey(k) || keyKind(k) != KindRangeDelete {
			return nil, corrupt(ft.rangeDel, errors.New("bad range tombstone"))
		}
		r.tombs = append(r.tombs, tombstone{start: slices.Clone(userKey(k)), end: slices.Clone(ri.Value()), seq: keySeq(k)})
		r.metaLen += len(k) + len(ri.Value())
	}
	if ri.Error() != nil {
		return nil, corrupt(ft.rangeDel, ri.Error())
	}
	r.frags = fragmentTombstones(r.tombs)
	pb, err := load(ft.props)
	if err != nil {
		return nil, err
	}
	props := map[string]uint64{}
	pi := newBlockIter(pb, bytes.Compare)
	for ok := pi.First(); ok; ok = pi.Next() {
		v, n := binary.Uvarint(pi.Value())
		if n <= 0 {
			return nil, corrupt(ft.props, fmt.Errorf("property %q", pi.Key()))
		}
		props[string(pi.Key())] = v
	}
	if pi.Error() != nil {
		return nil, corrupt(ft.props, pi.Error())
	}
	for _, fl := range r.props.fields() {
		*fl.v = props[fl.name]
	}
	return r, nil
}

// compareInternalChecked compares keys that may not be internal keys
// (while reading untrusted blocks) without panicking.
func compareInternalChecked(a, b []byte) int {
	if validInternalKey(a) && validInternalKey(b) {
		return compareInternal(a, b)
	}
	return bytes.Compare(a, b)
}

func (r *tableReader) handleOK(h blockHandle) bool {
	return h.offset <= uint64(r.size) && h.offset+uint64(h.length)+blockTrailerLen <= uint64(r.size)-footerLen
}

// readBlock returns the parsed data block at h, from the cache if there.
func (r *tableReader) readBlock(h blockHandle) (block, error) {
	if data, ok := r.cache.get(r.fileNum, h.offset); ok {
		return block{data: data.data, restartOff: data.restartOff, numRestarts: data.numRestarts}, nil
	}
	data, err := readBlockAt(r.f, r.name, h)
	if err != nil {
		return block{}, err
	}
	b, err := parseBlock(data)
	if err != nil {
		return block{}, &CorruptionError{File: r.name, Offset: int64(h.offset), Reason: err.Error()}
	}
	r.cache.put(r.fileNum, h.offset, b)
	return b, nil
}

// blockIndex returns the index of the first data block whose last key is
// >= key (len(index) if none).
func (r *tableReader) blockIndex(key []byte) int {
	u := userKey(key)
	pre := r.keyPre
	if c := bytes.Compare(u[:min(len(u), len(pre))], pre); c != 0 {
		// Below every index key (c < 0: also when u is a proper prefix
		// of pre), or above them all.
		if c < 0 {
			return 0
		}
		return len(r.index)
	}
	w := indexWindow(u, len(pre))
	// The first i whose last key is >= key: windows that differ order
	// the keys (they share pre); equal ones need the keys compared.
	lo, hi := 0, len(r.wins)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		kw := r.wins[m].win
		if kw > w || (kw == w && compareInternal(r.index[m].lastKey, key) >= 0) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// indexWin is an index entry's key window and block handle.
type indexWin struct {
	win uint64
	h   blockHandle
}

// indexWindowLen is the bytes of a user key an index window holds.
const indexWindowLen = 8

// indexWindow returns the indexWindowLen bytes of ukey after its first
// skip, big-endian, zero-padded past the key's end. For two keys sharing
// their first skip bytes, a smaller window means a smaller key: where the
// windows first differ, either both keys have a byte there and the
// smaller byte is the smaller key's, or the smaller key ended before it
// (the bytes of the other after its end were zero until there) and is a
// prefix of the other.
func indexWindow(ukey []byte, skip int) uint64 {
	var b [indexWindowLen]byte
	if skip < len(ukey) {
		copy(b[:], ukey[skip:])
	}
	return binary.BigEndian.Uint64(b[:])
}

// indexWindows sets keyPre and wins from the index, which is in order:
// every key between the first and the last begins with their common
// prefix.
func (r *tableReader) indexWindows() {
	r.keyPre, r.wins = nil, nil
	if len(r.index) == 0 {
		return
	}
	first, last := userKey(r.index[0].lastKey), userKey(r.index[len(r.index)-1].lastKey)
	n := 0
	for n < len(first) && n < len(last) && first[n] == last[n] {
		n++
	}
	r.keyPre = first[:n:n]
	r.wins = make([]indexWin, len(r.index))
	for i, e := range r.index {
		r.wins[i] = indexWin{win: indexWindow(userKey(e.lastKey), n), h: e.h}
	}
}

// get returns the newest entry of ukey with seq <= seq, if the table has
// one. The returned slices alias cached blocks: copy before keeping.
func (r *tableReader) get(ukey []byte, seq SeqNum) (ikey, value []byte, found bool, err error) {
	if !r.filter.mayContain(bloomHash(ukey)) {
		return nil, nil, false, nil
	}
	sk := searchKey(ukey, seq)
	i := r.blockIndex(sk)
	if i == len(r.index) {
		return nil, nil, false, nil
	}
	b, err := r.readBlock(r.index[i].h)
	if err != nil {
		return nil, nil, false, err
	}
	return r.searchBlock(b, r.index[i].h, ukey, sk)
}

// searchBlock returns the newest entry of ukey visible at search key sk
// in data block b (at h), if the block has one.
func (r *tableReader) searchBlock(b block, h blockHandle, ukey, sk []byte) (ikey, value []byte, found bool, err error) {
	it := newBlockIter(b, compareInternal)
	if !it.SeekGE(sk) {
		if it.err != nil {
			return nil, nil, false, &CorruptionError{File: r.name, Offset: int64(h.offset), Reason: it.err.Error()}
		}
		return nil, nil, false, nil
	}
	if !validInternalKey(it.Key()) || !bytes.Equal(userKey(it.Key()), ukey) {
		return nil, nil, false, nil
	}
	return it.Key(), it.Value(), true, nil
}

// tableIter is an internalIterator over a table's point entries.
type tableIter struct {
	r   *tableReader
	i   int // data block index
	bi  *blockIter
	err error
}

func (r *tableReader) newIter() *tableIter { return &tableIter{r: r, i: -1} }

func (it *tableIter) load(i int) bool {
	it.i = i
	it.bi = nil
	if i < 0 || i >= len(it.r.index) {
		return false
	}
	b, err := it.r.readBlock(it.r.index[i].h)
	if err != nil {
		it.err = err
		return false
	}
	it.bi = newBlockIter(b, compareInternal)
	return true
}

func (it *tableIter) check(ok bool) bool {
	if !ok && it.bi != nil && it.bi.err != nil && it.err == nil {
		it.err = &CorruptionError{File: it.r.name, Offset: int64(it.r.index[it.i].h.offset), Reason: it.bi.err.Error()}
	}
	if ok && !validInternalKey(it.bi.Key()) {
		it.err = &CorruptionError{File: it.r.name, Offset: int64(it.r.index[it.i].h.offset), Reason: "short internal key"}
		return false
	}
	return ok
}

func (it *tableIter) forward(ok bool) bool {
	for !it.check(ok) {
		if it.err != nil || !it.load(it.i+1) {
			it.bi = nil
			return false
		}
		ok = it.bi.First()
	}
	return true
}

func (it *tableIter) backward(ok bool) bool {
	for !it.check(ok) {
		if it.err != nil || !it.load(it.i-1) {
			it.bi = nil
			return false
		}
		ok = it.bi.Last()
	}
	return true
}

func (it *tableIter) SeekGE(key []byte) bool {
	if !it.load(it.r.blockIndex(key)) {
		return false
	}
	return it.forward(it.bi.SeekGE(key))
}

func (it *tableIter) SeekLT(key []byte) bool {
	i := it.r.blockIndex(key)
	if i == len(it.r.index) {
		i--
	}
	if !it.load(i) {
		return false
	}
	return it.backward(it.bi.SeekLT(key))
}

func (it *tableIter) First() bool {
	if !it.load(0) {
		return false
	}
	return it.forward(it.bi.First())
}

func (it *tableIter) Last() bool {
	if !it.load(len(it.r.index) - 1) {
		return false
	}
	return it.backward(it.bi.Last())
}

func (it *tableIter) Next() bool    { return it.bi != nil && it.forward(it.bi.Next()) }
func (it *tableIter) Prev() bool    { return it.bi != nil && it.backward(it.bi.Prev()) }
func (it *tableIter) Valid() bool   { return it.bi != nil && it.bi.Valid() }
func (it *tableIter) Key() []byte   { return it.bi.Key() }
func (it *tableIter) Value() []byte { return it.bi.Value() }
func (it *tableIter) Error() error  { return it.err }
func (it *tableIter) Close() error  { return it.err }

// tableFileName is the name of table number n.
func tableFileName(n uint64) string { return fmt.Sprintf("%06d.sst", n) }

func logFileName(n uint64) string { return fmt.Sprintf("%06d.log", n) }

func manifestFileName(n uint64) string { return fmt.Sprintf("MANIFEST-%06d", n) }

// parseFileName returns a file's type and number: "sst", "log" or
// "manifest".
func parseFileName(name string) (kind string, num uint64, ok bool) {
	var rest string
	switch {
	case len(name) > 9 && name[:9] == "MANIFEST-":
		kind, rest = "manifest", name[9:]
	case len(name) > 4 && name[len(name)-4:] == ".sst":
		kind, rest = "sst", name[:len(name)-4]
	case len(name) > 4 && name[len(name)-4:] == ".log":
		kind, rest = "log", name[:len(name)-4]
	default:
		return "", 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return kind, n, err == nil
}
