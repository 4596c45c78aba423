package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/metricstest"
	"github.com/nearstore/nearstore/internal/testclock"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// echoRuntime loads any module as the echo function: compute copies its
// input to its output. A λ read then returns exactly the bytes the target
// read for it, and a λ write writes its input, which is what the extent
// map tests need to see, without a real runtime.
type echoRuntime struct{}

func (echoRuntime) Kind() sandbox.Kind { return sandbox.KindWasm }
func (echoRuntime) Load(_ context.Context, module []byte, _ sandbox.Limits) (sandbox.Module, error) {
	return echoModule{id: sandbox.IDOf(module)}, nil
}
func (echoRuntime) Close(context.Context) error { return nil }

type echoModule struct{ id sandbox.ID }

func (m echoModule) ID() sandbox.ID                                  { return m.id }
func (echoModule) Kind() sandbox.Kind                                { return sandbox.KindWasm }
func (echoModule) HasPushdown() bool                                 { return false }
func (echoModule) HasCompute() bool                                  { return true }
func (echoModule) Close(context.Context) error                       { return nil }
func (echoModule) Acquire(context.Context) (sandbox.Instance, error) { return &echoInstance{}, nil }

type echoInstance struct{ in, out []byte }

func (*echoInstance) Data(int) ([]byte, error) { return nil, sandbox.ErrNoEntry }
func (*echoInstance) Scratch() []byte          { return nil }
func (*echoInstance) ResultLen() int           { return 0 }
func (*echoInstance) Step(context.Context, uint32, uint64, int) (bool, []sandbox.Next, error) {
	return false, nil, sandbox.ErrNoEntry
}
func (i *echoInstance) Input(n int) ([]byte, error) { i.in = make([]byte, n); return i.in, nil }
func (i *echoInstance) Output(n int) ([]byte, error) {
	if len(i.out) != n {
		i.out = make([]byte, n)
	}
	return i.out, nil
}
func (i *echoInstance) Compute(_ context.Context, inLen, outCap int) (int, error) {
	return copy(i.out[:outCap], i.in[:inLen]), nil
}
func (*echoInstance) Release() {}

// echoModuleBytes is a module the echo runtime accepts (and the host
// recognises as wasm).
var echoModuleBytes = []byte("\x00asm\x01\x00\x00\x00echo")

