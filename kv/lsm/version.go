package lsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// NumLevels is the number of levels, L0 to L6.
const NumLevels = 7

// FileMeta describes one table. Its exported fields are immutable once the
// table is in a version and are what a VersionEdit carries.
type FileMeta struct {
	FileNum uint64
	Size    uint64
	// Smallest and Largest bound the table's entries as internal keys.
	// Largest may be a range-deletion sentinel (end key, MaxSeqNum,
	// RANGEDEL): the table then reaches up to, but not including, that
	// user key.
	Smallest, Largest []byte
	// SmallestSeq and LargestSeq bound the sequence numbers in the table.
	SmallestSeq, LargestSeq SeqNum
	// RangeDels is the number of range tombstones in the table, so reads
	// open only tables that have some to collect them.
	RangeDels uint64

	// refs counts the versions holding the table; when it falls to zero
	// the file is obsolete.
	refs atomic.Int32
	// compacting is set while a compaction has the table as an input;
	// guarded by DB.mu.
	compacting bool
}

func (f *FileMeta) String() string {
	return fmt.Sprintf("%06d[%s-%s]", f.FileNum, formatKey(f.Smallest), formatKey(f.Largest))
}

// keyRange is a range of user keys: start inclusive, end inclusive unless
// endExclusive.
type keyRange struct {
	start, end   []byte
	endExclusive bool
}

func isSentinel(ikey []byte) bool {
	return trailer(ikey) == makeTrailer(MaxSeqNum, KindRangeDelete)
}

func (f *FileMeta) userRange() keyRange {
	return keyRange{start: userKey(f.Smallest), end: userKey(f.Largest), endExclusive: isSentinel(f.Largest)}
}

// endsBefore reports whether a range ending at (end, excl) lies wholly
// before user key k.
func endsBefore(end []byte, excl bool, k []byte) bool {
	c := bytes.Compare(end, k)
	return c < 0 || (c == 0 && excl)
}

func (r keyRange) overlaps(o keyRange) bool {
	return !endsBefore(r.end, r.endExclusive, o.start) && !endsBefore(o.end, o.endExclusive, r.start)
}

func (r keyRange) contains(k []byte) bool {
	return bytes.Compare(r.start, k) <= 0 && !endsBefore(r.end, r.endExclusive, k)
}

// union extends r to cover o.
func (r keyRange) union(o keyRange) keyRange {
	if r.start == nil {
		return o
	}
	if bytes.Compare(o.start, r.start) < 0 {
		r.start = o.start
	}
	if c := bytes.Compare(o.end, r.end); c > 0 || (c == 0 && !o.endExclusive) {
		r.end, r.endExclusive = o.end, o.endExclusive
	}
	return r
}

// NewFile is a table a VersionEdit adds to a level.
type NewFile struct {
	Level int
	Meta  *FileMeta
}

// DeletedFile is a table a VersionEdit removes from a level.
type DeletedFile struct {
	Level   int
	FileNum uint64
}

// A VersionEdit is a change to the LSM's shape: tables added and removed
// per level, and the counters recovery needs. The MANIFEST is a sequence
// of encoded edits; applying them in order to an empty version gives the
// current one. A zero LogNumber, NextFileNum or LastSeq means "unchanged".
//
// Encoding (docs/LSM.md, "Version edits"): a sequence of fields, each a
// uvarint tag then its data, all integers uvarints, byte strings a
// uvarint length then the bytes:
//
//	1 LogNumber        number
//	2 NextFileNum      number
//	3 LastSeq          number
//	4 deleted file     level, file number
//	5 new file         level, file number, size, smallest, largest,
//	                   smallest seq, largest seq, range deletions
type VersionEdit struct {
	// LogNumber: WALs numbered below it hold nothing that is not in
	// tables, and may be deleted.
	LogNumber   uint64
	NextFileNum uint64
	// LastSeq: no table holds a sequence number above it.
	LastSeq      SeqNum
	DeletedFiles []DeletedFile
	NewFiles     []NewFile
}

