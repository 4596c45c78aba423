package lambda

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/internal/testfuncs"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ byte(i>>8) ^ seed
	}
	return b
}

// TestCachedFraction: Cached counts exactly the pages Warm brought in,
// sequentially or at random, over any range.
func TestCachedFraction(t *testing.T) {
	e := newEnv(t, envConfig{cache: NewCache(64<<20, 4096)})
	ctx := context.Background()
	c := e.d.Cache()
	const pages = 100
	size := int64(pages*4096 - 100) // the last page is short
	f := e.file("frac", pattern(int(size), 1))
	for _, tc := range []struct {
		fraction float64
		random   bool
		want     int
	}{
		{0, false, 0}, {0.25, false, 25}, {0.333, false, 33}, {1, false, 100},
		{0.1, true, 10}, {0.5, true, 50}, {1, true, 100},
	} {
		if err := c.Drop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Warm(ctx, f, tc.fraction, tc.random, 42); err != nil {
			t.Fatal(err)
		}
		if got, want := c.Cached(f, 0, size), float64(tc.want)/pages; got != want {
			t.Errorf("warm %v random=%v: Cached = %v, want %v", tc.fraction, tc.random, got, want)
		}
		// Page by page, the fractions are 0 or 1 and add up; a range
		// with parts of two pages counts both.
		sum := 0.0
		for i := range int64(pages) {
			x := c.Cached(f, i*4096+10, 100)
			if x != 0 && x != 1 {
				t.Fatalf("page %d: Cached = %v", i, x)
			}
			sum += x
			if i > 0 {
				two := c.Cached(f, i*4096-1, 2)
				if want := (x + c.Cached(f, (i-1)*4096, 1)) / 2; two != want {
					t.Errorf("pages %d-%d: Cached = %v, want %v", i-1, i, two, want)
				}
			}
		}
		if int(sum) != tc.want {
			t.Errorf("warm %v random=%v: %v pages cached, want %d", tc.fraction, tc.random, sum, tc.want)
		}
		if !tc.random && tc.want > 0 && tc.want < pages {
			if c.Cached(f, 0, int64(tc.want)*4096) != 1 || c.Cached(f, int64(tc.want)*4096, size) != 0 {
				t.Errorf("warm %v: not the first pages", tc.fraction)
			}
		}
		if st := c.Stats(); st.Bytes != int64(tc.want)*4096 {
			t.Errorf("warm %v: %d bytes cached, want %d", tc.fraction, st.Bytes, tc.want*4096)
		}
	}
	// The same seed picks the same pages.
	pick := func() []float64 {
		_ = c.Drop(ctx)
		if err := c.Warm(ctx, f, 0.3, true, 7); err != nil {
			t.Fatal(err)
		}
		var v []float64
		for i := range int64(pages) {
			v = append(v, c.Cached(f, i*4096, 1))
		}
		return v
	}
	a, b := pick(), pick()
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("Warm with one seed picked different pages")
		}
	}
	if c.Cached(f, 0, 0) != 1 {
		t.Error("an empty range is not fully cached")
	}
}

// TestCacheReadAt: reads through the cache return the file's bytes,
// count hits and misses by page, read each run of missing pages at once,
// and behave like io.ReaderAt at the end.
func TestCacheReadAt(t *testing.T) {
	e := newEnv(t, envConfig{cache: NewCache(64<<20, 4096)})
	ctx := context.Background()
	c := e.d.Cache()
	data := pattern(10*4096+123, 2)
	f := e.file("readat", data)
	// Pages 2 and 5 cached: a read of pages 0-9 misses three runs.
	for _, p := range []int64{2, 5} {
		if _, err := c.ReadAt(ctx, f, make([]byte, 10), p*4096+7); err != nil {
			t.Fatal(err)
		}
	}
	st0 := c.Stats()
	got := make([]byte, 10*4096-50)
	k, err := c.ReadAt(ctx, f, got, 20)
	if err != nil || k != len(got) || !bytes.Equal(got, data[20:20+len(got)]) {
		t.Fatalf("ReadAt: %d, %v, bytes equal %v", k, err, bytes.Equal(got, data[20:20+len(got)]))
	}
	st := c.Stats()
	if st.Hits-st0.Hits != 2 || st.Misses-st0.Misses != 8 || st.Reads-st0.Reads != 3 {
		t.Errorf("hits %d, misses %d, reads %d: want 2, 8, 3", st.Hits-st0.Hits, st.Misses-st0.Misses, st.Reads-st0.Reads)
	}
	// All cached now: the same read is all hits, and no file reads.
	if _, err := c.ReadAt(ctx, f, got, 20); err != nil {
		t.Fatal(err)
	}
	if st2 := c.Stats(); st2.Reads != st.Reads || st2.Hits-st.Hits != 10 {
		t.Errorf("warm read: %d more reads, %d more hits", st2.Reads-st.Reads, st2.Hits-st.Hits)
	}
	// The end: short read with io.EOF, then nothing and io.EOF.
	size := int64(len(data))
	buf := make([]byte, 500)
	if k, err := c.ReadAt(ctx, f, buf, size-100); k != 100 || !errors.Is(err, io.EOF) || !bytes.Equal(buf[:100], data[size-100:]) {
		t.Errorf("read across the end: %d, %v", k, err)
	}
	if k, err := c.ReadAt(ctx, f, buf, size); k != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("read at the end: %d, %v", k, err)
	}
	if k, err := c.ReadAt(ctx, f, buf, size+5000); k != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("read past the end: %d, %v", k, err)
	}
	if _, err := c.ReadAt(ctx, f, buf, -1); err == nil {
		t.Error("negative offset accepted")
	}
}

