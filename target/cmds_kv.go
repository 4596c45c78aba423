package target

import (
	"context"
	"errors"

	"github.com/nearstore/nearstore/nvme"
)

// The Key Value command set (nvme/kv.go): the I/O command table of a
// namespace whose NamespaceConfig has a KV store. Its commands are looked
// up in this table instead of the NVM one (session.prepare), so an NVM
// Read or Write sent to a KV namespace is an Invalid Opcode, and a KV
// Store sent to an NVM namespace is a Write.
//
// Each completion carries, in DW1, the namespace's device credits
// (KVStore.Credits): LEED's flow control (Algorithm 1) returns them to the
// host with every response, so a host knows how much more it may send
// without a separate query.

// KVStore is the key-value store behind a KV namespace. Its methods are
// called concurrently. Errors that carry a KV status have a method
// KVStatus() nvme.Status (Key Does Not Exist, Key Exists, Capacity
// Exceeded, Invalid Key Size, Invalid Value Size, or Unrecovered Error for
// data the store cannot vouch for); any other error completes as Internal
// Error. Reads and writes are the device I/Os the command took, counted
// in the target's metrics per command.
type KVStore interface {
	Store(ctx context.Context, key, value []byte, options uint8) (reads, writes int, err error)
	Retrieve(ctx context.Context, key []byte) (value []byte, reads, writes int, err error)
	Delete(ctx context.Context, key []byte) (reads, writes int, err error)
	Exist(ctx context.Context, key []byte) (reads, writes int, err error)
	// List returns up to max keys from start (nil: the first), in the
	// store's order.
	List(ctx context.Context, start []byte, max int) ([][]byte, error)
	// MaxValueSize is the largest value Store takes.
	MaxValueSize() int
	// UsedBytes is the bytes live objects take (Identify's NUSE).
	UsedBytes() int64
	// Credits is the device capacity free now, in units of a 4 KiB read.
	Credits() uint32
}

func kvCommands() map[uint8]*cmdSpec {
	read := access{resv: resvRead}
	write := access{resv: resvWrite}
	return map[uint8]*cmdSpec{
		nvme.KVStore:    {label: "kv_store", dir: dirIn, access: write, changesData: true, blocking: true, check: checkKVStore, exec: execKVStore},
		nvme.KVRetrieve: {label: "kv_retrieve", dir: dirOut, access: read, blocking: true, exec: execKVRetrieve},
		nvme.KVDelete:   {label: "kv_delete", dir: dirNone, access: write, changesData: true, blocking: true, exec: execKVDelete},
		nvme.KVExist:    {label: "kv_exist", dir: dirNone, access: read, blocking: true, exec: execKVExist},
		nvme.KVList:     {label: "kv_list", dir: dirOut, access: read, blocking: true, exec: execKVList},
		nvme.IOFlush:    {label: "flush", dir: dirNone, access: write, blocking: true, allNamespaces: true, exec: execFlush},
	}
}

// checkKVStore refuses a bad key or a value above the namespace's maximum
// before the value is asked for, and takes the value's bytes (CDW10).
func checkKVStore(s *session, r *request) (int, nvme.Status) {
	if _, ok := r.sqe.KVKey(); !ok {
		return 0, nvme.StatusKVInvalidKeySize | nvme.DNR
	}
	n := r.sqe.CDW10
	if uint64(n) > uint64(r.ns.kv.MaxValueSize()) || int64(n) > int64(s.maxXfer) || r.sqe.DPTR.Length != n {
		return 0, nvme.StatusKVInvalidValueSize | nvme.DNR
	}
	return int(n), 0
}

// kvDone completes a KV command: its status from err, the device I/Os in
// the metrics, the credits in DW1.
func (s *session) kvDone(r *request, reads, writes int, err error) completion {
	s.srv.metrics.kvIOs(s.ss.nqn, r.ns.id, r.op, reads, writes)
	c := completion{dw1: r.ns.kv.Credits()}
	if err != nil {
		c.status = kvStatus(err)
		if c.status.Code() == nvme.StatusInternal || c.status.Code() == nvme.StatusKVUnrecoveredError {
			s.log.Error("KV command failed", "nsid", r.ns.id, "op", r.op, "err", err)
		}
	}
	return c
}

