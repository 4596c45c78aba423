package target

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// maxModuleSize bounds Config.MaxFunctionSize: the largest buffer the
// pool keeps.
const maxModuleSize = 16 << 20

// function is a loaded module. refs counts the table's reference and the
// requests running it, so that unloading a function some request is still
// running lets that request finish: the module is closed when the last
// reference goes.
type function struct {
	mod   sandbox.Module
	size  int
	calls atomic.Uint64
	refs  int // guarded by functionTable.mu
}

// functionTable holds the functions loaded on a server; every subsystem's
// hosts share it, as a function is named by its content.
type functionTable struct {
	runtimes map[sandbox.Kind]sandbox.Runtime
	limits   sandbox.Limits

	mu   sync.RWMutex
	byID map[sandbox.ID]*function
}

func newFunctionTable(rts []sandbox.Runtime, lim sandbox.Limits) *functionTable {
	t := &functionTable{runtimes: make(map[sandbox.Kind]sandbox.Runtime), limits: lim, byID: make(map[sandbox.ID]*function)}
	for _, rt := range rts {
		t.runtimes[rt.Kind()] = rt
	}
	return t
}

func (t *functionTable) get(id sandbox.ID) *function {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byID[id]
}

// acquire returns the function with id, or nil, holding a reference that
// the caller gives back with release.
func (t *functionTable) acquire(id sandbox.ID) *function {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.byID[id]
	if f != nil {
		f.refs++
	}
	return f
}

// release drops a reference to f, closing its module if it was the last.
func (t *functionTable) release(ctx context.Context, f *function) {
	t.mu.Lock()
	f.refs--
	last := f.refs == 0
	t.mu.Unlock()
	if last {
		_ = f.mod.Close(ctx)
	}
}

// load verifies and compiles a module, unless it is loaded already.
// The kind the host declares (0: detect) must be the module's, whether or
// not it is loaded already.
func (t *functionTable) load(ctx context.Context, kind sandbox.Kind, module []byte) (int, error) {
	detected, err := sandbox.DetectKind(module)
	if err != nil {
		return 0, err
	}
	if kind != 0 && kind != detected {
		return 0, fmt.Errorf("%w: declared as %s, but the module is %s", sandbox.ErrBadModule, kind, detected)
	}
	kind = detected
	id := sandbox.IDOf(module)
	if t.get(id) != nil {
		return t.count(), nil
	}
	rt := t.runtimes[kind]
	if rt == nil {
		return 0, fmt.Errorf("%w: no %s runtime on this target", sandbox.ErrBadModule, kind)
	}
	m, err := rt.Load(ctx, module, t.limits)
	if err != nil {
		return 0, err
	}
	if !m.HasPushdown() && !m.HasCompute() {
		_ = m.Close(ctx)
		return 0, fmt.Errorf("%w: no pushdown or compute entry", sandbox.ErrBadModule)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[id] != nil { // loaded meanwhile by another host
		_ = m.Close(ctx)
	} else {
		t.byID[id] = &function{mod: m, size: len(module), refs: 1}
	}
	return len(t.byID), nil
}

// unload removes a function from the table. Requests already running it
// finish; its module is closed after the last of them.
func (t *functionTable) unload(ctx context.Context, id sandbox.ID) bool {
	t.mu.Lock()
	f := t.byID[id]
	delete(t.byID, id)
	t.mu.Unlock()
	if f != nil {
		t.release(ctx, f)
	}
	return f != nil
}

func (t *functionTable) count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byID)
}

// list encodes the Function List data: a 16-byte header (count, reserved)
// then 48-byte entries, as many as max allows.
func (t *functionTable) list(max int) []byte {
	t.mu.RLock()
	ids := make([]sandbox.ID, 0, len(t.byID))
	for id := range t.byID {
		ids = append(ids, id)
	}
	fs := make([]*function, len(ids))
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	for i, id := range ids {
		fs[i] = t.byID[id]
	}
	t.mu.RUnlock()
	n := min(len(ids), max)
	b := make([]byte, 16+48*n)
	binary.LittleEndian.PutUint32(b, uint32(len(ids)))
	for i := 0; i < n; i++ {
		e := b[16+48*i:]
		copy(e[0:32], ids[i][:])
		e[32] = byte(fs[i].mod.Kind())
		if fs[i].mod.HasPushdown() {
			e[33] |= 1
		}
		if fs[i].mod.HasCompute() {
			e[33] |= 2
		}
		binary.LittleEndian.PutUint32(e[36:], uint32(fs[i].size))
		binary.LittleEndian.PutUint64(e[40:], fs[i].calls.Load())
	}
	return b
}

func (t *functionTable) close(ctx context.Context) {
	t.mu.Lock()
	fs := make([]*function, 0, len(t.byID))
	for id, f := range t.byID {
		fs = append(fs, f)
		delete(t.byID, id)
	}
	t.mu.Unlock()
	for _, f := range fs {
		t.release(ctx, f)
	}
}

// functionStatus maps an executor or runtime error to the status
// docs/PROTOCOL.md names. Anything else is a failure of the backend: a
// media error of the request's direction.
func functionStatus(err error, write bool) nvme.Status {
	switch {
	case errors.Is(err, pushdown.ErrMalformed):
		return nvme.StatusBadFunctionRequest | nvme.DNR
	case errors.Is(err, sandbox.ErrBadModule), errors.Is(err, sandbox.ErrNoEntry):
		return nvme.StatusFunctionRejected | nvme.DNR
	case errors.Is(err, sandbox.ErrTimeout):
		return nvme.StatusFunctionTimeout | nvme.DNR
	case errors.Is(err, sandbox.ErrMemory):
		return nvme.StatusFunctionMemory | nvme.DNR
	case errors.Is(err, sandbox.ErrOutput):
		return nvme.StatusFunctionOutput | nvme.DNR
	case errors.Is(err, sandbox.ErrStep):
		// A step that asked for more than a step may read, or neither
		// finished nor asked for a read: Step Limit, as the executor's
		// own checks answer.
		return nvme.StatusStepLimit | nvme.DNR
	case errors.Is(err, sandbox.ErrFunction):
		return nvme.StatusFunctionError | nvme.DNR
	case errors.Is(err, pushdown.ErrOutsideFile), errors.Is(err, pushdown.ErrBadExtent):
		return nvme.StatusOutsideFile | nvme.DNR
	case errors.Is(err, pushdown.ErrStepLimit), errors.Is(err, pushdown.ErrStepSize), errors.Is(err, pushdown.ErrNoProgress):
		return nvme.StatusStepLimit | nvme.DNR
	case errors.Is(err, pushdown.ErrStale):
		return nvme.StatusStaleExtentMap
	}
	if write {
		return nvme.StatusMediaWriteFault
	}
	return nvme.StatusMediaReadError
}
