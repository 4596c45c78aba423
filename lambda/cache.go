package lambda

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nearstore/nearstore/offloadfs"
)

// Defaults of NewCache.
const (
	// DefaultPageSize is the cache's unit. Device blocks are 512 or 4096
	// bytes; a larger page keeps the per-page bookkeeping small next to the
	// data, and page boundaries are what Cached counts.
	DefaultPageSize = 16 << 10
	// DefaultCacheSize is the default capacity in bytes.
	DefaultCacheSize = 256 << 20
)

// costWindow is how many recent I/O runs the cache's per-byte cost
// estimates cover.
const costWindow = 32

// Cache is the host block cache for offloadfs files: the page-cache
// analogue that modes B and K read through and that decides how much of a
// λ read's range is already on the host (Cached). Pages are PageSize bytes
// of a file, keyed by inode, kept in one LRU list under a byte capacity.
// Writes are write-back: pages become dirty and reach the file at Flush,
// Drop or eviction.
//
// Every write-back (Flush, Drop, eviction) happens under the cache's lock,
// so two write-backs of one page can never land out of order; misses are
// read without the lock, and a per-file generation (bumped by every
// write-back and Invalidate) keeps pages read before such a change from
// being cached after it.
//
// All I/O on a file should go through the cache while it holds pages of
// the file; bytes changed behind its back (other than by a λ write, which
// the dispatcher follows with Invalidate) are not seen until the pages are
// dropped.
type Cache struct {
	pageSize int
	capacity int64

	mu    sync.Mutex
	files map[uint64]*cfile
	lru   list.List // of *page, most recently used at the front
	bytes int64
	dirty int
	st    CacheStats
	miss  costRing // miss reads: seconds per byte
	wb    costRing // write-backs: seconds per byte
	// free holds the buffers of dropped pages for new ones (at most a
	// capacity's worth), so a cache that keeps missing does not keep the
	// garbage collector busy.
	free [][]byte
	// wbBuf gathers one write of a write-back (writeBackChunk bytes).
	wbBuf []byte
}

// cfile is one file's pages.
type cfile struct {
	ino     uint64
	f       *offloadfs.File // the last handle used, for write-back on eviction
	pages   map[int64]*page
	present []uint64 // bitset of cached pages, for Cached
	gen     uint64   // bumped by write-backs and Invalidate
}

// page is one cached page: data holds PageSize bytes, of which the first n
// are the file's (the page holding the end of the file is short); the rest
// are zero.
type page struct {
	cf    *cfile
	idx   int64
	data  []byte
	n     int
	dirty bool
	elem  *list.Element
}

// CacheStats are a cache's cumulative counters and current occupancy.
type CacheStats struct {
	Hits, Misses   uint64 // pages found / not found by reads
	ReadBytes      uint64 // bytes read from files to fill misses
	Reads          uint64 // file reads issued for misses
	WriteBackBytes uint64 // bytes written back to files
	Evictions      uint64 // pages evicted for capacity
	Dirty          int    // pages dirty now
	Bytes          int64  // bytes cached now (whole pages)
}

// costRing keeps the last costWindow (bytes, time) pairs of a kind of I/O.
type costRing struct {
	bytes [costWindow]int64
	secs  [costWindow]float64
	n     int
	next  int
}

func (r *costRing) add(bytes int64, d time.Duration) {
	if bytes <= 0 {
		return
	}
	r.bytes[r.next], r.secs[r.next] = bytes, d.Seconds()
	r.next = (r.next + 1) % costWindow
	r.n = min(r.n+1, costWindow)
}

// perByte is the seconds per byte over the window (total time over total
// bytes, so large runs count by their size, not as one sample each), or 0
// with no samples.
func (r *costRing) perByte() float64 {
	var b int64
	var s float64
	for i := range r.n {
		b += r.bytes[i]
		s += r.secs[i]
	}
	if b == 0 {
		return 0
	}
	return s / float64(b)
}

// NewCache returns a cache of capacity bytes (at least one page) with
// pages of pageSize bytes (0: DefaultPageSize; otherwise a power of two of
// at least 512).
func NewCache(capacity int64, pageSize int) *Cache {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	if pageSize < 512 || pageSize&(pageSize-1) != 0 {
		panic(fmt.Sprintf("lambda: NewCache: page size %d is not a power of two of at least 512", pageSize))
	}
	return &Cache{pageSize: pageSize, capacity: max(capacity, int64(pageSize)), files: make(map[uint64]*cfile)}
}

