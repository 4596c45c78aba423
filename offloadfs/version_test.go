package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
)

// readThroughMap reads a file's bytes straight from the device through
// its exported extent map, as the target will.
func readThroughMap(t *testing.T, dev offloadfs.Device, m pushdown.File) []byte {
	t.Helper()
	bs := uint64(dev.BlockSize())
	var out []byte
	for _, x := range m.Extents {
		b := make([]byte, uint64(x.Blocks)*bs)
		if _, err := dev.ReadAt(b, int64(x.LBA*bs)); err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	if uint64(len(out)) < m.Size {
		t.Fatalf("map covers %d bytes of %d", len(out), m.Size)
	}
	if uint64(len(out))-m.Size >= bs {
		t.Fatalf("map covers %d bytes for a %d-byte file: more than the last block", len(out), m.Size)
	}
	return out[:m.Size]
}

func TestExtentVersions(t *testing.T) {
	for _, spec := range []string{"mem:64MiB", "mem:64MiB?bs=4096"} {
		t.Run(spec, func(t *testing.T) {
			dev := testfs.Device(t, spec)
			fsys := testfs.Fresh(t, dev)
			f := testfs.Create(t, fsys, "f")
			var content []byte
			version := func() uint64 {
				t.Helper()
				m, err := f.Extents()
				if err != nil {
					t.Fatal(err)
				}
				if got := readThroughMap(t, dev, m); !bytes.Equal(got, content) {
					t.Fatalf("bytes read through the extent map differ from the file's (%d vs %d bytes)", len(got), len(content))
				}
				fi, _ := f.Stat()
				if fi.Sys().(*offloadfs.FileInfo).Version() != m.Version || m.Size != uint64(len(content)) {
					t.Fatalf("Stat and Extents disagree")
				}
				return m.Version
			}
			write := func(b []byte, off int) {
				t.Helper()
				if _, err := f.WriteAt(b, int64(off)); err != nil {
					t.Fatal(err)
				}
				if end := off + len(b); end > len(content) {
					content = append(content, make([]byte, end-len(content))...)
				}
				copy(content[off:], b)
			}
			v0 := version()
			steps := []struct {
				name string
				do   func()
				bump bool
			}{
				{"append allocates", func() { write(bytes.Repeat([]byte{1}, 10000), 0) }, true},
				{"overwrite inside", func() { write(bytes.Repeat([]byte{2}, 5000), 100) }, false},
				{"overwrite at the end", func() { write([]byte{3}, 9999) }, false},
				{"append into reserved blocks", func() { write([]byte("more"), 10000) }, true},
				{"sparse write", func() { write([]byte("far"), 3<<20) }, true},
				{"overwrite after sparse", func() { write([]byte("x"), 2<<20) }, false},
				{"truncate down", func() {
					if err := f.Truncate(7000); err != nil {
						t.Fatal(err)
					}
					content = content[:7000]
				}, true},
				{"truncate up", func() {
					if err := f.Truncate(20000); err != nil {
						t.Fatal(err)
					}
					content = append(content, make([]byte, 13000)...)
				}, true},
				{"preallocate", func() {
					if err := f.Preallocate(0, 8<<20); err != nil {
						t.Fatal(err)
					}
				}, true},
				{"preallocate inside", func() {
					if err := f.Preallocate(0, 1<<20); err != nil {
						t.Fatal(err)
					}
				}, false},
				{"write into preallocation", func() { write(bytes.Repeat([]byte{4}, 1<<20), 1<<20) }, true},
				{"overwrite again", func() { write(bytes.Repeat([]byte{5}, 4096), 4096) }, false},
				{"sync", func() {
					if err := f.Sync(); err != nil {
						t.Fatal(err)
					}
				}, false},
			}
			prev := v0
			for _, s := range steps {
				s.do()
				v := version()
				if s.bump && v <= prev {
					t.Errorf("%s: version %d, want above %d", s.name, v, prev)
				}
				if !s.bump && v != prev {
					t.Errorf("%s: version changed from %d to %d", s.name, prev, v)
				}
				prev = v
			}
			m, _ := f.Extents()
			if len(m.Extents) > 4 {
				t.Errorf("a file written mostly in order has %d extents: %v", len(m.Extents), m.Extents)
			}
		})
	}
}

func TestChangeFeed(t *testing.T) {
	ctx := context.Background()
	dev := testfs.Device(t, "mem:64MiB")
	if err := offloadfs.Mkfs(ctx, dev, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		commits []offloadfs.Commit
	)
	opts := testfs.Quiet()
	opts.OnCommit = func(c offloadfs.Commit) {
		mu.Lock()
		commits = append(commits, c)
		mu.Unlock()
	}
	fsys, err := offloadfs.Mount(ctx, dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	_, seq0 := fsys.ChangedSince(0)

	f, err := fsys.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 50000)); err != nil {
		t.Fatal(err)
	}
	m, _ := f.Extents()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(commits) != 1 {
		t.Fatalf("%d commits reported, want 1", len(commits))
	}
	found := false
	for _, c := range commits[0].Changes {
		if c.Ino == m.ID {
			found = c.Version == m.Version && !c.Removed
		}
	}
	mu.Unlock()
	if !found {
		t.Fatalf("commit %+v does not report inode %d at version %d", commits[0], m.ID, m.Version)
	}
	changes, seq1 := fsys.ChangedSince(seq0)
	if seq1 <= seq0 || len(changes) == 0 {
		t.Fatalf("ChangedSince(%d) = %v, %d", seq0, changes, seq1)
	}
	if got, err := fsys.ExtentMap(m.ID); err != nil || got.Version != m.Version || len(got.Extents) != len(m.Extents) {
		t.Fatalf("ExtentMap = %+v, %v; Extents gave %+v", got, err, m)
	}

	// An overwrite commits nothing.
	if _, err := f.WriteAt([]byte("x"), 10); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if changes, _ := fsys.ChangedSince(seq1); len(changes) != 0 {
		t.Fatalf("overwrite reported changes %v", changes)
	}
	f.Close()

	// Removal is a change with a higher version, and a new file on the
	// same inode continues from there.
	if err := fsys.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	changes, seq2 := fsys.ChangedSince(seq1)
	var removed offloadfs.Change
	for _, c := range changes {
		if c.Ino == m.ID {
			removed = c
		}
	}
	if !removed.Removed || removed.Version <= m.Version {
		t.Fatalf("removal reported as %+v (map was version %d)", removed, m.Version)
	}
	if _, err := fsys.ExtentMap(m.ID); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("ExtentMap of a removed inode: %v", err)
	}
	g, err := fsys.Create("b")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gm, _ := g.Extents()
	if gm.ID == m.ID && gm.Version <= removed.Version {
		t.Fatalf("reused inode %d got version %d, not above %d", gm.ID, gm.Version, removed.Version)
	}
	if changes, _ := fsys.ChangedSince(seq2); len(changes) != 0 {
		t.Fatalf("uncommitted changes reported: %v", changes)
	}
}

