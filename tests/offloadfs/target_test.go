package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/stamptest"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// stampAt pushes the stamp function down on f at off and returns what it
// saw, failing the test on an error.
func (e *env) stampAt(f *offloadfs.File, off int64) stamptest.Rec {
	e.t.Helper()
	return stamptest.At(e.t, e.fsys, e.fn, f, off)
}

// create writes a stamped file of n bytes, generation gen.
func (e *env) create(name string, gen uint64, n int) (*offloadfs.File, uint64) {
	e.t.Helper()
	return stamptest.Create(e.t, e.fsys, name, gen, n, bs)
}

// TestTargetRestart: a target that restarts loses its functions and the
// extent maps; requests fall back to the host meanwhile (same results),
// the function is loaded again, the synchronizer finds the maps gone and
// pushes every map again, and requests go back to the target.
func TestTargetRestart(t *testing.T) {
	e := newEnv(t, envConfig{})
	f, ino := e.create("f", 1, 16<<10)
	g, gino := e.create("g", 2, 16<<10)
	e.syncRemote()
	if st := e.stampAt(f, 4096); st != (stamptest.Rec{Ino: ino, Gen: 1, Off: 4096}) {
		t.Fatalf("before the restart: %+v", st)
	}
	if s := e.fsys.Stats(); s.Remote != 1 {
		t.Fatalf("before the restart: %+v", s)
	}
	e.restart()

	// The first request after the restart: the function is gone (load it
	// again, fall back), then the maps are (stale, fall back, resync).
	deadline := time.Now().Add(30 * time.Second)
	for e.fsys.Stats().Remote < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("requests never went back to the target: %+v", e.fsys.Stats())
		}
		if st := e.stampAt(g, 512); st != (stamptest.Rec{Ino: gino, Gen: 2, Off: 512}) {
			t.Fatalf("after the restart: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Whichever told first (the broken connection, the missing function,
	// or a stale refusal), the synchronizer found the maps lost once.
	s := e.fsys.Stats()
	if s.Resyncs != 1 || s.Fallbacks == 0 {
		t.Fatalf("after the restart: %+v", s)
	}
	vs, err := e.ns.ExtentMapVersions(context.Background(), []uint64{ino, gino})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range []*offloadfs.File{f, g} {
		m, _ := x.Extents()
		if vs[i] != m.Version {
			t.Errorf("inode %d: the restarted target holds version %d, the file is at %d", m.ID, vs[i], m.Version)
		}
	}
}

// TestLambdaWriteTarget: λ writes into space a file has, at the target
// and on the host; the target refuses nothing it should take, and the
// file system refuses ranges outside the file before sending.
func TestLambdaWriteTarget(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	f := testfs.Create(t, e.fsys, "out")
	ino := stamptest.InoOf(t, f)
	// Space first, as λ-IO fallocates: Truncate allocates and zeroes.
	if err := f.Truncate(64 << 10); err != nil {
		t.Fatal(err)
	}
	write := func(gen uint64, off int64) {
		t.Helper()
		data := stamptest.Blocks(ino, gen, int(off), 8*bs, bs)
		n, err := f.LambdaWrite(ctx, e.fn, off, 8*bs, stamptest.Params(2, bs), data)
		if err != nil || n != len(data) {
			t.Fatalf("λ write at %d: %d, %v", off, n, err)
		}
		got := make([]byte, len(data))
		if _, err := f.ReadAt(got, off); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("λ write at %d: read back differs", off)
		}
	}
	write(1, 0) // not synchronized yet: on the host
	if s := e.fsys.Stats(); s.Fallbacks != 1 || s.Sent != 0 {
		t.Fatalf("%+v", s)
	}
	e.syncRemote()
	before := e.srv.Metric("nearstore_target_commands_total", map[string]string{"op": "lambda_write", "result": "ok"})
	write(2, 8192)
	if got := e.srv.Metric("nearstore_target_commands_total", map[string]string{"op": "lambda_write", "result": "ok"}); got != before+1 {
		t.Fatalf("λ writes at the target: %v, want %v", got, before+1)
	}
	if _, err := f.LambdaWrite(ctx, e.fn, 1000, 8*bs, stamptest.Params(2, bs), nil); !errors.Is(err, iofs.ErrInvalid) {
		t.Fatalf("a λ write at an unaligned offset: %v, want ErrInvalid", err)
	}
	// The read side sees both.
	res, err := f.LambdaRead(ctx, e.fn, 0, 32*bs, stamptest.Params(1, bs), 32*stamptest.Size)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		st, ok := stamptest.Parse(res.Output[i*stamptest.Size:])
		switch {
		case i < 8 && (!ok || st != stamptest.Rec{Ino: ino, Gen: 1, Off: uint64(i * bs)}),
			i >= 16 && i < 24 && (!ok || st != stamptest.Rec{Ino: ino, Gen: 2, Off: uint64(i * bs)}),
			(i >= 8 && i < 16 || i >= 24) && ok:
			t.Fatalf("block %d: %+v (%v)", i, st, ok)
		}
	}
}