// kvStatus maps a store's error to the status the host sees.
func kvStatus(err error) nvme.Status {
	var st interface{ KVStatus() nvme.Status }
	switch {
	case errors.As(err, &st):
		return st.KVStatus()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nvme.StatusAbortRequested
	}
	return nvme.StatusInternal
}

func execKVStore(ctx context.Context, s *session, r *request) completion {
	key, _ := r.sqe.KVKey()
	opts := r.sqe.KVOptions()
	if opts&^(nvme.KVStoreMustExist|nvme.KVStoreMustNotExist) != 0 || opts == nvme.KVStoreMustExist|nvme.KVStoreMustNotExist {
		return status(nvme.StatusInvalidField | nvme.DNR)
	}
	reads, writes, err := r.ns.kv.Store(ctx, key, r.data, opts)
	return s.kvDone(r, reads, writes, err)
}

func execKVRetrieve(ctx context.Context, s *session, r *request) completion {
	key, ok := r.sqe.KVKey()
	if !ok {
		return status(nvme.StatusKVInvalidKeySize | nvme.DNR)
	}
	if r.sqe.CDW10 != 0 {
		if _, st := s.transferLen(r, uint64(r.sqe.CDW10)); st != 0 {
			return status(st)
		}
	}
	value, reads, writes, err := r.ns.kv.Retrieve(ctx, key)
	c := s.kvDone(r, reads, writes, err)
	if err != nil {
		return c
	}
	// DW0 is the value's size; the host buffer takes what fits.
	c.dw0 = uint32(len(value))
	if n := int(r.sqe.CDW10); len(value) > n {
		value = value[:n]
	}
	if len(value) > 0 {
		c.data = value
	}
	return c
}

func execKVDelete(ctx context.Context, s *session, r *request) completion {
	key, ok := r.sqe.KVKey()
	if !ok {
		return status(nvme.StatusKVInvalidKeySize | nvme.DNR)
	}
	reads, writes, err := r.ns.kv.Delete(ctx, key)
	return s.kvDone(r, reads, writes, err)
}

func execKVExist(ctx context.Context, s *session, r *request) completion {
	key, ok := r.sqe.KVKey()
	if !ok {
		return status(nvme.StatusKVInvalidKeySize | nvme.DNR)
	}
	reads, writes, err := r.ns.kv.Exist(ctx, key)
	return s.kvDone(r, reads, writes, err)
}

// execKVList returns the keys from the command's key on (a key length of
// zero lists from the first), as many as the host buffer takes.
func execKVList(ctx context.Context, s *session, r *request) completion {
	n, st := s.transferLen(r, uint64(r.sqe.CDW10))
	if st != 0 {
		return status(st)
	}
	var start []byte
	if r.sqe.CDW11&0xFF != 0 {
		k, ok := r.sqe.KVKey()
		if !ok {
			return status(nvme.StatusKVInvalidKeySize | nvme.DNR)
		}
		start = k
	}
	keys, err := r.ns.kv.List(ctx, start, n/4)
	if err != nil {
		return s.kvDone(r, 0, 0, err)
	}
	b, _ := nvme.MarshalKVList(keys, n)
	c := s.kvDone(r, 0, 0, nil)
	c.data = b
	return c
}

// identifyKV answers Identify Namespace for a KV namespace.
func identifyKV(ns *namespace) []byte {
	id := nvme.IdentifyNamespaceKV{
		NSZE:     uint64(ns.backend.Size()),
		NUSE:     uint64(ns.kv.UsedBytes()),
		NMIC:     1,
		NGUID:    ns.nguid,
		MaxKey:   nvme.KVMaxKey,
		MaxValue: uint32(ns.kv.MaxValueSize()),
	}
	return id.Marshal()
}

// csi is the command set of a namespace.
func (ns *namespace) csi() uint8 {
	if ns.kv != nil {
		return nvme.CSIKV
	}
	return 0
}