// TestVersionsSurviveRemount checks that versions are persistent.
func TestVersionsSurviveRemount(t *testing.T) {
	ctx := context.Background()
	dev := testfs.Device(t, "mem:64MiB")
	fsys := testfs.Fresh(t, dev)
	f, err := fsys.Create("x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 123456)); err != nil {
		t.Fatal(err)
	}
	want, err := f.Extents()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Closing trims the reserve: a new version.
	if want, err = fsys.ExtentMap(want.ID); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	fsys, err = offloadfs.MountReadOnly(ctx, dev, testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	f, err = fsys.Open("x")
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Extents()
	if err != nil {
		t.Fatal(err)
	}
	if want.Version == 0 || got.Version != want.Version || got.Size != want.Size || !slices.Equal(got.Extents, want.Extents) {
		t.Fatalf("after remount %+v, before %+v", got, want)
	}
}

// TestRemoveWhileOpen checks POSIX semantics for removed open files, and
// that a crash with such a file open frees it at the next mount.
func TestRemoveWhileOpen(t *testing.T) {
	ctx := context.Background()
	img := formatted(t, 16<<20)
	dev := newCrashDev(img, -1)
	fsys, err := offloadfs.Mount(ctx, dev, testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	// Warm up, so the root and orphan directories have their blocks.
	w, err := fsys.Create("warmup")
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.Remove("warmup"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	free0 := fsys.Usage().FreeBlocks
	f, err := fsys.Create("doomed")
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("z"), 1<<20)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Remove("doomed"); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Stat("doomed"); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("removed file still stats: %v", err)
	}
	// Still usable through the handle.
	if _, err := f.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back from removed file: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, fsys, "with an orphan")
	rep, _ := fsys.Fsck(ctx)
	if rep.Orphans != 1 {
		t.Fatalf("fsck counts %d orphans, want 1", rep.Orphans)
	}

	// Crash now: the next mount frees the orphan.
	crashed := newCrashDev(dev.image(crashUnflushed, nil), -1)
	fs2, err := offloadfs.Mount(ctx, crashed, testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	checkFsck(t, fs2, "after orphan recovery")
	if rep, _ := fs2.Fsck(ctx); rep.Orphans != 0 {
		t.Fatalf("%d orphans left after mount", rep.Orphans)
	}
	if got := fs2.Usage().FreeBlocks; got != free0 {
		t.Fatalf("%d free blocks after orphan recovery, want %d", got, free0)
	}
	fs2.Close()

	// Without a crash, the last close frees it.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fsys.Usage().FreeBlocks; got != free0 {
		t.Fatalf("%d free blocks after last close, want %d", got, free0)
	}
	checkFsck(t, fsys, "after last close")
	fsys.Close()
}

