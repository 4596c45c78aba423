package offloadfs_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
)

// fakeTarget is an in-process stand-in for a target, as offloadfs sees it
// (offloadfs.Remote and offloadfs.FunctionLoader): it keeps extent maps
// with the target's rules (versions only move forward; a request naming
// files by inode runs on exactly the held version or is refused as
// stale) and runs requests with the real executor on the file system's
// own device. Tests inject faults and hooks; tests/offloadfs runs the
// real target over TCP.
type fakeTarget struct {
	dev  offloadfs.Device
	exec pushdown.Executor
	rt   sandbox.Runtime

	mu     sync.Mutex
	maps   map[uint64]heldMap
	funcs  map[sandbox.ID]sandbox.Module
	grants map[uint64]host.Grant

	// failPuts fails that many Extent Map Puts before applying them.
	failPuts atomic.Int32
	// onPut, if set, sees every update the target applies.
	onPut func(u pushdown.MapUpdate)
	// hook, if set, runs after a request's files are resolved and before
	// it runs: tests change files there.
	hook func(op string)
	ran  atomic.Int64
}

type heldMap struct {
	pushdown.File
	removed bool
}

func newFakeTarget(dev offloadfs.Device) *fakeTarget {
	return &fakeTarget{
		dev:    dev,
		rt:     ebpf.NewRuntime(ebpf.Options{Logger: slog.New(slog.DiscardHandler)}),
		maps:   map[uint64]heldMap{},
		funcs:  map[sandbox.ID]sandbox.Module{},
		grants: map[uint64]host.Grant{},
	}
}

var errFakeDown = fmt.Errorf("fake target: injected failure: %w", host.ErrConnectionLost)

func (t *fakeTarget) UpdateExtentMaps(_ context.Context, ups []pushdown.MapUpdate) (applied, ignored int, err error) {
	if t.failPuts.Load() > 0 {
		t.failPuts.Add(-1)
		return 0, 0, errFakeDown
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, u := range ups {
		cur, has := t.maps[u.ID]
		switch {
		case u.Remove && u.Version == 0:
			delete(t.maps, u.ID)
		case has && u.Version <= cur.Version:
			ignored++
			continue
		default:
			t.maps[u.ID] = heldMap{File: u.File, removed: u.Remove}
		}
		applied++
		if t.onPut != nil {
			t.onPut(u)
		}
	}
	return applied, ignored, nil
}

func (t *fakeTarget) ExtentMapVersions(_ context.Context, inodes []uint64) ([]uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]uint64, len(inodes))
	for i, ino := range inodes {
		if h, ok := t.maps[ino]; ok && !h.removed {
			out[i] = h.Version
		}
	}
	return out, nil
}

// held returns the map held for ino.
func (t *fakeTarget) held(ino uint64) (pushdown.File, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.maps[ino]
	return h.File, ok && !h.removed
}

// forget drops every map, as a restarted target would have none.
func (t *fakeTarget) forget() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.maps)
}

func (t *fakeTarget) setMap(u pushdown.MapUpdate) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maps[u.ID] = heldMap{File: u.File, removed: u.Remove}
}

func (t *fakeTarget) prepare(op string, fn sandbox.ID, files []pushdown.File) (sandbox.Module, []pushdown.File, error) {
	t.mu.Lock()
	m := t.funcs[fn]
	resolved, err := pushdown.ResolveFiles(files, func(ino uint64) (pushdown.File, bool) {
		h, ok := t.maps[ino]
		return h.File, ok && !h.removed
	})
	t.mu.Unlock()
	switch {
	case m == nil:
		return nil, nil, &nvme.StatusError{Status: nvme.StatusFunctionNotFound}
	case errors.Is(err, pushdown.ErrStale):
		return nil, nil, fmt.Errorf("fake target: %w: %w", err, &nvme.StatusError{Status: nvme.StatusStaleExtentMap})
	case err != nil:
		return nil, nil, err
	}
	if t.hook != nil {
		t.hook(op)
	}
	t.ran.Add(1)
	return m, resolved, nil
}

func (t *fakeTarget) Pushdown(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, scratch []byte) (pushdown.Result, error) {
	m, files, err := t.prepare("pushdown", fn, files)
	if err != nil {
		return pushdown.Result{}, err
	}
	req := pushdown.Request{Function: fn, Files: files, StartFile: start.File, StartOffset: start.Offset, StartLength: start.Length, Params: scratch}
	return t.exec.Pushdown(ctx, t.dev, m, &req)
}

func (t *fakeTarget) LambdaRead(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, params []byte, outCap int) (pushdown.Result, error) {
	m, files, err := t.prepare("lambda_read", fn, files)
	if err != nil {
		return pushdown.Result{}, err
	}
	req := pushdown.Request{Function: fn, Files: files, StartFile: start.File, StartOffset: start.Offset, StartLength: start.Length, Params: params}
	return t.exec.LambdaRead(ctx, t.dev, m, &req, outCap)
}

func (t *fakeTarget) LambdaWrite(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, params, data []byte) (int, error) {
	m, files, err := t.prepare("lambda_write", fn, files)
	if err != nil {
		return 0, err
	}
	req := pushdown.Request{Function: fn, Files: files, StartFile: start.File, StartOffset: start.Offset, StartLength: start.Length, Params: params, Data: data}
	_, n, err := t.exec.LambdaWrite(ctx, t.dev, m, &req)
	return int(n), err
}

