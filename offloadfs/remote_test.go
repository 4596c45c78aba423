package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/metricstest"
	"github.com/nearstore/nearstore/internal/stamptest"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// The file system is a pusher for kv/btree (btree.Pusher has exactly this
// method); the assertion keeps the signature from drifting.
var _ interface {
	Pushdown(ctx context.Context, fn sandbox.ID, files []*offloadfs.File, start host.Start, scratch []byte) (pushdown.Result, error)
} = (*offloadfs.FS)(nil)

// tapRemote is the owner's real connection to the target with test hooks
// in front: it shows a test every extent-map update before it goes out,
// fails puts on demand as a broken link would, and runs a hook before a
// pushdown goes out. Whatever it lets through reaches the real target.
type tapRemote struct {
	offloadfs.Remote
	// failPuts fails that many Extent Map Puts without sending them.
	failPuts atomic.Int32
	// onPut, set before Mount, sees every update sent.
	onPut func(u pushdown.MapUpdate)
	// beforePushdown, if set, runs once a pushdown has passed the file
	// system's checks, before it is sent: tests change files there.
	beforePushdown atomic.Pointer[func()]
}

var errInjected = fmt.Errorf("test: injected put failure: %w", host.ErrConnectionLost)

func (r *tapRemote) UpdateExtentMaps(ctx context.Context, ups []pushdown.MapUpdate) (int, int, error) {
	for n := r.failPuts.Load(); n > 0; n = r.failPuts.Load() {
		if r.failPuts.CompareAndSwap(n, n-1) {
			return 0, 0, errInjected
		}
	}
	if r.onPut != nil {
		for _, u := range ups {
			r.onPut(u)
		}
	}
	return r.Remote.UpdateExtentMaps(ctx, ups)
}

func (r *tapRemote) Pushdown(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, scratch []byte) (pushdown.Result, error) {
	if h := r.beforePushdown.Load(); h != nil {
		(*h)()
	}
	return r.Remote.Pushdown(ctx, fn, files, start, scratch)
}

// newTapEnv is newRemoteEnv with a tapRemote in front of the connection;
// mutate sees the tap (not yet mounted) and the options.
func newTapEnv(t testing.TB, mutate func(*tapRemote, *offloadfs.Options)) (*remoteEnv, *tapRemote) {
	var tap *tapRemote
	e := newRemoteEnv(t, func(o *offloadfs.Options) {
		tap = &tapRemote{Remote: o.Remote}
		o.Remote = tap
		if mutate != nil {
			mutate(tap, o)
		}
	})
	return e, tap
}

// targetContent reads the whole of f through the target: λ reads of the
// stamp function's echo mode, each of which must run there, so the map
// the target holds is what resolves the file's bytes.
func (e *remoteEnv) targetContent(f *offloadfs.File) []byte {
	e.t.Helper()
	fi, err := f.Stat()
	if err != nil {
		e.t.Fatal(err)
	}
	const chunk = 32 << 10
	var out []byte
	for off := int64(0); off < fi.Size(); off += chunk {
		n := int(min(chunk, fi.Size()-off))
		remote, ran := e.fsys.Stats().Remote, e.target.ran("lambda_read", "ok")
		res, err := f.LambdaRead(context.Background(), e.fn, off, n, stamptest.Params(2, envBS), n)
		if err != nil {
			e.t.Fatalf("λ read [%d, +%d): %v", off, n, err)
		}
		if e.fsys.Stats().Remote != remote+1 || e.target.ran("lambda_read", "ok") != ran+1 {
			e.t.Fatalf("λ read [%d, +%d) did not run at the target: %+v", off, n, e.fsys.Stats())
		}
		out = append(out, res.Output...)
	}
	return out
}

