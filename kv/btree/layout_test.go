package btree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nearstore/nearstore/functions"
)

// memFile is a growing in-memory file.
type memFile struct{ b []byte }

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}

func sortedKeys(r *rand.Rand, n int) []uint64 {
	seen := map[uint64]bool{}
	keys := make([]uint64, 0, n)
	for len(keys) < n {
		k := r.Uint64N(1 << 40)
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// The bulk loader writes exactly what functions.BuildBTreeFanout builds,
// the layout btree_lookup's tests are written against.
func TestBulkLoadMatchesBuildBTree(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, fanout, vs int }{
		{0, 31, 64}, {1, 31, 64}, {31, 31, 64}, {32, 31, 64}, {961, 31, 64}, {962, 31, 8},
		{5000, 31, 64}, {1, 2, 1}, {2, 2, 3}, {3, 2, 64}, {1000, 2, 16}, {4097, 4, 64}, {777, 7, 100},
	} {
		t.Run(fmt.Sprintf("n%d-f%d-v%d", tc.n, tc.fanout, tc.vs), func(t *testing.T) {
			keys := sortedKeys(r, tc.n)
			wantIdx, wantVals := functions.BuildBTreeFanout(keys, tc.vs, tc.fanout)
			g, err := newGeometry(int64(tc.n), tc.fanout, tc.vs)
			if err != nil {
				t.Fatal(err)
			}
			if g.indexSize() != int64(len(wantIdx)) || g.valueLogSize() != int64(len(wantVals)) {
				t.Fatalf("geometry: index %d, values %d; BuildBTree: %d, %d", g.indexSize(), g.valueLogSize(), len(wantIdx), len(wantVals))
			}
			idx, vals := &memFile{}, &memFile{}
			var last int64 = -1
			src := func(i int64, v []byte) (uint64, error) {
				copy(v, functions.BTreeValue(keys[i], tc.vs))
				return keys[i], nil
			}
			err = bulkLoad(context.Background(), g, idx, vals, src, func(done, total int64) {
				if done < last || total != int64(tc.n) {
					t.Errorf("progress %d of %d after %d", done, total, last)
				}
				last = done
			})
			if err != nil {
				t.Fatal(err)
			}
			if last != int64(tc.n) {
				t.Errorf("last progress %d, want %d", last, tc.n)
			}
			if !bytes.Equal(idx.b, wantIdx) {
				t.Errorf("index differs from BuildBTreeFanout's (%d vs %d bytes)", len(idx.b), len(wantIdx))
			}
			if !bytes.Equal(vals.b, wantVals) {
				t.Errorf("value log differs from BuildBTreeFanout's")
			}
		})
	}
}

func TestBulkLoadRejectsBadKeys(t *testing.T) {
	g, err := newGeometry(3, 31, 8)
	if err != nil {
		t.Fatal(err)
	}
	for name, keys := range map[string][]uint64{
		"descending": {1, 3, 2},
		"duplicate":  {1, 2, 2},
		"reserved":   {1, 2, KeyNone},
	} {
		src := func(i int64, _ []byte) (uint64, error) { return keys[i], nil }
		if err := bulkLoad(context.Background(), g, &memFile{}, &memFile{}, src, nil); err == nil {
			t.Errorf("%s keys %v: loaded", name, keys)
		}
	}
	boom := errors.New("boom")
	src := func(int64, []byte) (uint64, error) { return 0, boom }
	if err := bulkLoad(context.Background(), g, &memFile{}, &memFile{}, src, nil); !errors.Is(err, boom) {
		t.Errorf("source error: got %v", err)
	}
}

func TestGeometry(t *testing.T) {
	for _, tc := range []struct {
		keys   int64
		fanout int
		depth  int
	}{
		{0, 31, 1}, {31, 31, 1}, {32, 31, 2}, {961, 31, 2}, {962, 31, 3},
		{1_000_000, 31, 5}, {30_000_000, 31, 6}, {2000, 4, 6}, {1 << 20, 2, 20},
	} {
		g, err := newGeometry(tc.keys, tc.fanout, 64)
		if err != nil {
			t.Fatal(err)
		}
		if g.depth() != tc.depth {
			t.Errorf("%d keys, fanout %d: depth %d, want %d", tc.keys, tc.fanout, g.depth(), tc.depth)
		}
		if g.levels[0].nodes != 1 || g.levels[0].off != 0 {
			t.Errorf("%d keys, fanout %d: root %+v", tc.keys, tc.fanout, g.levels[0])
		}
		if g.cacheEnd(0) != 0 || g.cacheEnd(g.depth()) != g.indexSize() || g.cacheEnd(1) != NodeSize {
			t.Errorf("%d keys, fanout %d: cache ends %d %d %d", tc.keys, tc.fanout, g.cacheEnd(0), g.cacheEnd(1), g.cacheEnd(g.depth()))
		}
	}
	for _, bad := range []struct{ keys, fanout, vs int }{{-1, 31, 64}, {1, 1, 64}, {1, 32, 64}, {1, 31, 0}, {1, 31, 4033}} {
		if _, err := newGeometry(int64(bad.keys), bad.fanout, bad.vs); err == nil {
			t.Errorf("geometry %+v accepted", bad)
		}
	}
}

// rangeMax keeps a pushed-down range within the step cap even when every
// batch starts in a leaf whose keys are all below lo.
func TestRangeMaxFitsSteps(t *testing.T) {
	for _, fanout := range []int{2, 3, 4, 31} {
		g, err := newGeometry(100_000, fanout, 8)
		if err != nil {
			t.Fatal(err)
		}
		for from := range g.depth() {
			for _, steps := range []int{8, 16, 64} {
				m := g.rangeMax(from, steps)
				if m == 0 {
					continue
				}
				leaves := (m+fanout-1)/fanout + 2
				if need := g.depth() - 1 - from + leaves; need > steps {
					t.Errorf("fanout %d from %d cap %d: %d entries may need %d steps", fanout, from, steps, m, need)
				}
			}
		}
	}
}

func TestMeta(t *testing.T) {
	g, err := newGeometry(123457, 13, 24)
	if err != nil {
		t.Fatal(err)
	}
	b := g.encodeMeta()
	got, err := decodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.keys != g.keys || got.fanout != g.fanout || got.valueSize != g.valueSize || !slices.Equal(got.levels, g.levels) {
		t.Errorf("round trip: %+v, want %+v", got, g)
	}
	for i := range b {
		c := slices.Clone(b)
		c[i] ^= 0x10
		if _, err := decodeMeta(c); !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %d flipped: %v", i, err)
		}
	}
	if _, err := decodeMeta(b[:60]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short meta: %v", err)
	}
}
