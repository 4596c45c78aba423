package lsm

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

func TestFlushArgsRoundTrip(t *testing.T) {
	a := &FlushArgs{
		Output: 77, Snapshots: []SeqNum{3, 9}, Table: TableOptions{BlockSize: 1024, BlockRestartInterval: 4, BloomBitsPerKey: 10},
		Entries: []WALRef{{Off: 0, Index: 1}, {Off: 40, Index: 0}}, RangeDels: []WALRef{{Off: 90, Index: 2}},
	}
	got, err := DecodeFlushArgs(a.Encode(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("decoded %+v, want %+v", got, a)
	}
	b := a.Encode(nil)
	for name, bad := range map[string][]byte{
		"short": b[:30], "magic": append([]byte{1}, b[1:]...), "trailing": append(b[:len(b):len(b)], 0),
		"truncated": b[:len(b)-1],
	} {
		if _, err := DecodeFlushArgs(bad); !errors.Is(err, errBadArgs) {
			t.Errorf("%s: err %v, want errBadArgs", name, err)
		}
	}
}

// TestRunFlushChecks: the engine writes the table from the WAL records
// the arguments locate, in their order, and refuses arguments that do not
// describe the WAL: entries out of key order, an index past a batch, an
// offset past the WAL, a record whose CRC fails.
func TestRunFlushChecks(t *testing.T) {
	b := NewBatch()
	b.Set([]byte("b"), []byte("vb"))
	b.Set([]byte("a"), []byte("va"))
	b.DeleteRange([]byte("c"), []byte("d"))
	b.setSeq(10)
	wal := appendRecord(nil, b.data)
	fs := newMemFS()
	run := func(wal []byte, a *FlushArgs) (*FileMeta, error) {
		f, err := fs.Create("out.sst")
		if err != nil {
			t.Fatal(err)
		}
		return RunFlush(context.Background(), a, wal, f)
	}
	good := &FlushArgs{Output: 5, Entries: []WALRef{{0, 1}, {0, 0}}, RangeDels: []WALRef{{0, 2}}}
	m, err := run(wal, good)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil || m.FileNum != 5 || m.SmallestSeq != 10 || m.LargestSeq != 12 || m.RangeDels != 1 {
		t.Fatalf("table %+v", m)
	}
	corrupt := append([]byte(nil), wal...)
	corrupt[len(corrupt)-1] ^= 1
	for _, tc := range []struct {
		name string
		wal  []byte
		args *FlushArgs
	}{
		{"out of order", wal, &FlushArgs{Output: 5, Entries: []WALRef{{0, 0}, {0, 1}}}},
		{"index past the batch", wal, &FlushArgs{Output: 5, Entries: []WALRef{{0, 3}}}},
		{"offset past the WAL", wal, &FlushArgs{Output: 5, Entries: []WALRef{{uint64(len(wal)), 0}}}},
		{"range deletion as a point", wal, &FlushArgs{Output: 5, Entries: []WALRef{{0, 2}}}},
		{"point as a range deletion", wal, &FlushArgs{Output: 5, RangeDels: []WALRef{{0, 0}}}},
		{"bad CRC", corrupt, good},
	} {
		if _, err := run(tc.wal, tc.args); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func FuzzFlushArgs(f *testing.F) {
	f.Add((&FlushArgs{Output: 1, Snapshots: []SeqNum{2}, Entries: []WALRef{{Off: 8, Index: 1}}}).Encode(nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeFlushArgs(b)
		if err != nil {
			return
		}
		if got := a.Encode(nil); string(got) != string(b) {
			t.Fatalf("re-encoded %x, decoded from %x", got, b)
		}
	})
}