// connectAs connects a host under the given NQN and returns namespace
// nsid.
func connectAs(t testing.TB, addr, hostNQN string, nsid uint32) (*host.Controller, *host.Namespace) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := host.Connect(ctx, addr, testNQN, host.Options{HostNQN: hostNQN, KeepAlive: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ns, err := c.Namespace(nsid)
	if err != nil {
		t.Fatal(err)
	}
	return c, ns
}

// gauge sums the target metric name's samples whose labels include want.
func gauge(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	return metricstest.Sum(t, reg, name, want)
}

func put(ino, version, size uint64, xs ...pushdown.Extent) pushdown.MapUpdate {
	return pushdown.MapUpdate{File: pushdown.File{ID: ino, Version: version, Size: size, Extents: xs}}
}

func remove(ino, version uint64) pushdown.MapUpdate {
	return pushdown.MapUpdate{File: pushdown.File{ID: ino, Version: version}, Remove: true}
}

func x(lba uint64, blocks uint32) pushdown.Extent { return pushdown.Extent{LBA: lba, Blocks: blocks} }

// TestMapTableVersions: versions per inode only move forward; a removal
// keeps its version as a floor; a removal of version 0 drops everything.
func TestMapTableVersions(t *testing.T) {
	tbl := &mapTable{byIno: make(map[uint64]heldMap)}
	for i, step := range []struct {
		up               pushdown.MapUpdate
		applied, ignored int
		held             uint64 // version held for inode 7 afterwards
		removed          bool
	}{
		{put(7, 2, 512, x(1, 1)), 1, 0, 2, false},
		{put(7, 2, 512, x(1, 1)), 0, 1, 2, false}, // resent
		{put(7, 1, 512, x(9, 1)), 0, 1, 2, false}, // late
		{put(7, 5, 1024, x(3, 2)), 1, 0, 5, false},
		{remove(7, 4), 0, 1, 5, false}, // older than the map
		{remove(7, 6), 1, 0, 6, true},
		{put(7, 6, 512, x(1, 1)), 0, 1, 6, true}, // the removed version, late
		{put(7, 7, 512, x(1, 1)), 1, 0, 7, false},
		{remove(7, 0), 1, 0, 0, false},
		{remove(7, 0), 0, 1, 0, false}, // nothing to remove
		{put(7, 1, 512, x(1, 1)), 1, 0, 1, false},
		{remove(8, 3), 1, 0, 1, false}, // a removal of a map never held still sets a floor
		{put(8, 3, 512, x(1, 1)), 0, 1, 1, false},
	} {
		d, err := tbl.apply([]pushdown.MapUpdate{step.up}, 100, 100)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		v, removed, _ := tbl.version(7)
		if d.applied != step.applied || d.ignored != step.ignored || v != step.held || removed != step.removed {
			t.Fatalf("step %d (%+v): applied %d ignored %d, holds v%d removed %v; want %d %d v%d %v",
				i, step.up, d.applied, d.ignored, v, removed, step.applied, step.ignored, step.held, step.removed)
		}
	}
	if tbl.live != 1 || tbl.extents != 1 || len(tbl.byIno) != 2 {
		t.Fatalf("live %d extents %d entries %d, want 1 1 2", tbl.live, tbl.extents, len(tbl.byIno))
	}
}

// TestMapTableLimits: a batch that would exceed a limit changes nothing.
func TestMapTableLimits(t *testing.T) {
	tbl := &mapTable{byIno: make(map[uint64]heldMap)}
	if _, err := tbl.apply([]pushdown.MapUpdate{put(1, 1, 0, x(1, 1), x(2, 1)), put(2, 1, 0)}, 3, 3); err != nil {
		t.Fatal(err)
	}
	for _, batch := range [][]pushdown.MapUpdate{
		{put(3, 1, 0), put(4, 1, 0)},                                     // 4 entries
		{put(3, 1, 0, x(5, 1)), put(1, 2, 0, x(1, 2), x(4, 1), x(6, 1))}, // 4 extents
		{remove(5, 1), remove(6, 1)},                                     // removals are entries too
	} {
		before := fmt.Sprint(tbl.byIno)
		if _, err := tbl.apply(batch, 3, 3); !errors.Is(err, errMapLimit) {
			t.Fatalf("%+v: %v, want errMapLimit", batch, err)
		}
		if fmt.Sprint(tbl.byIno) != before || tbl.live != 2 || tbl.extents != 2 {
			t.Fatalf("%+v: a refused batch changed the table", batch)
		}
	}
	// Replacing a map with a larger one fits when the old one goes.
	if _, err := tbl.apply([]pushdown.MapUpdate{put(1, 2, 0, x(7, 1)), put(2, 2, 0, x(8, 1), x(9, 1))}, 3, 3); err != nil {
		t.Fatal(err)
	}
}

// FuzzMapTable applies arbitrary batches and checks the table against a
// model: each inode's version never goes back except by a version-0
// removal, ignored updates change nothing, and the counters match the
// contents.
func FuzzMapTable(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0, 0, 0, 255, 255, 255, 17, 4, 9, 9, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		tbl := &mapTable{byIno: make(map[uint64]heldMap)}
		model := map[uint64]heldMap{}
		const maxEntries, maxExtents = 6, 10
		for len(b) >= 3 {
			var batch []pushdown.MapUpdate
			n := int(b[0]%4) + 1
			b = b[1:]
			for ; n > 0 && len(b) >= 3; n-- {
				ino, ver, kind := uint64(b[0]%8)+1, uint64(b[1]%6), b[2]
				b = b[3:]
				switch {
				case kind%3 == 0:
					batch = append(batch, remove(ino, ver))
				default:
					xs := make([]pushdown.Extent, kind%5)
					for i := range xs {
						xs[i] = x(uint64(i), 1)
					}
					batch = append(batch, put(ino, ver+1, 0, xs...))
				}
			}
			// The model: apply in order to a copy, then check the limits.
			next := make(map[uint64]heldMap, len(model))
			for k, v := range model {
				next[k] = v
			}
			applied := 0
			for _, u := range batch {
				cur, has := next[u.ID]
				switch {
				case u.Remove && u.Version == 0:
					if has {
						delete(next, u.ID)
						applied++
					}
				case has && u.Version <= cur.Version:
				default:
					next[u.ID] = heldMap{File: u.File, removed: u.Remove}
					applied++
				}
			}
			live, extents := 0, 0
			for _, h := range next {
				if !h.removed {
					live++
					extents += len(h.Extents)
				}
			}
			fits := len(next) <= maxEntries && extents <= maxExtents
			d, err := tbl.apply(batch, maxEntries, maxExtents)
			if fits != (err == nil) {
				t.Fatalf("batch %+v: err %v, model says fits %v", batch, err, fits)
			}
			if fits {
				model = next
				if d.applied != applied || d.applied+d.ignored != len(batch) {
					t.Fatalf("applied %d ignored %d of %d, model applied %d", d.applied, d.ignored, len(batch), applied)
				}
			}
			live, extents = 0, 0
			for _, h := range model {
				if !h.removed {
					live++
					extents += len(h.Extents)
				}
			}
			if len(tbl.byIno) != len(model) || tbl.live != live || tbl.extents != extents {
				t.Fatalf("table has %d entries (%d live, %d extents), model %d (%d, %d)",
					len(tbl.byIno), tbl.live, tbl.extents, len(model), live, extents)
			}
			for ino, h := range model {
				got := tbl.byIno[ino]
				if got.Version != h.Version || got.removed != h.removed || len(got.Extents) != len(h.Extents) {
					t.Fatalf("inode %d: table %+v, model %+v", ino, got, h)
				}
			}
		}
	})
}

// TestCover: coverage by unions of extents of usable grants.
func TestCover(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &grant{mode: pushdown.GrantRead, expires: now.Add(time.Minute), extents: []pushdown.Extent{x(10, 10), x(30, 5)}}
	w := &grant{mode: pushdown.GrantReadWrite, expires: now.Add(time.Minute), extents: []pushdown.Extent{x(20, 10)}}
	old := &grant{mode: pushdown.GrantReadWrite, expires: now, extents: []pushdown.Extent{x(0, 100)}}
	gs := []*grant{r, w, old}
	for _, tc := range []struct {
		lba, n uint64
		write  bool
		ok     bool
	}{
		{10, 10, false, true},
		{10, 25, false, true}, // r, w, r again
		{9, 2, false, false},  // starts before
		{34, 2, false, false}, // ends after
		{20, 10, true, true},
		{19, 2, true, false}, // 19 is read-only
		{10, 1, true, false},
		{0, 1, false, false}, // only the expired grant has it
		{50, 0, true, true},  // nothing to cover
	} {
		_, ok := cover(gs, now, blockRange{lba: tc.lba, n: tc.n, write: tc.write})
		if ok != tc.ok {
			t.Errorf("[%d, +%d) write %v: covered %v, want %v", tc.lba, tc.n, tc.write, ok, tc.ok)
		}
	}
}

