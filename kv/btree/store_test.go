package btree_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/kv/btree"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/volume"
)

const testNQN = "nqn.2026-11.io.nearstore:btree-test"

var quiet = slog.New(slog.DiscardHandler)

// env is a target in this process serving a memory volume of 512-byte
// blocks over loopback NVMe/TCP with both runtimes, the host connected to
// it, and an offloadfs on the namespace.
type env struct {
	ctrl *host.Controller
	ns   *host.Namespace
	fsys *offloadfs.FS
}

func newEnv(t *testing.T, size string) *env { return newEnvWith(t, size, nil) }

// newEnvWith is newEnv with the mount options adjusted by opts, given the
// host and the env's runtimes.
func newEnvWith(t *testing.T, size string, opts func(*env, *offloadfs.Options, []sandbox.Runtime)) *env {
	t.Helper()
	ctx := context.Background()
	vol, err := volume.Open("mem:" + size + "?bs=512")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	wrt, err := wasm.NewRuntime(ctx, wasm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wrt.Close(context.Background()) })
	rts := []sandbox.Runtime{wrt, ebpf.NewRuntime(ebpf.Options{Logger: quiet})}
	srv := testtarget.Start(t, testtarget.Config{NQN: testNQN, Name: vol.String(), Volume: vol,
		Runtimes: func() ([]sandbox.Runtime, error) {
			w, err := wasm.NewRuntime(context.Background(), wasm.Options{})
			return []sandbox.Runtime{w, ebpf.NewRuntime(ebpf.Options{Logger: quiet})}, err
		},
	})
	t.Cleanup(srv.Stop)
	ctrl, ns := testhost.Connect(t, srv.Addr(), testNQN, 1, host.Options{IOQueues: 1, QueueDepth: 64, Logger: quiet})
	if err := offloadfs.Mkfs(ctx, ns, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &env{ctrl: ctrl, ns: ns}
	mo := offloadfs.Options{CommitInterval: -1, Logger: quiet}
	if opts != nil {
		opts(e, &mo, rts)
	}
	if e.fsys, err = offloadfs.Mount(ctx, ns, mo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.fsys.Close() })
	return e
}

func (e *env) opts(cache int) btree.Options {
	return btree.Options{CacheLevels: cache, Pusher: btree.RawPusher{NS: e.ns}, Loader: e.ctrl, Logger: quiet}
}

// truth is what a store was loaded with: sorted keys, values derived from
// keys (functions.BTreeValue) unless updated.
type truth struct {
	keys      []uint64
	valueSize int
	updated   map[uint64][]byte
}

