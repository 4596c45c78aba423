package lsm

import (
	"bytes"
	"fmt"
	"strings"
)

// dumpInternal lists every internal entry with user key in [lo, hi], per
// source, for failure messages.
func dumpInternal(d *DB, lo, hi []byte) string {
	rs, err := d.loadReadState()
	if err != nil {
		return err.Error()
	}
	defer d.releaseReadState(rs)
	var sb strings.Builder
	dump := func(name string, it internalIterator, ts []tombstone) {
		for ok := it.SeekGE(searchKey(lo, MaxSeqNum)); ok && bytes.Compare(userKey(it.Key()), hi) <= 0; ok = it.Next() {
			fmt.Fprintf(&sb, "  %s: %s (%d bytes)\n", name, formatKey(it.Key()), len(it.Value()))
		}
		for _, t := range ts {
			if bytes.Compare(t.start, hi) <= 0 && bytes.Compare(t.end, lo) > 0 {
				fmt.Fprintf(&sb, "  %s: rangedel [%s, %s)#%d\n", name, t.start, t.end, t.seq)
			}
		}
	}
	for i, m := range rs.mems {
		dump(fmt.Sprintf("mem%d", i), m.newIter(), m.tombstones())
	}
	for l, fs := range rs.v.Levels {
		for _, f := range fs {
			h, err := d.tc.get(f.FileNum, f.Size)
			if err != nil {
				return err.Error()
			}
			dump(fmt.Sprintf("L%d/%06d", l, f.FileNum), h.reader().newIter(), h.reader().tombs)
			h.release()
		}
	}
	return sb.String()
}