// FuzzCover checks cover against a block-by-block model.
func FuzzCover(f *testing.F) {
	f.Add([]byte{3, 4, 1, 10, 3, 0, 2, 5, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 3 {
			return
		}
		now := time.Unix(1000, 0)
		r := blockRange{lba: uint64(b[0] % 64), n: uint64(b[1] % 16), write: b[2]&1 != 0}
		b = b[3:]
		var gs []*grant
		var readable, writable [128]bool
		for len(b) >= 4 {
			g := &grant{mode: pushdown.GrantRead, expires: now.Add(time.Second)}
			if b[0]&1 != 0 {
				g.mode = pushdown.GrantReadWrite
			}
			expired := b[0]&2 != 0
			if expired {
				g.expires = now
			}
			k := int(b[1]%3) + 1
			b = b[2:]
			for ; k > 0 && len(b) >= 2; k-- {
				xt := x(uint64(b[0]%64), uint32(b[1]%8)+1)
				b = b[2:]
				g.extents = append(g.extents, xt)
				for i := xt.LBA; i < xt.LBA+uint64(xt.Blocks) && !expired; i++ {
					readable[i] = true
					writable[i] = writable[i] || g.mode == pushdown.GrantReadWrite
				}
			}
			gs = append(gs, g)
		}
		want := true
		for i := r.lba; i < r.lba+r.n; i++ {
			if !readable[i] || (r.write && !writable[i]) {
				want = false
			}
		}
		used, ok := cover(gs, now, r)
		if ok != want {
			t.Fatalf("%+v: covered %v, want %v", r, ok, want)
		}
		for _, g := range used {
			if !now.Before(g.expires) || (r.write && g.mode != pushdown.GrantReadWrite) {
				t.Fatalf("used an unusable grant %+v", g)
			}
		}
	})
}

// TestGrantReleaseBarrier: Release waits for the commands admitted under
// the grant, and nothing is admitted under it once Release has begun.
func TestGrantReleaseBarrier(t *testing.T) {
	var restricted atomic.Int64
	tbl := grantTable{restricted: &restricted}
	clock := testclock.New(time.Unix(1000, 0))
	g := pushdown.Grant{ID: 1, Host: "task", Mode: pushdown.GrantRead, Lease: time.Minute, Extents: []pushdown.Extent{x(0, 8)}}
	if _, _, err := tbl.put("owner", &g, clock.Now(), 10); err != nil {
		t.Fatal(err)
	}
	// A second grant keeps "task" a task host while the first is released.
	g2 := pushdown.Grant{ID: 2, Host: "task", Mode: pushdown.GrantRead, Lease: time.Minute, Extents: []pushdown.Extent{x(500, 8)}}
	if _, _, err := tbl.put("owner", &g2, clock.Now(), 10); err != nil {
		t.Fatal(err)
	}
	if restricted.Load() != 1 {
		t.Fatalf("%d task hosts counted", restricted.Load())
	}
	refs, ok := tbl.admit("task", clock.Now, []blockRange{{lba: 2, n: 2}})
	if !ok || len(refs) != 1 {
		t.Fatalf("admit inside the grant: %v %d", ok, len(refs))
	}
	if _, ok := tbl.admit("other", clock.Now, []blockRange{{lba: 100, n: 2, write: true}}); !ok {
		t.Fatal("a host with no grants was refused")
	}
	if _, ok := tbl.admit("task", clock.Now, []blockRange{{lba: 7, n: 2}}); ok {
		t.Fatal("a range leaving the grant was admitted")
	}
	held, _ := tbl.release("owner", 1, clock.Now())
	released := make(chan struct{})
	go func() { held.drain(); close(released) }()
	for !held.released.Load() {
		time.Sleep(time.Millisecond)
	}
	if _, ok := tbl.admit("task", clock.Now, []blockRange{{lba: 2, n: 2}}); ok {
		t.Fatal("admitted under a grant being released")
	}
	select {
	case <-released:
		t.Fatal("release returned with a command still running under the grant")
	case <-time.After(20 * time.Millisecond):
	}
	refs.release()
	<-released
	// Still a task host: denied what its other grant does not cover.
	if _, ok := tbl.admit("task", clock.Now, []blockRange{{lba: 2, n: 2}}); ok {
		t.Fatal("a task host was admitted outside its grants")
	}
	// A task host may not grant.
	if _, _, err := tbl.put("task", &g, clock.Now(), 10); !errors.Is(err, errGrantDenied) {
		t.Fatalf("a task host granted: %v", err)
	}
	// Its standing ends with its last grant.
	if held, _ := tbl.release("owner", 2, clock.Now()); held == nil {
		t.Fatal("grant 2 was not held")
	}
	if restricted.Load() != 0 {
		t.Fatalf("%d task hosts counted after the last grant went", restricted.Load())
	}
	if refs, ok := tbl.admit("task", clock.Now, []blockRange{{lba: 2, n: 2}}); !ok || refs != nil {
		t.Fatal("a host whose grants all ended is still confined")
	}
}