// TestLambdaWritePreallocated: λ writes past the end go into the space
// Preallocate reserved, as λ-IO's go into fallocated extents: the file
// grows, the gap reads as zeroes, no new blocks are allocated, and the
// write still runs at the target (the growth is committed and synced
// first). Past the reservation the file grows by allocation.
func TestLambdaWritePreallocated(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	f := testfs.Create(t, e.fsys, "out")
	ino := stamptest.InoOf(t, f)
	const reserved = 256 << 10
	if err := f.Preallocate(0, reserved); err != nil {
		t.Fatal(err)
	}
	e.syncRemote()
	lbas := func() []uint64 {
		t.Helper()
		m, err := f.Extents()
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, x := range m.Extents {
			for b := range uint64(x.Blocks) {
				out = append(out, x.LBA+b)
			}
		}
		return out
	}
	// The file grows in steps; the blocks it already maps never move.
	free := e.fsys.Usage().FreeBlocks
	atTarget := func() float64 {
		return e.srv.Metric("nearstore_target_commands_total", map[string]string{"op": "lambda_write", "result": "ok"})
	}
	var prev []uint64
	write := func(gen uint64, off int64, blocks int) []byte {
		t.Helper()
		data := stamptest.Blocks(ino, gen, int(off), blocks*bs, bs)
		before := atTarget()
		n, err := f.LambdaWrite(ctx, e.fn, off, blocks*bs, stamptest.Params(2, bs), data)
		if err != nil || n != len(data) {
			t.Fatalf("λ write at %d: %d, %v", off, n, err)
		}
		if got := atTarget(); got != before+1 {
			t.Fatalf("λ write at %d ran at the target %v times, want 1 (stats %+v)", off, got-before, e.fsys.Stats())
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if want := off + int64(blocks*bs); fi.Size() != want {
			t.Fatalf("after a λ write at %d: size %d, want %d", off, fi.Size(), want)
		}
		now := lbas()
		for i := range prev {
			if now[i] != prev[i] {
				t.Fatalf("block %d moved from LBA %d to %d", i, prev[i], now[i])
			}
		}
		prev = now
		return data
	}
	first := write(1, 0, 8)
	second := write(2, 16*bs, 8) // leaves a gap of 8 blocks
	got := make([]byte, 24*bs)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:8*bs], first) || !bytes.Equal(got[16*bs:], second) {
		t.Fatal("read back differs from what was λ-written")
	}
	if !bytes.Equal(got[8*bs:16*bs], make([]byte, 8*bs)) {
		t.Fatal("the gap a λ write skipped does not read as zeroes")
	}
	// Up to the reservation's end, no block was allocated: the file's
	// blocks are the ones Preallocate reserved.
	write(3, reserved-8*bs, 8)
	if got := e.fsys.Usage().FreeBlocks; got != free {
		t.Fatalf("λ writes into reserved space allocated %d blocks", int64(free)-int64(got))
	}
	// Past it, the file grows by allocation and the write still runs at
	// the target.
	write(4, reserved+64*bs, 8)
	res, err := f.LambdaRead(ctx, e.fn, reserved-8*bs, 8*bs, stamptest.Params(1, bs), 8*stamptest.Size)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := stamptest.Parse(res.Output); !ok || st != (stamptest.Rec{Ino: ino, Gen: 3, Off: uint64(reserved - 8*bs)}) {
		t.Fatalf("stamp read back: %+v %v", st, ok)
	}
}

