package offload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nearstore/nearstore/pushdown"
)

// A Task is Go code an engine runs by name: it reads its request's files
// and writes its outputs through env, and returns its result (at most
// MaxOutput bytes). It should return when ctx ends; if it does not, its
// Env refuses all I/O from then on anyway.
type Task func(ctx context.Context, env *Env, args []byte) ([]byte, error)

// MaxOutput bounds a task's returned bytes.
const MaxOutput = 32 << 20

// Errors of tasks and requests.
var (
	// ErrOutsideGrant refuses offload_read or offload_write outside the
	// task's files: past a file's size, a write to an input, an unknown
	// file.
	ErrOutsideGrant = errors.New("offload: outside the task's grant")
	// ErrUnknownTask means no task is registered under the name.
	ErrUnknownTask = errors.New("offload: no such task")
	// ErrRejected means the engine did not admit the task (CPU above its
	// threshold, or no token); nothing ran.
	ErrRejected = errors.New("offload: the engine turned the task away")
	// ErrTaskEnded refuses I/O of a task whose run has ended.
	ErrTaskEnded = errors.New("offload: the task's run has ended")
	// ErrBadRequest means a request does not describe files the engine
	// can use (extents outside the device, or short of a file's size).
	ErrBadRequest = errors.New("offload: malformed request")
)

// Registry holds tasks by name. The engine and the client (for tasks it
// runs itself) use the same one; it is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tasks map[string]Task
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tasks: map[string]Task{}} }

// Register adds a task under name; a name is registered once.
func (r *Registry) Register(name string, t Task) error {
	if name == "" || t == nil {
		return fmt.Errorf("offload: register %q: a name and a task are needed", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tasks[name]; dup {
		return fmt.Errorf("offload: task %q is registered already", name)
	}
	r.tasks[name] = t
	return nil
}

// Lookup returns the task registered under name.
func (r *Registry) Lookup(name string) (Task, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tasks[name]
	return t, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.tasks))
	for n := range r.tasks {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// File is one file of a request: its map as granted (inode, version,
// size, device extents in file order), whether the task may write it,
// and what the cache keys it by.
type File struct {
	pushdown.File
	Write bool
	// ContentTag changes whenever the file's bytes may have changed
	// without a new version; Bypass reads the device, never the cache.
	ContentTag uint64
	Bypass     bool
}

// Request is a task to run.
type Request struct {
	// Task names a registered task, or, with Module, only labels it.
	Task string
	// Module, if not empty, is the task: a wasm module (wasm.go states
	// what it may import and must export).
	Module []byte
	Files  []File
	Args   []byte
	Client string // names the client, for fairness
	Token  uint64 // under the token policy
}

// Result is a task's result.
type Result struct {
	Output []byte
	// Written has, per file, the end of the highest byte written.
	Written []uint64
	Stats   Stats
}

// Stats count a run's I/O.
type Stats struct {
	BytesRead, BytesWritten uint64
	CacheHits, CacheMisses  uint64
}