func (t *fakeTarget) Grant(_ context.Context, g host.Grant) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.grants[g.ID] = g
	return nil
}

func (t *fakeTarget) ReleaseGrant(_ context.Context, id uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.grants, id)
	return nil
}

func (t *fakeTarget) ReleaseAllGrants(context.Context) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.grants)
	clear(t.grants)
	return n, nil
}

func (t *fakeTarget) grantCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.grants)
}

func (t *fakeTarget) LoadFunction(ctx context.Context, module []byte) (sandbox.ID, error) {
	id := sandbox.IDOf(module)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.funcs[id] != nil {
		return id, nil
	}
	m, err := t.rt.Load(ctx, module, sandbox.Limits{})
	if err != nil {
		return id, err
	}
	t.funcs[id] = m
	return id, nil
}

// unload drops every function, as a restarted target would have none.
func (t *fakeTarget) unload() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.funcs)
}

// stampModule returns tests/offloadfs's stamp function built for eBPF
// (whose runtime is light enough for unit tests).
func stampModule(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "tests", "offloadfs", "testdata", "stamp.o"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A stamp heads every device block of a test file: magic, inode,
// generation, offset.
const (
	stampMagic = 0x504d4154534e // "NSTAMP"
	stampSize  = 32
)

type stampRec struct{ ino, gen, off uint64 }

func parseStamp(b []byte) (stampRec, bool) {
	if len(b) < stampSize || binary.LittleEndian.Uint64(b) != stampMagic {
		return stampRec{}, false
	}
	le := binary.LittleEndian
	return stampRec{le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:])}, true
}

// stamped returns n bytes of file content whose every bs-byte block is
// stamped with (ino, gen, its offset).
func stamped(ino, gen uint64, n, bs int) []byte {
	b := make([]byte, n)
	for off := 0; off < n; off += bs {
		blk := b[off:min(off+bs, n)]
		for i := range blk {
			blk[i] = byte(gen) ^ byte(i)
		}
		if len(blk) >= stampSize {
			le := binary.LittleEndian
			le.PutUint64(blk, stampMagic)
			le.PutUint64(blk[8:], ino)
			le.PutUint64(blk[16:], gen)
			le.PutUint64(blk[24:], uint64(off))
		}
	}
	return b
}

// stampScratch is the pushdown scratch of the stamp function: read the
// start range's stamp, then (second >= 0) that of file's byte second.
func stampScratch(second int64, file uint32) []byte {
	s := make([]byte, 16)
	v := ^uint64(0)
	if second >= 0 {
		v = uint64(second)
	}
	binary.LittleEndian.PutUint64(s, v)
	binary.LittleEndian.PutUint32(s[8:], file)
	return s
}

// remoteEnv is a file system on a memory device with a fake target in
// front of the same device.
type remoteEnv struct {
	t      testing.TB
	dev    offloadfs.Device
	target *fakeTarget
	fsys   *offloadfs.FS
	rt     sandbox.Runtime
	fn     sandbox.ID
}

func newRemoteEnv(t testing.TB, mutate func(*offloadfs.Options)) *remoteEnv {
	t.Helper()
	ctx := context.Background()
	e := &remoteEnv{t: t, dev: newDev(t, "mem:64MiB")}
	if err := offloadfs.Mkfs(ctx, e.dev, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	e.target = newFakeTarget(e.dev)
	e.rt = ebpf.NewRuntime(ebpf.Options{Logger: slog.New(slog.DiscardHandler)})
	opts := quiet()
	opts.Remote = e.target
	opts.Loader = e.target
	opts.Runtimes = []sandbox.Runtime{e.rt}
	if mutate != nil {
		mutate(&opts)
	}
	var err error
	if e.fsys, err = offloadfs.Mount(ctx, e.dev, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.fsys.Close() })
	if e.fn, err = e.fsys.RegisterFunction(ctx, stampModule(t)); err != nil {
		t.Fatal(err)
	}
	return e
}

// syncRemote waits, with a deadline, for the target to hold every change.
func (e *remoteEnv) syncRemote() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.fsys.SyncRemote(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// create writes a stamped file of n bytes, generation gen, and returns it
// with its inode.
func (e *remoteEnv) create(name string, gen uint64, n int) (*offloadfs.File, uint64) {
	e.t.Helper()
	f, err := e.fsys.Create(name)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { f.Close() })
	ino := inoOf(e.t, f)
	if _, err := f.WriteAt(stamped(ino, gen, n, e.dev.BlockSize()), 0); err != nil {
		e.t.Fatal(err)
	}
	return f, ino
}

func inoOf(t testing.TB, f *offloadfs.File) uint64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*offloadfs.FileInfo).Ino()
}

// stampAt pushes the stamp function down on f at off and returns the
// stamp it saw.
func (e *remoteEnv) stampAt(f *offloadfs.File, off int64) stampRec {
	e.t.Helper()
	res, err := e.fsys.Pushdown(context.Background(), e.fn, []*offloadfs.File{f}, host.Start{Offset: uint64(off), Length: stampSize}, stampScratch(-1, 0))
	if err != nil {
		e.t.Fatal(err)
	}
	st, ok := parseStamp(res.Output[64:])
	if !ok {
		e.t.Fatalf("pushdown at %d returned no stamp: % x", off, res.Output[64:96])
	}
	return st
}
