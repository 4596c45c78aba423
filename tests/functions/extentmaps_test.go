package functions_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testclock"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// Issue 4's target side over the wire: requests that name files by inode
// and version run on the extent maps their host pushed, at exactly that
// version, and nowhere else; grants confine a second host to its extents.

// ref names a file by inode and version alone: the target fills in the
// extents and size from the map it holds.
func ref(f pushdown.File) pushdown.File { return pushdown.File{ID: f.ID, Version: f.Version} }

func refs(fs []pushdown.File) []pushdown.File {
	out := make([]pushdown.File, len(fs))
	for i, f := range fs {
		out[i] = ref(f)
	}
	return out
}

func isStatus(err error, st nvme.Status) bool { return errors.Is(err, &nvme.StatusError{Status: st}) }

// TestExtentMapPushdown: a B+-tree lookup naming its two files by inode
// and version is refused as stale until the maps are pushed, then runs on
// them in both runtimes; after the index moves (a new version), the old
// version is refused even though its old blocks now hold something else,
// and the new one runs. Each refusal is counted.
func TestExtentMapPushdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: generous})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(41, 42))
	tr := writeTree(t, e.ns, sortedKeys(rng, 1500), 3)
	v1 := []pushdown.File{tr.files[0], tr.files[1]}
	v1[0].ID, v1[0].Version = 101, 1
	v1[1].ID, v1[1].Version = 102, 1
	stale := func() float64 {
		return e.counter("nearstore_target_stale_requests_total", map[string]string{"nsid": "1"})
	}

	fn := e.load("btree_lookup", sandbox.KindWasm)
	scratch := make([]byte, sandbox.ScratchSize)
	functions.BTreeRequest{Mode: functions.BTreeGet, Key: tr.keys[0], ValueSize: functions.DefaultValueSize}.Encode(scratch)
	start := host.Start{File: functions.IndexFile, Length: functions.NodeSize}
	if _, err := e.ns.Pushdown(ctx, fn, refs(v1), start, scratch); !errors.Is(err, host.ErrStaleExtentMap) {
		t.Fatalf("before the maps are pushed: %v, want Stale Extent Map", err)
	}
	if got := stale(); got != 1 {
		t.Fatalf("stale requests counted: %v, want 1", got)
	}
	if err := e.ns.PutExtentMaps(ctx, v1); err != nil {
		t.Fatal(err)
	}
	if vs, err := e.ns.ExtentMapVersions(ctx, []uint64{101, 102, 103}); err != nil || vs[0] != 1 || vs[1] != 1 || vs[2] != 0 {
		t.Fatalf("versions held: %v (%v)", vs, err)
	}
	tr.files = refs(v1)
	for _, kind := range kinds {
		fn := e.load("btree_lookup", kind)
		for range 20 {
			tr.lookup(t, e.ns, fn, tr.keys[rng.IntN(len(tr.keys))])
		}
	}

	// Move the index: copy it to new blocks, push version 2, and reuse
	// the old blocks for something else, as a file system would.
	var plan extentPlan
	for i := uint64(0); i*5*bs < uint64(len(tr.index)); i++ {
		plan.lbas = append(plan.lbas, 20000+6*i)
	}
	plan.blocks = []uint32{5}
	moved := place(t, e.ns, tr.index, plan)
	moved.ID, moved.Version = 101, 2
	if err := e.ns.PutExtentMaps(ctx, []pushdown.File{moved}); err != nil {
		t.Fatal(err)
	}
	for _, s := range fileSpans(v1[0]) {
		stamp(t, e.vols[0], s.off, s.n)
	}
	before := stale()
	if _, err := e.ns.Pushdown(ctx, fn, refs(v1), start, scratch); !errors.Is(err, host.ErrStaleExtentMap) {
		t.Fatalf("the old version after the move: %v, want Stale Extent Map", err)
	}
	if got := stale() - before; got != 1 {
		t.Fatalf("stale requests counted: %v, want 1 more", got)
	}
	tr.files = []pushdown.File{ref(moved), ref(v1[1])}
	for _, kind := range kinds {
		fn := e.load("btree_lookup", kind)
		for range 20 {
			tr.lookup(t, e.ns, fn, tr.keys[rng.IntN(len(tr.keys))])
		}
	}
}

