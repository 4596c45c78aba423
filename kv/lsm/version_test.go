package lsm

import (
	"reflect"
	"strings"
	"testing"
)

func fm(num uint64, lo, hi string) *FileMeta {
	return &FileMeta{FileNum: num, Size: 100, Smallest: makeInternalKey([]byte(lo), 1, KindSet), Largest: makeInternalKey([]byte(hi), 1, KindSet), SmallestSeq: 1, LargestSeq: num}
}

func TestVersionEditRoundTrip(t *testing.T) {
	e := &VersionEdit{LogNumber: 7, NextFileNum: 12, LastSeq: 99,
		DeletedFiles: []DeletedFile{{Level: 0, FileNum: 3}, {Level: 4, FileNum: 1 << 40}},
		NewFiles: []NewFile{{Level: 1, Meta: fm(5, "a", "m")}, {Level: 6, Meta: &FileMeta{FileNum: 6, Size: 1 << 33,
			Smallest: makeInternalKey([]byte("n"), 3, KindRangeDelete), Largest: makeInternalKey([]byte("z"), MaxSeqNum, KindRangeDelete),
			SmallestSeq: 3, LargestSeq: 3, RangeDels: 1}}}}
	got, err := DecodeVersionEdit(e.Encode(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
	}
}

func TestVersionApply(t *testing.T) {
	base, err := (&Version{}).Apply(&VersionEdit{NewFiles: []NewFile{
		{Level: 0, Meta: fm(1, "a", "z")}, {Level: 0, Meta: fm(2, "c", "d")},
		{Level: 1, Meta: fm(3, "a", "f")}, {Level: 1, Meta: fm(4, "g", "k")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if base.Levels[0][0].FileNum != 2 {
		t.Fatalf("L0 not newest first: %s", base)
	}
	tests := []struct {
		name    string
		edit    VersionEdit
		wantErr string
		want    string // Version.String of the result
	}{
		{"add disjoint", VersionEdit{NewFiles: []NewFile{{Level: 1, Meta: fm(5, "l", "m")}}}, "", ""},
		{"add overlapping", VersionEdit{NewFiles: []NewFile{{Level: 1, Meta: fm(5, "e", "h")}}}, "overlap", ""},
		{"touching bounds overlap", VersionEdit{NewFiles: []NewFile{{Level: 1, Meta: fm(5, "k", "m")}}}, "overlap", ""},
		{"exclusive end does not", VersionEdit{NewFiles: []NewFile{{Level: 1, Meta: &FileMeta{FileNum: 5,
			Smallest: makeInternalKey([]byte("f1"), 2, KindSet), Largest: makeInternalKey([]byte("g"), MaxSeqNum, KindRangeDelete)}}}}, "", ""},
		{"delete missing", VersionEdit{DeletedFiles: []DeletedFile{{Level: 2, FileNum: 3}}}, "does not hold", ""},
		{"move down", VersionEdit{DeletedFiles: []DeletedFile{{Level: 1, FileNum: 4}}, NewFiles: []NewFile{{Level: 2, Meta: fm(4, "g", "k")}}}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nv, err := base.Apply(&tc.edit)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, l := range nv.Levels {
				n += len(l)
			}
			if want := 4 + len(tc.edit.NewFiles) - len(tc.edit.DeletedFiles); n != want {
				t.Fatalf("%d tables, want %d:\n%s", n, want, nv)
			}
		})
	}
	if got := len(base.Levels[1]); got != 2 {
		t.Fatalf("Apply changed its receiver: L1 has %d tables", got)
	}
}

// TestReplicaAppliesEdits replays a store's MANIFEST edits from outside
// the engine, as a replica would, and gets the store's version.
func TestReplicaAppliesEdits(t *testing.T) {
	fs := newMemFS()
	d := mustOpen(t, fs, smallOptions())
	for i := 0; i < 3000; i++ {
		if err := d.Set([]byte(strings.Repeat("k", i%7)+string(rune('a'+i%26))+string(rune(i))), make([]byte, 50), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	want := d.current.String()
	d.mu.Unlock()
	data, err := d.readFile(manifestFileName(d.manifestNum))
	if err != nil {
		t.Fatal(err)
	}
	v := &Version{}
	rr := recordReader{buf: data}
	for {
		rec, err := rr.next()
		if err != nil {
			break
		}
		e, err := DecodeVersionEdit(rec)
		if err != nil {
			t.Fatal(err)
		}
		if v, err = v.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := v.String(); got != want {
		t.Fatalf("replayed version\n%s\nwant\n%s", got, want)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
