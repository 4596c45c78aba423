// Package leedstore adapts kv/leed to kv/chain's Store: a replica of a
// chain kept in a LEED store on a block device (a volume), so a LEED
// group replicates across targets by chain replication with request
// shipping, its membership in etcd through package cluster.
//
// The mapping: Apply is leed.Store.Apply, whose chains record each
// write's sequence number with the write itself, so Applied() after a
// crash is the last write on the device. Reset formats the device; Import
// stores without sequence numbers; SetApplied writes a checkpoint that
// carries the sequence number. Keys are LEED's: 1 to 16 bytes.
//
// LEED keeps no versions, so a Snapshot is a copy: it reads every key and
// value while the node holds writes back (the node takes snapshots only
// for COPY to a joining node), and holds them in memory until closed.
package leedstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/leed"
)

// Store is a chain.Store on a leed.Store.
type Store struct {
	dev  leed.Device
	opts leed.Options
	// mu guards st: Reset replaces it, everything else reads it.
	mu sync.RWMutex
	st *leed.Store
}

var (
	_ chain.Store        = (*Store)(nil)
	_ chain.RangeScanner = (*Store)(nil)
)

// Open opens the LEED store on dev, formatting it with opts if it holds
// none.
func Open(ctx context.Context, dev leed.Device, opts leed.Options) (*Store, error) {
	opts.Create = true
	st, err := leed.Open(ctx, dev, opts)
	if err != nil {
		return nil, fmt.Errorf("leedstore: %w", err)
	}
	return &Store{dev: dev, opts: opts, st: st}, nil
}

// Leed is the store underneath, for its counters.
func (s *Store) Leed() *leed.Store {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st
}

// Close closes the LEED store (not the device).
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Close()
}

// Apply implements chain.Store. A delete of a key that does not exist is
// a write that changed nothing.
func (s *Store) Apply(ctx context.Context, seq uint64, op chain.Op) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if want := s.st.Applied() + 1; seq != want {
		return fmt.Errorf("leedstore: write %d out of order (next is %d)", seq, want)
	}
	lop := leed.Op{Seq: seq, Kind: leed.OpPut, Key: op.Key, Value: op.Value, Mode: leed.PutAny}
	if op.Delete {
		lop.Kind = leed.OpDelete
	}
	_, err := s.st.Apply(ctx, lop)
	if err != nil && !(op.Delete && errors.Is(err, leed.ErrNotFound)) {
		return fmt.Errorf("leedstore: apply %d: %w", seq, err)
	}
	return nil
}

// Get implements chain.Store.
func (s *Store) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, _, err := s.st.Get(ctx, key)
	switch {
	case errors.Is(err, leed.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("leedstore: get: %w", err)
	}
	return v, true, nil
}

// Applied implements chain.Store.
func (s *Store) Applied() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st.Applied()
}

// Reset implements chain.Store: it formats the device afresh.
func (s *Store) Reset(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.st.Close(); err != nil {
		return fmt.Errorf("leedstore: reset: %w", err)
	}
	if err := leed.Format(s.dev, s.opts); err != nil {
		return fmt.Errorf("leedstore: reset: %w", err)
	}
	st, err := leed.Open(ctx, s.dev, s.opts)
	if err != nil {
		return fmt.Errorf("leedstore: reset: %w", err)
	}
	s.st = st
	return nil
}

// Import implements chain.Store.
func (s *Store) Import(ctx context.Context, kvs []chain.KV) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	batch := make([]leed.KV, len(kvs))
	for i, kv := range kvs {
		batch[i] = leed.KV{Key: kv.Key, Value: kv.Value}
	}
	if _, err := s.st.ImportBatch(ctx, batch); err != nil {
		return fmt.Errorf("leedstore: import: %w", err)
	}
	return nil
}

// SetApplied implements chain.Store.
func (s *Store) SetApplied(ctx context.Context, seq uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.st.SetApplied(ctx, seq); err != nil {
		return fmt.Errorf("leedstore: set applied: %w", err)
	}
	return nil
}

// Snapshot implements chain.Store: it copies every key and value, in key
// order, as of Applied() now (the node calls it while no write runs).
func (s *Store) Snapshot() (chain.Snapshot, error) {
	p := &snapshot{seq: s.Applied()}
	err := s.Scan(context.Background(), nil, nil, func(k, v []byte) error {
		p.kvs = append(p.kvs, chain.KV{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("leedstore: snapshot: %w", err)
	}
	return p, nil
}

// Scan implements chain.RangeScanner: the live keys in [start, end) (end
// nil: no bound) in key order. LEED hashes keys to segments, so a scan
// reads every segment's chain (one device read each) for the keys, sorts
// those in the range, and reads their values (one device read each); a
// key deleted between the two reads is skipped. It runs beside writes: a
// key written meanwhile may show its old or its new value.
func (s *Store) Scan(ctx context.Context, start, end []byte, fn func(key, value []byte) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	all, err := s.st.List(ctx, nil, math.MaxInt)
	if err != nil {
		return fmt.Errorf("leedstore: scan: %w", err)
	}
	keys := all[:0]
	for _, k := range all {
		if bytes.Compare(k, start) >= 0 && (end == nil || bytes.Compare(k, end) < 0) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, bytes.Compare)
	for _, k := range keys {
		v, _, err := s.st.Get(ctx, k)
		switch {
		case errors.Is(err, leed.ErrNotFound):
			continue
		case err != nil:
			return fmt.Errorf("leedstore: scan: key %q: %w", k, err)
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

type snapshot struct {
	seq uint64
	kvs []chain.KV
}

func (p *snapshot) Seq() uint64 { return p.seq }

func (p *snapshot) Range(ctx context.Context, fn func(key, value []byte) error) error {
	for _, kv := range p.kvs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(kv.Key, kv.Value); err != nil {
			return err
		}
	}
	return nil
}

func (p *snapshot) Close() error { p.kvs = nil; return nil }
