package pushdown

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMapUpdatesRoundTrip(t *testing.T) {
	ups := []MapUpdate{
		{File: File{ID: 7, Version: 3, Size: 1000, Extents: []Extent{{LBA: 10, Blocks: 1}, {LBA: 2, Blocks: 1}}}},
		{File: File{ID: 8, Version: 9}, Remove: true},
		{File: File{ID: 9, Version: 1, Size: 0, Extents: []Extent{}}},
		{File: File{ID: 7, Version: 0}, Remove: true},
	}
	b := MarshalMapUpdates(ups)
	got, err := UnmarshalMapUpdates(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ups {
		if len(ups[i].Extents) == 0 {
			ups[i].Extents = got[i].Extents // nil and empty are the same on the wire
		}
	}
	if !reflect.DeepEqual(got, ups) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, ups)
	}
}

// TestMapUpdatesBad: every rule of the payload, with the entry it names.
func TestMapUpdatesBad(t *testing.T) {
	good := MarshalMapUpdates([]MapUpdate{
		{File: File{ID: 7, Version: 3, Size: 512, Extents: []Extent{{LBA: 10, Blocks: 1}}}},
		{File: File{ID: 8, Version: 4, Size: 512, Extents: []Extent{{LBA: 11, Blocks: 1}}}},
	})
	second := MapPutHeaderSize + FileSize + ExtentSize // entry 1
	le := binary.LittleEndian
	for _, tc := range []struct {
		name  string
		edit  func(b []byte) []byte
		index int
	}{
		{"short header", func(b []byte) []byte { return b[:10] }, -1},
		{"format", func(b []byte) []byte { le.PutUint16(b, 2); return b }, -1},
		{"no entries", func(b []byte) []byte { le.PutUint16(b[2:], 0); return b }, -1},
		{"too many entries", func(b []byte) []byte { le.PutUint16(b[2:], MaxMapsPerPut+1); return b }, -1},
		{"reserved header", func(b []byte) []byte { b[9] = 1; return b }, -1},
		{"truncated entry", func(b []byte) []byte { return b[:second+8] }, 1},
		{"truncated extents", func(b []byte) []byte { return b[:len(b)-1] }, 1},
		{"trailing bytes", func(b []byte) []byte { return append(b, 0) }, -1},
		{"count past the data", func(b []byte) []byte { le.PutUint16(b[2:], 3); return b }, 2},
		{"inode 0", func(b []byte) []byte { le.PutUint64(b[second:], 0); return b }, 1},
		{"version 0", func(b []byte) []byte { le.PutUint64(b[second+8:], 0); return b }, 1},
		{"unknown flag", func(b []byte) []byte { le.PutUint32(b[second+28:], 2); return b }, 1},
		{"removal with extents", func(b []byte) []byte { le.PutUint32(b[second+28:], 1); return b }, 1},
		{"too many extents", func(b []byte) []byte { le.PutUint32(b[second+24:], MaxMapExtents+1); return b }, 1},
		{"empty extent", func(b []byte) []byte { le.PutUint32(b[second+FileSize+8:], 0); return b }, 1},
		{"extent reserved", func(b []byte) []byte { b[second+FileSize+12] = 1; return b }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := UnmarshalMapUpdates(tc.edit(bytes.Clone(good)))
			var ee *EntryError
			if !errors.As(err, &ee) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want an *EntryError wrapping ErrMalformed", err)
			}
			if ee.Index != tc.index {
				t.Fatalf("entry %d named, want %d (%v)", ee.Index, tc.index, err)
			}
		})
	}
}

func TestCheckMap(t *testing.T) {
	for _, tc := range []struct {
		f  File
		ok bool
	}{
		{File{Size: 1024, Extents: []Extent{{LBA: 0, Blocks: 1}, {LBA: 99, Blocks: 1}}}, true},
		{File{Size: 1025, Extents: []Extent{{LBA: 0, Blocks: 1}, {LBA: 99, Blocks: 1}}}, false},
		{File{Size: 512, Extents: []Extent{{LBA: 99, Blocks: 2}}}, false},
		{File{Size: 512, Extents: []Extent{{LBA: 1<<64 - 1, Blocks: 2}}}, false},
		{File{}, true},
	} {
		err := CheckMap(&tc.f, 100, 512)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadExtent)) {
			t.Errorf("%+v: %v, want ok %v", tc.f, err, tc.ok)
		}
	}
}