func newTruth(seed uint64, n, valueSize int) *truth {
	r := rand.New(rand.NewPCG(seed, 99))
	seen := map[uint64]bool{}
	keys := make([]uint64, 0, n)
	for len(keys) < n {
		// Even keys only, from 2 up, so that k-1 and k+1 are always
		// missing and 0 is below every key.
		k := (r.Uint64N(1<<40) + 1) * 2
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return &truth{keys: keys, valueSize: valueSize, updated: map[uint64][]byte{}}
}

func (tr *truth) source(i int64, v []byte) (uint64, error) {
	copy(v, functions.BTreeValue(tr.keys[i], tr.valueSize))
	return tr.keys[i], nil
}

func (tr *truth) value(k uint64) []byte {
	if v, ok := tr.updated[k]; ok {
		return v
	}
	return functions.BTreeValue(k, tr.valueSize)
}

// rangeOf returns the truth's entries in [lo, hi], at most limit.
func (tr *truth) rangeOf(lo, hi uint64, limit int) []btree.Entry {
	var out []btree.Entry
	i, _ := slices.BinarySearch(tr.keys, lo)
	for ; i < len(tr.keys) && tr.keys[i] <= hi; i++ {
		if limit > 0 && len(out) == limit {
			break
		}
		out = append(out, btree.Entry{Key: tr.keys[i], Value: tr.value(tr.keys[i])})
	}
	return out
}

func create(t *testing.T, e *env, dir string, tr *truth, fanout int, opts btree.Options) *btree.Store {
	t.Helper()
	opts.Fanout, opts.ValueSize = fanout, tr.valueSize
	s, err := btree.Create(context.Background(), e.fsys, dir, int64(len(tr.keys)), tr.source, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func open(t *testing.T, e *env, dir string, opts btree.Options) *btree.Store {
	t.Helper()
	s, err := btree.Open(context.Background(), e.fsys, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var modes = []btree.Mode{btree.Plain, btree.Pushdown}

// The file system's version-checked pushdown and function registry slot
// into a store as they are.
var (
	_ btree.Pusher         = (*offloadfs.FS)(nil)
	_ btree.FunctionLoader = btree.LoaderFunc((*offloadfs.FS)(nil).RegisterFunction)
)

// checkGet looks key up and compares with the truth.
func checkGet(t *testing.T, s *btree.Store, tr *truth, m btree.Mode, key uint64, present bool) {
	t.Helper()
	v, err := s.Get(context.Background(), m, key)
	switch {
	case !present && !errors.Is(err, btree.ErrNotFound):
		t.Fatalf("%v get of missing key %d: %x, %v", m, key, v, err)
	case present && err != nil:
		t.Fatalf("%v get of %d: %v", m, key, err)
	case present && !bytes.Equal(v, tr.value(key)):
		t.Fatalf("%v get of %d: %x, want %x", m, key, v, tr.value(key))
	}
}

func checkRange(t *testing.T, s *btree.Store, tr *truth, m btree.Mode, lo, hi uint64, limit int) {
	t.Helper()
	got, err := s.Range(context.Background(), m, lo, hi, limit)
	if err != nil {
		t.Fatalf("%v range [%d, %d] limit %d: %v", m, lo, hi, limit, err)
	}
	want := tr.rangeOf(lo, hi, limit)
	if len(got) != len(want) {
		t.Fatalf("%v range [%d, %d] limit %d: %d entries, want %d", m, lo, hi, limit, len(got), len(want))
	}
	for i := range got {
		if got[i].Key != want[i].Key || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("%v range [%d, %d] limit %d: entry %d is %d=%x, want %d=%x", m, lo, hi, limit, i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

// A tree of six levels (fanout 4): every key and its neighbours, in both
// modes, without a cache and with every cache depth, with the round trips
// each costs.
func TestGetEveryKeyBothModes(t *testing.T) {
	e := newEnv(t, "64MiB")
	tr := newTruth(1, 2000, 64)
	s := create(t, e, "kv", tr, 4, e.opts(0))
	info := s.Info()
	if info.Depth != 6 || info.Keys != 2000 {
		t.Fatalf("info %+v, want 6 levels of 2000 keys", info)
	}
	for _, m := range modes {
		for _, k := range tr.keys {
			checkGet(t, s, tr, m, k, true)
		}
		for _, k := range []uint64{0, 1, tr.keys[0] - 1, tr.keys[0] + 1, tr.keys[len(tr.keys)-1] + 1, tr.keys[len(tr.keys)-1] + 2, btree.KeyNone, btree.KeyNone - 1} {
			checkGet(t, s, tr, m, k, false)
		}
	}
	st := s.Stats()
	// Plain: depth + 1 reads per present key, depth per missing one
	// (found missing in its leaf), none for KeyNone. Pushdown: one each.
	if want := uint64(2000*7 + 7*6); st.Reads != want {
		t.Errorf("plain reads %d, want %d", st.Reads, want)
	}
	if want := uint64(2000 + 7); st.Pushdowns != want || st.Fallbacks != 0 {
		t.Errorf("pushdowns %d, fallbacks %d; want %d, 0", st.Pushdowns, st.Fallbacks, want)
	}

	r := rand.New(rand.NewPCG(5, 6))
	for k := 0; k <= info.Depth+1; k++ {
		c := open(t, e, "kv", e.opts(k))
		if got := c.Info().CacheLevels; got != min(k, info.Depth) {
			t.Errorf("cache %d: %d levels cached", k, got)
		}
		for _, m := range modes {
			before := c.Stats()
			const n = 60
			for range n {
				key := tr.keys[r.IntN(len(tr.keys))]
				checkGet(t, c, tr, m, key, true)
				checkGet(t, c, tr, m, key+1, false)
			}
			d := diff(c.Stats(), before)
			cached := min(k, info.Depth)
			switch {
			case m == btree.Plain:
				// Found: the uncached levels and the value; missing: the
				// uncached levels.
				want := uint64(n*(info.Depth+1-cached) + n*(info.Depth-cached))
				if d.Reads != want || d.Pushdowns != 0 {
					t.Errorf("cache %d, plain: %d reads, %d pushdowns; want %d, 0", k, d.Reads, d.Pushdowns, want)
				}
			case cached < info.Depth:
				if d.Pushdowns != 2*n || d.Reads != 0 {
					t.Errorf("cache %d, pushdown: %d pushdowns, %d reads; want %d, 0", k, d.Pushdowns, d.Reads, 2*n)
				}
			default:
				// The whole index is cached: only the value is read.
				if d.Pushdowns != 0 || d.Reads != n {
					t.Errorf("cache %d, pushdown: %d pushdowns, %d reads; want 0, %d", k, d.Pushdowns, d.Reads, n)
				}
			}
		}
	}
}

func diff(a, b btree.Stats) btree.Stats {
	return btree.Stats{
		Gets: a.Gets - b.Gets, Ranges: a.Ranges - b.Ranges, Updates: a.Updates - b.Updates,
		Reads: a.Reads - b.Reads, Pushdowns: a.Pushdowns - b.Pushdowns, CacheHits: a.CacheHits - b.CacheHits,
		Fallbacks: a.Fallbacks - b.Fallbacks, Reloads: a.Reloads - b.Reloads,
	}
}

func TestRanges(t *testing.T) {
	e := newEnv(t, "64MiB")
	tr := newTruth(2, 3000, 24)
	create(t, e, "kv", tr, 5, e.opts(0))
	first, last := tr.keys[0], tr.keys[len(tr.keys)-1]
	type rng struct {
		lo, hi uint64
		limit  int
	}
	cases := []rng{
		{0, btree.KeyNone, 0},                   // everything: resumes a dozen times
		{0, btree.KeyNone, 1},                   // limit 1
		{first, last, 253},                      // one past a full batch
		{first, last, 252},                      // exactly a full batch
		{tr.keys[100], tr.keys[100], 0},         // one key
		{tr.keys[100] + 1, tr.keys[101] - 1, 0}, // between two keys: empty
		{last + 1, btree.KeyNone, 0},            // above everything
		{0, first - 1, 0},                       // below everything
		{tr.keys[10], tr.keys[9], 0},            // lo > hi
		{tr.keys[7] + 1, tr.keys[900] - 1, 0},
		{tr.keys[1000], tr.keys[1000+252], 0},     // 253 keys: a resume at the very end
		{tr.keys[1000], tr.keys[1000+251], 0},     // 252 keys
		{tr.keys[2990], btree.KeyNone - 1, 500},   // the end of the chain
		{tr.keys[5] - 1, tr.keys[5+600] + 1, 300}, // limit mid-way
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 20 {
		i := r.IntN(len(tr.keys))
		j := min(len(tr.keys)-1, i+r.IntN(700))
		cases = append(cases, rng{tr.keys[i] - uint64(r.IntN(2)), tr.keys[j] + uint64(r.IntN(2)), r.IntN(3) * 200})
	}
	for _, cache := range []int{0, 2, 5, 6} {
		s := open(t, e, "kv", e.opts(cache))
		for _, m := range modes {
			for _, c := range cases {
				checkRange(t, s, tr, m, c.lo, c.hi, c.limit)
			}
		}
		st := s.Stats()
		if st.Fallbacks != 0 {
			t.Errorf("cache %d: %d fallbacks", cache, st.Fallbacks)
		}
	}
}

// Pushed-down ranges resume past 252 entries: a full scan of n keys is
// ceil(n/252) pushdowns plus the value reads, no node reads.
func TestRangeResumesInPushdowns(t *testing.T) {
	e := newEnv(t, "64MiB")
	tr := newTruth(3, 1000, 64)
	s := create(t, e, "kv", tr, 31, e.opts(0))
	before := s.Stats()
	checkRange(t, s, tr, btree.Pushdown, 0, btree.KeyNone, 0)
	d := diff(s.Stats(), before)
	if d.Pushdowns != 4 { // 252 + 252 + 252 + 244
		t.Errorf("%d pushdowns, want 4", d.Pushdowns)
	}
	// The value log holds the keys' values in key order: one read per batch.
	if d.Reads != 4 {
		t.Errorf("%d reads, want 4 (one value run per batch)", d.Reads)
	}
	before = s.Stats()
	checkRange(t, s, tr, btree.Plain, 0, btree.KeyNone, 0)
	d = diff(s.Stats(), before)
	// Plain: descend once (root, inner node, first leaf), then follow the
	// other 32 leaves without descending again, and 4 value runs.
	if want := uint64(3 + 32 + 4); d.Reads != want || d.Pushdowns != 0 {
		t.Errorf("plain: %d reads, %d pushdowns; want %d, 0", d.Reads, d.Pushdowns, want)
	}
}

func TestUpdates(t *testing.T) {
	e := newEnv(t, "64MiB")
	tr := newTruth(4, 500, 40)
	s := create(t, e, "kv", tr, 3, e.opts(1))
	ctx := context.Background()
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 100 {
		k := tr.keys[r.IntN(len(tr.keys))]
		v := make([]byte, tr.valueSize)
		for j := range v {
			v[j] = byte(r.Uint32())
		}
		if err := s.Update(ctx, modes[i%2], k, v); err != nil {
			t.Fatal(err)
		}
		tr.updated[k] = v
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		for _, k := range tr.keys {
			checkGet(t, s, tr, m, k, true)
		}
		checkRange(t, s, tr, m, 0, btree.KeyNone, 0)
	}
	for _, m := range modes {
		if err := s.Update(ctx, m, tr.keys[0]+1, make([]byte, tr.valueSize)); !errors.Is(err, btree.ErrNotFound) {
			t.Errorf("%v update of a missing key: %v", m, err)
		}
		if err := s.Update(ctx, m, tr.keys[0], make([]byte, tr.valueSize+1)); err == nil {
			t.Errorf("%v update with a wrong-sized value succeeded", m)
		}
	}
	// Reopened, the updates are there.
	s2 := open(t, e, "kv", e.opts(0))
	for _, m := range modes {
		for k := range tr.updated {
			checkGet(t, s2, tr, m, k, true)
		}
	}
}

// Concurrent gets of both modes on one store, under the race detector.
func TestConcurrentGets(t *testing.T) {
	e := newEnv(t, "64MiB")
	tr := newTruth(5, 3000, 64)
	s := create(t, e, "kv", tr, 8, e.opts(1))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			m := modes[g%2]
			for range 100 {
				k := tr.keys[r.IntN(len(tr.keys))]
				v, err := s.Get(context.Background(), m, k)
				if err != nil || !bytes.Equal(v, tr.value(k)) {
					errs <- fmt.Errorf("%v get of %d: %x, %v", m, k, v, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// unavailable is a Pusher the target never answers: every request is
// ErrPushdownUnavailable, as a version-checked pushdown says when the
// target's extent maps are stale.
type unavailable struct{ calls int }

func (u *unavailable) Pushdown(context.Context, sandbox.ID, []*offloadfs.File, host.Start, []byte) (pushdown.Result, error) {
	u.calls++
	return pushdown.Result{}, fmt.Errorf("stale: %w", btree.ErrPushdownUnavailable)
}

func TestFallbackToPlain(t *testing.T) {
	e := newEnv(t, "64MiB")
	tr := newTruth(6, 800, 64)
	create(t, e, "kv", tr, 6, e.opts(0))
	u := &unavailable{}
	opts := e.opts(2)
	opts.Pusher = u
	s := open(t, e, "kv", opts)
	for _, k := range tr.keys[:100] {
		checkGet(t, s, tr, btree.Pushdown, k, true)
		checkGet(t, s, tr, btree.Pushdown, k+1, false)
	}
	checkRange(t, s, tr, btree.Pushdown, 0, btree.KeyNone, 0)
	st := s.Stats()
	if st.Fallbacks != 201 || u.calls != 201 {
		t.Errorf("%d fallbacks, %d pushdown calls; want 201 each", st.Fallbacks, u.calls)
	}
	// Without a pusher, pushdown is refused rather than silently plain.
	plain := open(t, e, "kv", btree.Options{Logger: quiet})
	if _, err := plain.Get(context.Background(), btree.Pushdown, tr.keys[0]); !errors.Is(err, btree.ErrNoPushdown) {
		t.Errorf("pushdown without a pusher: %v", err)
	}
	checkGet(t, plain, tr, btree.Plain, tr.keys[0], true)
}

// btree_lookup runs in eBPF as well; and a target that lost the function
// gets it again.
func TestEBPFAndReload(t *testing.T) {
	e := newEnv(t, "64MiB")
	tr := newTruth(7, 700, 64)
	opts := e.opts(1)
	opts.Runtime = sandbox.KindEBPF
	s := create(t, e, "kv", tr, 5, opts)
	for _, k := range tr.keys[:50] {
		checkGet(t, s, tr, btree.Pushdown, k, true)
	}
	checkRange(t, s, tr, btree.Pushdown, tr.keys[3], tr.keys[600], 0)
	mod, err := functions.Module("btree_lookup", sandbox.KindEBPF)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ctrl.UnloadFunction(context.Background(), sandbox.IDOf(mod)); err != nil {
		t.Fatal(err)
	}
	checkGet(t, s, tr, btree.Pushdown, tr.keys[1], true)
	if st := s.Stats(); st.Reloads != 1 || st.Fallbacks != 0 {
		t.Errorf("%d reloads, %d fallbacks; want 1, 0", st.Reloads, st.Fallbacks)
	}
}

func TestCreateAndOpenErrors(t *testing.T) {
	e := newEnv(t, "64MiB")
	ctx := context.Background()
	tr := newTruth(8, 10, 64)
	create(t, e, "kv", tr, 31, e.opts(0))
	if _, err := btree.Create(ctx, e.fsys, "kv", 10, tr.source, e.opts(0)); !errors.Is(err, iofs.ErrExist) {
		t.Errorf("create over a store: %v", err)
	}
	if _, err := btree.Open(ctx, e.fsys, "nothing", e.opts(0)); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("open of nothing: %v", err)
	}
	if _, err := btree.Create(ctx, e.fsys, "bad", 10, tr.source, btree.Options{Fanout: 40}); err == nil {
		t.Error("fanout 40 accepted")
	}
	if _, err := btree.Open(ctx, e.fsys, "kv", btree.Options{Pusher: btree.RawPusher{NS: e.ns}}); err == nil {
		t.Error("a pusher without a loader accepted")
	}
	// An empty tree answers every query with nothing.
	empty := create(t, e, "empty", newTruth(9, 0, 64), 31, e.opts(0))
	for _, m := range modes {
		if _, err := empty.Get(ctx, m, 42); !errors.Is(err, btree.ErrNotFound) {
			t.Errorf("%v get in an empty tree: %v", m, err)
		}
		if es, err := empty.Range(ctx, m, 0, btree.KeyNone, 0); err != nil || len(es) != 0 {
			t.Errorf("%v range of an empty tree: %v, %v", m, es, err)
		}
	}
	// An index of the wrong size is caught at Open.
	f, err := e.fsys.OpenFile("kv/index", os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1024); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := btree.Open(ctx, e.fsys, "kv", e.opts(0)); !errors.Is(err, btree.ErrCorrupt) {
		t.Errorf("open with a grown index: %v", err)
	}
}

// A host that mounts the file system read-only (not its owner) can look
// keys up both ways; updates fail.
func TestReadOnlyMount(t *testing.T) {
	e := newEnv(t, "64MiB")
	tr := newTruth(10, 900, 64)
	create(t, e, "kv", tr, 7, e.opts(0))
	ro, err := offloadfs.MountReadOnly(context.Background(), e.ns, offloadfs.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	s, err := btree.Open(context.Background(), ro, "kv", e.opts(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, m := range modes {
		for _, k := range tr.keys[:200] {
			checkGet(t, s, tr, m, k, true)
		}
		checkRange(t, s, tr, m, tr.keys[10], tr.keys[700], 0)
		if err := s.Update(context.Background(), m, tr.keys[0], make([]byte, 64)); err == nil {
			t.Errorf("%v update on a read-only mount succeeded", m)
		}
	}
}

// The file system's version-checked pushdown (offloadfs.FS.Pushdown, with
// the target's extent maps kept in sync) serves a store as RawPusher does.
func TestVersionCheckedPushdown(t *testing.T) {
	e := newEnvWith(t, "64MiB", func(e *env, o *offloadfs.Options, rts []sandbox.Runtime) {
		o.Remote, o.Loader, o.Runtimes = e.ns, e.ctrl, rts
	})
	ctx := context.Background()
	tr := newTruth(11, 1500, 64)
	opts := btree.Options{Pusher: e.fsys, Loader: btree.LoaderFunc(e.fsys.RegisterFunction), Logger: quiet}
	s := create(t, e, "kv", tr, 6, opts)
	if err := e.fsys.SyncRemote(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		for _, k := range tr.keys[:300] {
			checkGet(t, s, tr, m, k, true)
			checkGet(t, s, tr, m, k+1, false)
		}
		checkRange(t, s, tr, m, 0, btree.KeyNone, 0)
	}
	st, fst := s.Stats(), e.fsys.Stats()
	if st.Pushdowns == 0 || st.Fallbacks != 0 || fst.Remote == 0 {
		t.Errorf("store: %d pushdowns, %d fallbacks; file system: %d requests ran at the target (stats %+v)", st.Pushdowns, st.Fallbacks, fst.Remote, fst)
	}
}