// echoServer serves two 16 MiB namespaces with the echo runtime, the
// given clock and metrics, and connects an owner host to namespace 1.
func echoServer(t *testing.T, cfg Config) (addr string, reg *prometheus.Registry, owner *host.Controller, ns *host.Namespace, fn sandbox.ID) {
	t.Helper()
	reg = prometheus.NewRegistry()
	cfg.Runtimes = []sandbox.Runtime{echoRuntime{}}
	cfg.Metrics = NewMetrics(reg)
	_, addr = startServer(t, cfg, "mem:16MiB", "mem:16MiB")
	owner, ns = connectAs(t, addr, "nqn.2026-11.io.nearstore:owner", 1)
	fn, err := owner.LoadFunction(context.Background(), echoModuleBytes)
	if err != nil {
		t.Fatal(err)
	}
	return addr, reg, owner, ns, fn
}

// fill writes a recognisable pattern over the first blocks of ns: block i
// holds bytes of value i*7+seed.
func fill(t *testing.T, ns *host.Namespace, blocks int, seed byte) []byte {
	t.Helper()
	b := make([]byte, blocks*512)
	for i := range b {
		b[i] = byte(i/512*7) + seed + byte(i%512)
	}
	if _, err := ns.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// fileBytes is what a map's first size bytes hold on the pattern.
func fileBytes(disk []byte, f pushdown.File) []byte {
	var out []byte
	for _, e := range f.Extents {
		out = append(out, disk[e.LBA*512:(e.LBA+uint64(e.Blocks))*512]...)
	}
	return out[:f.Size]
}

// TestExtentMapAdminStatuses: each malformed or refused Extent Map or
// Grant command gets its status, with DNR and, for Bad Extent Map, the
// entry at fault in DW0; nothing of a refused batch is applied.
func TestExtentMapAdminStatuses(t *testing.T) {
	_, _, c, ns, _ := echoServer(t, Config{MaxExtentMaps: 4})
	ctx := context.Background()
	const blocks = 16 << 20 / 512
	good := put(1, 1, 512, x(0, 1))
	putCmd := nvme.Command{Opcode: nvme.AdminExtentMapPut, NSID: 1}
	grant := func(edit func(*pushdown.Grant)) []byte {
		g := pushdown.Grant{ID: 1, Host: "nqn.task", Mode: pushdown.GrantRead, Lease: time.Minute, Extents: []pushdown.Extent{x(0, 1), x(5, 1)}}
		edit(&g)
		return g.Marshal()
	}
	badFormat := pushdown.MarshalMapUpdates([]pushdown.MapUpdate{good})
	badFormat[0] = 9
	for _, tc := range []struct {
		name string
		cmd  nvme.Command
		out  []byte
		in   []byte
		want nvme.Status
		dw0  uint32
	}{
		{"bad format", putCmd, badFormat, nil, nvme.StatusBadExtentMap, noEntry},
		{"extent outside the namespace", putCmd, pushdown.MarshalMapUpdates([]pushdown.MapUpdate{good, put(2, 1, 512, x(blocks-1, 2))}), nil, nvme.StatusBadExtentMap, 1},
		{"map shorter than its file", putCmd, pushdown.MarshalMapUpdates([]pushdown.MapUpdate{good, good, put(2, 1, 513, x(0, 1))}), nil, nvme.StatusBadExtentMap, 2},
		{"unknown namespace", nvme.Command{Opcode: nvme.AdminExtentMapPut, NSID: 9}, pushdown.MarshalMapUpdates([]pushdown.MapUpdate{good}), nil, nvme.StatusInvalidNamespace, 0},
		{"shorter than a header", putCmd, make([]byte, 8), nil, nvme.StatusSGLDataLenInvalid, 0},
		{"over the limit", putCmd, pushdown.MarshalMapUpdates([]pushdown.MapUpdate{put(1, 1, 0), put(2, 1, 0), put(3, 1, 0), put(4, 1, 0), put(5, 1, 0)}), nil, nvme.StatusMetadataLimit, 0},
		{"query of a partial inode", nvme.Command{Opcode: nvme.AdminExtentMapQuery, NSID: 1}, make([]byte, 12), make([]byte, 64), nvme.StatusBadExtentMap, noEntry},
		{"query result too small", nvme.Command{Opcode: nvme.AdminExtentMapQuery, NSID: 1}, make([]byte, 16), make([]byte, 32), nvme.StatusSGLDataLenInvalid, 0},
		{"grant write only", nvme.Command{Opcode: nvme.AdminGrantPut, NSID: 1}, grant(func(g *pushdown.Grant) { g.Mode = 2 }), nil, nvme.StatusBadExtentMap, noEntry},
		{"grant outside the namespace", nvme.Command{Opcode: nvme.AdminGrantPut, NSID: 1}, grant(func(g *pushdown.Grant) { g.Extents[1].LBA = blocks }), nil, nvme.StatusBadExtentMap, 1},
		{"grant to oneself", nvme.Command{Opcode: nvme.AdminGrantPut, NSID: 1}, grant(func(g *pushdown.Grant) { g.Host = "nqn.2026-11.io.nearstore:owner" }), nil, nvme.StatusBadExtentMap, noEntry},
		{"grant on no namespace", nvme.Command{Opcode: nvme.AdminGrantPut, NSID: 3}, grant(func(*pushdown.Grant) {}), nil, nvme.StatusInvalidNamespace, 0},
		{"unknown vendor opcode", nvme.Command{Opcode: 0xC4, NSID: 1}, nil, nil, nvme.StatusInvalidOpcode, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd
			cpl, err := c.Admin(ctx, &cmd, tc.out, tc.in)
			if !errors.Is(err, &nvme.StatusError{Status: tc.want}) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !cpl.Status.DoNotRetry() || cpl.DW0 != tc.dw0 {
				t.Fatalf("status %v DW0 %#x, want DNR and DW0 %#x", cpl.Status, cpl.DW0, tc.dw0)
			}
		})
	}
	// Nothing of the refused batches was applied.
	vs, err := ns.ExtentMapVersions(ctx, []uint64{1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(vs) != "[0 0 0 0 0]" {
		t.Fatalf("versions after refused puts: %v", vs)
	}
	// A release of a grant never made succeeds: releases may be resent.
	if err := ns.ReleaseGrant(ctx, 77); err != nil {
		t.Fatal(err)
	}
}

// TestExtentMapVersionsOverTheWire: what the host library sends and the
// query reports, through resends, late maps and removals.
func TestExtentMapVersionsOverTheWire(t *testing.T) {
	_, reg, _, ns, _ := echoServer(t, Config{})
	ctx := context.Background()
	type want struct{ applied, ignored int }
	for i, step := range []struct {
		ups  []pushdown.MapUpdate
		want want
		v    []uint64 // versions of inodes 7 and 8 afterwards
	}{
		{[]pushdown.MapUpdate{put(7, 2, 512, x(1, 1)), put(8, 1, 0)}, want{2, 0}, []uint64{2, 1}},
		{[]pushdown.MapUpdate{put(7, 2, 512, x(1, 1)), put(7, 1, 512, x(2, 1))}, want{0, 2}, []uint64{2, 1}},
		{[]pushdown.MapUpdate{put(7, 3, 1024, x(4, 2)), remove(8, 2)}, want{2, 0}, []uint64{3, 0}},
		{[]pushdown.MapUpdate{put(8, 2, 0)}, want{0, 1}, []uint64{3, 0}},
		{[]pushdown.MapUpdate{put(8, 3, 0)}, want{1, 0}, []uint64{3, 3}},
		{[]pushdown.MapUpdate{remove(7, 0), put(7, 1, 0)}, want{2, 0}, []uint64{1, 3}},
	} {
		applied, ignored, err := ns.UpdateExtentMaps(ctx, step.ups)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if (want{applied, ignored}) != step.want {
			t.Fatalf("step %d: applied %d ignored %d, want %+v", i, applied, ignored, step.want)
		}
		vs, err := ns.ExtentMapVersions(ctx, []uint64{7, 8})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(vs) != fmt.Sprint(step.v) {
			t.Fatalf("step %d: versions %v, want %v", i, vs, step.v)
		}
	}
	if got := gauge(t, reg, "nearstore_target_extent_maps", map[string]string{"nsid": "1"}); got != 2 {
		t.Fatalf("extent maps gauge %v, want 2", got)
	}
	if got := gauge(t, reg, "nearstore_target_extent_map_updates_total", map[string]string{"result": "ignored"}); got != 3 {
		t.Fatalf("ignored updates %v, want 3", got)
	}
	// Batches larger than one command are cut; queries larger than one
	// command too.
	var many []pushdown.MapUpdate
	var inos []uint64
	for i := range 3000 {
		many = append(many, put(uint64(100+i), 1, 512, x(uint64(i), 1)))
		inos = append(inos, uint64(100+i))
	}
	if applied, _, err := ns.UpdateExtentMaps(ctx, many); err != nil || applied != 3000 {
		t.Fatalf("3000 maps: applied %d, %v", applied, err)
	}
	vs, err := ns.ExtentMapVersions(ctx, inos)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if v != 1 {
			t.Fatalf("inode %d: version %d", inos[i], v)
		}
	}
	// Batches are cut by size too: 40 maps of 1000 extents are 640 KiB.
	many = many[:0]
	for i := range 40 {
		xs := make([]pushdown.Extent, 1000)
		for j := range xs {
			xs[j] = x(uint64(i*1000+j)%(16<<20/512), 1)
		}
		many = append(many, put(uint64(10000+i), 1, 512000, xs...))
	}
	if applied, _, err := ns.UpdateExtentMaps(ctx, many); err != nil || applied != 40 {
		t.Fatalf("40 large maps: applied %d, %v", applied, err)
	}
	if got := gauge(t, reg, "nearstore_target_extent_map_extents", map[string]string{"nsid": "1"}); got != 40000+3000 {
		t.Fatalf("extents gauge %v, want 43000", got)
	}
	// A map over the extent limit is refused by the target, naming it; one
	// larger than a command can carry, by the host before sending.
	xs := make([]pushdown.Extent, pushdown.MaxMapExtents+1)
	for i := range xs {
		xs[i] = x(0, 1)
	}
	_, _, err = ns.UpdateExtentMaps(ctx, []pushdown.MapUpdate{put(1, 9, 0), put(20000, 1, 0, xs...)})
	if !errors.Is(err, host.ErrBadExtentMap) {
		t.Fatalf("a map over the extent limit: %v, want Bad Extent Map", err)
	}
	if _, _, err := ns.UpdateExtentMaps(ctx, []pushdown.MapUpdate{put(20001, 1, 0, make([]pushdown.Extent, 40000)...)}); err == nil || isStatusErr(err) {
		t.Fatalf("a map larger than a command: %v, want the host's own error", err)
	}
	if vs, err := ns.ExtentMapVersions(ctx, []uint64{1, 20000, 20001}); err != nil || fmt.Sprint(vs) != "[0 0 0]" {
		t.Fatalf("after refused puts: %v %v", vs, err)
	}
}

func isStatusErr(err error) bool {
	var se *nvme.StatusError
	return errors.As(err, &se)
}

// TestExtentMapRequests: function requests naming files by inode run on
// the maps the sending host put, at exactly the version named, whatever
// extents the request sends; another host cannot use them.
func TestExtentMapRequests(t *testing.T) {
	addr, reg, _, ns, fn := echoServer(t, Config{})
	ctx := context.Background()
	disk := fill(t, ns, 64, 1)
	v1 := pushdown.File{ID: 5, Version: 1, Size: 1200, Extents: []pushdown.Extent{x(10, 2), x(3, 1)}}
	v2 := pushdown.File{ID: 5, Version: 2, Size: 700, Extents: []pushdown.Extent{x(30, 2)}}
	ref := func(f pushdown.File) pushdown.File { return pushdown.File{ID: f.ID, Version: f.Version} }
	read := func(ns *host.Namespace, f pushdown.File) ([]byte, error) {
		res, err := ns.LambdaRead(ctx, fn, []pushdown.File{f}, host.Start{Length: 700}, nil, 4096)
		return res.Output, err
	}
	stale := func() float64 {
		return gauge(t, reg, "nearstore_target_stale_requests_total", map[string]string{"nsid": "1"})
	}

	if _, err := read(ns, ref(v1)); !errors.Is(err, host.ErrStaleExtentMap) {
		t.Fatalf("before any put: %v, want stale", err)
	}
	if stale() != 1 {
		t.Fatalf("stale requests counted: %v", stale())
	}
	if err := ns.PutExtentMaps(ctx, []pushdown.File{v1}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []pushdown.File{ref(v1), v1, {ID: 5, Version: 1, Size: 1200}} {
		got, err := read(ns, f)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		if !bytes.Equal(got, fileBytes(disk, v1)[:700]) {
			t.Fatalf("%+v: read other bytes than the held map's", f)
		}
	}
	// Lying about the extents, or the size, is refused.
	for _, f := range []pushdown.File{
		{ID: 5, Version: 1, Size: 1200, Extents: []pushdown.Extent{x(40, 3)}},
		{ID: 5, Version: 1, Size: 1536, Extents: v1.Extents},
		{ID: 5, Version: 1, Size: 1536},
	} {
		if _, err := read(ns, f); !errors.Is(err, &nvme.StatusError{Status: nvme.StatusOutsideFile}) {
			t.Fatalf("%+v: %v, want Outside File", f, err)
		}
	}
	// A remap: the old version is refused, the new one reads the new
	// blocks.
	if err := ns.PutExtentMaps(ctx, []pushdown.File{v2}); err != nil {
		t.Fatal(err)
	}
	if _, err := read(ns, ref(v1)); !errors.Is(err, host.ErrStaleExtentMap) {
		t.Fatalf("old version after a remap: %v, want stale", err)
	}
	if got, err := read(ns, ref(v2)); err != nil || !bytes.Equal(got, fileBytes(disk, v2)) {
		t.Fatalf("new version: %v", err)
	}
	// Raw namespace files (ID 0) need no map.
	if got, err := read(ns, pushdown.File{Size: 700, Extents: []pushdown.Extent{x(40, 2)}}); err != nil || !bytes.Equal(got, disk[40*512:40*512+700]) {
		t.Fatalf("raw file: %v", err)
	}

	// Another host cannot use the owner's maps, and its own maps of the
	// same inode are its own.
	_, other := connectAs(t, addr, "nqn.2026-11.io.nearstore:other", 1)
	if _, err := read(other, ref(v2)); !errors.Is(err, host.ErrStaleExtentMap) {
		t.Fatalf("another host's request on the owner's map: %v, want stale", err)
	}
	if vs, err := other.ExtentMapVersions(ctx, []uint64{5}); err != nil || vs[0] != 0 {
		t.Fatalf("another host sees versions %v (%v)", vs, err)
	}
	mine := pushdown.File{ID: 5, Version: 9, Size: 700, Extents: []pushdown.Extent{x(50, 2)}}
	if err := other.PutExtentMaps(ctx, []pushdown.File{mine}); err != nil {
		t.Fatal(err)
	}
	if got, err := read(other, ref(mine)); err != nil || !bytes.Equal(got, fileBytes(disk, mine)) {
		t.Fatalf("other host's own map: %v", err)
	}
	if _, err := read(ns, ref(mine)); !errors.Is(err, host.ErrStaleExtentMap) {
		t.Fatalf("the owner used the other host's version: %v", err)
	}
	if got, err := read(ns, ref(v2)); err != nil || !bytes.Equal(got, fileBytes(disk, v2)) {
		t.Fatalf("the owner's map after another host's put: %v", err)
	}

	// λ Write under a map writes into the held extents only.
	w := pushdown.File{ID: 6, Version: 1, Size: 1024, Extents: []pushdown.Extent{x(20, 1), x(22, 1)}}
	if err := ns.PutExtentMaps(ctx, []pushdown.File{w}); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{0xAB}, 1024)
	if n, err := ns.LambdaWrite(ctx, fn, []pushdown.File{ref(w)}, host.Start{Length: 1024}, nil, data); err != nil || n != 1024 {
		t.Fatalf("λ write: %d, %v", n, err)
	}
	after := make([]byte, len(disk))
	if _, err := ns.ReadAt(after, 0); err != nil {
		t.Fatal(err)
	}
	for blk := range 64 {
		want := disk[blk*512 : (blk+1)*512]
		if blk == 20 || blk == 22 {
			want = data[:512]
		}
		if !bytes.Equal(after[blk*512:(blk+1)*512], want) {
			t.Fatalf("block %d after the λ write is wrong", blk)
		}
	}
}

// TestGrants: the grant policy end to end, with an injected clock.
func TestGrants(t *testing.T) {
	clock := testclock.New(time.Unix(1_000_000, 0))
	addr, reg, _, owner, fn := echoServer(t, Config{Now: clock.Now})
	ctx := context.Background()
	const taskNQN = "nqn.2026-11.io.nearstore:task"
	task, tns := connectAs(t, addr, taskNQN, 1)
	_, tns2 := connectAs(t, addr, taskNQN, 2)
	_, other := connectAs(t, addr, "nqn.2026-11.io.nearstore:other", 1)
	if _, err := task.LoadFunction(ctx, echoModuleBytes); err != nil {
		t.Fatal(err)
	}
	blk := make([]byte, 512)
	denied := func(err error) bool { return errors.Is(err, host.ErrAccessDenied) }
	readAt := func(ns *host.Namespace, lba, n int64) error {
		_, err := ns.ReadAt(make([]byte, n*512), lba*512)
		return err
	}
	writeAt := func(ns *host.Namespace, lba int64) error {
		_, err := ns.WriteAt(blk, lba*512)
		return err
	}
	lambda := func(lba uint64, blocks uint32) error {
		f := pushdown.File{Size: uint64(blocks) * 512, Extents: []pushdown.Extent{x(lba, blocks)}}
		_, err := tns.LambdaRead(ctx, fn, []pushdown.File{f}, host.Start{Length: 512}, nil, 1024)
		return err
	}
	// Before any grant the future task host is an ordinary host.
	if err := writeAt(tns, 5000); err != nil {
		t.Fatal(err)
	}
	// Only the reservation holder grants; a grantee registers to write.
	holdReservation(t, owner)
	if err := tns.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: 0x7a5c}); err != nil {
		t.Fatal(err)
	}
	if err := owner.Grant(ctx, host.Grant{ID: 1, Host: taskNQN, Mode: host.GrantRead, Lease: time.Minute,
		Extents: []pushdown.Extent{x(1000, 8), x(1008, 8)}}); err != nil {
		t.Fatal(err)
	}
	type check struct {
		name string
		run  func() error
		ok   bool
	}
	run := func(phase string, cs []check) {
		t.Helper()
		for _, c := range cs {
			err := c.run()
			if c.ok && err != nil {
				t.Errorf("%s: %s: %v", phase, c.name, err)
			}
			if !c.ok && !denied(err) {
				t.Errorf("%s: %s: %v, want Access Denied", phase, c.name, err)
			}
		}
	}
	run("read grant", []check{
		{"read inside", func() error { return readAt(tns, 1000, 16) }, true},
		{"read across the two extents", func() error { return readAt(tns, 1006, 4) }, true},
		{"read straddling the end", func() error { return readAt(tns, 1015, 2) }, false},
		{"read outside", func() error { return readAt(tns, 5000, 1) }, false},
		{"write inside", func() error { return writeAt(tns, 1000) }, false},
		{"write zeroes inside", func() error { return tns.WriteZeroes(ctx, 1000*512, 512) }, false},
		{"deallocate inside", func() error { return tns.Deallocate(ctx, 1000*512, 512) }, false},
		{"flush", func() error { return tns.Flush(ctx) }, true},
		{"λ read inside", func() error { return lambda(1000, 16) }, true},
		{"λ read of a file reaching outside", func() error { return lambda(1000, 17) }, false},
		{"other namespace", func() error { return writeAt(tns2, 7) }, true},
		{"other host", func() error { return readAt(other, 5000, 1) }, true},
		{"owner", func() error { return writeAt(owner, 1000) }, true},
		{"task host grants", func() error {
			return tns.Grant(ctx, host.Grant{ID: 9, Host: "nqn.x", Mode: host.GrantRead, Lease: time.Minute, Extents: []pushdown.Extent{x(0, 1)}})
		}, false},
	})
	if err := owner.Grant(ctx, host.Grant{ID: 2, Host: taskNQN, Mode: host.GrantReadWrite, Lease: 2 * time.Minute,
		Extents: []pushdown.Extent{x(2000, 4)}}); err != nil {
		t.Fatal(err)
	}
	run("read-write grant", []check{
		{"write inside", func() error { return writeAt(tns, 2003) }, true},
		{"write zeroes inside", func() error { return tns.WriteZeroes(ctx, 2000*512, 4*512) }, true},
		{"deallocate inside", func() error { return tns.Deallocate(ctx, 2000*512, 512) }, true},
		{"write past it", func() error { return tns.WriteZeroes(ctx, 2000*512, 5*512) }, false},
		{"write into the read grant", func() error { return writeAt(tns, 1001) }, false},
	})
	clock.Advance(time.Minute)
	run("the read grant expired", []check{
		{"read inside", func() error { return readAt(tns, 1000, 1) }, false},
		{"write in the read-write grant", func() error { return writeAt(tns, 2000) }, true},
	})
	if err := owner.Grant(ctx, host.Grant{ID: 1, Host: taskNQN, Mode: host.GrantRead, Lease: time.Minute,
		Extents: []pushdown.Extent{x(1000, 1)}}); err != nil {
		t.Fatal(err)
	}
	run("renewed, smaller", []check{
		{"read inside", func() error { return readAt(tns, 1000, 1) }, true},
		{"read where it was", func() error { return readAt(tns, 1001, 1) }, false},
	})
	if got := gauge(t, reg, "nearstore_target_grants", map[string]string{"nsid": "1"}); got != 2 {
		t.Fatalf("grants gauge %v, want 2", got)
	}
	for _, id := range []uint64{1, 2} {
		if err := owner.ReleaseGrant(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// With its last grant gone the task host is an ordinary host again,
	// unregistered, under the owner's reservation: it reads, and cannot
	// write.
	run("released", []check{
		{"read", func() error { return readAt(tns, 1000, 1) }, true},
		{"other namespace", func() error { return readAt(tns2, 7, 1) }, true},
		{"owner", func() error { return readAt(owner, 1000, 1) }, true},
	})
	if err := writeAt(tns, 2000); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("released task host's write: %v, want a reservation conflict", err)
	}
	if got := gauge(t, reg, "nearstore_target_access_denied_total", map[string]string{"nsid": "1"}); got < 10 {
		t.Fatalf("access denied counted %v times", got)
	}
}