const (
	tagLogNumber   = 1
	tagNextFileNum = 2
	tagLastSeq     = 3
	tagDeletedFile = 4
	tagNewFile     = 5
)

// Encode appends the edit's encoding to dst.
func (e *VersionEdit) Encode(dst []byte) []byte {
	u := binary.AppendUvarint
	bs := func(dst, b []byte) []byte { return append(u(dst, uint64(len(b))), b...) }
	if e.LogNumber != 0 {
		dst = u(u(dst, tagLogNumber), e.LogNumber)
	}
	if e.NextFileNum != 0 {
		dst = u(u(dst, tagNextFileNum), e.NextFileNum)
	}
	if e.LastSeq != 0 {
		dst = u(u(dst, tagLastSeq), e.LastSeq)
	}
	for _, d := range e.DeletedFiles {
		dst = u(u(u(dst, tagDeletedFile), uint64(d.Level)), d.FileNum)
	}
	for _, n := range e.NewFiles {
		m := n.Meta
		dst = u(u(u(u(dst, tagNewFile), uint64(n.Level)), m.FileNum), m.Size)
		dst = bs(bs(dst, m.Smallest), m.Largest)
		dst = u(u(u(dst, m.SmallestSeq), m.LargestSeq), m.RangeDels)
	}
	return dst
}

// errBadEdit is wrapped by decoding errors.
var errBadEdit = errors.New("malformed version edit")

// DecodeVersionEdit decodes an encoded edit. The result does not alias b.
func DecodeVersionEdit(b []byte) (*VersionEdit, error) {
	e := &VersionEdit{}
	num := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%w: bad uvarint", errBadEdit)
		}
		b = b[n:]
		return v, nil
	}
	bytesField := func() ([]byte, error) {
		l, err := num()
		if err != nil {
			return nil, err
		}
		if l > uint64(len(b)) {
			return nil, fmt.Errorf("%w: string of %d bytes past the end", errBadEdit, l)
		}
		v := slices.Clone(b[:l])
		b = b[l:]
		return v, nil
	}
	level := func() (int, error) {
		l, err := num()
		if err == nil && l >= NumLevels {
			err = fmt.Errorf("%w: level %d", errBadEdit, l)
		}
		return int(l), err
	}
	for len(b) > 0 {
		tag, err := num()
		if err != nil {
			return nil, err
		}
		switch tag {
		case tagLogNumber:
			e.LogNumber, err = num()
		case tagNextFileNum:
			e.NextFileNum, err = num()
		case tagLastSeq:
			e.LastSeq, err = num()
		case tagDeletedFile:
			var d DeletedFile
			if d.Level, err = level(); err == nil {
				d.FileNum, err = num()
			}
			e.DeletedFiles = append(e.DeletedFiles, d)
		case tagNewFile:
			n := NewFile{Meta: &FileMeta{}}
			m := n.Meta
			if n.Level, err = level(); err != nil {
				return nil, err
			}
			for _, p := range []*uint64{&m.FileNum, &m.Size} {
				if *p, err = num(); err != nil {
					return nil, err
				}
			}
			if m.Smallest, err = bytesField(); err != nil {
				return nil, err
			}
			if m.Largest, err = bytesField(); err != nil {
				return nil, err
			}
			if !validInternalKey(m.Smallest) || !validInternalKey(m.Largest) {
				return nil, fmt.Errorf("%w: table %d bounds are not internal keys", errBadEdit, m.FileNum)
			}
			if compareInternal(m.Smallest, m.Largest) > 0 {
				return nil, fmt.Errorf("%w: table %d bounds inverted", errBadEdit, m.FileNum)
			}
			if m.SmallestSeq, err = num(); err == nil {
				if m.LargestSeq, err = num(); err == nil {
					m.RangeDels, err = num()
				}
			}
			e.NewFiles = append(e.NewFiles, n)
		default:
			return nil, fmt.Errorf("%w: unknown tag %d", errBadEdit, tag)
		}
		if err != nil {
			return nil, err
		}
	}
	return e, nil
}

