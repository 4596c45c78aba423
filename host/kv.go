package host

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nearstore/nearstore/nvme"
)

// The NVMe Key Value command set on a KV namespace (CSI 01h): Store,
// Retrieve, Delete, Exist and List, with LEED's client-side flow control.
//
// Flow control (LEED, Algorithm 1): the target returns with every KV
// completion the device credits it has left (completion DW1). A handle
// sends a command while it holds a credit, spending it, or when none of
// its commands to that namespace is outstanding (so it always makes
// progress and learns the current credit); otherwise the command waits
// for a completion to bring credits back. Credits are per namespace: a
// namespace is one device of the target.

// ErrNotKV is returned for KV commands sent to a namespace of another
// command set.
var ErrNotKV = errors.New("host: not a Key Value namespace")

// kvFlow is a namespace's flow control state, shared by its handles.
type kvFlow struct {
	mu          sync.Mutex
	credits     int64 // credits held; starts at zero: the first command learns them
	outstanding int
	wake        chan struct{} // closed when a completion brings credits
	waited      int64
}

// acquire waits until a command may be sent.
func (f *kvFlow) acquire(ctx context.Context) error {
	for {
		f.mu.Lock()
		if f.credits > 0 || f.outstanding == 0 {
			if f.credits > 0 {
				f.credits--
			}
			f.outstanding++
			f.mu.Unlock()
			return nil
		}
		if f.wake == nil {
			f.wake = make(chan struct{})
		}
		w := f.wake
		f.waited++
		f.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release records a completion and the credits it returned (ok false: it
// brought none, as a transport failure).
func (f *kvFlow) release(credits uint32, ok bool) {
	f.mu.Lock()
	f.outstanding--
	if ok {
		f.credits = int64(credits)
	}
	w := f.wake
	f.wake = nil
	f.mu.Unlock()
	if w != nil {
		close(w)
	}
}

// KVFlowStats are a namespace's flow control counters.
type KVFlowStats struct {
	Credits     int64 // credits held now
	Outstanding int   // KV commands in flight
	Waited      int64 // times a command waited for credits
}

// KVFlow returns the namespace's flow control counters.
func (ns *Namespace) KVFlow() KVFlowStats {
	f := &ns.st.kvFlow
	f.mu.Lock()
	defer f.mu.Unlock()
	return KVFlowStats{Credits: f.credits, Outstanding: f.outstanding, Waited: f.waited}
}

// IsKV reports whether the namespace speaks the Key Value command set.
func (ns *Namespace) IsKV() bool { return ns.info().kv != nil }

// KVIdentify returns a KV namespace's Identify Namespace data.
func (ns *Namespace) KVIdentify() (nvme.IdentifyNamespaceKV, error) {
	kv := ns.info().kv
	if kv == nil {
		return nvme.IdentifyNamespaceKV{}, fmt.Errorf("%w: nsid %d", ErrNotKV, ns.ID())
	}
	return *kv, nil
}

// kvDo sends one KV command under flow control.
func (ns *Namespace) kvDo(ctx context.Context, cmd *nvme.Command, out, in []byte) (nvme.Completion, error) {
	if !ns.IsKV() {
		return nvme.Completion{}, fmt.Errorf("%w: nsid %d", ErrNotKV, ns.ID())
	}
	f := &ns.st.kvFlow
	if err := f.acquire(ctx); err != nil {
		return nvme.Completion{}, err
	}
	call := ns.Go(ctx, cmd, out, in, make(chan *Call, 1))
	<-call.Done
	var se *nvme.StatusError
	isStatus := errors.As(call.Err, &se)
	f.release(call.Completion.DW1, call.Err == nil || isStatus)
	if isStatus {
		return call.Completion, fmt.Errorf("host: KV %s, nsid %d: %s: %w", kvOpName(cmd.Opcode), ns.ID(), kvStatusText(se.Status), se)
	}
	return call.Completion, call.Err
}

func kvOpName(opc uint8) string {
	switch opc {
	case nvme.KVStore:
		return "Store"
	case nvme.KVRetrieve:
		return "Retrieve"
	case nvme.KVDelete:
		return "Delete"
	case nvme.KVExist:
		return "Exist"
	case nvme.KVList:
		return "List"
	}
	return fmt.Sprintf("opcode %#x", opc)
}

// kvStatusText names the KV command set's statuses.
func kvStatusText(st nvme.Status) string {
	switch st.Code() {
	case nvme.StatusKVInvalidValueSize:
		return "Invalid Value Size"
	case nvme.StatusKVInvalidKeySize:
		return "Invalid Key Size"
	case nvme.StatusKVKeyNotExist:
		return "Key Does Not Exist"
	case nvme.StatusKVUnrecoveredError:
		return "Unrecovered Error (the store found its data corrupt)"
	case nvme.StatusKVKeyExists:
		return "Key Exists"
	case nvme.StatusCapacityExceeded:
		return "Capacity Exceeded"
	}
	return st.String()
}

// KVStoreOptions are a Store's conditions (at most one).
type KVStoreOptions struct {
	// MustExist stores only over an existing key (else Key Does Not
	// Exist).
	MustExist bool
	// MustNotExist stores only a new key (else Key Exists).
	MustNotExist bool
}

// Store stores value under key (1 to 16 bytes). It fails with a status
// error: Capacity Exceeded when the store is full (nothing was changed),
// Invalid Value Size above the namespace's maximum, Key Exists or Key
// Does Not Exist as opts ask. Test with errors.Is(err,
// &nvme.StatusError{Status: nvme.StatusKVKeyNotExist}).
func (ns *Namespace) Store(ctx context.Context, key, value []byte, opts KVStoreOptions) error {
	cmd := nvme.Command{Opcode: nvme.KVStore, CDW10: uint32(len(value))}
	if opts.MustExist {
		cmd.CDW11 |= nvme.KVStoreMustExist << 8
	}
	if opts.MustNotExist {
		cmd.CDW11 |= nvme.KVStoreMustNotExist << 8
	}
	if err := cmd.SetKVKey(key); err != nil {
		return err
	}
	_, err := ns.kvDo(ctx, &cmd, value, nil)
	return err
}

// Retrieve returns key's value (Key Does Not Exist if it has none).
func (ns *Namespace) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	kv, err := ns.KVIdentify()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, min(int(kv.MaxValue), ns.c.MaxTransfer()))
	cmd := nvme.Command{Opcode: nvme.KVRetrieve, CDW10: uint32(len(buf))}
	if err := cmd.SetKVKey(key); err != nil {
		return nil, err
	}
	cqe, err := ns.kvDo(ctx, &cmd, nil, buf)
	if err != nil {
		return nil, err
	}
	if int(cqe.DW0) > len(buf) {
		return nil, fmt.Errorf("host: value of key %q is %d bytes, more than one transfer (%d)", key, cqe.DW0, len(buf))
	}
	return buf[:cqe.DW0], nil
}

// Delete removes key (Key Does Not Exist if it has none).
func (ns *Namespace) Delete(ctx context.Context, key []byte) error {
	cmd := nvme.Command{Opcode: nvme.KVDelete}
	if err := cmd.SetKVKey(key); err != nil {
		return err
	}
	_, err := ns.kvDo(ctx, &cmd, nil, nil)
	return err
}

// Exist reports whether key has a value.
func (ns *Namespace) Exist(ctx context.Context, key []byte) (bool, error) {
	cmd := nvme.Command{Opcode: nvme.KVExist}
	if err := cmd.SetKVKey(key); err != nil {
		return false, err
	}
	_, err := ns.kvDo(ctx, &cmd, nil, nil)
	if errors.Is(err, &nvme.StatusError{Status: nvme.StatusKVKeyNotExist}) {
		return false, nil
	}
	return err == nil, err
}

// List returns keys from start on (nil: from the first), in the target's
// order, as many as one buffer of bufSize bytes holds (4 KiB if zero). To
// go on, call again with the last key returned and drop it from the
// answer.
func (ns *Namespace) List(ctx context.Context, start []byte, bufSize int) ([][]byte, error) {
	if bufSize <= 0 {
		bufSize = 4096
	}
	bufSize = min(bufSize, ns.c.MaxTransfer())
	buf := make([]byte, bufSize)
	cmd := nvme.Command{Opcode: nvme.KVList, CDW10: uint32(bufSize)}
	if start != nil {
		if err := cmd.SetKVKey(start); err != nil {
			return nil, err
		}
	}
	if _, err := ns.kvDo(ctx, &cmd, nil, buf); err != nil {
		return nil, err
	}
	return nvme.UnmarshalKVList(buf)
}