// TestConcurrent runs data I/O on several files, metadata operations and
// syncs at once (for the race detector), then checks everything.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	fsys := testfs.New(t, "mem:128MiB")
	const workers = 6
	var wg sync.WaitGroup
	errs := make(chan error, workers*2)
	want := make([][]byte, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := string(rune('a'+w)) + "/file"
			if err := fsys.MkdirAll(string(rune('a' + w))); err != nil {
				errs <- err
				return
			}
			f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_APPEND)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			var data []byte
			for i := range 200 {
				rec := bytes.Repeat([]byte{byte(w*31 + i)}, 1000+i*13)
				if _, err := f.Write(rec); err != nil {
					errs <- err
					return
				}
				data = append(data, rec...)
				if i%20 == 0 {
					if err := f.Sync(); err != nil {
						errs <- err
						return
					}
				}
				got := make([]byte, len(rec))
				if _, err := f.ReadAt(got, int64(len(data)-len(rec))); err != nil || !bytes.Equal(got, rec) {
					errs <- errors.Join(err, errors.New("read back differs"))
					return
				}
			}
			want[w] = data
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 100 {
			g, err := fsys.Create("tmp")
			if err == nil {
				_, err = g.Write(make([]byte, 7000))
				err = errors.Join(err, g.Close())
			}
			if err == nil && i%2 == 0 {
				err = fsys.Rename("tmp", "tmp2")
			}
			if err != nil {
				errs <- err
				return
			}
			rep, err := fsys.Fsck(ctx)
			if err == nil {
				err = rep.Err()
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkFsck(t, fsys, "after concurrent work")
	for w := range workers {
		f, err := fsys.Open(string(rune('a'+w)) + "/file")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want[w]))
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want[w]) {
			t.Fatalf("worker %d's file differs: %v", w, err)
		}
		f.Close()
	}
}
