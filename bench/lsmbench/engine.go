package lsmbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/lsmpushbench"
	"github.com/nearstore/nearstore/kv/lsm"
)

// engine is one side of the benchmark.
type engine interface {
	name() string
	set(k, v []byte) error
	get(k []byte) (bool, error)
	// scan reads up to n records from start on, returning how many.
	scan(start []byte, n int) (int, error)
	// dir is the store's directory, for its size on disk.
	dir() string
	// writeDetail is the bytes written into each level so far (L0: by
	// flushes) and the write stalls (with slowdowns) and their time.
	writeDetail() writeDetail
	// settle flushes and waits for background compactions to finish.
	settle(ctx context.Context) error
	close() error
}

type ourEngine struct {
	d    *lsm.DB
	path string
}

func (e ourEngine) name() string          { return "kv/lsm" }
func (e ourEngine) set(k, v []byte) error { return e.d.Set(k, v, nil) }
func (e ourEngine) close() error          { return e.d.Close() }
func (e ourEngine) get(k []byte) (bool, error) {
	_, err := e.d.Get(k)
	if errors.Is(err, lsm.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
func (e ourEngine) dir() string { return e.path }
func (e ourEngine) scan(start []byte, n int) (int, error) {
	it, err := e.d.NewIter(&lsm.IterOptions{LowerBound: start})
	if err != nil {
		return 0, err
	}
	return scanN(it, start, n)
}
func (e ourEngine) settle(ctx context.Context) error {
	if err := e.d.Flush(ctx); err != nil {
		return err
	}
	return harness.WaitIdle(ctx, func() bool {
		m := e.d.Metrics()
		return m.Compact.InProgress == 0 && !m.Flush.InProgress
	})
}

// iterator is what scanN needs of either engine's iterator.
type iterator interface {
	SeekGE(key []byte) bool
	Next() bool
	Value() []byte
	Error() error
	Close() error
}

// scanN reads up to n records from start, values included (a scan's cost
// is reading them), counts them and closes it.
func scanN(it iterator, start []byte, n int) (int, error) {
	c := 0
	for ok := it.SeekGE(start); ok && c < n; ok = it.Next() {
		c++
		_ = it.Value()
	}
	return c, errors.Join(it.Error(), it.Close())
}

// writeDetail is where an engine's writes went.
type writeDetail struct {
	levelBytes [7]uint64
	stalls     uint64
	stallTime  time.Duration
}

func (e ourEngine) writeDetail() writeDetail {
	m := e.d.Metrics()
	var w writeDetail
	for l := range m.Levels {
		w.levelBytes[l] = m.Levels[l].BytesWritten
	}
	w.stalls = m.WriteStalls.Count + m.WriteSlowdowns.Count
	w.stallTime = m.WriteStalls.Duration + m.WriteSlowdowns.Duration
	return w
}

type pebbleEngine struct {
	d     *pebble.DB
	cache *pebble.Cache
	path  string
	// stalls and stallNanos count Pebble's write stalls (from its event
	// listener).
	stalls, stallNanos *atomic.Uint64
}

func (e pebbleEngine) dir() string { return e.path }
func (e pebbleEngine) writeDetail() writeDetail {
	m := e.d.Metrics()
	var w writeDetail
	for l := range m.Levels {
		w.levelBytes[l] = m.Levels[l].TableBytesFlushed + m.Levels[l].TableBytesCompacted
	}
	w.stalls, w.stallTime = e.stalls.Load(), time.Duration(e.stallNanos.Load())
	return w
}
func (e pebbleEngine) scan(start []byte, n int) (int, error) {
	it, err := e.d.NewIter(&pebble.IterOptions{LowerBound: start})
	if err != nil {
		return 0, err
	}
	return scanN(it, start, n)
}

func (e pebbleEngine) name() string          { return "pebble" }
func (e pebbleEngine) set(k, v []byte) error { return e.d.Set(k, v, pebble.NoSync) }
func (e pebbleEngine) close() error {
	err := e.d.Close()
	e.cache.Unref()
	return err
}
func (e pebbleEngine) get(k []byte) (bool, error) {
	_, closer, err := e.d.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, closer.Close()
}
func (e pebbleEngine) settle(ctx context.Context) error {
	return lsmpushbench.SettlePebble(ctx, e.d)
}

// pebbleLog sends Pebble's log to slog: its routine messages at debug.
type pebbleLog struct{ l *slog.Logger }

func (p pebbleLog) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "engine", "pebble")
}
func (p pebbleLog) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "engine", "pebble")
}
func (p pebbleLog) Fatalf(format string, args ...any) { panic(fmt.Sprintf("pebble: "+format, args...)) }