// TestExtentMapLyingExtents: a request that names a held file but sends
// other extents (or a larger size) is refused before the target reads
// anything; one that sends none runs on the held map and reads only the
// file's blocks. A stamped region next to the file is never read.
func TestExtentMapLyingExtents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: generous})
	ctx := context.Background()
	vol := e.vols[0]
	rng := rand.New(rand.NewPCG(5, 6))
	const secretLBA = 9000
	stamp(t, vol, secretLBA*bs, 16*bs)
	data := u64s(rng, 3*bs/8)
	f := place(t, e.ns, data, extentPlan{lbas: []uint64{8000, 8100}, blocks: []uint32{2, 1}})
	f.ID, f.Version = 31, 4
	if err := e.ns.PutExtentMaps(ctx, []pushdown.File{f}); err != nil {
		t.Fatal(err)
	}
	want, _ := functions.Stats64(data)
	secret := []pushdown.Extent{{LBA: secretLBA, Blocks: 3}}
	start := host.Start{Length: uint32(len(data))}
	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			fn := e.load("stats64", kind)
			for _, tc := range []struct {
				name string
				file pushdown.File
				want nvme.Status // 0: succeeds on the held map
			}{
				{"other extents", pushdown.File{ID: 31, Version: 4, Size: f.Size, Extents: secret}, nvme.StatusOutsideFile},
				{"extra extent", pushdown.File{ID: 31, Version: 4, Size: f.Size, Extents: append(append([]pushdown.Extent{}, f.Extents...), secret...)}, nvme.StatusOutsideFile},
				{"larger size", pushdown.File{ID: 31, Version: 4, Size: f.Size + bs}, nvme.StatusOutsideFile},
				{"version not held", pushdown.File{ID: 31, Version: 5, Size: f.Size, Extents: secret}, nvme.StatusStaleExtentMap},
				{"inode not held", pushdown.File{ID: 32, Version: 4, Size: f.Size, Extents: secret}, nvme.StatusStaleExtentMap},
				{"the held map, sent", f, 0},
				{"the held map, not sent", ref(f), 0},
			} {
				vol.record()
				res, err := e.ns.LambdaRead(ctx, fn, []pushdown.File{tc.file}, start, nil, functions.StatsSize)
				acc := vol.accesses()
				if tc.want != 0 {
					if !isStatus(err, tc.want) {
						t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
					}
					if len(acc) != 0 {
						t.Errorf("%s: a refused request touched the namespace: %v", tc.name, acc)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if got, err := functions.ParseStats(res.Output); err != nil || got != want {
					t.Errorf("%s: stats %+v (%v), want the file's %+v", tc.name, got, err, want)
				}
				for _, a := range acc {
					if a.write || !within(a, fileSpans(f)) {
						t.Errorf("%s: touched %+v, outside the file's blocks", tc.name, a)
					}
				}
			}
		})
	}
	checkStamp(t, vol, secretLBA*bs, 16*bs)
}

