package target

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
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
	// owners are the hosts that loaded it, guarded by functionTable.mu:
	// only they see it in Function List and may unload it, and it stays
	// loaded while one of them keeps it.
	owners map[string]struct{}
}

// functionTable holds the functions loaded on a server. A function is
// named by its content, so hosts that load the same module share one
// compiled module (never one instance: sandbox.WithTenant), and each is
// one of its owners.
type functionTable struct {
	runtimes map[sandbox.Kind]sandbox.Runtime
	limits   sandbox.Limits
	quota    functionQuota
	// sched, if set, runs compiling under the loading host's CPU share.
	sched *funcScheduler

	mu   sync.RWMutex
	byID map[sandbox.ID]*function
	// perHost is what each host owns, for its quota.
	perHost map[string]*hostFunctions
}

// functionQuota bounds what one host may keep loaded: functions, bytes
// of modules, and the memory their instances may pin (each function
// counted at the memory limit of its instances).
type functionQuota struct {
	count  int
	bytes  int
	memory int64
}

// hostFunctions is one host's share of the table.
type hostFunctions struct {
	count, bytes int
}

// errFunctionQuota: a load past the host's quota.
var errFunctionQuota = errors.New("function quota reached")

func newFunctionTable(rts []sandbox.Runtime, lim sandbox.Limits, q functionQuota) *functionTable {
	t := &functionTable{runtimes: make(map[sandbox.Kind]sandbox.Runtime), limits: lim, quota: q,
		byID: make(map[sandbox.ID]*function), perHost: make(map[string]*hostFunctions)}
	for _, rt := range rts {
		t.runtimes[rt.Kind()] = rt
	}
	return t
}

// pinnedPerFunction is the memory one loaded function may pin: its
// instances' memory limit (wasm linear memory) and call stack limit (the
// sandbox defaults if unset).
func (t *functionTable) pinnedPerFunction() int64 {
	lim := t.limits.WithDefaults()
	return int64(lim.MemoryBytes) + int64(lim.StackBytes)
}

// admitLocked checks that host may own one more function of size bytes.
func (t *functionTable) admitLocked(host string, size int) error {
	h := t.perHost[host]
	if h == nil {
		h = &hostFunctions{}
	}
	switch {
	case h.count+1 > t.quota.count:
		return fmt.Errorf("%w: %d functions (limit %d)", errFunctionQuota, h.count, t.quota.count)
	case h.bytes+size > t.quota.bytes:
		return fmt.Errorf("%w: %d bytes of modules, %d more asked (limit %d)", errFunctionQuota, h.bytes, size, t.quota.bytes)
	case int64(h.count+1)*t.pinnedPerFunction() > t.quota.memory:
		return fmt.Errorf("%w: %d functions of up to %d bytes of memory each (limit %d)", errFunctionQuota, h.count+1, t.pinnedPerFunction(), t.quota.memory)
	}
	return nil
}

// ownLocked makes host an owner of f, counting it in host's quota.
func (t *functionTable) ownLocked(host string, f *function) {
	if _, ok := f.owners[host]; ok {
		return
	}
	f.owners[host] = struct{}{}
	h := t.perHost[host]
	if h == nil {
		h = &hostFunctions{}
		t.perHost[host] = h
	}
	h.count++
	h.bytes += f.size
}

// disownLocked removes host from f's owners and reports whether f has
// none left.
func (t *functionTable) disownLocked(host string, f *function) bool {
	if _, ok := f.owners[host]; ok {
		delete(f.owners, host)
		if h := t.perHost[host]; h != nil {
			h.count--
			h.bytes -= f.size
			if h.count == 0 {
				delete(t.perHost, host)
			}
		}
	}
	return len(f.owners) == 0
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
		// Closing the module must not be cut short by the cancellation
		// that may have ended its last run.
		_ = f.mod.Close(context.WithoutCancel(ctx))
	}
}

