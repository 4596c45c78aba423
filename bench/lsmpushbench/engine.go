package lsmpushbench

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/kv/lsm"
)

// engine is a store under test.
type engine interface {
	Get(key []byte) ([]byte, error) // a missing key is an error
	Set(key, value []byte) error
	// settle flushes and waits for compactions to finish.
	settle(ctx context.Context) error
	cache() (hits, misses int64)
	pushdown() lsm.PushdownStats
	Close() error
}

type lsmEngine struct{ *lsm.DB }

func (e lsmEngine) Set(k, v []byte) error { return e.DB.Set(k, v, nil) }
func (e lsmEngine) cache() (int64, int64) {
	m := e.Metrics()
	return m.BlockCache.Hits, m.BlockCache.Misses
}
func (e lsmEngine) pushdown() lsm.PushdownStats { return e.PushdownStats() }
func (e lsmEngine) settle(ctx context.Context) error {
	if err := e.Flush(ctx); err != nil {
		return err
	}
	return harness.WaitIdle(ctx, func() bool {
		m := e.Metrics()
		busy := m.Compact.InProgress > 0 || m.Flush.InProgress
		for _, l := range m.Levels {
			busy = busy || l.Score >= 1
		}
		return !busy
	})
}

type pebbleEngine struct {
	d *pebble.DB
	c *pebble.Cache
}

func (e pebbleEngine) Get(k []byte) ([]byte, error) {
	v, closer, err := e.d.Get(k)
	if err != nil {
		return nil, err
	}
	v = append([]byte(nil), v...)
	return v, closer.Close()
}
func (e pebbleEngine) Set(k, v []byte) error { return e.d.Set(k, v, pebble.NoSync) }
func (e pebbleEngine) cache() (int64, int64) {
	m := e.d.Metrics()
	return m.BlockCache.Hits, m.BlockCache.Misses
}
func (e pebbleEngine) pushdown() lsm.PushdownStats { return lsm.PushdownStats{} }
func (e pebbleEngine) settle(ctx context.Context) error {
	return SettlePebble(ctx, e.d)
}
func (e pebbleEngine) Close() error {
	err := e.d.Close()
	e.c.Unref()
	return err
}

// pebbleMetaCache is what Pebble's block cache gets beyond kv/lsm's:
// Pebble keeps index and filter blocks in its cache, kv/lsm keeps them
// pinned outside it, and a benchmark database's are well under this.
const pebbleMetaCache = 2 << 20

// openEngine opens the store of v's mode: kv/lsm (plain or pushdown, in
// v's runtime at v's sampling rate) or Pebble, both on the file system.
func (e *env) openEngine(v variant) (engine, error) {
	if v.Mode == ModePebble {
		c := pebble.NewCache(e.cfg.BlockCache + pebbleMetaCache)
		po := &pebble.Options{
			FS: pebbleFS{e.fsys}, Cache: c, MemTableSize: memTableSize, LBaseMaxBytes: lbaseMaxBytes,
			Logger: pebbleLog{},
		}
		for i := range po.Levels {
			po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
			po.Levels[i].BlockSize = 4096
		}
		for i := range po.TargetFileSizes {
			po.TargetFileSizes[i] = 1 << 20 << i // kv/lsm's: doubling per level
		}
		for i := range po.Levels {
			po.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
		}
		d, err := pebble.Open(pebbleDir, po)
		if err != nil {
			c.Unref()
			return nil, fmt.Errorf("bench: open pebble: %w", err)
		}
		return pebbleEngine{d, c}, nil
	}
	d, err := lsm.Open(e.fsys.VFS(), dbDir, e.options(v))
	if err != nil {
		return nil, err
	}
	return lsmEngine{d}, nil
}

// pebbleLog drops Pebble's informational messages.
type pebbleLog struct{}

func (pebbleLog) Infof(string, ...any) {}
func (pebbleLog) Errorf(format string, args ...any) {
	slog.Default().Error(fmt.Sprintf("pebble: "+format, args...))
}
func (pebbleLog) Fatalf(format string, args ...any) { panic(fmt.Sprintf("pebble: "+format, args...)) }