// TestExtentMapLambdaWrite: bitmap's λ write into a file named by inode
// and version lands in the held extents; after the file moves, a write
// naming the old version is refused and writes nothing, and one naming
// the new version writes only the new blocks.
func TestExtentMapLambdaWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: generous})
	ctx := context.Background()
	vol := e.vols[0]
	rng := rand.New(rand.NewPCG(9, 10))
	v1 := pushdown.File{ID: 41, Version: 1, Size: 8 * bs, Extents: []pushdown.Extent{{LBA: 20000, Blocks: 3}, {LBA: 20100, Blocks: 5}}}
	v2 := pushdown.File{ID: 41, Version: 2, Size: 8 * bs, Extents: []pushdown.Extent{{LBA: 21000, Blocks: 8}}}
	regions := []access{{off: 19990 * bs, n: 20 * bs}, {off: 20090 * bs, n: 20 * bs}, {off: 20990 * bs, n: 20 * bs}}
	for _, a := range regions {
		stamp(t, vol, a.off, a.n)
	}
	if err := e.ns.PutExtentMaps(ctx, []pushdown.File{v1}); err != nil {
		t.Fatal(err)
	}
	fn := e.load("bitmap", sandbox.KindWasm)
	start := host.Start{Offset: bs, Length: 6 * bs}
	write := func(f pushdown.File) ([]byte, []access, error) {
		bitmap := make([]byte, 6*bs)
		for i := range bitmap {
			if rng.IntN(3) == 0 {
				bitmap[i] = 0xff
			}
		}
		runs := functions.EncodeBitmap(bitmap, len(bitmap)*8)
		vol.record()
		_, err := e.ns.LambdaWrite(ctx, fn, []pushdown.File{ref(f)}, start, nil, runs)
		return bitmap, vol.accesses(), err
	}
	check := func(f pushdown.File, bitmap []byte, acc []access) {
		t.Helper()
		written := fileRangeSpans(f, bs, 6*bs)
		for _, a := range acc {
			if !a.write || !within(a, written) {
				t.Errorf("version %d: touched %+v, outside the range's blocks", f.Version, a)
			}
		}
		if got := readFile(t, vol, f); !bytes.Equal(got[bs:7*bs], bitmap) {
			t.Errorf("version %d: the range does not hold the expansion", f.Version)
		}
	}
	bitmap, acc, err := write(v1)
	if err != nil {
		t.Fatal(err)
	}
	check(v1, bitmap, acc)
	wroteV1 := fileRangeSpans(v1, bs, 6*bs)

	if err := e.ns.PutExtentMaps(ctx, []pushdown.File{v2}); err != nil {
		t.Fatal(err)
	}
	if _, acc, err := write(v1); !errors.Is(err, host.ErrStaleExtentMap) || len(acc) != 0 {
		t.Fatalf("λ write naming the old version: %v, touched %v; want Stale Extent Map and nothing", err, acc)
	}
	bitmap, acc, err = write(v2)
	if err != nil {
		t.Fatal(err)
	}
	check(v2, bitmap, acc)
	for _, a := range regions {
		checkStamp(t, vol, a.off, a.n, append(fileRangeSpans(v2, bs, 6*bs), wroteV1...)...)
	}
}

