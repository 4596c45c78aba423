package btree

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
)

// Errors a store returns; test with errors.Is.
var (
	// ErrNotFound: the key is not in the tree.
	ErrNotFound = errors.New("btree: key not found")
	// ErrCorrupt: the tree's files do not hold a well-formed tree.
	ErrCorrupt = errors.New("btree: corrupt tree")
	// ErrNoPushdown: a pushdown operation on a store opened without a
	// Pusher.
	ErrNoPushdown = fmt.Errorf("btree: store has no pusher: %w", errors.ErrUnsupported)
)

// Mode is how an operation reads the tree.
type Mode int

const (
	// Plain: the host reads every node it does not cache, one ordinary
	// read (one network round trip) per level, then the value.
	Plain Mode = iota
	// Pushdown: the host walks the levels it caches, then sends one
	// Pushdown Read that runs btree_lookup at the target from the first
	// level it does not, down the tree and into the value log.
	Pushdown
)

func (m Mode) String() string {
	switch m {
	case Plain:
		return "plain"
	case Pushdown:
		return "pushdown"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode reads "plain" or "pushdown".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "plain":
		return Plain, nil
	case "pushdown":
		return Pushdown, nil
	}
	return 0, fmt.Errorf("btree: mode %q: want plain or pushdown", s)
}

// DefaultPushdownSteps is the target's default cap on the steps of one
// pushdown request (sandbox.Limits.MaxSteps).
const DefaultPushdownSteps = 64