func TestGrantRoundTrip(t *testing.T) {
	g := Grant{ID: 1 << 40, Host: "nqn.2026-11.io.nearstore:task", Mode: GrantReadWrite, Lease: 1500 * time.Millisecond,
		Extents: []Extent{{LBA: 5, Blocks: 3}, {LBA: 1 << 33, Blocks: 1}}}
	var got Grant
	if err := got.Unmarshal(g.Marshal()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, g) {
		t.Fatalf("got %+v, want %+v", got, g)
	}
}

func TestGrantBad(t *testing.T) {
	good := (&Grant{ID: 1, Host: "h", Mode: GrantRead, Lease: time.Second, Extents: []Extent{{LBA: 5, Blocks: 3}, {LBA: 9, Blocks: 1}}}).Marshal()
	le := binary.LittleEndian
	for _, tc := range []struct {
		name  string
		edit  func(b []byte) []byte
		index int
	}{
		{"short", func(b []byte) []byte { return b[:GrantHeaderSize-1] }, -1},
		{"ID 0", func(b []byte) []byte { le.PutUint64(b, 0); return b }, -1},
		{"no lease", func(b []byte) []byte { le.PutUint32(b[8:], 0); return b }, -1},
		{"write only", func(b []byte) []byte { b[12] = 2; return b }, -1},
		{"reserved", func(b []byte) []byte { b[20] = 1; return b }, -1},
		{"no NQN", func(b []byte) []byte { b[32] = 0; return b }, -1},
		{"NQN not terminated cleanly", func(b []byte) []byte { b[40] = 'x'; return b }, -1},
		{"NQN too long", func(b []byte) []byte { copy(b[32:], strings.Repeat("n", 224)); return b }, -1},
		{"NQN not UTF-8", func(b []byte) []byte { b[32] = 0xff; return b }, -1},
		{"no extents", func(b []byte) []byte { le.PutUint32(b[16:], 0); return b[:GrantHeaderSize] }, -1},
		{"count past the data", func(b []byte) []byte { le.PutUint32(b[16:], 3); return b }, -1},
		{"trailing bytes", func(b []byte) []byte { return append(b, 0) }, -1},
		{"empty extent", func(b []byte) []byte { le.PutUint32(b[GrantHeaderSize+ExtentSize+8:], 0); return b }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g Grant
			err := g.Unmarshal(tc.edit(bytes.Clone(good)))
			var ee *EntryError
			if !errors.As(err, &ee) || !errors.Is(err, ErrMalformed) || ee.Index != tc.index {
				t.Fatalf("got %v, want an *EntryError for entry %d wrapping ErrMalformed", err, tc.index)
			}
		})
	}
}

// TestResolveFiles: the rules a target applies to a request's file table.
func TestResolveFiles(t *testing.T) {
	held := map[uint64]File{
		7: {ID: 7, Version: 3, Size: 1000, Extents: []Extent{{LBA: 10, Blocks: 2}}},
	}
	lookup := func(ino uint64) (File, bool) { f, ok := held[ino]; return f, ok }
	raw := File{Size: 512, Extents: []Extent{{LBA: 99, Blocks: 1}}}
	for _, tc := range []struct {
		name string
		f    File
		want error // nil: resolves to the held map (or, raw, to itself)
	}{
		{"raw", raw, nil},
		{"held, no extents", File{ID: 7, Version: 3}, nil},
		{"held, size given", File{ID: 7, Version: 3, Size: 1000}, nil},
		{"held, extents given", held[7], nil},
		{"old version", File{ID: 7, Version: 2}, ErrStale},
		{"newer version", File{ID: 7, Version: 4}, ErrStale},
		{"unknown inode", File{ID: 8, Version: 1}, ErrStale},
		{"other extents", File{ID: 7, Version: 3, Size: 1000, Extents: []Extent{{LBA: 12, Blocks: 2}}}, ErrOutsideFile},
		{"more extents", File{ID: 7, Version: 3, Size: 1000, Extents: []Extent{{LBA: 10, Blocks: 2}, {LBA: 50, Blocks: 1}}}, ErrOutsideFile},
		{"larger size", File{ID: 7, Version: 3, Size: 1024, Extents: []Extent{{LBA: 10, Blocks: 2}}}, ErrOutsideFile},
		{"larger size, no extents", File{ID: 7, Version: 3, Size: 1024}, ErrOutsideFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []File{tc.f}
			got, err := ResolveFiles(in, lookup)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := held[7]
			if tc.f.ID == 0 {
				want = raw
			}
			if !reflect.DeepEqual(got[0], want) {
				t.Fatalf("resolved to %+v, want %+v", got[0], want)
			}
			if !reflect.DeepEqual(in[0], tc.f) {
				t.Fatalf("the request's table changed: %+v", in[0])
			}
		})
	}
}