// TestSyncCommittedOnly: the synchronizer pushes maps in the background,
// and only maps whose metadata is committed: every version sent to the
// target was reported committed first, whatever the writers do
// meanwhile. After SyncRemote the target holds every file's current map
// (it answers with the file's version, and requests it runs read the
// file's bytes). A change not yet committed stays away from the target
// even when the synchronizer pushes every map again.
func TestSyncCommittedOnly(t *testing.T) {
	var mu sync.Mutex
	committed := map[uint64]uint64{} // inode → highest committed version
	var bad []string
	e, _ := newTapEnv(t, func(tap *tapRemote, o *offloadfs.Options) {
		o.OnCommit = func(c offloadfs.Commit) {
			mu.Lock()
			defer mu.Unlock()
			for _, ch := range c.Changes {
				committed[ch.Ino] = max(committed[ch.Ino], ch.Version)
			}
		}
		tap.onPut = func(u pushdown.MapUpdate) {
			mu.Lock()
			defer mu.Unlock()
			if u.Version > committed[u.ID] {
				bad = append(bad, "inode "+itoa(u.ID)+" version "+itoa(u.Version)+" pushed before it was committed")
			}
		}
	})
	ctx := context.Background()

	var wg sync.WaitGroup
	files := make([]*offloadfs.File, 4)
	for i := range files {
		files[i], _ = e.create("f"+itoa(uint64(i)), 1, 512)
	}
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := bytes.Repeat([]byte{byte(i)}, 3000)
			for k := range 60 {
				if _, err := f.Write(buf); err != nil {
					t.Error(err)
					return
				}
				if k%7 == 0 {
					if err := f.Truncate(int64(k * 100)); err != nil {
						t.Error(err)
						return
					}
				}
				if k%10 == 0 {
					if err := e.fsys.Sync(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	e.syncRemote()
	checkBad := func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, b := range bad {
			t.Error(b)
		}
		bad = nil
	}
	checkBad()
	for _, f := range files {
		m, err := f.Extents()
		if err != nil {
			t.Fatal(err)
		}
		if v := e.held(m.ID); v != m.Version {
			t.Errorf("inode %d: the target holds version %d, the file is at %d", m.ID, v, m.Version)
		}
		want := make([]byte, m.Size)
		if _, err := f.ReadAt(want, 0); err != nil {
			t.Fatal(err)
		}
		if got := e.targetContent(f); !bytes.Equal(got, want) {
			t.Errorf("inode %d: the target's map resolves other bytes than the file's (%d bytes read there, %d in the file)", m.ID, len(got), len(want))
		}
	}
	if s := e.fsys.Stats(); s.MapsPut == 0 {
		t.Errorf("stats count no maps put: %+v", s)
	}

	// An uncommitted change stays away from the target. Make the
	// synchronizer push every map it can while f has one: drop g's map at
	// the target (an Extent Map Put on the owner's connection removing it,
	// as a target that lost it), so that a request on g is refused as
	// stale, the synchronizer finds the loss and pushes every live file's
	// map again.
	f, g := files[0], files[1]
	before, _ := f.Extents()
	gm, _ := g.Extents()
	if _, err := f.Write(make([]byte, 5000)); err != nil {
		t.Fatal(err)
	}
	if after, _ := f.Extents(); after.Version == before.Version {
		t.Fatalf("growing the file left its version at %d", before.Version)
	}
	if _, _, err := e.ns.UpdateExtentMaps(ctx, []pushdown.MapUpdate{{File: pushdown.File{ID: gm.ID}, Remove: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fsys.Pushdown(ctx, e.fn, []*offloadfs.File{g}, host.Start{Length: stamptest.Size}, stamptest.Scratch(-1, 0)); err != nil {
		t.Fatal(err)
	}
	if s := e.fsys.Stats(); s.Stale != 1 {
		t.Fatalf("the request on g was not refused as stale: %+v", s)
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.held(gm.ID) != gm.Version {
		if time.Now().After(deadline) {
			t.Fatalf("the synchronizer never pushed g's map again: %+v", e.fsys.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := e.fsys.Stats(); s.Resyncs != 1 {
		t.Fatalf("resyncs %d, want 1", s.Resyncs)
	}
	if v := e.held(before.ID); v != before.Version {
		t.Errorf("the target holds version %d of f, whose committed version is %d", v, before.Version)
	}
	checkBad()
}

// TestSyncRemovals: a removed file's removal reaches the target (with the
// freed inode's version, a floor against late maps), and so does a file
// removed while open once its last handle closes.
func TestSyncRemovals(t *testing.T) {
	e := newRemoteEnv(t, nil)
	f, ino := e.create("gone", 1, 4096)
	e.syncRemote()
	if e.held(ino) == 0 {
		t.Fatal("the target holds no map of the new file")
	}
	if err := e.fsys.Remove("gone"); err != nil {
		t.Fatal(err)
	}
	e.syncRemote()
	if e.held(ino) == 0 {
		t.Fatal("the map went while the file was still open")
	}
	removed := e.fsys.Stats().MapsRemoved
	f.Close()
	e.syncRemote()
	if v := e.held(ino); v != 0 {
		t.Fatalf("the target still holds version %d of the map of a freed inode", v)
	}
	if s := e.fsys.Stats(); s.MapsRemoved != removed+1 {
		t.Fatalf("maps removed %d, want %d", s.MapsRemoved, removed+1)
	}
	// The removal is a floor: an older map of the inode sent late is
	// ignored, not applied.
	applied, ignored, err := e.ns.UpdateExtentMaps(context.Background(), []pushdown.MapUpdate{{File: pushdown.File{ID: ino, Version: 1, Size: 512, Extents: []pushdown.Extent{{LBA: 1, Blocks: 1}}}}})
	if err != nil || applied != 0 || ignored != 1 || e.held(ino) != 0 {
		t.Fatalf("a late map of the freed inode: applied %d, ignored %d, %v; held version %d", applied, ignored, err, e.held(ino))
	}
}

// TestSyncRetries: pushes that fail are retried until they go through.
func TestSyncRetries(t *testing.T) {
	e, tap := newTapEnv(t, nil)
	e.syncRemote()
	tap.failPuts.Store(3)
	f, ino := e.create("f", 1, 4096)
	e.syncRemote()
	m, _ := f.Extents()
	if v := e.held(ino); v != m.Version {
		t.Fatalf("the target holds version %d, the file is at %d: the map never arrived", v, m.Version)
	}
	if n := tap.failPuts.Load(); n != 0 {
		t.Fatalf("%d injected failures left", n)
	}
	if s := e.fsys.Stats(); s.SyncErrors < 3 {
		t.Fatalf("sync errors %d, want at least 3", s.SyncErrors)
	}
}

// TestSyncReplacesForeignMaps: maps the target holds from an earlier file
// system on the namespace (the same host NQN), at higher versions, are
// replaced rather than left to shadow the new ones.
func TestSyncReplacesForeignMaps(t *testing.T) {
	e := newRemoteEnv(t, nil)
	f, ino := e.create("f", 1, 4096)
	// The earlier file system's map of the inode, put on the owner's
	// connection before the new file's map is committed.
	foreign := pushdown.MapUpdate{File: pushdown.File{ID: ino, Version: 1 << 40, Size: 512, Extents: []pushdown.Extent{{LBA: 1, Blocks: 1}}}}
	if applied, _, err := e.ns.UpdateExtentMaps(context.Background(), []pushdown.MapUpdate{foreign}); err != nil || applied != 1 {
		t.Fatalf("the foreign map: applied %d, %v", applied, err)
	}
	e.syncRemote()
	m, _ := f.Extents()
	if v := e.held(ino); v != m.Version {
		t.Fatalf("the target holds version %d, the file is at %d", v, m.Version)
	}
	if got := e.stampAt(f, 512); got != (stamptest.Rec{Ino: ino, Gen: 1, Off: 512}) {
		t.Fatalf("stamp %+v", got)
	}
	if s := e.fsys.Stats(); s.Remote != 1 || e.target.ran("pushdown", "ok") != 1 {
		t.Fatalf("stats %+v, %d pushdowns at the target: want the pushdown served remotely", s, e.target.ran("pushdown", "ok"))
	}
}

// TestPushdownWhereItRuns: a pushdown runs on the host until the target
// holds the file's version, then at the target; a change not yet pushed
// sends it back to the host. The results are the same either way.
func TestPushdownWhereItRuns(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newRemoteEnv(t, func(o *offloadfs.Options) { o.Metrics = offloadfs.NewMetrics(reg) })
	e.syncRemote()
	f, ino := e.create("f", 7, 64<<10)
	want := stamptest.Rec{Ino: ino, Gen: 7, Off: 4096}
	if got := e.stampAt(f, 4096); got != want {
		t.Fatalf("host: stamp %+v, want %+v", got, want)
	}
	s := e.fsys.Stats()
	if s.NotSynced != 1 || s.Fallbacks != 1 || s.Sent != 0 {
		t.Fatalf("before sync: %+v", s)
	}
	if n := e.target.ran("pushdown", "ok") + e.target.ran("pushdown", "error"); n != 0 {
		t.Fatalf("before sync: %d pushdowns reached the target", n)
	}
	e.syncRemote()
	ran := e.target.ran("pushdown", "ok")
	if got := e.stampAt(f, 4096); got != want {
		t.Fatalf("target: stamp %+v, want %+v", got, want)
	}
	if e.target.ran("pushdown", "ok") != ran+1 {
		t.Fatal("the pushdown did not run at the target")
	}
	// Two files in one request: the second read goes to file 1.
	g, gino := e.create("g", 9, 8192)
	e.syncRemote()
	res, err := e.fsys.Pushdown(context.Background(), e.fn, []*offloadfs.File{f, g}, host.Start{Offset: 0, Length: stamptest.Size}, stamptest.Scratch(4096, 1))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := stamptest.Parse(res.Output[64:])
	b, _ := stamptest.Parse(res.Output[96:])
	if a != (stamptest.Rec{Ino: ino, Gen: 7, Off: 0}) || b != (stamptest.Rec{Ino: gino, Gen: 9, Off: 4096}) {
		t.Fatalf("two files: %+v, %+v", a, b)
	}
	if e.target.ran("pushdown", "ok") != ran+2 {
		t.Fatal("the two-file pushdown did not run at the target")
	}
	// Appending changes the map: until committed and pushed, host again.
	if _, err := f.WriteAt(stamptest.Blocks(ino, 7, 0, 8192, envBS)[:4096], 64<<10); err != nil {
		t.Fatal(err)
	}
	s = e.fsys.Stats()
	if got := e.stampAt(f, 4096); got != want {
		t.Fatalf("after append: stamp %+v", got)
	}
	if s2 := e.fsys.Stats(); s2.NotSynced != s.NotSynced+1 || s2.Fallbacks != s.Fallbacks+1 {
		t.Fatalf("after append: %+v, before %+v", s2, s)
	}
	if e.target.ran("pushdown", "ok") != ran+2 {
		t.Fatal("the pushdown after the append reached the target")
	}
	if got := counterValue(t, reg, "nearstore_offloadfs_version_mismatches_total", map[string]string{"op": "pushdown", "when": "before"}); got != 2 {
		t.Fatalf("mismatch metric: %v, want 2", got)
	}
}

// counterValue sums the counter name's samples whose labels include want.
func counterValue(t testing.TB, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	return metricstest.Sum(t, reg, name, want)
}

// TestPushdownStaleAfterRestart: a target that restarted has lost its
// maps and refuses the next request as stale (here its function is back
// already, loaded by another party); the request runs on the host, the
// synchronizer finds the loss and pushes every map again, and requests go
// to the target again. A target that lost the function: the request runs
// on the host, and the function is loaded there again.
func TestPushdownStaleAfterRestart(t *testing.T) {
	e := newRemoteEnv(t, nil)
	ctx := context.Background()
	f, ino := e.create("f", 3, 8192)
	g, _ := e.create("g", 4, 8192)
	e.syncRemote()
	e.restart()
	e.loadAgain()
	if got := e.stampAt(f, 512); got != (stamptest.Rec{Ino: ino, Gen: 3, Off: 512}) {
		t.Fatalf("stamp %+v", got)
	}
	s := e.fsys.Stats()
	if s.Stale != 1 || s.Fallbacks != 1 || s.Remote != 0 {
		t.Fatalf("after the restart: %+v", s)
	}
	if n := e.target.Metric("nearstore_target_stale_requests_total", nil); n != 1 {
		t.Fatalf("the target refused %v requests as stale, want 1", n)
	}
	e.syncRemote()
	if s := e.fsys.Stats(); s.Resyncs != 1 {
		t.Fatalf("resyncs %d, want 1", s.Resyncs)
	}
	for _, x := range []*offloadfs.File{f, g} {
		m, _ := x.Extents()
		if v := e.held(m.ID); v != m.Version {
			t.Fatalf("inode %d not pushed again: the target holds version %d, the file is at %d", m.ID, v, m.Version)
		}
	}
	ran := e.target.ran("pushdown", "ok")
	if got := e.stampAt(f, 0); got != (stamptest.Rec{Ino: ino, Gen: 3, Off: 0}) {
		t.Fatalf("stamp %+v", got)
	}
	if e.target.ran("pushdown", "ok") != ran+1 {
		t.Fatal("requests did not go back to the target")
	}

	// A target that lost its functions (Function Unload): the request
	// is refused, runs on the host, and the function is loaded there
	// again.
	if err := e.ctrl.UnloadFunction(ctx, e.fn); err != nil {
		t.Fatal(err)
	}
	fallbacks, refused := e.fsys.Stats().Fallbacks, e.target.ran("pushdown", "error")
	if got := e.stampAt(f, 1024); got != (stamptest.Rec{Ino: ino, Gen: 3, Off: 1024}) {
		t.Fatalf("stamp %+v", got)
	}
	if s := e.fsys.Stats(); s.Fallbacks != fallbacks+1 || e.target.ran("pushdown", "error") != refused+1 {
		t.Fatalf("without the function: %+v, %d refusals at the target (%d before)", s, e.target.ran("pushdown", "error"), refused)
	}
	ran = e.target.ran("pushdown", "ok")
	e.stampAt(f, 0)
	if e.target.ran("pushdown", "ok") != ran+1 {
		t.Fatal("the function was not loaded at the target again")
	}
}

// TestPushdownDiscarded: a file truncated and rewritten while the target
// runs a request on it (after the file system's checks sent it): the
// target runs it on the map it holds, the result is discarded (its
// blocks may have been another file's by then) and the request runs on
// the host, which sees the new generation.
func TestPushdownDiscarded(t *testing.T) {
	e, tap := newTapEnv(t, nil)
	f, ino := e.create("f", 1, 8192)
	e.syncRemote()
	var once sync.Once
	hook := func() {
		once.Do(func() {
			if err := f.Truncate(0); err != nil {
				t.Error(err)
			}
			if _, err := f.WriteAt(stamptest.Blocks(ino, 2, 0, 8192, envBS), 0); err != nil {
				t.Error(err)
			}
		})
	}
	tap.beforePushdown.Store(&hook)
	if got := e.stampAt(f, 4096); got != (stamptest.Rec{Ino: ino, Gen: 2, Off: 4096}) {
		t.Fatalf("stamp %+v, want generation 2", got)
	}
	if s := e.fsys.Stats(); s.Discarded != 1 || s.Fallbacks != 1 || s.Remote != 0 {
		t.Fatalf("stats %+v", s)
	}
	if n := e.target.ran("pushdown", "ok"); n != 1 {
		t.Fatalf("%d pushdowns ran at the target, want the discarded one", n)
	}
}

// TestLambdaReadAndWrite: λ reads and writes, at the target and on the
// host, into space the file has; ranges outside it are refused.
func TestLambdaReadAndWrite(t *testing.T) {
	e := newRemoteEnv(t, nil)
	ctx := context.Background()
	f, ino := e.create("f", 5, 16<<10)
	check := func(where string) {
		t.Helper()
		res, err := f.LambdaRead(ctx, e.fn, 2048, 4096, stamptest.Params(1, envBS), 1024)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if len(res.Output) != 8*stamptest.Size {
			t.Fatalf("%s: %d bytes of output", where, len(res.Output))
		}
		for i := range 8 {
			if st, _ := stamptest.Parse(res.Output[i*stamptest.Size:]); st != (stamptest.Rec{Ino: ino, Gen: 5, Off: uint64(2048 + 512*i)}) {
				t.Fatalf("%s: block %d: %+v", where, i, st)
			}
		}
	}
	check("host")
	if n := e.target.ran("lambda_read", "ok") + e.target.ran("lambda_read", "error"); n != 0 {
		t.Fatalf("before sync: %d λ reads reached the target", n)
	}
	e.syncRemote()
	check("target")
	if e.target.ran("lambda_read", "ok") != 1 {
		t.Fatal("the λ read did not run at the target")
	}

	// λ write: the echo mode writes the data as given.
	data := stamptest.Blocks(ino, 6, 0, 1024, 512)
	if n, err := f.LambdaWrite(ctx, e.fn, 8192, 1024, stamptest.Params(2, envBS), data); err != nil || n != 1024 {
		t.Fatalf("λ write at the target: %d, %v", n, err)
	}
	if e.target.ran("lambda_write", "ok") != 1 {
		t.Fatal("the λ write did not run at the target")
	}
	got := make([]byte, 1024)
	if _, err := f.ReadAt(got, 8192); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("λ write at the target: read back differs (%v)", err)
	}
	// A restarted target (its function loaded again) holds no maps: the
	// next λ write is refused as stale and runs on the host.
	e.restart()
	e.loadAgain()
	stale := e.fsys.Stats().Stale
	data = stamptest.Blocks(ino, 7, 0, 512, 512)
	if n, err := f.LambdaWrite(ctx, e.fn, 0, 1024, stamptest.Params(2, envBS), data[:300]); err != nil || n != 300 {
		t.Fatalf("λ write on the host: %d, %v", n, err)
	}
	if s := e.fsys.Stats(); s.Stale != stale+1 || e.target.ran("lambda_write", "ok") != 0 || e.target.ran("lambda_write", "error") != 1 {
		t.Fatalf("λ write after the restart: %+v; at the target %d ran, %d refused", s,
			e.target.ran("lambda_write", "ok"), e.target.ran("lambda_write", "error"))
	}
	// Padded with zeroes to the block's end; the rest of the range keeps
	// what it had.
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got[:300], data[:300]) || !bytes.Equal(got[300:512], make([]byte, 212)) ||
		!bytes.Equal(got[512:], stamptest.Blocks(ino, 5, 0, 1024, 512)[512:]) {
		t.Fatalf("λ write on the host: read back differs (%v)", err)
	}
	for _, c := range []struct{ off, n int }{{100, 512}, {0, 100}, {-512, 512}} {
		if _, err := f.LambdaWrite(ctx, e.fn, int64(c.off), c.n, stamptest.Params(2, envBS), nil); !errors.Is(err, iofs.ErrInvalid) {
			t.Errorf("λ write [%d, +%d): %v, want ErrInvalid", c.off, c.n, err)
		}
	}
	// Past the end, the file grows to the range's end first: a gap and
	// the unwritten rest of the range read as zeroes.
	size := func() int64 {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	old := size()
	data = stamptest.Blocks(ino, 8, 0, 512, 512)
	if n, err := f.LambdaWrite(ctx, e.fn, 20<<10, 1024, stamptest.Params(2, envBS), data); err != nil || n != 512 {
		t.Fatalf("λ write past the end: %d, %v", n, err)
	}
	if got := size(); got != 21<<10 {
		t.Fatalf("after a λ write at [20 KiB, +1 KiB): size %d, want %d", got, 21<<10)
	}
	tail := make([]byte, 21<<10-old)
	if _, err := f.ReadAt(tail, old); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(tail))
	copy(want[20<<10-old:], data)
	if !bytes.Equal(tail, want) {
		t.Fatal("λ write past the end: the grown bytes differ from zeroes and the output")
	}
	// Output longer than the range: an error, nothing written.
	if _, err := f.LambdaWrite(ctx, e.fn, 0, 512, stamptest.Params(2, envBS), make([]byte, 600)); !errors.Is(err, sandbox.ErrFunction) {
		t.Errorf("output over the range: %v", err)
	}
}

// TestFunctionErrorsMatch: a function failing with a code fails the same
// way at the target and on the host.
func TestFunctionErrorsMatch(t *testing.T) {
	e := newRemoteEnv(t, nil)
	f, _ := e.create("f", 1, 4096)
	call := func() error {
		_, err := e.fsys.Pushdown(context.Background(), e.fn, []*offloadfs.File{f}, host.Start{Offset: 0, Length: 16}, stamptest.Scratch(-1, 0))
		return err
	}
	for _, where := range []struct {
		name         string
		atTarget     int // the pushdowns the target has failed after the call
		hostFallback uint64
	}{{"host", 0, 1}, {"target", 1, 1}} {
		err := call()
		var fe *sandbox.FunctionError
		if !errors.Is(err, sandbox.ErrFunction) || !errors.As(err, &fe) || fe.Code != -22 {
			t.Errorf("%s: %v, want the function's -22", where.name, err)
		}
		if n, fb := e.target.ran("pushdown", "error"), e.fsys.Stats().Fallbacks; n != where.atTarget || fb != where.hostFallback {
			t.Errorf("%s: the target failed %d pushdowns, %d ran on the host; want %d, %d", where.name, n, fb, where.atTarget, where.hostFallback)
		}
		e.syncRemote()
	}
	_, err := e.fsys.Pushdown(context.Background(), e.fn, []*offloadfs.File{f}, host.Start{Offset: 4090, Length: 32}, stamptest.Scratch(-1, 0))
	if !errors.Is(err, pushdown.ErrOutsideFile) {
		t.Errorf("past the end: %v", err)
	}
}

// TestNoFallback: without a target and without a host module, a request
// cannot run at all, and says so.
func TestNoFallback(t *testing.T) {
	fsys := testfs.New(t, "mem:16MiB")
	f := testfs.Create(t, fsys, "f")
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	_, err := fsys.Pushdown(context.Background(), sandbox.ID{1}, []*offloadfs.File{f}, host.Start{Length: 32}, nil)
	if !errors.Is(err, offloadfs.ErrNoFallback) {
		t.Fatalf("%v, want ErrNoFallback", err)
	}
	if _, err := fsys.Grant(context.Background(), "nqn.x", []*offloadfs.File{f}, pushdown.GrantRead, time.Second); !errors.Is(err, offloadfs.ErrNoRemote) {
		t.Fatalf("grant without a target: %v", err)
	}
	if err := fsys.SyncRemote(context.Background()); !errors.Is(err, offloadfs.ErrNoRemote) {
		t.Fatalf("SyncRemote without a target: %v", err)
	}
	// Bad calls.
	if _, err := fsys.Pushdown(context.Background(), sandbox.ID{1}, nil, host.Start{}, nil); !errors.Is(err, iofs.ErrInvalid) {
		t.Fatalf("no files: %v", err)
	}
	if _, err := fsys.Pushdown(context.Background(), sandbox.ID{1}, []*offloadfs.File{f}, host.Start{File: 1}, nil); !errors.Is(err, iofs.ErrInvalid) {
		t.Fatalf("start file out of range: %v", err)
	}
	w, err := fsys.OpenFile("f", os.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := fsys.Pushdown(context.Background(), sandbox.ID{1}, []*offloadfs.File{w}, host.Start{}, nil); !errors.Is(err, iofs.ErrPermission) {
		t.Fatalf("write-only handle: %v", err)
	}
}

// TestGrantPins: a granted file's bytes cannot be truncated away or
// overwritten, but it can grow and be removed; its blocks stay allocated
// until the grant is released, and the target is told of both ends.
func TestGrantPins(t *testing.T) {
	e := newRemoteEnv(t, nil)
	ctx := context.Background()
	f, _ := e.create("f", 1, 64<<10)
	m, _ := f.Extents()
	g, err := e.fsys.Grant(ctx, taskNQN, []*offloadfs.File{f, f}, pushdown.GrantReadWrite, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Extents(), m.Extents) || e.target.grants() != 1 {
		t.Fatalf("granted %v, the file's map is %v; the target holds %d grants", g.Extents(), m.Extents, e.target.grants())
	}
	if err := f.Truncate(100); !errors.Is(err, offloadfs.ErrGranted) {
		t.Fatalf("truncate: %v, want ErrGranted", err)
	}
	if _, err := e.fsys.Create("f"); !errors.Is(err, offloadfs.ErrGranted) {
		t.Fatalf("create over it: %v, want ErrGranted", err)
	}
	if _, err := f.WriteAt([]byte{1}, 100); !errors.Is(err, offloadfs.ErrGranted) {
		t.Fatalf("overwrite: %v, want ErrGranted", err)
	}
	if _, err := f.WriteAt([]byte{1}, 64<<10); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := f.Truncate(64<<10 + 10); err != nil {
		t.Fatalf("truncate above the granted bytes: %v", err)
	}
	if err := e.fsys.Remove("f"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := e.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	free := e.fsys.Usage().FreeBlocks
	if e.fsys.Stats().Grants != 1 {
		t.Fatal("stats do not count the grant")
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if err := e.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if after := e.fsys.Usage().FreeBlocks; after <= free {
		t.Fatalf("free blocks %d after the release, %d before: the removed file's blocks were not freed", after, free)
	}
	if e.target.grants() != 0 || e.fsys.Stats().Grants != 0 {
		t.Fatalf("the grant is still held: %d at the target, stats %+v", e.target.grants(), e.fsys.Stats())
	}
}

// TestGrantExpires: when the lease runs out the grant is released at the
// target and the file can change again.
func TestGrantExpires(t *testing.T) {
	e := newRemoteEnv(t, nil)
	f, _ := e.create("f", 1, 4096)
	if _, err := e.fsys.Grant(context.Background(), taskNQN, []*offloadfs.File{f}, pushdown.GrantRead, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.fsys.Stats().Grants != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the grant did not expire")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if e.target.grants() != 0 {
		t.Fatal("the expired grant was not released at the target")
	}
	if err := f.Truncate(0); err != nil {
		t.Fatalf("truncate after expiry: %v", err)
	}
	// Grants still live at Close are released.
	g, _ := e.create("g", 1, 4096)
	if _, err := e.fsys.Grant(context.Background(), taskNQN, []*offloadfs.File{g}, pushdown.GrantRead, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := e.fsys.Close(); err != nil {
		t.Fatal(err)
	}
	if e.target.grants() != 0 {
		t.Fatal("Close left a grant at the target")
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// TestGeneration: a file's Generation stays put while nothing changes it,
// and moves with every completed write into its bytes (an overwrite, a
// λ write), every truncation, and a grant (which lets
// another host write it).
func TestGeneration(t *testing.T) {
	e := newRemoteEnv(t, nil)
	ctx := context.Background()
	f, ino := e.create("f", 1, 16<<10)
	e.syncRemote()
	g := f.Generation()
	if g.Granted || g.Size != 16<<10 {
		t.Fatalf("new file: %+v, want not granted, 16 KiB", g)
	}
	if _, err := f.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	e.stampAt(f, 0)
	if f.Generation() != g {
		t.Fatalf("after a read and a pushdown: %+v, want %+v unchanged", f.Generation(), g)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"an overwrite", func() error { _, err := f.WriteAt([]byte("x"), 100); return err }},
		{"a λ write", func() error {
			_, err := f.LambdaWrite(ctx, e.fn, 0, 1024, stamptest.Params(2, envBS), stamptest.Blocks(ino, 3, 0, 1024, 512))
			return err
		}},
		{"a truncation", func() error { return f.Truncate(8 << 10) }},
		{"a grant", func() error {
			_, err := e.fsys.Grant(ctx, taskNQN, []*offloadfs.File{f}, pushdown.GrantReadWrite, time.Hour)
			return err
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		next := f.Generation()
		if next == g {
			t.Errorf("after %s: Generation unchanged (%+v)", st.name, g)
		}
		g = next
	}
	if !g.Granted {
		t.Errorf("granted: %+v, want Granted", g)
	}
}