// PageSize returns the cache's page size.
func (c *Cache) PageSize() int { return c.pageSize }

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	st.Dirty, st.Bytes = c.dirty, c.bytes
	return st
}

// costs returns the recent seconds per byte of miss reads and of
// write-backs (0: none measured).
func (c *Cache) costs() (miss, writeBack float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.miss.perByte(), c.wb.perByte()
}

// fileLocked returns f's pages, creating the entry. The handle kept for
// write-backs is the last one written through (a read-only handle that
// only read could not write the pages back). Callers hold mu.
func (c *Cache) fileLocked(f *offloadfs.File, write bool) *cfile {
	ino := f.Ino()
	cf := c.files[ino]
	if cf == nil {
		cf = &cfile{ino: ino, pages: make(map[int64]*page)}
		c.files[ino] = cf
	}
	if write || cf.f == nil {
		cf.f = f
	}
	return cf
}

func (cf *cfile) setPresent(idx int64, on bool) {
	w := int(idx / 64)
	if on {
		if w >= len(cf.present) {
			cf.present = slices.Grow(cf.present, w+1-len(cf.present))[:w+1]
		}
		cf.present[w] |= 1 << (idx % 64)
	} else if w < len(cf.present) {
		cf.present[w] &^= 1 << (idx % 64)
	}
}

// each calls fn for the cached pages first..last, in no particular order:
// by index over a short range, over the file's pages otherwise, so a
// call on a few pages of a file with many costs only those few.
func (cf *cfile) each(first, last int64, fn func(p *page)) {
	if last-first < int64(len(cf.pages)) {
		for idx := first; idx <= last; idx++ {
			if p := cf.pages[idx]; p != nil {
				fn(p)
			}
		}
		return
	}
	for idx, p := range cf.pages {
		if idx >= first && idx <= last {
			fn(p)
		}
	}
}

// count returns how many pages of [first, last] are present.
func (cf *cfile) count(first, last int64) int {
	n := 0
	for w := first / 64; w <= last/64 && int(w) < len(cf.present); w++ {
		word := cf.present[w]
		if w == first/64 {
			word &= ^uint64(0) << (first % 64)
		}
		if w == last/64 {
			word &= ^uint64(0) >> (63 - last%64)
		}
		n += bits.OnesCount64(word)
	}
	return n
}