// TestGrantEndToEnd: the owner grants a task host read access to a
// file's blocks: the task host reads them and nothing else, through the
// target's checks; the owner cannot truncate or overwrite them meanwhile;
// a removal waits for the release to free them; after the release the
// task host is denied again.
func TestGrantEndToEnd(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	f, ino := e.create("shared", 3, 32<<10)
	other, _ := e.create("private", 4, 32<<10)
	if err := e.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	_, task := e.connect(taskNQN, 1)
	g, err := e.fsys.Grant(ctx, taskNQN, []*offloadfs.File{f}, pushdown.GrantRead, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	read := func(x pushdown.Extent) error {
		_, err := task.ReadAtContext(ctx, make([]byte, bs), int64(x.LBA)*bs)
		return err
	}
	for _, x := range g.Extents() {
		if err := read(x); err != nil {
			t.Fatalf("the grantee reading its grant: %v", err)
		}
	}
	got := make([]byte, bs)
	x := g.Extents()[0]
	if _, err := task.ReadAtContext(ctx, got, int64(x.LBA)*bs+bs); err != nil {
		t.Fatal(err)
	}
	if st, _ := stamptest.Parse(got); st != (stamptest.Rec{Ino: ino, Gen: 3, Off: bs}) {
		t.Fatalf("the grantee read %+v", st)
	}
	om, _ := other.Extents()
	if err := read(om.Extents[0]); !errors.Is(err, host.ErrAccessDenied) {
		t.Fatalf("the grantee reading another file: %v, want Access Denied", err)
	}
	if _, err := task.WriteAtContext(ctx, make([]byte, bs), int64(x.LBA)*bs); !errors.Is(err, host.ErrAccessDenied) {
		t.Fatalf("the grantee writing a read grant: %v, want Access Denied", err)
	}
	// The owner's side of the contract.
	if err := f.Truncate(0); !errors.Is(err, offloadfs.ErrGranted) {
		t.Fatalf("truncate: %v, want ErrGranted", err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, offloadfs.ErrGranted) {
		t.Fatalf("overwrite: %v, want ErrGranted", err)
	}
	if err := e.fsys.Remove("shared"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := e.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := read(x); err != nil {
		t.Fatalf("the grantee after the owner removed the file: %v", err)
	}
	free := e.fsys.Usage().FreeBlocks
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Its last grant gone, the grantee is an ordinary host under the
	// owner's reservation: it may read, as any host may under Write
	// Exclusive Registrants Only, and may not write.
	if _, err := task.WriteAtContext(ctx, make([]byte, bs), int64(x.LBA)*bs); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("the grantee writing after the release: %v, want Reservation Conflict", err)
	}
	if err := e.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if after := e.fsys.Usage().FreeBlocks; after <= free {
		t.Fatalf("the removed file's blocks were not freed at the release: %d free before, %d after", free, after)
	}

	// An expiring lease: released at the target by the owner, then the
	// file is the owner's again.
	h, _ := e.create("short", 5, 8<<10)
	if _, err := e.fsys.Grant(ctx, taskNQN, []*offloadfs.File{h}, pushdown.GrantReadWrite, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.fsys.Stats().Grants != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the grant did not expire")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := h.Truncate(0); err != nil {
		t.Fatalf("truncate after the lease ended: %v", err)
	}
	// A grant to the owner itself is the target's to refuse, and leaves
	// nothing pinned.
	if _, err := e.fsys.Grant(ctx, ownerNQN, []*offloadfs.File{other}, pushdown.GrantRead, time.Second); !errors.Is(err, host.ErrBadExtentMap) {
		t.Fatalf("a grant to the owner: %v, want Bad Extent Map", err)
	}
	if err := other.Truncate(0); err != nil {
		t.Fatalf("truncate after a refused grant: %v", err)
	}
}

// TestFunctionErrorsEndToEnd: the function's own failures read the same
// at the target and on the host.
func TestFunctionErrorsEndToEnd(t *testing.T) {
	e := newEnv(t, envConfig{})
	f, _ := e.create("f", 1, 4096)
	call := func() error {
		_, err := e.fsys.Pushdown(context.Background(), e.fn, []*offloadfs.File{f}, host.Start{Length: 16}, stamptest.Scratch(-1, 0))
		return err
	}
	for _, where := range []string{"host", "target"} {
		err := call()
		var fe *sandbox.FunctionError
		if !errors.Is(err, sandbox.ErrFunction) || !errors.As(err, &fe) || fe.Code != -22 {
			t.Errorf("%s: %v, want the function's -22", where, err)
		}
		e.syncRemote()
	}
	if s := e.fsys.Stats(); s.Remote != 1 || s.Fallbacks != 1 {
		t.Fatalf("%+v", s)
	}
	for _, where := range []string{"target", "host"} {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.fsys.Pushdown(context.Background(), e.fn, []*offloadfs.File{f}, host.Start{Offset: uint64(fi.Size() - 10), Length: 32}, stamptest.Scratch(-1, 0))
		if !errors.Is(err, pushdown.ErrOutsideFile) {
			t.Errorf("%s: past the end: %v", where, err)
		}
		// Make the next run on the host: an unsynchronized append.
		if _, err := f.WriteAt(stamptest.Blocks(1, 1, 4096, bs, bs), fi.Size()); err != nil {
			t.Fatal(err)
		}
	}
	if s := e.fsys.Stats(); s.Remote != 2 || s.Fallbacks != 2 {
		t.Fatalf("%+v", s)
	}
}
