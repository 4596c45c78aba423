package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// fragment fills a file system with one-block files and a filler, then
// removes every other small file, leaving only one-block holes; it
// returns the number of holes.
func fragment(t *testing.T, fsys *offloadfs.FS, files, spare int) int {
	t.Helper()
	bs := fsys.Usage().BlockSize
	for i := range files {
		f, err := fsys.Create(fmt.Sprintf("small%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, bs)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	f, err := fsys.Create("filler")
	if err != nil {
		t.Fatal(err)
	}
	free := int(fsys.Usage().FreeBlocks)
	if err := f.Truncate(int64(free-spare) * int64(bs)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for i := 0; i < files; i += 2 {
		if err := fsys.Remove(fmt.Sprintf("small%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := fsys.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return files / 2
}

// TestFragmented writes a file into a checkerboard of free blocks, so its
// map has thousands of extents spread over a chain of extent blocks, and
// checks it through growth, remount, truncation and removal.
func TestFragmented(t *testing.T) {
	ctx := context.Background()
	dev := testfs.Device(t, "mem:64MiB")
	fsys := testfs.FreshWith(t, dev, offloadfs.MkfsOptions{Inodes: 8192})
	holes := fragment(t, fsys, 5000, 0)
	free0 := fsys.Usage().FreeBlocks

	r := rand.New(rand.NewPCG(5, 5))
	data := make([]byte, (holes-25)*4096)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	f, err := fsys.Create("frag")
	if err != nil {
		t.Fatal(err)
	}
	// In pieces, so the map grows extent by extent.
	for off := 0; off < len(data); off += 40000 {
		if _, err := f.Write(data[off:min(off+40000, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := f.Extents()
	if len(m.Extents) < holes-30 {
		t.Fatalf("%d extents in %d one-block holes: the test did not fragment", len(m.Extents), holes)
	}
	if got := readThroughMap(t, dev, m); !bytes.Equal(got, data) {
		t.Fatal("data read through the extent map differs")
	}
	f.Close()
	checkFsck(t, fsys, "fragmented")

	// A write needing every free block gets them as single-block extents,
	// but then no block is left for its extent chain: it fails, and
	// gives back everything at once.
	if err := fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	free := fsys.Usage().FreeBlocks
	g, err := fsys.Create("frag2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(make([]byte, free*4096)); !errors.Is(err, offloadfs.ErrNoSpace) {
		t.Fatalf("write of all %d free blocks in holes: %v", free, err)
	}
	if got := fsys.Usage().FreeBlocks; got != free {
		t.Fatalf("%d blocks free after the failed write, %d before", got, free)
	}
	g.Close()
	if err := fsys.Remove("frag2"); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, fsys, "after a failed write")
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}

	check := func(what string, want []byte) {
		t.Helper()
		if fsys, err = offloadfs.Mount(ctx, dev, testfs.Quiet()); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		checkFsck(t, fsys, what)
		f, err := fsys.Open("frag")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want)+1)
		n, _ := f.ReadAt(got, 0)
		if n != len(want) || !bytes.Equal(got[:n], want) {
			t.Fatalf("%s: read %d bytes, want %d equal ones", what, n, len(want))
		}
		m2, _ := f.Extents()
		if got := readThroughMap(t, dev, m2); !bytes.Equal(got, want) {
			t.Fatalf("%s: extent map differs", what)
		}
		f.Close()
	}
	check("remount", data)

	f, _ = fsys.OpenFile("frag", 2)
	for _, size := range []int{len(data) - 5000, 700 * 4096, 12 * 4096, 3 * 4096} {
		if err := f.Truncate(int64(size)); err != nil {
			t.Fatal(err)
		}
		data = data[:size]
		m, _ := f.Extents()
		if got := readThroughMap(t, dev, m); !bytes.Equal(got, data) {
			t.Fatalf("after truncating to %d the map differs", size)
		}
		checkFsck(t, fsys, fmt.Sprintf("truncated to %d", size))
	}
	f.Close()
	fsys.Close()
	check("remount after truncation", data)
	if err := fsys.Remove("frag"); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fsys.Usage().FreeBlocks; got != free0 {
		t.Fatalf("%d blocks free after removing the file, %d before it", got, free0)
	}
	checkFsck(t, fsys, "removed")
	fsys.Close()
}

// fragmentedWorkload is a crash workload whose file has a chain of extent
// blocks that grows and shrinks. It is meant for 512-byte blocks.
func fragmentedWorkload(t *testing.T, base *diskImage) (setup, rest []op) {
	const files, spare = 400, 10
	var ops []op
	for i := range files {
		ops = append(ops, op{kind: opCreate, p: fmt.Sprintf("s%d", i), data: make([]byte, 512)})
	}
	// Size the filler on a scratch mount.
	fsys, err := offloadfs.Mount(context.Background(), newCrashDev(base, -1), testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ops {
		if err := applyFS(fsys, o); err != nil {
			t.Fatal(err)
		}
	}
	free := int64(fsys.Usage().FreeBlocks)
	ops = append(ops, op{kind: opCreate, p: "filler"}, op{kind: opTruncate, p: "filler", n: (free - spare) * 512})
	for i := 0; i < files; i += 2 {
		ops = append(ops, op{kind: opRemove, p: fmt.Sprintf("s%d", i)})
	}
	setup = append(ops, op{kind: opSync})
	chunk := bytes.Repeat([]byte("fragmented"), 6000)
	rest = append(rest,
		op{kind: opCreate, p: "frag", data: chunk[:20000]},
		op{kind: opAppend, p: "frag", data: chunk[:30000]},
		op{kind: opSync},
		op{kind: opAppend, p: "frag", data: chunk[:20000]},
		op{kind: opTruncate, p: "frag", n: 15000},
		op{kind: opSync},
		op{kind: opAppend, p: "frag", data: chunk[:50000]},
		op{kind: opRename, p: "frag", q: "frag2"},
		op{kind: opTruncate, p: "frag2", n: 3000},
		op{kind: opSync},
		op{kind: opRemove, p: "frag2"},
		op{kind: opSync},
	)
	return setup, rest
}

func TestCrashFragmented(t *testing.T) {
	base := formattedWith(t, 4<<20, offloadfs.MkfsOptions{BlockSize: 512, Inodes: 1024})
	setup, ops := fragmentedWorkload(t, base)
	// Run the long set-up once, and crash only the rest.
	dev := newCrashDev(base, -1)
	cr := runUntilCrash(t, dev, setup)
	base, m0 := imageOf(dev.cur.bytes()), cr.snaps[len(cr.snaps)-1]
	dry := newCrashDev(base, -1)
	runFrom(t, dry, m0, ops)
	total := dry.writes
	step := 1
	if testing.Short() || raceEnabled {
		step = 5
	}
	r := rand.New(rand.NewPCG(9, 9))
	for k := 0; k < total; k += step {
		dev := newCrashDev(base, k)
		cr := runFrom(t, dev, m0, ops)
		for mode := range numCrashModes {
			checkRecovery(t, dev.image(mode, r), cr, fmt.Sprintf("crash at write %d/%d (%s)", k, total, crashModeNames[mode]))
		}
	}
}

// TestCommitInterval checks that unsynced changes are committed by the
// timer.
func TestCommitInterval(t *testing.T) {
	ctx := context.Background()
	dev := testfs.Device(t, "mem:16MiB")
	if err := offloadfs.Mkfs(ctx, dev, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := testfs.Quiet()
	opts.CommitInterval = 10 * time.Millisecond
	committed := make(chan offloadfs.Commit, 10)
	opts.OnCommit = func(c offloadfs.Commit) {
		select {
		case committed <- c:
		default:
		}
	}
	fsys, err := offloadfs.Mount(ctx, dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	f, err := fsys.Create("x")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("hello"))
	select {
	case c := <-committed:
		if len(c.Changes) == 0 {
			t.Fatalf("commit %+v without changes", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no commit without Sync")
	}
	f.Close()
}