// fileSize is f's current size.
func fileSize(f *offloadfs.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// pageLen is how many of page idx's bytes lie inside a file of size bytes.
func (c *Cache) pageLen(idx, size int64) int {
	return int(max(0, min(int64(c.pageSize), size-idx*int64(c.pageSize))))
}

// lookupLocked returns page idx if it is cached and whole for a file of
// size bytes. A clean page cached when the file was shorter is dropped
// (the file grew: its tail must be read); a dirty one grows, since the
// bytes past its old end were zeroed by the growth and its buffer holds
// zeroes there. Callers hold mu.
func (c *Cache) lookupLocked(cf *cfile, idx, size int64) *page {
	p := cf.pages[idx]
	if p == nil {
		return nil
	}
	if want := c.pageLen(idx, size); p.n < want {
		if !p.dirty {
			c.removeLocked(p)
			return nil
		}
		p.n = want
	}
	c.lru.MoveToFront(p.elem)
	return p
}

// bufLocked returns a page buffer; its bytes are arbitrary. Callers hold
// mu.
func (c *Cache) bufLocked() []byte {
	if k := len(c.free); k > 0 {
		b := c.free[k-1]
		c.free = c.free[:k-1]
		return b
	}
	return make([]byte, c.pageSize)
}

// insertLocked caches a page. Callers hold mu.
func (c *Cache) insertLocked(cf *cfile, idx int64, data []byte, n int, dirty bool) *page {
	p := &page{cf: cf, idx: idx, data: data, n: n, dirty: dirty}
	p.elem = c.lru.PushFront(p)
	cf.pages[idx] = p
	cf.setPresent(idx, true)
	c.bytes += int64(c.pageSize)
	if dirty {
		c.dirty++
	}
	return p
}

// removeLocked drops a page, dirty or not. Callers hold mu.
func (c *Cache) removeLocked(p *page) {
	c.lru.Remove(p.elem)
	delete(p.cf.pages, p.idx)
	p.cf.setPresent(p.idx, false)
	c.bytes -= int64(c.pageSize)
	if int64(len(c.free)) < c.capacity/int64(c.pageSize) {
		c.free = append(c.free, p.data)
	}
	p.data = nil
	if p.dirty {
		c.dirty--
	}
	// The file's entry stays (with its generation) even when empty, so
	// a read in flight can tell its pages went stale; Drop removes it.
}

// evictLocked evicts least recently used pages until the cache fits its
// capacity, writing dirty ones back first (coalesced with their dirty
// neighbours). A page whose write-back fails stays cached and dirty (the
// data must not be lost), so the cache may stay over capacity; the error
// is returned. Callers hold mu.
func (c *Cache) evictLocked() (time.Duration, error) {
	var wbTime time.Duration
	var errs []error
	skip := make(map[*page]bool)
	for e := c.lru.Back(); c.bytes > c.capacity && e != nil; {
		p := e.Value.(*page)
		e = e.Prev()
		if skip[p] {
			continue
		}
		if p.dirty {
			// Write back the run of dirty pages around p in one write.
			lo, hi := p.idx, p.idx
			for q := p.cf.pages[lo-1]; q != nil && q.dirty; q = p.cf.pages[lo-1] {
				lo--
			}
			for q := p.cf.pages[hi+1]; q != nil && q.dirty; q = p.cf.pages[hi+1] {
				hi++
			}
			began := time.Now()
			err := c.writeBackLocked(p.cf, lo, hi)
			wbTime += time.Since(began)
			if err != nil {
				errs = append(errs, err)
				skip[p] = true
				continue
			}
			// Write-back may have moved nothing in the list, but e may now
			// point at a page of the run, which is clean and fine to evict.
		}
		c.removeLocked(p)
		c.st.Evictions++
	}
	return wbTime, errors.Join(errs...)
}

// writeBackChunk caps one write of a write-back. A long run of dirty
// pages (a whole file written through the cache) is written a chunk at a
// time from one reused buffer, rather than gathered into one buffer as
// large as the run: a 1 GiB flush used to allocate and fault in 1 GiB, and
// that cost, outside the timed write, was half of what the flush took, so
// the measured write-back cost (which prices a host-side λ write's output)
// was half the real one.
const writeBackChunk = 4 << 20

// writeBackLocked writes dirty pages lo..hi of cf (all present and
// dirty, contiguous) in writes of at most writeBackChunk bytes and marks
// them clean. Bytes past the file's current end are not written (the file
// shrank meanwhile: they are no longer the file's). Each write's measured
// cost includes gathering its pages. Callers hold mu.
func (c *Cache) writeBackLocked(cf *cfile, lo, hi int64) error {
	ps := int64(c.pageSize)
	size, err := fileSize(cf.f)
	if err != nil {
		return fmt.Errorf("lambda: cache write-back: %w", err)
	}
	last := cf.pages[hi]
	end := min(hi*ps+int64(last.n), size)
	per := max(writeBackChunk/ps, 1) // pages per write
	for first := lo; first <= hi; first += per {
		start := first * ps
		stop := min(first+per-1, hi)
		cend := min((stop+1)*ps, end)
		if cend <= start {
			break
		}
		began := time.Now()
		if int64(cap(c.wbBuf)) < cend-start {
			c.wbBuf = make([]byte, per*ps)
		}
		buf := c.wbBuf[:cend-start]
		for i := first; i <= stop && (i-first)*ps < int64(len(buf)); i++ {
			copy(buf[(i-first)*ps:], cf.pages[i].data[:cf.pages[i].n])
		}
		if _, err := cf.f.WriteAt(buf, start); err != nil {
			// The pages written so far stay dirty too: writing them
			// again is harmless, losing track of them is not.
			return fmt.Errorf("lambda: cache write-back of [%d, %d): %w", start, cend, err)
		}
		c.wb.add(cend-start, time.Since(began))
		c.st.WriteBackBytes += uint64(cend - start)
	}
	for i := lo; i <= hi; i++ {
		p := cf.pages[i]
		p.dirty = false
		c.dirty--
	}
	cf.gen++
	return nil
}

// flushLocked writes back f's dirty pages first..last, coalescing
// contiguous ones. Callers hold mu.
func (c *Cache) flushLocked(cf *cfile, first, last int64) error {
	var idxs []int64
	cf.each(first, last, func(p *page) {
		if p.dirty {
			idxs = append(idxs, p.idx)
		}
	})
	slices.Sort(idxs)
	for i := 0; i < len(idxs); {
		j := i
		for j+1 < len(idxs) && idxs[j+1] == idxs[j]+1 {
			j++
		}
		if err := c.writeBackLocked(cf, idxs[i], idxs[j]); err != nil {
			return err
		}
		i = j + 1
	}
	return nil
}

// readStats tells a read's caller what it cost: the bytes read from the
// file for misses, in how many reads, and how long they took.
type readStats struct {
	missBytes int64
	reads     int
	missTime  time.Duration
}

// ReadAt reads len(p) bytes of f at off through the cache, with io.ReaderAt's
// semantics: fewer bytes only at the end of the file, with io.EOF. Missing
// pages are read from the file, each run of contiguous missing pages in
// one read, and cached.
func (c *Cache) ReadAt(ctx context.Context, f *offloadfs.File, p []byte, off int64) (int, error) {
	n, _, err := c.readAt(ctx, f, p, off, 0)
	return n, err
}

func (c *Cache) readAt(ctx context.Context, f *offloadfs.File, p []byte, off int64, maxRun int64) (int, readStats, error) {
	var rs readStats
	if off < 0 {
		return 0, rs, &iofs.PathError{Op: "read", Path: f.Name(), Err: fmt.Errorf("%w: negative offset", iofs.ErrInvalid)}
	}
	size, err := fileSize(f)
	if err != nil {
		return 0, rs, err
	}
	if off >= size {
		return 0, rs, io.EOF
	}
	want := len(p)
	p = p[:min(int64(len(p)), size-off)]
	if len(p) == 0 {
		return 0, rs, nil
	}
	ps := int64(c.pageSize)
	first, last := off/ps, (off+int64(len(p))-1)/ps

	// Copy what is cached; note the runs of missing pages (each at most
	// maxRun bytes, unless 0).
	type run struct{ lo, hi int64 }
	var runs []run
	c.mu.Lock()
	cf := c.fileLocked(f, false)
	gen := cf.gen
	for idx := first; idx <= last; idx++ {
		if pg := c.lookupLocked(cf, idx, size); pg != nil {
			c.copyOut(p, off, pg)
			c.st.Hits++
			continue
		}
		c.st.Misses++
		if k := len(runs); k > 0 && runs[k-1].hi == idx-1 && (maxRun == 0 || (idx-runs[k-1].lo+1)*ps <= maxRun) {
			runs[k-1].hi = idx
		} else {
			runs = append(runs, run{idx, idx})
		}
	}
	c.mu.Unlock()

	var errs []error
	for _, r := range runs {
		if err := ctx.Err(); err != nil {
			return 0, rs, err
		}
		start := r.lo * ps
		end := min((r.hi+1)*ps, size)
		// Whole pages inside the caller's range are read straight into
		// it; a run with a page sticking out goes through a buffer.
		var buf []byte
		direct := start >= off && end <= off+int64(len(p))
		if direct {
			buf = p[start-off : end-off]
		} else {
			buf = make([]byte, end-start)
		}
		began := time.Now()
		k, err := f.ReadAt(buf, start)
		took := time.Since(began)
		rs.reads++
		rs.missBytes += int64(k)
		rs.missTime += took
		if err != nil && !(errors.Is(err, io.EOF) && int64(k) == end-start) {
			return 0, rs, fmt.Errorf("lambda: cache read of [%d, %d): %w", start, end, err)
		}
		c.mu.Lock()
		if maxRun == 0 {
			// Split reads cost more per byte than the cache's own:
			// they are not what a miss costs.
			c.miss.add(int64(k), took)
		}
		c.st.ReadBytes += uint64(k)
		c.st.Reads++
		for idx := r.lo; idx <= r.hi; idx++ {
			b := buf[(idx-r.lo)*ps : min((idx-r.lo+1)*ps, int64(len(buf)))]
			if pg := c.lookupLocked(cf, idx, size); pg != nil {
				// Cached meanwhile (a write, say): that copy is newer.
				c.copyOut(p, off, pg)
				continue
			}
			if !direct {
				c.copyBytes(p, off, idx*ps, b)
			}
			if cf.gen != gen || c.files[cf.ino] != cf {
				// Written back or invalidated meanwhile: these bytes may
				// be older than the file's; hand them out (the read and
				// the change were concurrent) but do not cache them.
				continue
			}
			data := c.bufLocked()
			clear(data[copy(data, b):])
			c.insertLocked(cf, idx, data, len(b), false)
		}
		if _, err := c.evictLocked(); err != nil {
			errs = append(errs, err)
		}
		c.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return 0, rs, err
	}
	if len(p) < want {
		return len(p), rs, io.EOF
	}
	return len(p), rs, nil
}

// copyOut copies the part of page pg inside [off, off+len(p)) into p.
func (c *Cache) copyOut(p []byte, off int64, pg *page) {
	c.copyBytes(p, off, pg.idx*int64(c.pageSize), pg.data[:pg.n])
}

// copyBytes copies the part of b (the file's bytes at boff) inside
// [off, off+len(p)) into p.
func (c *Cache) copyBytes(p []byte, off, boff int64, b []byte) {
	lo := max(off, boff)
	hi := min(off+int64(len(p)), boff+int64(len(b)))
	if hi > lo {
		copy(p[lo-off:hi-off], b[lo-boff:hi-boff])
	}
}

// WriteAt writes p at off of f into the cache: the pages become dirty and
// reach the file later (Flush, Drop, eviction). A write past the file's
// end grows the file (Truncate) first, so the file's size is always right;
// a page only partly written is read first unless it lies past the old
// end.
func (c *Cache) WriteAt(ctx context.Context, f *offloadfs.File, p []byte, off int64) (int, error) {
	n, _, err := c.writeAt(ctx, f, p, off)
	return n, err
}

// writeAt is WriteAt, also returning the time spent writing back pages it
// evicted.
func (c *Cache) writeAt(ctx context.Context, f *offloadfs.File, p []byte, off int64) (int, time.Duration, error) {
	if off < 0 {
		return 0, 0, &iofs.PathError{Op: "write", Path: f.Name(), Err: fmt.Errorf("%w: negative offset", iofs.ErrInvalid)}
	}
	if len(p) == 0 {
		return 0, 0, nil
	}
	size, err := fileSize(f)
	if err != nil {
		return 0, 0, err
	}
	end := off + int64(len(p))
	oldSize := size
	if end > size {
		if err := f.Truncate(end); err != nil {
			return 0, 0, err
		}
		size = end
	}
	ps := int64(c.pageSize)
	first, last := off/ps, (end-1)/ps
	// The pages only partly covered that hold old bytes must be read
	// first: at most the first and the last.
	var partial []int64
	for _, idx := range []int64{first, last} {
		covered := off <= idx*ps && end >= min((idx+1)*ps, size)
		if !covered && idx*ps < oldSize && (len(partial) == 0 || partial[0] != idx) {
			partial = append(partial, idx)
		}
	}
	for _, idx := range partial {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		// A read through the cache caches the page (unless something
		// raced it out; then the loop below reads it again).
		buf := make([]byte, ps)
		if _, err := c.ReadAt(ctx, f, buf[:c.pageLen(idx, oldSize)], idx*ps); err != nil && !errors.Is(err, io.EOF) {
			return 0, 0, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cf := c.fileLocked(f, true)
	for idx := first; idx <= last; idx++ {
		pg := c.lookupLocked(cf, idx, size)
		if pg == nil {
			data := c.bufLocked()
			clear(data)
			covered := off <= idx*ps && end >= min((idx+1)*ps, size)
			if !covered && idx*ps < oldSize {
				// Evicted or invalidated since it was read: read it again,
				// under the lock this time.
				k, err := f.ReadAt(data[:c.pageLen(idx, oldSize)], idx*ps)
				if err != nil && !errors.Is(err, io.EOF) {
					return 0, 0, fmt.Errorf("lambda: cache read of page %d: %w", idx, err)
				}
				c.st.ReadBytes += uint64(k)
				c.st.Reads++
			}
			pg = c.insertLocked(cf, idx, data, c.pageLen(idx, size), false)
		}
		pstart := idx * ps
		lo, hi := max(off, pstart), min(end, pstart+ps)
		copy(pg.data[lo-pstart:hi-pstart], p[lo-off:hi-off])
		pg.n = max(pg.n, int(hi-pstart))
		if !pg.dirty {
			pg.dirty = true
			c.dirty++
		}
	}
	wbTime, err := c.evictLocked()
	if err != nil {
		return len(p), wbTime, err
	}
	return len(p), wbTime, nil
}

// Flush writes back f's dirty pages overlapping [off, off+n) (n < 0: to
// the end of the file), contiguous ones in one write each.
func (c *Cache) Flush(ctx context.Context, f *offloadfs.File, off, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	first, last, ok := c.pageRange(off, n)
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cf := c.files[f.Ino()]
	if cf == nil || c.dirty == 0 {
		return nil
	}
	cf.f = f
	return c.flushLocked(cf, first, last)
}

// pageRange returns the pages overlapping [off, off+n) (n < 0: to the
// end), or ok false for an empty range.
func (c *Cache) pageRange(off, n int64) (first, last int64, ok bool) {
	off = max(off, 0)
	if n == 0 {
		return 0, 0, false
	}
	ps := int64(c.pageSize)
	if n < 0 || off+n < off {
		return off / ps, math.MaxInt64 / ps, true
	}
	return off / ps, (off + n - 1) / ps, true
}

// Invalidate drops f's pages overlapping [off, off+n) (n < 0: to the end),
// after something changed the file's bytes there behind the cache (a λ
// write at the target). Dirty pages are dropped too: flush them first.
func (c *Cache) Invalidate(f *offloadfs.File, off, n int64) {
	first, last, ok := c.pageRange(off, n)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cf := c.files[f.Ino()]
	if cf == nil {
		return
	}
	cf.gen++
	var drop []*page
	cf.each(first, last, func(p *page) { drop = append(drop, p) })
	for _, p := range drop {
		c.removeLocked(p)
	}
}

// Cached returns the fraction of the pages overlapping [off, off+n) that
// are cached: a popcount over the file's page bitset. An empty range
// counts as fully cached (nothing to read).
func (c *Cache) Cached(f *offloadfs.File, off, n int64) float64 {
	if n <= 0 {
		return 1
	}
	first, last, _ := c.pageRange(off, n)
	c.mu.Lock()
	defer c.mu.Unlock()
	cf := c.files[f.Ino()]
	if cf == nil {
		return 0
	}
	return float64(cf.count(first, last)) / float64(last-first+1)
}

// warmChunk bounds the buffer Warm reads through.
const warmChunk = 4 << 20

// Warm brings fraction (0 to 1) of f's pages into the cache: the first
// ones (sequential) or a random choice of them (random, seeded by seed),
// rounded to whole pages. It is how benchmarks set up a warm host cache.
func (c *Cache) Warm(ctx context.Context, f *offloadfs.File, fraction float64, random bool, seed uint64) error {
	size, err := fileSize(f)
	if err != nil {
		return err
	}
	ps := int64(c.pageSize)
	pages := (size + ps - 1) / ps
	k := int64(math.Round(min(max(fraction, 0), 1) * float64(pages)))
	var idxs []int64
	if random {
		perm := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)).Perm(int(pages))[:k]
		for _, i := range perm {
			idxs = append(idxs, int64(i))
		}
		slices.Sort(idxs)
	} else {
		for i := range k {
			idxs = append(idxs, i)
		}
	}
	buf := make([]byte, min(warmChunk, k*ps))
	for i := 0; i < len(idxs); {
		// A run of consecutive pages, at most a buffer's worth.
		j := i
		for j+1 < len(idxs) && idxs[j+1] == idxs[j]+1 && (int64(j+2-i))*ps <= int64(len(buf)) {
			j++
		}
		start := idxs[i] * ps
		n := min(int64(j+1-i)*ps, size-start)
		if _, err := c.ReadAt(ctx, f, buf[:n], start); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		i = j + 1
	}
	return nil
}

// Drop writes back every dirty page, then empties the cache (the
// drop_caches analogue). Pages whose write-back fails stay, dirty.
func (c *Cache) Drop(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, cf := range c.files {
		if err := c.flushLocked(cf, 0, math.MaxInt64); err != nil {
			errs = append(errs, err)
		}
	}
	for e := c.lru.Front(); e != nil; {
		p := e.Value.(*page)
		e = e.Next()
		if !p.dirty {
			c.removeLocked(p)
		}
	}
	for ino, cf := range c.files {
		cf.gen++
		if len(cf.pages) == 0 {
			delete(c.files, ino)
		}
	}
	c.free = nil // dropping caches gives their memory back
	return errors.Join(errs...)
}