// FuzzMapUpdates: the decoder never panics, and whatever it accepts
// encodes back to exactly the same bytes (there is one encoding of a
// batch, so a target and a host can never read one payload two ways).
func FuzzMapUpdates(f *testing.F) {
	f.Add(MarshalMapUpdates([]MapUpdate{
		{File: File{ID: 7, Version: 3, Size: 1000, Extents: []Extent{{LBA: 10, Blocks: 1}, {LBA: 2, Blocks: 1}}}},
		{File: File{ID: 8, Version: 9}, Remove: true},
	}))
	f.Add(MarshalMapUpdates([]MapUpdate{{File: File{ID: 1, Version: 1}}}))
	f.Add([]byte{1, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ups, err := UnmarshalMapUpdates(b)
		if err != nil {
			var ee *EntryError
			if !errors.As(err, &ee) || !errors.Is(err, ErrMalformed) || ee.Index < -1 || ee.Index >= MaxMapsPerPut {
				t.Fatalf("error %v is not an *EntryError wrapping ErrMalformed", err)
			}
			return
		}
		if len(ups) == 0 || len(ups) > MaxMapsPerPut {
			t.Fatalf("%d updates accepted", len(ups))
		}
		for _, u := range ups {
			if u.ID == 0 || (!u.Remove && u.Version == 0) || (u.Remove && (u.Size != 0 || len(u.Extents) != 0)) {
				t.Fatalf("accepted %+v", u)
			}
		}
		if !bytes.Equal(MarshalMapUpdates(ups), b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// FuzzGrant: as FuzzMapUpdates, for Grant Put.
func FuzzGrant(f *testing.F) {
	f.Add((&Grant{ID: 1, Host: "nqn.task", Mode: GrantRead, Lease: time.Second, Extents: []Extent{{LBA: 5, Blocks: 3}}}).Marshal())
	f.Add((&Grant{ID: 9, Host: "h", Mode: GrantReadWrite, Lease: time.Hour, Extents: []Extent{{LBA: 5, Blocks: 3}, {LBA: 1, Blocks: 1}}}).Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		var g Grant
		if err := g.Unmarshal(b); err != nil {
			var ee *EntryError
			if !errors.As(err, &ee) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not an *EntryError wrapping ErrMalformed", err)
			}
			return
		}
		if g.ID == 0 || g.Lease <= 0 || g.Host == "" || len(g.Extents) == 0 || (g.Mode != GrantRead && g.Mode != GrantReadWrite) {
			t.Fatalf("accepted %+v", g)
		}
		if !bytes.Equal(g.Marshal(), b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// TestCheckMapTotalDoesNotWrap: extents may repeat, and their byte total
// is saturated rather than wrapped, so it is never smaller than it is.
func TestCheckMapTotalDoesNotWrap(t *testing.T) {
	f := File{Size: 1<<64 - 1}
	for range 1<<20 + 1 { // (2^20+1) × (2^32-1) × 4 KiB > 2^64
		f.Extents = append(f.Extents, Extent{LBA: 0, Blocks: 1<<32 - 1})
	}
	if err := CheckMap(&f, 1<<40, 4096); err != nil {
		t.Fatal(err)
	}
}