// TestCacheWriteBack: writes stay in the cache until flushed, partial
// pages keep their other bytes, writes past the end grow the file with
// zeroes, and Drop writes everything back.
func TestCacheWriteBack(t *testing.T) {
	e := newEnv(t, envConfig{cache: NewCache(64<<20, 4096)})
	ctx := context.Background()
	c := e.d.Cache()
	data := pattern(5*4096+300, 3)
	f := e.file("wb", data)
	want := bytes.Clone(data)
	// A partial page not cached, and one spanning two pages.
	for _, w := range []struct {
		off int64
		b   []byte
	}{{100, []byte("hello")}, {4096 - 3, []byte("across pages")}} {
		if _, err := c.WriteAt(ctx, f, w.b, w.off); err != nil {
			t.Fatal(err)
		}
		copy(want[w.off:], w.b)
	}
	if !bytes.Equal(contents(t, f), data) {
		t.Error("a write-back cache wrote through")
	}
	if c.Stats().Dirty != 2 {
		t.Errorf("%d dirty pages, want 2", c.Stats().Dirty)
	}
	got := make([]byte, len(want))
	if _, err := c.ReadAt(ctx, f, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read through the cache does not see the writes: %v", err)
	}
	if err := c.Flush(ctx, f, 0, 10); err != nil { // page 0 only
		t.Fatal(err)
	}
	if c.Stats().Dirty != 1 {
		t.Errorf("after flushing page 0: %d dirty pages, want 1", c.Stats().Dirty)
	}
	// Past the end: the file grows, with zeroes between.
	size := int64(len(data))
	tail := []byte("tail")
	if _, err := c.WriteAt(ctx, f, tail, size+5000); err != nil {
		t.Fatal(err)
	}
	want = append(want, make([]byte, 5000)...)
	want = append(want, tail...)
	if s, _ := fileSize(f); s != int64(len(want)) {
		t.Errorf("size %d after a write past the end, want %d", s, len(want))
	}
	got = make([]byte, len(want))
	if _, err := c.ReadAt(ctx, f, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read through the cache after growth: %v", err)
	}
	wb := c.Stats().WriteBackBytes
	if err := c.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(contents(t, f), want) {
		t.Error("file contents after Drop differ")
	}
	if st := c.Stats(); st.Dirty != 0 || st.Bytes != 0 || st.WriteBackBytes <= wb {
		t.Errorf("after Drop: %+v", st)
	}
}

// TestCacheWriteBackLongRun: a run of dirty pages longer than one
// write-back chunk reaches the file whole, chunk boundaries and a short
// last page included, and the write-back moves exactly the file's bytes.
func TestCacheWriteBackLongRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{
		{"one chunk", writeBackChunk},
		{"chunk and a page", writeBackChunk + 4096},
		{"chunks and a short page", 2*writeBackChunk + 3*4096 + 123},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{cache: NewCache(64<<20, 4096)})
			ctx := context.Background()
			c := e.d.Cache()
			f := e.file("long", make([]byte, tc.size))
			data := pattern(tc.size, 9)
			if _, err := c.WriteAt(ctx, f, data, 0); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(ctx, f, 0, -1); err != nil {
				t.Fatal(err)
			}
			if st := c.Stats(); st.Dirty != 0 || st.WriteBackBytes != uint64(tc.size) {
				t.Errorf("stats %+v: want no dirty pages and %d bytes written back", st, tc.size)
			}
			if !bytes.Equal(contents(t, f), data) {
				t.Error("file differs after the flush")
			}
		})
	}
}

