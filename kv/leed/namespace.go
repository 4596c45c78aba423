package leed

import (
	"context"
	"errors"

	"github.com/nearstore/nearstore/nvme"
)

// Namespace serves a store as an NVMe KV namespace: its methods are the
// ones target.KVStore asks for, and its errors carry the KV command set's
// statuses (KVStatus).
type Namespace struct {
	DB *Store
	// Engine is the device's token engine, whose free capacity is the
	// credit returned to hosts; nil reports none.
	Engine *Engine
}

// kvError is a store error with the status the host sees.
type kvError struct {
	err error
	st  nvme.Status
}

func (e *kvError) Error() string         { return e.err.Error() }
func (e *kvError) Unwrap() error         { return e.err }
func (e *kvError) KVStatus() nvme.Status { return e.st }

// statusOf maps the store's errors to the KV command set's statuses.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	var st nvme.Status
	switch {
	case errors.Is(err, ErrNotFound):
		st = nvme.StatusKVKeyNotExist
	case errors.Is(err, ErrExists):
		st = nvme.StatusKVKeyExists
	case errors.Is(err, ErrFull):
		st = nvme.StatusCapacityExceeded
	case errors.Is(err, ErrKeySize):
		st = nvme.StatusKVInvalidKeySize
	case errors.Is(err, ErrValueSize):
		st = nvme.StatusKVInvalidValueSize
	case errors.Is(err, ErrCorrupt):
		st = nvme.StatusKVUnrecoveredError
	default:
		return err
	}
	return &kvError{err: err, st: st | nvme.DNR}
}

// Store stores value under key; options are the Store command's
// (nvme.KVStoreMustExist, nvme.KVStoreMustNotExist).
func (n *Namespace) Store(ctx context.Context, key, value []byte, options uint8) (int, int, error) {
	mode := PutAny
	switch {
	case options&nvme.KVStoreMustExist != 0:
		mode = PutMustExist
	case options&nvme.KVStoreMustNotExist != 0:
		mode = PutMustNotExist
	}
	c, err := n.DB.Put(ctx, key, value, mode)
	return c.Reads, c.Writes, statusOf(err)
}

// Retrieve returns key's value.
func (n *Namespace) Retrieve(ctx context.Context, key []byte) ([]byte, int, int, error) {
	v, c, err := n.DB.Get(ctx, key)
	return v, c.Reads, c.Writes, statusOf(err)
}

// Delete removes key.
func (n *Namespace) Delete(ctx context.Context, key []byte) (int, int, error) {
	c, err := n.DB.Delete(ctx, key)
	return c.Reads, c.Writes, statusOf(err)
}

// Exist reports whether key exists.
func (n *Namespace) Exist(ctx context.Context, key []byte) (int, int, error) {
	c, err := n.DB.Exist(ctx, key)
	return c.Reads, c.Writes, statusOf(err)
}

// List lists keys from start in the store's order (Store.List).
func (n *Namespace) List(ctx context.Context, start []byte, max int) ([][]byte, error) {
	keys, err := n.DB.List(ctx, start, max)
	return keys, statusOf(err)
}

// MaxValueSize is the store's largest value.
func (n *Namespace) MaxValueSize() int { return n.DB.MaxValueSize() }

// UsedBytes is the bytes of live values and chains.
func (n *Namespace) UsedBytes() int64 {
	st := n.DB.Stats()
	return st.LiveValueBytes + st.LiveKeySlots*BucketSize
}

// Credits is the engine's free capacity in tokens; without an engine, a
// constant that never holds a host back.
func (n *Namespace) Credits() uint32 {
	if n.Engine == nil {
		return 1 << 16
	}
	return n.Engine.Credits()
}