// A Version is the set of tables making up the LSM at one moment. It is
// immutable; Apply makes a new one.
//
// Invariants:
//   - L0 is ordered newest first (LargestSeq descending); its tables may
//     overlap. For any user key, a table earlier in L0 holds only newer
//     entries of it than a later one (L0 tables come from flushes, in
//     order, and leave L0 only all together).
//   - Each level L1+ is ordered by Smallest and its tables' user-key
//     ranges do not overlap, so one table per level can hold a key.
//   - For any user key, entries in Ln are newer than entries in Ln+1.
type Version struct {
	Levels [NumLevels][]*FileMeta
	// sizes caches each level's total table size; set by Apply.
	sizes [NumLevels]uint64
	// refs counts users (the current pointer, iterators, gets). It
	// only rises while the version is current (a reader takes a
	// reference under DB.rsMu, which installing a new version excludes),
	// so once it falls to zero it stays there.
	refs atomic.Int32
}

// Apply returns the version that results from applying e to v. It checks
// that deleted tables exist and that L1+ stay free of overlaps. v is not
// changed.
func (v *Version) Apply(e *VersionEdit) (*Version, error) {
	nv := &Version{}
	deleted := map[[2]uint64]bool{}
	for _, d := range e.DeletedFiles {
		deleted[[2]uint64{uint64(d.Level), d.FileNum}] = true
	}
	for level := range v.Levels {
		for _, f := range v.Levels[level] {
			k := [2]uint64{uint64(level), f.FileNum}
			if deleted[k] {
				delete(deleted, k)
				continue
			}
			nv.Levels[level] = append(nv.Levels[level], f)
		}
	}
	if len(deleted) > 0 {
		for k := range deleted {
			return nil, fmt.Errorf("lsm: version edit deletes table %06d from L%d, which does not hold it", k[1], k[0])
		}
	}
	for _, n := range e.NewFiles {
		if n.Level < 0 || n.Level >= NumLevels {
			return nil, fmt.Errorf("lsm: version edit adds to level %d", n.Level)
		}
		nv.Levels[n.Level] = append(nv.Levels[n.Level], n.Meta)
	}
	slices.SortFunc(nv.Levels[0], func(a, b *FileMeta) int {
		if a.LargestSeq != b.LargestSeq {
			if a.LargestSeq > b.LargestSeq {
				return -1
			}
			return 1
		}
		if a.FileNum > b.FileNum {
			return -1
		}
		return 1
	})
	for level, fs := range nv.Levels {
		for _, f := range fs {
			nv.sizes[level] += f.Size
		}
	}
	for level := 1; level < NumLevels; level++ {
		fs := nv.Levels[level]
		slices.SortFunc(fs, func(a, b *FileMeta) int { return compareInternal(a.Smallest, b.Smallest) })
		for i := 1; i < len(fs); i++ {
			if fs[i-1].userRange().overlaps(fs[i].userRange()) {
				return nil, fmt.Errorf("lsm: version edit makes L%d tables overlap: %s and %s", level, fs[i-1], fs[i])
			}
		}
	}
	return nv, nil
}

// snapshotEdit is an edit that builds v from nothing.
func (v *Version) snapshotEdit() *VersionEdit {
	e := &VersionEdit{}
	for level, fs := range v.Levels {
		for _, f := range fs {
			e.NewFiles = append(e.NewFiles, NewFile{Level: level, Meta: f})
		}
	}
	return e
}

// overlaps returns the tables in level that overlap r.
func (v *Version) overlaps(level int, r keyRange) []*FileMeta {
	var out []*FileMeta
	for _, f := range v.Levels[level] {
		if f.userRange().overlaps(r) {
			out = append(out, f)
		}
	}
	return out
}

// levelSize is the total size of level's tables.
func (v *Version) levelSize(level int) uint64 { return v.sizes[level] }

func (v *Version) String() string {
	var sb strings.Builder
	for level, fs := range v.Levels {
		if len(fs) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "L%d:", level)
		for _, f := range fs {
			fmt.Fprintf(&sb, " %s", f)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}