// load verifies and compiles a module for host, unless it is loaded
// already, and makes host one of its owners, within host's quota. The
// kind the host declares (0: detect) must be the module's, whether or not
// it is loaded already. It returns how many functions host owns.
//
// A program name (non-empty program) picks one program of a module that
// holds several; it needs a runtime that is a sandbox.ProgramLoader (eBPF),
// and the function's ID is sandbox.ProgramID(module, program).
func (t *functionTable) load(ctx context.Context, host string, kind sandbox.Kind, module []byte, program string) (int, error) {
	detected, err := sandbox.DetectKind(module)
	if err != nil {
		return 0, err
	}
	if kind != 0 && kind != detected {
		return 0, fmt.Errorf("%w: declared as %s, but the module is %s", sandbox.ErrBadModule, kind, detected)
	}
	kind = detected
	id := sandbox.ProgramID(module, program)
	t.mu.Lock()
	if f := t.byID[id]; f != nil {
		defer t.mu.Unlock()
		if _, ok := f.owners[host]; !ok {
			if err := t.admitLocked(host, f.size); err != nil {
				return 0, err
			}
			t.ownLocked(host, f)
		}
		return t.perHost[host].count, nil
	}
	// Checked before compiling, and again after: compiling is the
	// expensive part a host over its quota must not get.
	err = t.admitLocked(host, len(module))
	t.mu.Unlock()
	if err != nil {
		return 0, err
	}
	rt := t.runtimes[kind]
	if rt == nil {
		return 0, fmt.Errorf("%w: no %s runtime on this target", sandbox.ErrBadModule, kind)
	}
	// Compiling is function CPU too: it runs on the loading host's share.
	if t.sched != nil {
		slot, err := t.sched.acquire(ctx, host)
		if err != nil {
			return 0, err
		}
		defer slot.release()
	}
	var m sandbox.Module
	if program == "" {
		m, err = rt.Load(ctx, module, t.limits)
	} else if pl, ok := rt.(sandbox.ProgramLoader); ok {
		m, err = pl.LoadProgram(ctx, module, program, t.limits)
	} else {
		err = fmt.Errorf("%w: the %s runtime takes no program name (asked for %q)", sandbox.ErrBadModule, kind, program)
	}
	if err != nil {
		return 0, err
	}
	if !m.HasPushdown() && !m.HasCompute() {
		_ = m.Close(ctx)
		return 0, fmt.Errorf("%w: no pushdown or compute entry", sandbox.ErrBadModule)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.byID[id]
	if f != nil { // loaded meanwhile
		_ = m.Close(ctx)
	} else {
		f = &function{mod: m, size: len(module), refs: 1, owners: make(map[string]struct{})}
	}
	if _, ok := f.owners[host]; !ok {
		if err := t.admitLocked(host, f.size); err != nil {
			if len(f.owners) == 0 {
				_ = m.Close(ctx)
			}
			return 0, err
		}
	}
	t.byID[id] = f
	t.ownLocked(host, f)
	return t.perHost[host].count, nil
}

// unload gives up host's ownership of a function, and removes the function
// from the table if no owner is left. Requests already running it finish;
// its module is closed after the last of them. A function host does not
// own is not found.
func (t *functionTable) unload(ctx context.Context, host string, id sandbox.ID) bool {
	t.mu.Lock()
	f := t.byID[id]
	if f == nil {
		t.mu.Unlock()
		return false
	}
	if _, ok := f.owners[host]; !ok {
		t.mu.Unlock()
		return false
	}
	last := t.disownLocked(host, f)
	if last {
		delete(t.byID, id)
	}
	t.mu.Unlock()
	if last {
		t.release(ctx, f)
	}
	return true
}

// count returns how many functions host owns.
func (t *functionTable) count(host string) int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if h := t.perHost[host]; h != nil {
		return h.count
	}
	return 0
}

// forget gives up every ownership host holds: its state after it has
// gone (Server.hostGone).
func (t *functionTable) forget(ctx context.Context, host string) {
	t.mu.Lock()
	var drop []*function
	for id, f := range t.byID {
		if _, ok := f.owners[host]; ok && t.disownLocked(host, f) {
			delete(t.byID, id)
			drop = append(drop, f)
		}
	}
	t.mu.Unlock()
	for _, f := range drop {
		t.release(ctx, f)
	}
}