// TestGrantsEndToEnd: a second host given a read grant reads inside it
// (plainly and by λ read) and is denied outside it and for writes, without
// the target touching a denied block; a read-write grant lets it write
// there; once the grant is released, or its lease has run out, it is
// denied even inside. The owner and an unrelated host are never affected.
func TestGrantsEndToEnd(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Unix(2_000_000_000, 0))
	e := newEnv(t, envConfig{limits: generous, now: clock.Now})
	ctx := context.Background()
	vol := e.vols[0]
	const taskNQN = "nqn.2026-11.io.nearstore:e2e-task"
	_, task := e.connectAs(taskNQN, 1)
	_, stranger := e.connectAs("nqn.2026-11.io.nearstore:e2e-stranger", 1)
	stats := e.load("stats64", sandbox.KindWasm)
	const grantLBA, grantBlocks = 7000, 16
	granted := access{off: grantLBA * bs, n: grantBlocks * bs}
	stamp(t, vol, (grantLBA-16)*bs, (grantBlocks+32)*bs)

	read := func(ns *host.Namespace, lba int64, blocks int) ([]byte, error) {
		b := make([]byte, blocks*bs)
		_, err := ns.ReadAt(b, lba*bs)
		return b, err
	}
	write := func(ns *host.Namespace, lba int64) error {
		_, err := ns.WriteAt(make([]byte, bs), lba*bs)
		return err
	}
	lambda := func(lba uint64, blocks uint32) error {
		f := pushdown.File{Size: uint64(blocks) * bs, Extents: []pushdown.Extent{{LBA: lba, Blocks: blocks}}}
		res, err := task.LambdaRead(ctx, stats, []pushdown.File{f}, host.Start{Length: uint32(f.Size)}, nil, functions.StatsSize)
		if err != nil {
			return err
		}
		b := make([]byte, f.Size)
		if _, err := vol.ReadAt(b, int64(lba)*bs); err != nil {
			return err
		}
		want, _ := functions.Stats64(b)
		if got, err := functions.ParseStats(res.Output); err != nil || got != want {
			return errors.New("λ read returned the wrong stats")
		}
		return nil
	}
	type step struct {
		name string
		run  func() error
		ok   bool
	}
	run := func(phase string, steps []step) {
		t.Helper()
		for _, s := range steps {
			vol.record()
			err := s.run()
			acc := vol.accesses()
			switch {
			case s.ok && err != nil:
				t.Errorf("%s: %s: %v", phase, s.name, err)
			case !s.ok && !errors.Is(err, host.ErrAccessDenied):
				t.Errorf("%s: %s: %v, want Access Denied", phase, s.name, err)
			case !s.ok && len(acc) != 0:
				t.Errorf("%s: %s: denied, but the target touched %v", phase, s.name, acc)
			}
		}
	}

	// Only the namespace's reservation holder may grant: the owner takes
	// Write Exclusive Registrants Only, as offloadfs does, and the hosts
	// that write register.
	for i, ns := range []*host.Namespace{e.ns, task, stranger} {
		if err := ns.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: uint64(0x100 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ns.Acquire(ctx, host.AcquireOpts{Action: host.AcquireReservation, Type: nvme.ResvWriteExclusiveRegOnly, Key: 0x100}); err != nil {
		t.Fatal(err)
	}
	if err := stranger.Grant(ctx, host.Grant{ID: 1, Host: taskNQN, Mode: host.GrantRead, Lease: time.Minute,
		Extents: []pushdown.Extent{{LBA: grantLBA, Blocks: grantBlocks}}}); !errors.Is(err, host.ErrAccessDenied) {
		t.Fatalf("a grant from a host not holding the reservation: %v, want Access Denied", err)
	}
	if err := e.ns.Grant(ctx, host.Grant{ID: 1, Host: taskNQN, Mode: host.GrantRead, Lease: time.Minute,
		Extents: []pushdown.Extent{{LBA: grantLBA, Blocks: grantBlocks}}}); err != nil {
		t.Fatal(err)
	}
	run("read grant", []step{
		{"read inside", func() error {
			b, err := read(task, grantLBA, grantBlocks)
			if err == nil {
				want := make([]byte, len(b))
				_, _ = vol.ReadAt(want, granted.off)
				if !bytes.Equal(b, want) {
					err = errors.New("read returned other bytes")
				}
			}
			return err
		}, true},
		{"λ read inside", func() error { return lambda(grantLBA+2, 8) }, true},
		{"read before", func() error { _, err := read(task, grantLBA-1, 2); return err }, false},
		{"read after", func() error { _, err := read(task, grantLBA+grantBlocks, 1); return err }, false},
		{"read far away", func() error { _, err := read(task, 100, 1); return err }, false},
		{"write inside", func() error { return write(task, grantLBA) }, false},
		{"λ read reaching outside", func() error { return lambda(grantLBA+8, 9) }, false},
		{"λ write inside", func() error {
			_, err := task.LambdaWrite(ctx, e.load("bitmap", sandbox.KindWasm),
				[]pushdown.File{{Size: bs, Extents: []pushdown.Extent{{LBA: grantLBA, Blocks: 1}}}}, host.Start{Length: bs}, nil,
				functions.EncodeBitmap([]byte{1}, 8))
			return err
		}, false},
		{"the owner writes anywhere", func() error { return write(e.ns, 100) }, true},
		{"a stranger reads inside", func() error { _, err := read(stranger, grantLBA, 1); return err }, true},
		{"a stranger writes far away", func() error { return write(stranger, 101) }, true},
	})
	checkStamp(t, vol, (grantLBA-16)*bs, (grantBlocks+32)*bs)

	if err := e.ns.Grant(ctx, host.Grant{ID: 2, Host: taskNQN, Mode: host.GrantReadWrite, Lease: time.Hour,
		Extents: []pushdown.Extent{{LBA: 30000, Blocks: 4}}}); err != nil {
		t.Fatal(err)
	}
	run("read-write grant", []step{
		{"write inside", func() error { return write(task, 30003) }, true},
		{"write past it", func() error { return write(task, 30004) }, false},
		{"read grant still there", func() error { _, err := read(task, grantLBA, 1); return err }, true},
	})
	if err := e.ns.ReleaseGrant(ctx, 1); err != nil {
		t.Fatal(err)
	}
	run("read grant released", []step{
		{"read inside", func() error { _, err := read(task, grantLBA, 1); return err }, false},
		{"write in the read-write grant", func() error { return write(task, 30000) }, true},
	})
	clock.Advance(time.Hour)
	// Its last grant gone, the task host's standing ends: it is an
	// ordinary host again, and no longer registered, so the owner's
	// reservation lets it read and not write.
	run("read-write lease ran out", []step{
		{"read inside", func() error { _, err := read(task, 30000, 1); return err }, true},
		{"the owner reads", func() error { _, err := read(e.ns, 30000, 1); return err }, true},
		{"the stranger reads", func() error { _, err := read(stranger, 30000, 1); return err }, true},
	})
	if err := write(task, 30000); !errors.Is(err, host.ErrReservationConflict) {
		t.Errorf("the task host writing after its last lease ran out: %v, want Reservation Conflict", err)
	}
	if got := e.counter("nearstore_target_access_denied_total", map[string]string{"nsid": "1"}); got < 9 {
		t.Errorf("access denied counted %v times", got)
	}
}

// TestExtentMapPutWhileRunning: a Put does not wait for the requests
// running on the map it replaces, nor hold up other I/O; a running request
// finishes on the map it started with, and later requests see the new one.
func TestExtentMapPutWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: generous})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vol := e.vols[0]
	rng := rand.New(rand.NewPCG(13, 14))
	d1, d2 := u64s(rng, 2*bs/8), u64s(rng, 2*bs/8)
	v1 := place(t, e.ns, d1, extentPlan{lbas: []uint64{8000}, blocks: []uint32{2}})
	v1.ID, v1.Version = 51, 1
	v2 := place(t, e.ns, d2, extentPlan{lbas: []uint64{8500}, blocks: []uint32{2}})
	v2.ID, v2.Version = 51, 2
	if err := e.ns.PutExtentMaps(ctx, []pushdown.File{v1}); err != nil {
		t.Fatal(err)
	}
	stats := e.load("stats64", sandbox.KindWasm)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	vol.setGate(func(off, n int64) {
		if off == 8000*bs {
			once.Do(func() { close(started) })
			<-release
		}
	})
	defer vol.setGate(nil)
	type result struct {
		res pushdown.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.ns.LambdaRead(ctx, stats, []pushdown.File{ref(v1)}, host.Start{Length: 2 * bs}, nil, functions.StatsSize)
		done <- result{res, err}
	}()
	<-started
	// The request is held inside its read: the Put, a query and ordinary
	// I/O all complete meanwhile.
	if err := e.ns.PutExtentMaps(ctx, []pushdown.File{v2}); err != nil {
		t.Fatal(err)
	}
	if vs, err := e.ns.ExtentMapVersions(ctx, []uint64{51}); err != nil || vs[0] != 2 {
		t.Fatalf("versions while the request runs: %v (%v)", vs, err)
	}
	if _, err := e.ns.ReadAt(make([]byte, bs), 100*bs); err != nil {
		t.Fatal(err)
	}
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	want1, _ := functions.Stats64(d1)
	if got, err := functions.ParseStats(r.res.Output); err != nil || got != want1 {
		t.Fatalf("the running request: %+v (%v), want version 1's %+v", got, err, want1)
	}
	if _, err := e.ns.LambdaRead(ctx, stats, []pushdown.File{ref(v1)}, host.Start{Length: 2 * bs}, nil, functions.StatsSize); !errors.Is(err, host.ErrStaleExtentMap) {
		t.Fatalf("version 1 after the put: %v, want stale", err)
	}
	res, err := e.ns.LambdaRead(ctx, stats, []pushdown.File{ref(v2)}, host.Start{Length: 2 * bs}, nil, functions.StatsSize)
	want2, _ := functions.Stats64(d2)
	if got, perr := functions.ParseStats(res.Output); err != nil || perr != nil || got != want2 {
		t.Fatalf("version 2: %+v (%v %v), want %+v", got, err, perr, want2)
	}
}