// Options configure Create and Open. The zero value opens a store for
// plain reads only.
type Options struct {
	// Fanout is the most keys per node, 2 to 31 (default 31, BPF-KV's).
	// Smaller fanouts make deeper trees from fewer keys. Create only:
	// Open reads it from the tree.
	Fanout int
	// ValueSize is every value's size in bytes (default 64, BPF-KV's; at
	// most 4032, what btree_lookup's scratch returns). Create only.
	ValueSize int
	// CacheLevels is how many levels, from the root down, the host keeps
	// in memory (0: none; the depth or more: the whole index). Reads of
	// cached nodes cost nothing; a pushdown starts at the first level not
	// cached.
	CacheLevels int
	// Pusher runs pushdown requests at the target (RawPusher, or a file
	// system's version-checked pushdown). nil: Plain only.
	Pusher Pusher
	// Loader loads btree_lookup on the target; needed with Pusher.
	Loader FunctionLoader
	// Runtime is the runtime btree_lookup runs in at the target:
	// sandbox.KindEBPF (default) or sandbox.KindWasm. eBPF is the
	// default because a B+-tree walk is XRP's kind of program: a few
	// hundred instructions per node, where the interpreter's per-step
	// cost (about 0.3 µs over native) beats a call into wasm (about
	// 2.5 µs), and per-step cost is what bounds pushdown throughput
	// (docs/BENCHMARKS.md, "BPF-KV lookups").
	Runtime sandbox.Kind
	// PushdownSteps is the target's step cap per pushdown request
	// (default 64, the target's default); range requests are sized to
	// finish within it.
	PushdownSteps int
	// Progress, if set, hears how many of Create's entries are written
	// (about once per MiB of values, and at the end).
	Progress func(done, total int64)
	// Logger receives load and fallback events (default slog.Default()).
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Fanout == 0 {
		o.Fanout = DefaultFanout
	}
	if o.ValueSize == 0 {
		o.ValueSize = DefaultValueSize
	}
	if o.Runtime == 0 {
		o.Runtime = sandbox.KindEBPF
	}
	if o.PushdownSteps <= 0 {
		o.PushdownSteps = DefaultPushdownSteps
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// The files of a store, in its directory.
const (
	indexName = "index"
	valueName = "values"
	metaName  = "meta"
)

// Store is a BPF-KV B+-tree in a directory of an offloadfs: the index file
// of 512-byte nodes, the value log, and a meta file recording the shape.
// It is safe for concurrent use. Keys are uint64s other than KeyNone;
// values all have the size the tree was created with. The key set is
// fixed at Create; values can be updated in place.
type Store struct {
	dir     string
	geo     geometry
	index   *offloadfs.File
	values  *offloadfs.File
	files   []*offloadfs.File // {index, values}: a pushdown's file table
	cache   []byte            // the index's first cacheEnd bytes: the top levels
	cached  int               // levels in cache
	pusher  Pusher
	loader  FunctionLoader
	runtime sandbox.Kind
	steps   int
	log     *slog.Logger

	fnMu sync.Mutex // serializes reloads of the function
	fn   atomic.Pointer[sandbox.ID]

	ops   sync.Pool // *op
	stats counters
}

type counters struct {
	gets, ranges, updates     atomic.Uint64
	reads, pushdowns, cacheHs atomic.Uint64
	fallbacks, reloads        atomic.Uint64
}

// Stats are a store's counters since Open.
type Stats struct {
	Gets, Ranges, Updates uint64
	// Reads are the ordinary reads the store issued to its files: one
	// network round trip each.
	Reads uint64
	// Pushdowns are the pushdown requests sent: one round trip each.
	Pushdowns uint64
	// CacheHits are node reads the client cache answered.
	CacheHits uint64
	// Fallbacks are pushdowns that could not run at the target
	// (ErrPushdownUnavailable) and were done with plain reads instead.
	Fallbacks uint64
	// Reloads are the times btree_lookup had to be loaded again because
	// the target no longer had it.
	Reloads uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	c := &s.stats
	return Stats{
		Gets: c.gets.Load(), Ranges: c.ranges.Load(), Updates: c.updates.Load(),
		Reads: c.reads.Load(), Pushdowns: c.pushdowns.Load(), CacheHits: c.cacheHs.Load(),
		Fallbacks: c.fallbacks.Load(), Reloads: c.reloads.Load(),
	}
}

// Info describes a store's tree.
type Info struct {
	Keys        int64 `json:"keys"`
	Depth       int   `json:"depth"` // levels, leaves included
	Fanout      int   `json:"fanout"`
	ValueSize   int   `json:"value_size"`
	CacheLevels int   `json:"cache_levels"` // levels cached on the host (at most Depth)
	IndexBytes  int64 `json:"index_bytes"`
	ValueBytes  int64 `json:"value_bytes"`
	CacheBytes  int64 `json:"cache_bytes"`
}

// Info describes the tree.
func (s *Store) Info() Info {
	return Info{
		Keys: s.geo.keys, Depth: s.geo.depth(), Fanout: s.geo.fanout, ValueSize: s.geo.valueSize,
		CacheLevels: s.cached, IndexBytes: s.geo.indexSize(), ValueBytes: s.geo.valueLogSize(),
		CacheBytes: int64(len(s.cache)),
	}
}

// Create bulk-loads a new store of n entries from src (keys strictly
// ascending) into directory dir of fsys, which must not hold a store yet,
// and opens it. The meta file is written last, after everything else is
// durable, so an interrupted load leaves no store that Open would accept.
func Create(ctx context.Context, fsys *offloadfs.FS, dir string, n int64, src Source, opts Options) (*Store, error) {
	opts.setDefaults()
	g, err := newGeometry(n, opts.Fanout, opts.ValueSize)
	if err != nil {
		return nil, err
	}
	if _, err := fsys.Stat(path.Join(dir, metaName)); err == nil {
		return nil, fmt.Errorf("btree: create %s: %w", dir, iofs.ErrExist)
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("btree: create %s: %w", dir, err)
	}
	index, err := createSized(fsys, path.Join(dir, indexName), g.indexSize())
	if err != nil {
		return nil, err
	}
	defer index.Close()
	values, err := createSized(fsys, path.Join(dir, valueName), g.valueLogSize())
	if err != nil {
		return nil, err
	}
	defer values.Close()
	opts.Logger.Debug("btree: loading", "dir", dir, "keys", n, "depth", g.depth(), "fanout", g.fanout,
		"index_bytes", g.indexSize(), "value_bytes", g.valueLogSize())
	if err := bulkLoad(ctx, g, index, values, src, opts.Progress); err != nil {
		return nil, err
	}
	if err := fsys.Sync(ctx); err != nil {
		return nil, fmt.Errorf("btree: create %s: %w", dir, err)
	}
	meta, err := fsys.OpenFile(path.Join(dir, metaName), os.O_RDWR|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return nil, fmt.Errorf("btree: create %s: %w", dir, err)
	}
	_, err = meta.WriteAt(g.encodeMeta(), 0)
	if err == nil {
		err = meta.Sync()
	}
	if cerr := meta.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("btree: create %s: writing meta: %w", dir, err)
	}
	return Open(ctx, fsys, dir, opts)
}

// createSized creates (or truncates) a file and sizes it in one
// allocation, so its extents are as few as the free space allows and
// every write of the load is an overwrite that changes no metadata.
func createSized(fsys *offloadfs.FS, name string, size int64) (*offloadfs.File, error) {
	f, err := fsys.Create(name)
	if err != nil {
		return nil, fmt.Errorf("btree: %w", err)
	}
	// Grow to whole 512-byte sectors first, then trim to the exact size:
	// growing zeroes the new bytes, and a namespace zeroes only whole
	// blocks (offloadfs passes a ragged tail straight to Write Zeroes);
	// trimming inside the last block changes only the size.
	if err := f.Truncate(ceilDiv(size, NodeSize) * NodeSize); err != nil {
		f.Close()
		return nil, fmt.Errorf("btree: sizing %s: %w", name, err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("btree: sizing %s: %w", name, err)
	}
	return f, nil
}

// Open opens the store in directory dir of fsys: it checks the files
// against the meta file, reads the top opts.CacheLevels levels into
// memory and, with a Pusher, loads btree_lookup on the target.
func Open(ctx context.Context, fsys *offloadfs.FS, dir string, opts Options) (_ *Store, err error) {
	opts.setDefaults()
	if opts.Pusher != nil && opts.Loader == nil {
		return nil, errors.New("btree: a Pusher needs a Loader to load btree_lookup")
	}
	mb, err := readFile(fsys, path.Join(dir, metaName))
	if err != nil {
		return nil, err
	}
	g, err := decodeMeta(mb)
	if err != nil {
		return nil, fmt.Errorf("btree: open %s: %w", dir, err)
	}
	s := &Store{
		dir: dir, geo: g, pusher: opts.Pusher, loader: opts.Loader, runtime: opts.Runtime,
		steps: opts.PushdownSteps, log: opts.Logger,
	}
	s.ops.New = func() any { return s.newOp() }
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	// A read-only mount (a host other than the file system's owner)
	// opens a store for lookups only; Update then fails.
	flag := os.O_RDWR
	if fsys.ReadOnly() {
		flag = os.O_RDONLY
	}
	if s.index, err = openSized(fsys, path.Join(dir, indexName), flag, g.indexSize()); err != nil {
		return nil, err
	}
	if s.values, err = openSized(fsys, path.Join(dir, valueName), flag, g.valueLogSize()); err != nil {
		return nil, err
	}
	s.files = []*offloadfs.File{functions.IndexFile: s.index, functions.ValueFile: s.values}
	s.cached = min(max(opts.CacheLevels, 0), g.depth())
	if end := g.cacheEnd(s.cached); end > 0 {
		s.cache = make([]byte, end)
		if _, err := s.index.ReadAt(s.cache, 0); err != nil {
			return nil, fmt.Errorf("btree: open %s: reading the top %d levels: %w", dir, s.cached, err)
		}
	}
	if s.pusher != nil {
		if _, err := s.loadFunction(ctx, nil); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// openSized opens a store file and checks its size.
func openSized(fsys *offloadfs.FS, name string, flag int, size int64) (*offloadfs.File, error) {
	f, err := fsys.OpenFile(name, flag)
	if err != nil {
		return nil, fmt.Errorf("btree: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("btree: %w", err)
	}
	if fi.Size() != size {
		f.Close()
		return nil, fmt.Errorf("%w: %s is %d bytes, the meta file says %d", ErrCorrupt, name, fi.Size(), size)
	}
	return f, nil
}

func readFile(fsys *offloadfs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("btree: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("btree: %w", err)
	}
	if fi.Size() != metaSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, want %d", ErrCorrupt, name, fi.Size(), metaSize)
	}
	b := make([]byte, metaSize)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("btree: %w", err)
	}
	return b, nil
}

// loadFunction loads btree_lookup on the target unless another caller has
// done so since the ID stale was in use, and returns the current ID.
func (s *Store) loadFunction(ctx context.Context, stale *sandbox.ID) (sandbox.ID, error) {
	s.fnMu.Lock()
	defer s.fnMu.Unlock()
	if cur := s.fn.Load(); cur != nil && cur != stale {
		return *cur, nil
	}
	mod, err := functions.Module("btree_lookup", s.runtime)
	if err != nil {
		return sandbox.ID{}, fmt.Errorf("btree: %w", err)
	}
	id, err := s.loader.LoadFunction(ctx, mod)
	if err != nil {
		return sandbox.ID{}, fmt.Errorf("btree: loading btree_lookup (%s): %w", s.runtime, err)
	}
	s.fn.Store(&id)
	return id, nil
}

// Sync makes every update so far durable.
func (s *Store) Sync() error {
	if err := s.values.Sync(); err != nil {
		return fmt.Errorf("btree: sync: %w", err)
	}
	return nil
}

// Close closes the store's files. It leaves btree_lookup loaded on the
// target: other stores may be using it, and loading is idempotent.
func (s *Store) Close() error {
	var errs []error
	for _, f := range []*offloadfs.File{s.index, s.values} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	s.index, s.values = nil, nil
	return errors.Join(errs...)
}
