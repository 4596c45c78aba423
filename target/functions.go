package target

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// maxModuleSize bounds a Function Load.
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

// adminFunction runs nearstore's vendor admin commands: Function Load,
// List and Unload, the extent-map commands and the grant commands. They
// run off the admin queue's reader goroutine: loading compiles, and a
// Grant Release waits for the commands admitted under the grant.
func (q *queue) adminFunction(cmd *command) {
	if q.discovery {
		q.complete(cmd, nvme.StatusInvalidOpcode|nvme.DNR, 0)
		return
	}
	c := q.ctrl
	c.mu.Lock()
	ready := c.csts&nvme.CSTSReady != 0
	c.mu.Unlock()
	if !ready {
		q.complete(cmd, nvme.StatusCommandSequence|nvme.DNR, 0)
		return
	}
	ft := q.srv.funcs
	ctx := context.Background()
	switch cmd.sqe.Opcode {
	case nvme.AdminExtentMapPut:
		q.extentMapPut(cmd)
	case nvme.AdminExtentMapQuery:
		q.extentMapQuery(cmd)
	case nvme.AdminGrantPut:
		q.grantPut(cmd)
	case nvme.AdminGrantRelease:
		q.grantRelease(cmd)
	case nvme.AdminFunctionLoad:
		n, err := ft.load(ctx, sandbox.Kind(uint8(cmd.sqe.CDW10)), cmd.data)
		if err != nil {
			// Whatever the runtime objects to (a malformed module, one
			// that fails verification, or needs more memory than the
			// limit), the module is refused.
			q.log.Info("function load refused", "err", err)
			q.complete(cmd, nvme.StatusFunctionRejected|nvme.DNR, 0)
			return
		}
		q.log.Info("function loaded", "id", sandbox.IDOf(cmd.data).String(), "bytes", len(cmd.data))
		q.complete(cmd, nvme.StatusSuccess, uint32(n))
	case nvme.AdminFunctionUnload:
		var id sandbox.ID
		copy(id[:], cmd.data)
		if !ft.unload(ctx, id) {
			q.complete(cmd, nvme.StatusFunctionNotFound|nvme.DNR, 0)
			return
		}
		q.complete(cmd, nvme.StatusSuccess, uint32(ft.count()))
	case nvme.AdminFunctionList:
		q.sendData(cmd, ft.list(int(cmd.sqe.CDW10)))
	default:
		q.complete(cmd, nvme.StatusInvalidOpcode|nvme.DNR, 0)
	}
}

// execFunction runs Pushdown Read, λ Read and λ Write on an I/O queue.
func (q *queue) execFunction(cmd *command) {
	switch cmd.sqe.Opcode {
	case nvme.IOPushdownRead:
		cmd.op = "pushdown"
	case nvme.IOLambdaRead:
		cmd.op = "lambda_read"
	case nvme.IOLambdaWrite:
		cmd.op = "lambda_write"
	}
	var req pushdown.Request
	if err := req.Unmarshal(cmd.data); err != nil {
		q.complete(cmd, nvme.StatusBadFunctionRequest|nvme.DNR, 0)
		return
	}
	ctx := context.Background()
	f := q.srv.funcs.acquire(req.Function)
	if f == nil {
		q.complete(cmd, nvme.StatusFunctionNotFound|nvme.DNR, 0)
		return
	}
	defer q.srv.funcs.release(ctx, f)
	// Files named by inode run on the maps this host put, at exactly the
	// versions the request names; the request keeps those maps however
	// many Puts arrive while it runs.
	files, err := q.resolveFiles(cmd, req.Files)
	if err != nil {
		q.log.Debug("function request refused", "op", cmd.op, "err", err)
		q.complete(cmd, functionStatus(err, false), 0)
		return
	}
	req.Files = files
	refs, st := q.admitFunction(cmd, &req)
	if st != 0 {
		q.complete(cmd, st, 0)
		return
	}
	defer refs.release()
	f.calls.Add(1)
	dev := backendDevice{cmd.ns.backend}
	var res pushdown.Result
	// The target time runs from the first read to the result: what a
	// host's dispatcher subtracts from the round trip to see the transfer.
	began := time.Now()
	switch cmd.sqe.Opcode {
	case nvme.IOPushdownRead:
		res, err = q.srv.exec.Pushdown(ctx, dev, f.mod, &req)
		res.TargetMicros = pushdown.MicrosOf(time.Since(began))
	case nvme.IOLambdaRead:
		res, err = q.srv.exec.LambdaRead(ctx, dev, f.mod, &req, cmd.inCap-pushdown.ResultSize)
		res.TargetMicros = pushdown.MicrosOf(time.Since(began))
	case nvme.IOLambdaWrite:
		var n int64
		res, n, err = q.srv.exec.LambdaWrite(ctx, dev, f.mod, &req)
		if err == nil {
			// The output went to whole blocks, padded with zeroes.
			bs := int64(cmd.ns.backend.BlockSize())
			q.countIO(false, (n+bs-1)/bs*bs)
			q.complete(cmd, nvme.StatusSuccess, uint32(n))
			return
		}
	}
	q.ctrl.smart.readCmds.Add(uint64(res.Reads))
	q.ctrl.smart.readBlocks512.Add(res.BytesRead >> 9)
	if err != nil {
		st := functionStatus(err, cmd.sqe.Opcode == nvme.IOLambdaWrite)
		dw1 := uint32(res.BytesRead)
		if st.Code() == nvme.StatusFunctionError {
			dw1 = uint32(res.Code)
		}
		q.log.Debug("function request failed", "op", cmd.op, "err", err)
		q.completeWith(cmd, st, res.Reads, dw1, nil)
		return
	}
	if pushdown.ResultSize+len(res.Output) > cmd.inCap {
		q.completeWith(cmd, nvme.StatusFunctionOutput|nvme.DNR, res.Reads, uint32(res.BytesRead), nil)
		return
	}
	out := q.srv.bufs.get(pushdown.ResultSize + len(res.Output))
	n := res.Marshal(out)
	q.completeWith(cmd, nvme.StatusSuccess, res.Reads, uint32(res.BytesRead), out[:n])
	q.srv.bufs.put(out)
}

// backendDevice gives the executor a namespace's backend.
type backendDevice struct{ Backend }
