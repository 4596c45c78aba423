package offload_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	iofs "io/fs"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
)

// hostile tasks, besides the standard ones.
func testTasks(t testing.TB) *offload.Registry {
	r := offload.StandardTasks()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// read-past reads one byte more than its first file has.
	must(r.Register("read-past", func(ctx context.Context, env *offload.Env, _ []byte) ([]byte, error) {
		_, err := env.ReadAt(ctx, 0, make([]byte, env.Size(0)+1), 0)
		return nil, err
	}))
	// write-input writes into its first file, an input.
	must(r.Register("write-input", func(ctx context.Context, env *offload.Env, _ []byte) ([]byte, error) {
		_, err := env.WriteAt(ctx, 0, []byte("overwritten"), 0)
		return nil, err
	}))
	// write-then-fail fills its output and fails.
	must(r.Register("write-then-fail", func(ctx context.Context, env *offload.Env, _ []byte) ([]byte, error) {
		if _, err := env.WriteAt(ctx, 1, make([]byte, env.Size(1)), 0); err != nil {
			return nil, err
		}
		return nil, errors.New("failing on purpose")
	}))
	// stuck writes a little, then never returns, whatever its context.
	// Its writes fail once its run has ended: it tries until they do,
	// and reports how it was stopped on ended.
	must(r.Register("stuck", func(ctx context.Context, env *offload.Env, _ []byte) ([]byte, error) {
		for {
			if _, err := env.WriteAt(context.Background(), 1, []byte("stuck"), 0); err != nil {
				if errors.Is(err, offload.ErrTaskEnded) {
					select {} // never returns
				}
				return nil, err
			}
			time.Sleep(time.Millisecond)
		}
	}))
	return r
}

