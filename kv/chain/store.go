package chain

import "context"

// Op is one write: a put of Value at Key, or a delete of Key.
type Op struct {
	Key, Value []byte
	Delete     bool
}

// KV is one key and its value, as COPY moves them.
type KV struct {
	Key, Value []byte
}

// Store is the local store a node replicates, as the node uses it. The
// node calls it from several goroutines; writes (Apply, Reset, Import,
// SetApplied) are never concurrent with each other, reads (Get, a
// Snapshot's Range) may run beside them.
//
// The contract:
//   - Apply(seq, op) is called with seq == Applied()+1 exactly: writes are
//     applied in the chain's sequence order, with no gaps. The store must
//     record seq atomically with op, so that after a crash Applied() names
//     the last write that survived, and a write shipped again (seq <=
//     Applied()) is skipped by the node, never applied twice.
//   - Snapshot returns a consistent view holding exactly the writes up to
//     Applied() at the call; the node calls it while no write runs, and
//     iterates it afterwards while writes go on (COPY to a joining node).
//   - Reset empties the store and sets Applied() to 0; Import adds KVs (of
//     a COPY, keys in any order, no key twice); SetApplied(seq) ends a
//     COPY: the store now holds the sender's state at seq.
type Store interface {
	Apply(ctx context.Context, seq uint64, op Op) error
	Get(ctx context.Context, key []byte) (value []byte, found bool, err error)
	Applied() uint64
	Snapshot() (Snapshot, error)
	Reset(ctx context.Context) error
	Import(ctx context.Context, kvs []KV) error
	SetApplied(ctx context.Context, seq uint64) error
}

// Snapshot is a consistent read-only view of a Store.
type Snapshot interface {
	// Seq is the last write the view holds.
	Seq() uint64
	// Range calls fn for every live key in key order; fn must not keep
	// the slices.
	Range(ctx context.Context, fn func(key, value []byte) error) error
	Close() error
}
