// Package lsmstore adapts kv/lsm to kv/chain's Store: a replica of a
// chain kept in an LSM tree on a local directory.
//
// Layout in the tree: user key k is stored under 'u'+k; the key "m"
// holds the applied sequence number (8 bytes, big-endian), written in the
// same batch as every write, so the two never disagree after a crash.
package lsmstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/vfs"
)

var (
	metaKey   = []byte("m")
	userLower = []byte("u")
	userUpper = []byte("v")
)

// Store is a chain.Store on an lsm.DB.
type Store struct {
	db      *lsm.DB
	applied atomic.Uint64
	// wo: writes are not synced one by one; a chain survives the loss of
	// a node's unsynced tail because every other replica holds it, and a
	// restarted node rejoins through COPY.
	wo *lsm.WriteOptions
}

var _ chain.Store = (*Store)(nil)

// Open opens (or creates) the store in dir on the local file system.
func Open(dir string, opts lsm.Options) (*Store, error) {
	db, err := lsm.Open(vfs.OS(""), dir, opts)
	if err != nil {
		return nil, fmt.Errorf("lsmstore: %w", err)
	}
	s := &Store{db: db}
	a, err := ReadApplied(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.applied.Store(a)
	return s, nil
}

// ReadApplied reads the applied sequence number recorded in db (0 if
// none): the layout's "m" key.
func ReadApplied(db *lsm.DB) (uint64, error) {
	v, err := db.Get(metaKey)
	switch {
	case errors.Is(err, lsm.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("lsmstore: read applied: %w", err)
	case len(v) != 8:
		return 0, fmt.Errorf("lsmstore: applied record is %d bytes, want 8", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// DB is the tree underneath, for its metrics.
func (s *Store) DB() *lsm.DB { return s.db }

// WriteBatch is the batch of write seq in the layout: op on its user
// key and the applied record, in one batch.
func WriteBatch(seq uint64, op chain.Op) *lsm.Batch {
	b := lsm.NewBatch()
	if op.Delete {
		b.Delete(userKey(op.Key))
	} else {
		b.Set(userKey(op.Key), op.Value)
	}
	b.Set(metaKey, seqBytes(seq))
	return b
}

// ResetBatch deletes every user key and records applied 0.
func ResetBatch() *lsm.Batch {
	b := lsm.NewBatch()
	b.DeleteRange(userLower, userUpper)
	b.Set(metaKey, seqBytes(0))
	return b
}

// ImportBatch sets the KVs of a COPY on their user keys.
func ImportBatch(kvs []chain.KV) *lsm.Batch {
	b := lsm.NewBatch()
	for _, kv := range kvs {
		b.Set(userKey(kv.Key), kv.Value)
	}
	return b
}

// AppliedBatch records seq as applied (the end of a COPY).
func AppliedBatch(seq uint64) *lsm.Batch {
	b := lsm.NewBatch()
	b.Set(metaKey, seqBytes(seq))
	return b
}

// Get reads user key key in db.
func Get(db *lsm.DB, key []byte) ([]byte, bool, error) {
	v, err := db.Get(userKey(key))
	if errors.Is(err, lsm.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

// Close closes the tree.
func (s *Store) Close() error { return s.db.Close() }

func seqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func userKey(k []byte) []byte { return append([]byte{'u'}, k...) }

// Apply implements chain.Store.
func (s *Store) Apply(ctx context.Context, seq uint64, op chain.Op) error {
	if want := s.applied.Load() + 1; seq != want {
		return fmt.Errorf("lsmstore: write %d out of order (next is %d)", seq, want)
	}
	if err := s.db.Apply(ctx, WriteBatch(seq, op), s.wo); err != nil {
		return fmt.Errorf("lsmstore: apply %d: %w", seq, err)
	}
	s.applied.Store(seq)
	return nil
}

// Get implements chain.Store.
func (s *Store) Get(_ context.Context, key []byte) ([]byte, bool, error) {
	return Get(s.db, key)
}

// Applied implements chain.Store.
func (s *Store) Applied() uint64 { return s.applied.Load() }

// Reset implements chain.Store: one range deletion over the user keys.
func (s *Store) Reset(ctx context.Context) error {
	if err := s.db.Apply(ctx, ResetBatch(), s.wo); err != nil {
		return fmt.Errorf("lsmstore: reset: %w", err)
	}
	s.applied.Store(0)
	return nil
}

// Import implements chain.Store.
func (s *Store) Import(ctx context.Context, kvs []chain.KV) error {
	if err := s.db.Apply(ctx, ImportBatch(kvs), s.wo); err != nil {
		return fmt.Errorf("lsmstore: import: %w", err)
	}
	return nil
}

// SetApplied implements chain.Store.
func (s *Store) SetApplied(ctx context.Context, seq uint64) error {
	if err := s.db.Apply(ctx, AppliedBatch(seq), &lsm.WriteOptions{Sync: true}); err != nil {
		return fmt.Errorf("lsmstore: set applied: %w", err)
	}
	s.applied.Store(seq)
	return nil
}

// Snapshot implements chain.Store.
func (s *Store) Snapshot() (chain.Snapshot, error) {
	return NewSnapshot(s.db, s.applied.Load()), nil
}

// NewSnapshot is a chain.Snapshot of db now, which holds the writes up
// to seq.
func NewSnapshot(db *lsm.DB, seq uint64) chain.Snapshot {
	return &snapshot{snap: db.NewSnapshot(), seq: seq}
}

type snapshot struct {
	snap *lsm.Snapshot
	seq  uint64
}

func (p *snapshot) Seq() uint64 { return p.seq }

func (p *snapshot) Range(ctx context.Context, fn func(key, value []byte) error) error {
	it, err := p.snap.NewIter(&lsm.IterOptions{LowerBound: userLower, UpperBound: userUpper})
	if err != nil {
		return err
	}
	return eachUser(ctx, it, fn)
}

// eachUser calls fn for every user key of it (the 'u' prefix stripped)
// and closes it.
func eachUser(ctx context.Context, it *lsm.Iterator, fn func(key, value []byte) error) error {
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(it.Key()[1:], it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

func (p *snapshot) Close() error { return p.snap.Close() }

var _ chain.RangeScanner = (*Store)(nil)

// Scan implements chain.RangeScanner with one bounded iterator.
func (s *Store) Scan(ctx context.Context, start, end []byte, fn func(key, value []byte) error) error {
	return Scan(ctx, s.db, start, end, fn)
}

// Scan is chain.RangeScanner's Scan of db in the layout.
func Scan(ctx context.Context, db *lsm.DB, start, end []byte, fn func(key, value []byte) error) error {
	o := &lsm.IterOptions{LowerBound: userKey(start), UpperBound: userUpper}
	if end != nil {
		o.UpperBound = userKey(end)
	}
	it, err := db.NewIter(o)
	if err != nil {
		return err
	}
	return eachUser(ctx, it, fn)
}