// list encodes the Function List data of the functions host owns: a
// 16-byte header (count, reserved) then 48-byte entries, as many as max
// allows.
func (t *functionTable) list(host string, max int) []byte {
	t.mu.RLock()
	ids := make([]sandbox.ID, 0, len(t.byID))
	for id, f := range t.byID {
		if _, ok := f.owners[host]; ok {
			ids = append(ids, id)
		}
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
	clear(t.perHost)
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

// callLimiter bounds the function requests of each host running at once
// (Config.MaxFunctionCallsPerHost): a host's requests past it wait for one
// of its own to finish, never for another host's, so a host keeping many
// looping functions in flight holds at most that many requests' buffers
// and instances. Their CPU is funcScheduler's.
//
// A host has one entry (hostCalls) at a time, and every slot of the host
// is taken from it. Each controller of the host holds the entry for its
// life (join at creation, leave at removal), so a request takes a slot
// with one atomic add and a channel send, no lock or map lookup. A
// request keeps the entry too while it holds or waits for a slot: a
// controller torn down with requests still running (a backend call cannot
// be interrupted) leaves them counted on the entry, and a new controller
// of the host joins that same entry rather than getting fresh slots.
type callLimiter struct {
	max   int
	mu    sync.Mutex
	hosts map[string]*hostCalls
}

// hostCalls is one host's slots. users counts the controllers holding the
// entry and the requests holding or waiting for a slot. When it falls to
// zero the entry leaves hosts, under callLimiter.mu and only if users is
// still zero, and users becomes goneUsers, so that it stays negative
// whatever stale adds follow: a request that raises it to no more than
// zero knows its entry has left and takes the host's current one.
type hostCalls struct {
	slots chan struct{}
	host  string
	users atomic.Int64
}

// goneUsers marks an entry that has left callLimiter.hosts: far below
// zero, beyond any number of adds.
const goneUsers = math.MinInt64 / 2

func newCallLimiter(max int) *callLimiter {
	return &callLimiter{max: max, hosts: make(map[string]*hostCalls)}
}

// join returns host's entry with one more user, made if the host has
// none; the caller gives the use back with leave.
func (l *callLimiter) join(host string) *hostCalls {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.joinLocked(host)
}

func (l *callLimiter) joinLocked(host string) *hostCalls {
	hc := l.hosts[host]
	if hc == nil {
		hc = &hostCalls{slots: make(chan struct{}, l.max), host: host}
		l.hosts[host] = hc
	}
	hc.users.Add(1)
	return hc
}

// use adds a user to hc, an entry the caller got from join: hc itself
// unless it has left, else the host's current entry.
func (l *callLimiter) use(hc *hostCalls) *hostCalls {
	if hc.users.Add(1) > 0 {
		return hc
	}
	hc.users.Add(-1)
	return l.join(hc.host)
}

// acquire waits for one of the slots of hc's host, or for ctx to end. hc
// is an entry from join (a controller's): the returned one, hc unless hc
// had left, is what the caller gives back with release; nil comes with
// ctx's error.
func (l *callLimiter) acquire(ctx context.Context, hc *hostCalls) (*hostCalls, error) {
	hc = l.use(hc)
	// A free slot needs no look at ctx.
	select {
	case hc.slots <- struct{}{}:
		return hc, nil
	default:
	}
	select {
	case hc.slots <- struct{}{}:
		return hc, nil
	case <-ctx.Done():
		l.leave(hc)
		return nil, ctx.Err()
	}
}

// release gives back the slot acquire took.
func (l *callLimiter) release(hc *hostCalls) {
	<-hc.slots
	l.leave(hc)
}

// leave drops one user of hc, and the entry with its last.
func (l *callLimiter) leave(hc *hostCalls) {
	if hc.users.Add(-1) > 0 {
		return
	}
	l.mu.Lock()
	// A join may have come between the add and the lock.
	if hc.users.CompareAndSwap(0, goneUsers) {
		delete(l.hosts, hc.host)
	}
	l.mu.Unlock()
}

// running returns how many of host's requests hold a slot.
func (l *callLimiter) running(host string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if hc := l.hosts[host]; hc != nil {
		return len(hc.slots)
	}
	return 0
}
