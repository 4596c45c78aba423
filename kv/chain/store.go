package chain

import (
	"context"

	"github.com/nearstore/nearstore/cluster"
)

// Op is one write: a put of Value at Key, or a delete of Key; or, with
// Record set, a store record.
type Op struct {
	Key, Value []byte
	Delete     bool
	// Tag is the store's own number for the write (0: none): the head's
	// store gives it (HeadStore) and every replica's store gets the write
	// with it.
	Tag uint64
	// Record, if non-nil, makes the op a store record rather than a
	// write: Key, Value and Delete are unset and no key turns dirty. The
	// head's store makes records (Node.Append); they are numbered,
	// logged, shipped and committed as writes are, so every replica's
	// store gets each at its place in the one order of the chain. A
	// store whose head never appends (lsmstore, leedstore) never gets one.
	Record []byte
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

// The optional interfaces below are what a store that is more than a
// map of keys (kv/rubble: a primary that ships its tables to its
// secondaries) needs of the node. A Store without them is replicated as
// the contract above says.

// HeadStore is a Store that completes the ops it applies as the head:
// the op ApplyHead returns (a Tag given, a Record filled in) is what
// the node logs and ships to every other replica. Other replicas get
// Apply with that op.
type HeadStore interface {
	ApplyHead(ctx context.Context, seq uint64, op Op) (Op, error)
}

// Throttler is a Store that holds the head's writes back while it is
// behind (e.g. its memtables wait for flushes): Put calls WaitForRoom
// before it takes the node's lock, so a store that must not block in
// Apply (its background work may need the node, as Append does) still
// bounds its memory.
type Throttler interface {
	WaitForRoom(ctx context.Context) error
}

// ChainWatcher is a Store told every configuration its node installs
// (self is the node's ID), before the node serves under it, and the
// empty Chain when the node stops serving. SetChain is called under the
// node's lock: it must not block; a store changes its role in the
// background.
type ChainWatcher interface {
	SetChain(c cluster.Chain, self string)
}

// Noter is a Store that reports state to the members above it: each
// node sends its store's newest note, and the newest note of every
// member below it, up the chain on its acks, so the head's store hears
// from every replica (kv/rubble: which slots each secondary holds).
// Notes are versioned per origin; a lower version than the one held is
// dropped, so a store's versions must grow across its restarts too.
type Noter interface {
	// Note returns the store's newest note (nil: none), its version,
	// and a channel closed when a newer one exists.
	Note() (body []byte, version uint64, changed <-chan struct{})
	// Noted gets each newer note from a member below the node; it is
	// called under the node's lock and must not block.
	Noted(from string, version uint64, body []byte)
}