// TestCacheEvictionWritesBack: a cache smaller than what is written
// evicts dirty pages by writing them back first.
func TestCacheEvictionWritesBack(t *testing.T) {
	e := newEnv(t, envConfig{cache: NewCache(4*4096, 4096)})
	ctx := context.Background()
	c := e.d.Cache()
	f := e.file("evict", make([]byte, 16*4096))
	data := pattern(16*4096, 4)
	for i := range 16 {
		if _, err := c.WriteAt(ctx, f, data[i*4096:(i+1)*4096], int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	// Eviction writes a victim back together with its dirty neighbours,
	// so more than the 12 victims may have been written back.
	if st.Bytes != 4*4096 || st.Evictions != 12 || st.WriteBackBytes < 12*4096 || st.Dirty > 4 {
		t.Errorf("stats %+v: want 4 pages cached, 12 evicted and written back", st)
	}
	// The evicted pages are in the file already, before any flush.
	if got := contents(t, f); !bytes.Equal(got[:12*4096], data[:12*4096]) {
		t.Error("evicted dirty pages were not written back")
	}
	if err := c.Flush(ctx, f, 0, -1); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(contents(t, f), data) {
		t.Error("file differs after the flush")
	}
}

// TestCacheCoherentWithTarget: a T read sees bytes written through the
// cache (they are written back first), and a K read after a T write sees
// the target's bytes (the cache's pages are dropped).
func TestCacheCoherentWithTarget(t *testing.T) {
	e := newEnv(t, envConfig{cache: NewCache(64<<20, 4096)})
	ctx := context.Background()
	c := e.d.Cache()
	data := pattern(32*4096, 5)
	f := e.file("coherent", data)
	if err := c.Warm(ctx, f, 1, false, 0); err != nil {
		t.Fatal(err)
	}
	// Write via the cache, then read at the target.
	fresh := pattern(3*4096+17, 6)
	if _, err := c.WriteAt(ctx, f, fresh, 4096+11); err != nil {
		t.Fatal(err)
	}
	copy(data[4096+11:], fresh)
	res, err := e.d.Read(ctx, Target, ReadCall{File: f, Fn: e.fns["stats64"], Off: 0, N: len(data), OutCap: functions.StatsSize})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.Output, testfuncs.Native(t, "stats64", data, functions.StatsSize)) || res.TargetMicros == 0 {
		t.Error("a T read did not see the bytes written through the cache")
	}
	// Write at the target over cached pages, then read on the host.
	bm := bytes.Repeat([]byte{0x0f}, 2*4096)
	if _, err := e.d.Write(ctx, Target, WriteCall{File: f, Fn: e.fns["bitmap"], Off: 8 * 4096, N: 4 * 4096, Data: functions.EncodeBitmap(bm, 8*len(bm))}); err != nil {
		t.Fatal(err)
	}
	// Only the output's blocks (2 pages of the 4) are written: the rest
	// of the range keeps its bytes.
	copy(data[8*4096:], bm)
	res, err = e.d.Read(ctx, Host, ReadCall{File: f, Fn: e.fns["stats64"], Off: 0, N: len(data), OutCap: functions.StatsSize})
	if err != nil {
		t.Fatal(err)
	}
	want := data
	if !bytes.Equal(res.Output, testfuncs.Native(t, "stats64", want, functions.StatsSize)) {
		t.Error("a K read after a T write did not see the target's bytes")
	}
	got := make([]byte, len(want))
	if _, err := c.ReadAt(ctx, f, got, 0); err != nil || !bytes.Equal(got, want) || !bytes.Equal(contents(t, f), want) {
		t.Errorf("cache and file disagree after a T write: %v", err)
	}
}

func BenchmarkCachedFraction(b *testing.B) {
	e := newEnv(b, envConfig{cache: NewCache(64<<20, 4096)})
	ctx := context.Background()
	c := e.d.Cache()
	f := e.file("bench", make([]byte, 16<<20)) // 4096 pages
	if err := c.Warm(ctx, f, 0.5, true, 1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Cached(f, 4096*100+17, 8<<20)
	}
}

// TestCacheWriteBackHandle: pages written through one handle and evicted
// by reads through a read-only one are written back through the writable
// one.
func TestCacheWriteBackHandle(t *testing.T) {
	e := newEnv(t, envConfig{cache: NewCache(4*4096, 4096)})
	ctx := context.Background()
	c := e.d.Cache()
	w := e.file("handles", make([]byte, 16*4096))
	r, err := e.fsys.Open("handles")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data := pattern(4*4096, 8)
	if _, err := c.WriteAt(ctx, w, data, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12*4096)
	if _, err := c.ReadAt(ctx, r, buf, 4*4096); err != nil {
		t.Fatalf("reads evicting dirty pages: %v", err)
	}
	if st := c.Stats(); st.Dirty != 0 || st.WriteBackBytes != 4*4096 {
		t.Errorf("after eviction: %+v", st)
	}
	if !bytes.Equal(contents(t, w)[:4*4096], data) {
		t.Error("dirty pages evicted by another handle's reads were not written back")
	}
}