func crc(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

func TestOffloadCopy(t *testing.T) {
	eachKind(t, func(t *testing.T, r *rig, c *offload.Client) {
		ctx := context.Background()
		// Sizes unlike the block size and the cache page.
		a := r.write("a", 100_003, 1)
		b := r.write("b", 7, 2)
		empty := r.write("empty", 0, 3)
		if err := r.fsys.Mkdir("out"); err != nil {
			t.Fatal(err)
		}
		res, err := r.fsys.Offload(ctx, c, "copy", []offloadfs.OffloadFile{
			{In: r.open("a")}, {In: r.open("empty")}, {Out: "out/ab", Reserve: 1 << 20}, {In: r.open("b")},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := append(append(append([]byte{}, a...), empty...), b...)
		if res.Local {
			t.Fatal("ran locally; the engine admits everything")
		}
		if got := binary.LittleEndian.Uint64(res.Output); got != uint64(len(want)) {
			t.Fatalf("copy says %d bytes, want %d", got, len(want))
		}
		if res.Sizes[2] != int64(len(want)) {
			t.Fatalf("output size %d, want %d", res.Sizes[2], len(want))
		}
		mustEqual(t, "out/ab", r.contents(r.fsys, "out/ab"), want)
		// The unused reserve went back: the output holds only its
		// blocks (the file system's block is 4 KiB).
		fi, err := r.fsys.Stat("out/ab")
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Sys().(*offloadfs.FileInfo).AllocatedBlocks(); got != (uint64(len(want))+4095)/4096 {
			t.Fatalf("the output holds %d blocks, want %d", got, (len(want)+4095)/4096)
		}
		// Outputs replace files atomically, and the inputs are intact.
		_, err = r.fsys.Offload(ctx, c, "copy", []offloadfs.OffloadFile{{In: r.open("b")}, {Out: "out/ab", Reserve: 4096}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "out/ab replaced", r.contents(r.fsys, "out/ab"), b)
		mustEqual(t, "a", r.contents(r.fsys, "a"), a)
		rep := testfs.Fsck(t, r.fsys)
		if rep.Orphans != 0 {
			t.Fatalf("%d orphans left", rep.Orphans)
		}
	})
}

// TestOffloadOutsideGrant: a task reading past its file, or writing an
// input, fails and changes nothing; so does a request forged to name
// blocks the owner never granted (the file system's superblock), which
// the target refuses the engine whatever the engine's own checks say.
func TestOffloadOutsideGrant(t *testing.T) {
	eachKind(t, func(t *testing.T, r *rig, c *offload.Client) {
		ctx := context.Background()
		a := r.write("a", 5000, 1)
		for _, task := range []string{"read-past", "write-input"} {
			_, err := r.fsys.Offload(ctx, c, task, []offloadfs.OffloadFile{{In: r.open("a")}, {Out: "out-" + task, Reserve: 4096}}, nil)
			if !errors.Is(err, offload.ErrOutsideGrant) {
				t.Fatalf("%s: %v, want ErrOutsideGrant", task, err)
			}
			if _, err := r.fsys.Stat("out-" + task); !errors.Is(err, iofs.ErrNotExist) {
				t.Fatalf("%s: the output exists after a failed task: %v", task, err)
			}
		}
		mustEqual(t, "a", r.contents(r.fsys, "a"), a)

		// A forged request: the owner granted the engine a's blocks
		// only; the request claims the superblock is file 0's.
		fa := r.open("a")
		g, err := r.fsys.Grant(ctx, engineNQN, []*offloadfs.File{fa}, pushdown.GrantReadWrite, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Release(ctx)
		forged := offload.Request{Task: "copy", Files: []offload.File{
			{File: pushdown.File{ID: 99, Version: 1, Size: 4096, Extents: []pushdown.Extent{{LBA: 0, Blocks: 8}}}},
			{File: pushdown.File{ID: 100, Version: 1, Size: 4096, Extents: g.Extents()}, Write: true},
		}}
		if _, _, err := c.Run(ctx, forged); !errors.Is(err, offload.ErrOutsideGrant) {
			t.Fatalf("forged request: %v, want ErrOutsideGrant", err)
		}
		mustEqual(t, "a after the forged request", r.contents(r.fsys, "a"), a)
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
		testfs.Fsck(t, r.fsys)
	})
}

// TestOffloadFailureLeavesNothing: a task that fails after writing its
// output, or that never ends, leaves no output and no space taken.
func TestOffloadFailureLeavesNothing(t *testing.T) {
	r := newRig(t)
	_, c := r.engine(onPeer, offload.Config{TaskTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	r.write("a", 10_000, 1)
	r.write("keep", 3000, 2)
	// A task that succeeds first: the orphan directory keeps the block
	// its first entry took.
	if _, err := r.fsys.Offload(ctx, c, "copy", []offloadfs.OffloadFile{{In: r.open("a")}, {Out: "copied", Reserve: 64 << 10}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	freeBefore, _ := r.fsys.FreeBlocks()
	for task, want := range map[string]error{"write-then-fail": nil, "stuck": offload.ErrTaskEnded} {
		_, err := r.fsys.Offload(ctx, c, task, []offloadfs.OffloadFile{{In: r.open("a")}, {Out: "keep", Reserve: 64 << 10}}, nil)
		if err == nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", task, err, want)
		}
	}
	if got := r.contents(r.fsys, "keep"); len(got) != 3000 {
		t.Fatalf("keep has %d bytes after failed tasks that would have replaced it", len(got))
	}
	if err := r.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if free, _ := r.fsys.FreeBlocks(); free != freeBefore {
		t.Fatalf("%d blocks free after failed tasks, %d before", free, freeBefore)
	}
	testfs.Fsck(t, r.fsys)
}

// TestOffloadCacheNeverStale: the engine caches what tasks read, and a
// task given a file's new contents — an overwrite in place, which keeps
// the extent-map version, or a rewrite, which changes it — never sees
// the old bytes.
func TestOffloadCacheNeverStale(t *testing.T) {
	r := newRig(t)
	e, c := r.engine(onPeer, offload.Config{CacheBytes: 1 << 20})
	ctx := context.Background()
	sum := func() uint32 {
		t.Helper()
		res, err := r.fsys.Offload(ctx, c, "crc32c", []offloadfs.OffloadFile{{In: r.open("a")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint32(res.Output)
	}
	data := r.write("a", 200_000, 1)
	if got, want := sum(), crc(data); got != want {
		t.Fatalf("crc %08x, want %08x", got, want)
	}
	hits := e.Cache().Stats().Hits
	if got, want := sum(), crc(data); got != want {
		t.Fatalf("crc again %08x, want %08x", got, want)
	}
	if e.Cache().Stats().Hits == hits {
		t.Fatal("a second read of the same version hit nothing in the cache")
	}
	// Bypass reads the device: no lookup at all.
	before := e.Cache().Stats()
	if _, err := r.fsys.Offload(ctx, c, "crc32c", []offloadfs.OffloadFile{{In: r.open("a"), Bypass: true}}, nil); err != nil {
		t.Fatal(err)
	}
	if after := e.Cache().Stats(); after.Hits != before.Hits || after.Misses != before.Misses {
		t.Fatalf("a bypassing read looked in the cache: %+v, then %+v", before, after)
	}
	// Overwrite one byte in place: same size, same version.
	f, err := r.fsys.OpenFile("a", 2) // O_RDWR
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	version := fi.Sys().(*offloadfs.FileInfo).Version()
	data[150_001] ^= 0xff
	if _, err := f.WriteAt(data[150_001:150_002], 150_001); err != nil {
		t.Fatal(err)
	}
	fi, _ = f.Stat()
	if v := fi.Sys().(*offloadfs.FileInfo).Version(); v != version {
		t.Fatalf("an overwrite changed the version %d to %d; the test wants it kept", version, v)
	}
	f.Close()
	if got, want := sum(), crc(data); got != want {
		t.Fatalf("after an overwrite in place: crc %08x, want %08x (stale cache)", got, want)
	}
	// Rewrite it shorter: a new version.
	data = r.write("a", 70_000, 9)
	if got, want := sum(), crc(data); got != want {
		t.Fatalf("after a rewrite: crc %08x, want %08x (stale cache)", got, want)
	}
	if st := e.Cache().Stats(); st.Bytes > st.Budget {
		t.Fatalf("the cache holds %d bytes, over its %d", st.Bytes, st.Budget)
	}
}

// TestOffloadRejectedRunsLocally: under each policy, a task the engine
// turns away runs on the client with the same result.
func TestOffloadRejectedRunsLocally(t *testing.T) {
	for _, adm := range []offload.Admission{
		{Policy: offload.PolicyCPU, CPUThreshold: 0.5},
		{Policy: offload.PolicyTokens, Tokens: 1, TokenTTL: time.Hour},
	} {
		t.Run(string(adm.Policy), func(t *testing.T) {
			r := newRig(t)
			cpu := make(chan float64, 1)
			cpu <- 0.9
			e, c := r.engine(onPeer, offload.Config{Admission: adm, CPU: func() float64 {
				select {
				case v := <-cpu:
					return v
				default:
					return 0.9
				}
			}})
			if adm.Policy == offload.PolicyTokens {
				if _, _, err := e.AcquireToken("another-client"); err != nil {
					t.Fatal(err)
				}
			} else {
				for e.Info().CPU < 0.9 {
					time.Sleep(time.Millisecond) // the first sample
				}
			}
			data := r.write("a", 12_345, 1)
			res, err := r.fsys.Offload(context.Background(), c, "copy", []offloadfs.OffloadFile{{In: r.open("a")}, {Out: "b", Reserve: 1 << 16}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Local {
				t.Fatal("the task ran on the engine, which should have turned it away")
			}
			mustEqual(t, "b", r.contents(r.fsys, "b"), data)
			reason := map[offload.Policy]string{offload.PolicyCPU: "cpu", offload.PolicyTokens: "token"}[adm.Policy]
			if got := r.metric("nearstore_offload_client_rejected_total", map[string]string{"reason": reason}); got != 1 {
				t.Errorf("rejected_total{reason=%s} = %v, want 1", reason, got)
			}
			if got := r.metric("nearstore_offload_client_tasks_total", map[string]string{"where": "local"}); got != 1 {
				t.Errorf("client_tasks_total{where=local} = %v, want 1", got)
			}
			if got := r.metric("nearstore_offload_client_tasks_total", map[string]string{"where": "engine"}); got != 0 {
				t.Errorf("client_tasks_total{where=engine} = %v, want 0", got)
			}
			testfs.Fsck(t, r.fsys)
		})
	}
}

func TestRegistry(t *testing.T) {
	r := offload.StandardTasks()
	if err := r.Register("copy", nil); err == nil {
		t.Fatal("registered a nil task")
	}
	noop := func(context.Context, *offload.Env, []byte) ([]byte, error) { return nil, nil }
	if err := r.Register("copy", noop); err == nil {
		t.Fatal("registered copy twice")
	}
	if got := fmt.Sprint(r.Names()); got != "[copy crc32c]" {
		t.Fatalf("names %s", got)
	}
}
