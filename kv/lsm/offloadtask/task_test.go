package offloadtask_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testengine"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/kv/lsm/offloadtask"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// The tests run the real pieces: package target serving a memory volume
// on loopback TCP, the store's offloadfs over NVMe/TCP, and an in-target
// engine (the volume directly, its I/O admitted through the target's
// grants) served over gRPC on loopback.
const (
	rigNQN    = "nqn.2026-11.io.nearstore:lsm-offload"
	ownerNQN  = "nqn.2026-11.io.nearstore:lsm-owner"
	engineNQN = "nqn.2026-11.io.nearstore:lsm-engine"
)

type rig struct {
	t    *testing.T
	vol  volume.Volume
	tgt  *testtarget.Target
	ns   *host.Namespace
	fsys *offloadfs.FS
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t}
	var err error
	if r.vol, err = volume.Open(fmt.Sprintf("mem:%d?bs=512", 128<<20)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.vol.Close() })
	r.tgt = testtarget.Start(t, testtarget.Config{NQN: rigNQN, Name: "lsm", Volume: r.vol})
	t.Cleanup(r.tgt.Stop)
	_, r.ns = testhost.Connect(t, r.tgt.Addr(), rigNQN, 1, host.Options{HostNQN: ownerNQN, IOQueues: 2, KeepAlive: -1})
	testfs.Format(t, r.ns)
	r.fsys = r.mount()
	return r
}

func (r *rig) mount() *offloadfs.FS {
	return testfs.Mount(r.t, r.ns, offloadfs.Options{Remote: r.ns})
}