// holdReservation registers ns's host and takes a Write Exclusive
// Registrants Only reservation on ns, as a file system's owner does.
func holdReservation(t testing.TB, ns *host.Namespace) {
	t.Helper()
	ctx := context.Background()
	if err := ns.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: 0x5e5e}); err != nil {
		t.Fatal(err)
	}
	if err := ns.Acquire(ctx, host.AcquireOpts{Action: host.AcquireReservation, Type: nvme.ResvWriteExclusiveRegOnly, Key: 0x5e5e}); err != nil {
		t.Fatal(err)
	}
}

// TestGrantsNeedTheReservation: issue 18's lock-out. Any host could grant
// to any NQN, and a grantee stayed a task host for the life of the target,
// so granting the owner one block and releasing it locked the owner out
// of its own namespace. Now only the reservation holder grants, and a
// grantee's standing ends with its last grant, released or expired.
func TestGrantsNeedTheReservation(t *testing.T) {
	clock := testclock.New(time.Unix(1_000_000, 0))
	addr, _, _, owner, _ := echoServer(t, Config{Now: clock.Now})
	ctx := context.Background()
	const victimNQN = "nqn.2026-11.io.nearstore:victim"
	_, victim := connectAs(t, addr, victimNQN, 1)
	_, attacker := connectAs(t, addr, "nqn.2026-11.io.nearstore:attacker", 1)
	one := []pushdown.Extent{x(0, 1)}
	// Nobody holds a reservation: nobody may grant.
	for _, ns := range []*host.Namespace{owner, attacker} {
		err := ns.Grant(ctx, host.Grant{ID: 1, Host: victimNQN, Mode: host.GrantRead, Lease: time.Millisecond, Extents: one})
		if !errors.Is(err, host.ErrAccessDenied) {
			t.Fatalf("grant without a reservation: %v, want Access Denied", err)
		}
	}
	holdReservation(t, owner)
	if err := attacker.Grant(ctx, host.Grant{ID: 1, Host: victimNQN, Mode: host.GrantRead, Lease: time.Minute, Extents: one}); !errors.Is(err, host.ErrAccessDenied) {
		t.Fatalf("grant by a host not holding the reservation: %v, want Access Denied", err)
	}
	readVictim := func() error { _, err := victim.ReadAt(make([]byte, 4096), 100*512); return err }
	if err := readVictim(); err != nil {
		t.Fatal(err)
	}
	// Granted, the victim is confined; released, it is not.
	if err := owner.Grant(ctx, host.Grant{ID: 1, Host: victimNQN, Mode: host.GrantRead, Lease: time.Minute, Extents: one}); err != nil {
		t.Fatal(err)
	}
	if err := readVictim(); !errors.Is(err, host.ErrAccessDenied) {
		t.Fatalf("task host outside its grant: %v", err)
	}
	if err := owner.ReleaseGrant(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := readVictim(); err != nil {
		t.Fatalf("after its last grant was released: %v", err)
	}
	// Expired, likewise, with no release.
	if err := owner.Grant(ctx, host.Grant{ID: 2, Host: victimNQN, Mode: host.GrantRead, Lease: time.Millisecond, Extents: one}); err != nil {
		t.Fatal(err)
	}
	if err := readVictim(); !errors.Is(err, host.ErrAccessDenied) {
		t.Fatalf("task host outside its grant: %v", err)
	}
	clock.Advance(time.Second)
	if err := readVictim(); err != nil {
		t.Fatalf("after its last grant expired: %v", err)
	}
}
