package offload

import (
	"container/list"
	"context"
	"sync"
)

// PageSize is the offload cache's unit: 64 KiB of a file's bytes, at
// file offsets that are multiples of it (the last page of a file ends at
// its last device block).
const PageSize = 64 << 10

// pageKey names a page: a file's inode, the extent-map version and the
// contents tag it was read under, and its index in the file. A request
// naming another version or tag of the inode never finds it, so the
// cache never serves bytes older than the version a task was given
// (initiator-centric coherence, as in OffloadFS, at the granularity of
// extent-map versions rather than mtimes).
type pageKey struct {
	ino, version, tag, index uint64
}

type page struct {
	key  pageKey
	data []byte
	pins int           // tasks using it; guarded by Cache.mu
	elem *list.Element // in lru while unpinned; guarded by Cache.mu
}

// Cache is an engine's offload cache: pages of input files read by its
// tasks, within a byte budget. A page a running task uses is pinned and
// is not evicted; when pinned pages fill the budget, further reads go to
// the device uncached. Stale pages are never served (pageKey) and age
// out in LRU order.
type Cache struct {
	budget int64

	mu        sync.Mutex
	used      int64
	pages     map[pageKey]*page
	lru       list.List // unpinned pages, most recently used first
	hits      uint64
	misses    uint64
	evictions uint64
}

// NewCache returns a cache of budget bytes; 0 or less caches nothing
// (and NewCache returns nil, which the engine takes as no cache).
func NewCache(budget int64) *Cache {
	if budget <= 0 {
		return nil
	}
	return &Cache{budget: budget, pages: map[pageKey]*page{}}
}

// CacheStats describe a cache.
type CacheStats struct {
	Budget, Bytes           int64
	Pages                   int
	Hits, Misses, Evictions uint64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Budget: c.budget, Bytes: c.used, Pages: len(c.pages), Hits: c.hits, Misses: c.misses, Evictions: c.evictions}
}

// get returns the page under k, pinned, or nil (a miss).
func (c *Cache) get(k pageKey) *page {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pages[k]
	if p == nil {
		c.misses++
		return nil
	}
	c.hits++
	c.pinLocked(p)
	return p
}

func (c *Cache) pinLocked(p *page) {
	if p.elem != nil {
		c.lru.Remove(p.elem)
		p.elem = nil
	}
	p.pins++
}

// add caches data under k and returns the page, pinned: the one already
// there if another task added it meanwhile. It evicts unpinned pages to
// make room; if pinned pages leave none, it returns nil and caches
// nothing.
func (c *Cache) add(k pageKey, data []byte) *page {
	n := int64(len(data))
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pages[k]; p != nil {
		c.pinLocked(p)
		return p
	}
	for c.used+n > c.budget {
		back := c.lru.Back()
		if back == nil {
			return nil
		}
		old := back.Value.(*page)
		c.lru.Remove(back)
		delete(c.pages, old.key)
		c.used -= int64(len(old.data))
		c.evictions++
	}
	p := &page{key: k, data: data, pins: 1}
	c.pages[k] = p
	c.used += n
	return p
}

// unpin ends a task's use of p; unused, it may be evicted.
func (c *Cache) unpin(p *page) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.pins--
	if p.pins == 0 {
		p.elem = c.lru.PushFront(p)
	}
}

// readCached reads file bytes [off, off+len(p)) of an input through the
// cache, pinning every page it uses until the task ends.
func (e *Env) readCached(ctx context.Context, f *File, p []byte, off uint64) (int, error) {
	end := off + uint64(len(p))
	limit := (f.Size + e.bs - 1) / e.bs * e.bs // the file's last device block
	var hits, misses uint64
	for at := off; at < end; {
		idx := at / PageSize
		k := pageKey{ino: f.ID, version: f.Version, tag: f.ContentTag, index: idx}
		e.statMu.Lock()
		pg := e.pinned[k]
		e.statMu.Unlock()
		fresh := false // a pin taken now
		if pg == nil {
			if pg = e.cache.get(k); pg != nil {
				hits++
				fresh = true
			}
		}
		var data []byte
		if pg != nil {
			data = pg.data
		} else {
			misses++
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			base := idx * PageSize
			data = make([]byte, min(base+PageSize, limit)-base)
			if err := e.deviceIO(f, data, base, false); err != nil {
				return 0, err
			}
			pg = e.cache.add(k, data)
			fresh = pg != nil
		}
		if fresh {
			// A task pins a page once; pages' bytes never change, so
			// data stays good whatever happens to an extra pin.
			e.statMu.Lock()
			if e.pinned[k] == nil {
				e.pinned[k] = pg
				pg = nil
			}
			e.statMu.Unlock()
			if pg != nil {
				e.cache.unpin(pg)
			}
		}
		within := at - idx*PageSize
		k2 := copy(p[at-off:], data[within:])
		at += uint64(k2)
	}
	e.count(func(s *Stats) {
		s.BytesRead += uint64(len(p))
		s.CacheHits += hits
		s.CacheMisses += misses
	})
	return len(p), nil
}