// engine serves an in-target engine with tasks and adm, and returns a
// client of it (with no local engine: the store compacts locally itself).
func (r *rig) engine(tasks *offload.Registry, adm offload.Admission) *offload.Client {
	srv := r.tgt.Server()
	cfg := offload.Config{
		HostNQN: engineNQN, Device: offloadfs.VolumeDevice(r.vol), Tasks: tasks, Admission: adm,
		Admit: func(lba, n uint64, write bool) (func(), error) {
			return srv.AdmitGranted(rigNQN, 1, engineNQN, lba, n, write)
		},
		CPU: func() float64 { return 1 }, // busy, for PolicyCPU
	}
	_, addr := testengine.Serve(r.t, cfg)
	c, err := offload.Dial(addr, offload.ClientOptions{Name: "lsm-test"})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

func lsmTasks(t *testing.T) *offload.Registry {
	reg := offload.NewRegistry()
	if err := offloadtask.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

func storeOptions() lsm.Options {
	return lsm.Options{
		MemTableSize:          64 << 10,
		L0CompactionThreshold: 2,
		LBaseMaxBytes:         256 << 10,
		TargetFileSize:        32 << 10,
		Table:                 lsm.TableOptions{BlockSize: 1024, BlockRestartInterval: 4},
		Logger:                slog.New(slog.DiscardHandler),
	}
}

// TestCompactionOffload runs a store whose compactions go to an engine
// that runs them, one that turns them away, and one that fails them: the
// store's contents are the same as a model's in each, with a snapshot
// held across compactions, and the counters say where compactions ran.
func TestCompactionOffload(t *testing.T) {
	for _, tc := range []struct {
		name            string
		tasks           func(*testing.T) *offload.Registry
		adm             offload.Admission
		offloaded       bool // compactions run at the engine
		rejected, local bool
		recycle         bool // flushes too, from the WAL
	}{
		{name: "recycle", tasks: lsmTasks, adm: offload.Admission{Policy: offload.PolicyNone}, offloaded: true, recycle: true},
		{name: "engine", tasks: lsmTasks, adm: offload.Admission{Policy: offload.PolicyNone}, offloaded: true},
		{name: "rejected", tasks: lsmTasks, adm: offload.Admission{Policy: offload.PolicyCPU, CPUThreshold: 0.5}, rejected: true, local: true, recycle: true},
		{name: "unknown task", tasks: func(*testing.T) *offload.Registry { return offload.NewRegistry() },
			adm: offload.Admission{Policy: offload.PolicyNone}, local: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			peer := r.engine(tc.tasks(t), tc.adm)
			opts := storeOptions()
			opts.Offload = &lsm.OffloadOptions{FS: r.fsys, Peer: peer, Compaction: true, Recycle: tc.recycle}
			d, err := lsm.Open(r.fsys.VFS(), "db", opts)
			if err != nil {
				t.Fatal(err)
			}
			model, snapModel, snap := writeRandom(t, d, 6000)
			ctx := context.Background()
			if err := d.Compact(ctx, []byte(""), []byte("\xff")); err != nil {
				t.Fatal(err)
			}
			checkStore(t, d, model)
			checkSnapshot(t, snap, snapModel)
			snap.Close()
			m := d.OffloadMetrics()
			t.Logf("%+v; L1+ tables: %v", m, levelTables(d))
			if got := m.Compactions > 0; got != tc.offloaded {
				t.Errorf("offloaded compactions: %d, want some: %v", m.Compactions, tc.offloaded)
			}
			if got := m.LocalCompactions > 0; got != tc.local {
				t.Errorf("local compactions: %d, want some: %v", m.LocalCompactions, tc.local)
			}
			if got := m.Flushes > 0; got != (tc.recycle && tc.offloaded) {
				t.Errorf("flushes at the engine: %d, want some: %v", m.Flushes, tc.recycle && tc.offloaded)
			}
			if got := m.LocalFlushes > 0; got != (tc.recycle && tc.local) {
				t.Errorf("flushes here after the engine did not: %d, want some: %v", m.LocalFlushes, tc.recycle && tc.local)
			}
			if got := m.Rejected > 0; got != tc.rejected {
				t.Errorf("rejected: %d, want some: %v", m.Rejected, tc.rejected)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			// Reopened without offload, from the MANIFEST alone.
			d, err = lsm.Open(r.fsys.VFS(), "db", storeOptions())
			if err != nil {
				t.Fatal(err)
			}
			checkStore(t, d, model)
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			testfs.Fsck(t, r.fsys)
		})
	}
}

// writeRandom writes n random sets, deletes and a few range deletions
// over a small key space, taking a snapshot halfway, and returns the
// final model, the snapshot's and the snapshot.
func writeRandom(t *testing.T, d *lsm.DB, n int) (final, atSnap map[string]string, snap *lsm.Snapshot) {
	rng := rand.New(rand.NewPCG(7, 8))
	model := map[string]string{}
	for i := range n {
		if i == n/2 {
			snap = d.NewSnapshot()
			atSnap = maps.Clone(model)
		}
		k := fmt.Sprintf("key%05d", rng.IntN(2000))
		if i%500 == 499 {
			end := fmt.Sprintf("key%05d", rng.IntN(2000))
			if end < k {
				k, end = end, k
			}
			if err := d.DeleteRange([]byte(k), []byte(end), nil); err != nil {
				t.Fatal(err)
			}
			for mk := range model {
				if mk >= k && mk < end {
					delete(model, mk)
				}
			}
			continue
		}
		if rng.IntN(10) == 0 {
			if err := d.Delete([]byte(k), nil); err != nil {
				t.Fatal(err)
			}
			delete(model, k)
			continue
		}
		v := fmt.Sprintf("%s-%d-%s", k, i, bytes.Repeat([]byte{byte('a' + i%26)}, rng.IntN(200)))
		if err := d.Set([]byte(k), []byte(v), nil); err != nil {
			t.Fatal(err)
		}
		model[k] = v
	}
	return model, atSnap, snap
}

type getter interface {
	Get(key []byte) ([]byte, error)
	NewIter(o *lsm.IterOptions) (*lsm.Iterator, error)
}

func checkStore(t *testing.T, d *lsm.DB, model map[string]string) {
	t.Helper()
	checkReader(t, "store", d, model)
}

func checkSnapshot(t *testing.T, s *lsm.Snapshot, model map[string]string) {
	t.Helper()
	checkReader(t, "snapshot", s, model)
}

// checkReader checks every model key by Get and the whole contents by
// iteration.
func checkReader(t *testing.T, what string, g getter, model map[string]string) {
	t.Helper()
	for k, want := range model {
		v, err := g.Get([]byte(k))
		if err != nil || string(v) != want {
			t.Fatalf("%s: get %s: %q, %v; want %q", what, k, v, err, want)
		}
	}
	it, err := g.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for ok := it.First(); ok; ok = it.Next() {
		k := string(it.Key())
		if model[k] != string(it.Value()) {
			t.Fatalf("%s: iterator: %s = %q, want %q", what, k, it.Value(), model[k])
		}
		keys = append(keys, k)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		t.Fatal(err)
	}
	if want := slices.Sorted(maps.Keys(model)); !slices.Equal(keys, want) {
		t.Fatalf("%s: iterator has %d keys, want %d", what, len(keys), len(want))
	}
}

func levelTables(d *lsm.DB) []int {
	m := d.Metrics()
	var out []int
	for _, l := range m.Levels {
		out = append(out, l.Tables)
	}
	return out
}
