package leed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nearstore/nearstore/volume"
)

// memDev is a device in memory that can be cut: after cutAfter more
// writes, the next write lands torn (only its first half) and every later
// one fails, as if the machine stopped mid-write.
type memDev struct {
	mu       sync.Mutex
	b        []byte
	cutAfter int // -1: never
	cut      bool
	writes   int
}

func newMemDev(size int) *memDev { return &memDev{b: make([]byte, size), cutAfter: -1} }

func (d *memDev) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off < 0 || off+int64(len(p)) > int64(len(d.b)) {
		return 0, io.ErrUnexpectedEOF
	}
	return copy(p, d.b[off:]), nil
}

var errCut = errors.New("device cut")

func (d *memDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off < 0 || off+int64(len(p)) > int64(len(d.b)) {
		return 0, io.ErrUnexpectedEOF
	}
	if d.cut {
		return 0, errCut
	}
	if d.cutAfter == 0 {
		d.cut = true
		copy(d.b[off:], p[:len(p)/2])
		return 0, errCut
	}
	if d.cutAfter > 0 {
		d.cutAfter--
	}
	d.writes++
	return copy(d.b[off:], p), nil
}

func (d *memDev) Size() int64  { return int64(len(d.b)) }
func (d *memDev) Flush() error { return nil }

// clone is the device as a restarted machine finds it.
func (d *memDev) clone() *memDev {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &memDev{b: bytes.Clone(d.b), cutAfter: -1}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func smallOpts() Options {
	return Options{AvgValueSize: 200, MaxValueSize: 2048, ItemsPerSegment: 200, Create: true, Logger: quiet()}
}

func open(t testing.TB, dev Device, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), dev, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func value(rng *rand.Rand, max int) []byte {
	v := make([]byte, rng.IntN(max)+1)
	for i := range v {
		v[i] = byte(rng.Uint32())
	}
	return v
}

func TestCosts(t *testing.T) {
	ctx := context.Background()
	s := open(t, newMemDev(16<<20), smallOpts())
	for i := 0; i < 500; i++ {
		c, err := s.Put(ctx, []byte(fmt.Sprintf("key%05d", i)), bytes.Repeat([]byte{byte(i)}, 100), PutAny)
		if err != nil {
			t.Fatal(err)
		}
		// The first key of a segment has no chain to read.
		if c != (Cost{Reads: 1, Writes: 2}) && c != (Cost{Writes: 2}) {
			t.Fatalf("put %d cost %+v, want 1 read 2 writes", i, c)
		}
	}
	for i := 0; i < 500; i++ {
		c, err := s.Put(ctx, []byte(fmt.Sprintf("key%05d", i)), bytes.Repeat([]byte{byte(i)}, 100), PutAny)
		if err != nil {
			t.Fatal(err)
		}
		if c != (Cost{Reads: 1, Writes: 2}) {
			t.Fatalf("overwrite %d cost %+v, want 1 read 2 writes", i, c)
		}
	}
	v, c, err := s.Get(ctx, []byte("key00042"))
	if err != nil || !bytes.Equal(v, bytes.Repeat([]byte{42}, 100)) {
		t.Fatalf("get: %v %x", err, v)
	}
	if c != (Cost{Reads: 2}) {
		t.Fatalf("get cost %+v", c)
	}
	if c, err := s.Exist(ctx, []byte("key00042")); err != nil || c != (Cost{Reads: 1}) {
		t.Fatalf("exist: %v %+v", err, c)
	}
	if c, err := s.Delete(ctx, []byte("key00042")); err != nil || c != (Cost{Reads: 1, Writes: 1}) {
		t.Fatalf("delete: %v %+v", err, c)
	}
	if _, _, err := s.Get(ctx, []byte("key00042")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	if _, err := s.Put(ctx, []byte("key00001"), []byte("x"), PutMustNotExist); !errors.Is(err, ErrExists) {
		t.Fatalf("must-not-exist over a key: %v", err)
	}
	if _, err := s.Put(ctx, []byte("nokey"), []byte("x"), PutMustExist); !errors.Is(err, ErrNotFound) {
		t.Fatalf("must-exist on no key: %v", err)
	}
	for _, k := range [][]byte{nil, bytes.Repeat([]byte{1}, 17)} {
		if _, err := s.Put(ctx, k, []byte("x"), PutAny); !errors.Is(err, ErrKeySize) {
			t.Fatalf("key of %d bytes: %v", len(k), err)
		}
	}
	if _, err := s.Put(ctx, []byte("k"), make([]byte, 2049), PutAny); !errors.Is(err, ErrValueSize) {
		t.Fatalf("value too large: %v", err)
	}
	st := s.Stats()
	if st.Objects != 499 {
		t.Fatalf("objects %d", st.Objects)
	}
	if st.SegTblBytes != 4*int64(st.Segments) {
		t.Fatalf("SegTbl %d bytes for %d segments", st.SegTblBytes, st.Segments)
	}
}

// TestModel runs random operations against a map, reopening cleanly and
// after crashes at random writes, with a device small enough that both
// logs wrap and compact many times.
func TestModel(t *testing.T) {
	ctx := context.Background()
	seeds, steps := uint64(4), 6000
	if testing.Short() {
		seeds, steps = 2, 2500
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			dev := newMemDev(4 << 20)
			s := open(t, dev, smallOpts())
			model := map[string][]byte{}
			var compactions int64
			keys := make([]string, 600)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d-%d", i, rng.IntN(1000))
			}
			check := func(when string) {
				t.Helper()
				for _, k := range keys {
					v, _, err := s.Get(ctx, []byte(k))
					want, ok := model[k]
					switch {
					case !ok && !errors.Is(err, ErrNotFound):
						t.Fatalf("%s: get %q: %v, want not found", when, k, err)
					case ok && (err != nil || !bytes.Equal(v, want)):
						t.Fatalf("%s: get %q: %v, %d bytes, want %d", when, k, err, len(v), len(want))
					}
				}
				if got := s.Stats().Objects; got != int64(len(model)) {
					t.Fatalf("%s: %d objects, model has %d", when, got, len(model))
				}
				listed, err := s.List(ctx, nil, 1<<20)
				if err != nil || len(listed) != len(model) {
					t.Fatalf("%s: list: %v, %d keys, want %d", when, err, len(listed), len(model))
				}
			}
			for step := 0; step < steps; step++ {
				k := keys[rng.IntN(len(keys))]
				switch r := rng.IntN(100); {
				case r < 55:
					v := value(rng, 1500)
					if _, err := s.Put(ctx, []byte(k), v, PutAny); err != nil {
						t.Fatalf("step %d put: %v", step, err)
					}
					model[k] = v
				case r < 70:
					_, err := s.Delete(ctx, []byte(k))
					if _, ok := model[k]; ok != (err == nil) {
						t.Fatalf("step %d delete %q: %v (in model: %v)", step, k, err, ok)
					}
					delete(model, k)
				case r < 97:
					v, _, err := s.Get(ctx, []byte(k))
					if want, ok := model[k]; ok != (err == nil) || ok && !bytes.Equal(v, want) {
						t.Fatalf("step %d get %q: %v", step, k, err)
					}
				case r < 98:
					check("before reopen")
					compactions += s.Stats().Compactions
					s.Close()
					s = open(t, dev, smallOpts())
					check("after reopen")
				default:
					// Crash during the next put, at a random write of it
					// (or of the compaction it runs).
					compactions += s.Stats().Compactions
					dev.cutAfter = rng.IntN(4)
					v := value(rng, 1500)
					_, err := s.Put(ctx, []byte(k), v, PutAny)
					dev2 := dev.clone()
					s = open(t, dev2, smallOpts())
					dev = dev2
					if err == nil {
						model[k] = v
					} else if got, _, gerr := s.Get(ctx, []byte(k)); gerr == nil && bytes.Equal(got, v) {
						model[k] = v // it reached the device before the cut
					}
					check("after crash")
				}
			}
			if compactions += s.Stats().Compactions; compactions == 0 {
				t.Fatalf("no compaction ran: %+v", s.Stats())
			}
			check("end")
		})
	}
}

// TestCrashEveryWrite cuts the device at every write of a sequence of
// puts and deletes that runs compactions, and checks that each reopened
// store holds every acknowledged write and, for the one in flight, the
// old or the new state.
func TestCrashEveryWrite(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	type op struct {
		del bool
		key string
		val []byte
	}
	var ops []op
	for i := 0; i < 400; i++ {
		k := fmt.Sprintf("c%d", rng.IntN(120))
		ops = append(ops, op{del: rng.IntN(5) == 0, key: k, val: value(rng, 1500)})
	}
	// Count the writes of a clean run.
	base := newMemDev(2 << 20)
	if err := Format(base, smallOpts()); err != nil {
		t.Fatal(err)
	}
	clean := base.clone()
	s := open(t, clean, smallOpts())
	for _, o := range ops {
		if o.del {
			s.Delete(ctx, []byte(o.key))
		} else if _, err := s.Put(ctx, []byte(o.key), o.val, PutAny); err != nil {
			t.Fatal(err)
		}
	}
	total := clean.writes
	if s.Stats().Compactions == 0 {
		t.Fatal("the sequence runs no compaction")
	}
	step := 1
	if testing.Short() {
		step = 7
	}
	for cut := 0; cut < total; cut += step {
		dev := base.clone()
		dev.cutAfter = cut
		s := open(t, dev, smallOpts())
		model := map[string][]byte{}
		var inflight *op
		for i := range ops {
			o := &ops[i]
			var err error
			if o.del {
				_, err = s.Delete(ctx, []byte(o.key))
				if errors.Is(err, ErrNotFound) {
					err = nil
				}
			} else {
				_, err = s.Put(ctx, []byte(o.key), o.val, PutAny)
			}
			if err != nil {
				inflight = o
				break
			}
			if o.del {
				delete(model, o.key)
			} else {
				model[o.key] = o.val
			}
		}
		r := open(t, dev.clone(), smallOpts())
		for k := range 120 {
			key := fmt.Sprintf("c%d", k)
			v, _, err := r.Get(ctx, []byte(key))
			want, ok := model[key]
			if inflight != nil && inflight.key == key {
				okOld := ok == (err == nil) && (!ok || bytes.Equal(v, want))
				okNew := inflight.del && errors.Is(err, ErrNotFound) || !inflight.del && err == nil && bytes.Equal(v, inflight.val)
				if !okOld && !okNew {
					t.Fatalf("cut at write %d: in-flight key %q: %v", cut, key, err)
				}
				continue
			}
			if ok != (err == nil) || ok && !bytes.Equal(v, want) {
				t.Fatalf("cut at write %d of %d: key %q: %v (want present: %v)", cut, total, key, err, ok)
			}
		}
	}
}

func TestFullLosesNothing(t *testing.T) {
	ctx := context.Background()
	dev := newMemDev(2 << 20)
	s := open(t, dev, smallOpts())
	stored := map[string][]byte{}
	rng := rand.New(rand.NewPCG(3, 3))
	var full error
	for i := 0; i < 100000 && full == nil; i++ {
		k := fmt.Sprintf("f%d", i)
		v := value(rng, 400)
		if _, err := s.Put(ctx, []byte(k), v, PutAny); err != nil {
			full = err
			break
		}
		stored[k] = v
	}
	if !errors.Is(full, ErrFull) {
		t.Fatalf("filling: %v, want ErrFull", full)
	}
	st := s.Stats()
	used := float64(st.LiveValueBytes) / float64(st.DeviceBytes)
	t.Logf("%d objects, value bytes %.1f%% of the device, %+v", len(stored), 100*used, st)
	s.Close()
	s = open(t, dev, smallOpts())
	for k, v := range stored {
		got, _, err := s.Get(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("after full, %q: %v", k, err)
		}
	}
	// Deleting makes room again.
	n := 0
	for k := range stored {
		if _, err := s.Delete(ctx, []byte(k)); err != nil {
			t.Fatal(err)
		}
		delete(stored, k)
		if n++; n == len(stored)/2 {
			break
		}
	}
	if _, err := s.Put(ctx, []byte("again"), make([]byte, 300), PutAny); err != nil {
		t.Fatalf("put after deletes: %v", err)
	}
}

// chainSlot returns the device offset of the first bucket of key's chain.
func chainSlot(s *Store, key []byte) int64 {
	seg := s.segmentOf(key)
	return s.g.keyLogOff + int64(s.segtbl[seg]>>6)*BucketSize
}

func TestCorruptBucket(t *testing.T) {
	ctx := context.Background()
	for _, where := range []struct {
		name string
		off  int
	}{{"item", bucketHdrSize + 3}, {"header", 9}, {"magic", 0}} {
		t.Run(where.name, func(t *testing.T) {
			dev := newMemDev(4 << 20)
			s := open(t, dev, smallOpts())
			for i := 0; i < 300; i++ {
				if _, err := s.Put(ctx, []byte(fmt.Sprintf("x%d", i)), []byte(fmt.Sprintf("value %d", i)), PutAny); err != nil {
					t.Fatal(err)
				}
			}
			// Overwrite once so an older chain of the segment exists too.
			key := []byte("x7")
			if _, err := s.Put(ctx, key, []byte("new value"), PutAny); err != nil {
				t.Fatal(err)
			}
			off := chainSlot(s, key)
			s.Close()
			dev.b[off+int64(where.off)] ^= 0x40
			// Before reopening: the open store reads the damage.
			s2 := open(t, dev, smallOpts())
			v, _, err := s2.Get(ctx, key)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("get over a corrupt bucket: %q, %v; want ErrCorrupt", v, err)
			}
			if _, err := s2.Put(ctx, key, []byte("y"), PutAny); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("put over a corrupt bucket: %v", err)
			}
			// Keys of other segments never answer with a wrong value.
			for i := 0; i < 300; i++ {
				k := fmt.Sprintf("x%d", i)
				v, _, err := s2.Get(ctx, []byte(k))
				want := fmt.Sprintf("value %d", i)
				if k == "x7" {
					want = "new value"
				}
				if err == nil && string(v) != want {
					t.Fatalf("%s: %q, want %q", k, v, want)
				}
				if err != nil && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s: %v", k, err)
				}
			}
		})
	}
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	dev := newMemDev(4 << 20)
	s := open(t, dev, smallOpts())
	ops := []Op{
		{Seq: 1, Kind: OpPut, Key: []byte("a"), Value: []byte("1")},
		{Seq: 2, Kind: OpPut, Key: []byte("b"), Value: []byte("2")},
		{Seq: 3, Kind: OpDelete, Key: []byte("a")},
		{Seq: 4, Kind: OpDelete, Key: []byte("a")}, // not found: still applied
		{Seq: 5, Kind: OpPut, Key: []byte("b"), Value: []byte("x"), Mode: PutMustNotExist},
		{Seq: 6, Kind: OpPut, Key: []byte("c"), Value: []byte("3")},
	}
	wantErr := []error{nil, nil, nil, ErrNotFound, ErrExists, nil}
	for i, op := range ops {
		if _, err := s.Apply(ctx, op); !errors.Is(err, wantErr[i]) {
			t.Fatalf("op %d: %v, want %v", op.Seq, err, wantErr[i])
		}
	}
	if _, err := s.Apply(ctx, Op{Seq: 9, Kind: OpPut, Key: []byte("z"), Value: []byte("z")}); !errors.Is(err, ErrSeqGap) {
		t.Fatalf("gap: %v", err)
	}
	// Re-shipped: a no-op.
	if _, err := s.Apply(ctx, ops[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, []byte("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("re-applied op 1 resurrected a: %v", err)
	}
	s.Close()
	s = open(t, dev, smallOpts())
	if got := s.Applied(); got != 6 {
		t.Fatalf("applied after reopen %d, want 6", got)
	}
	if v, _, err := s.Get(ctx, []byte("b")); err != nil || string(v) != "2" {
		t.Fatalf("b: %q %v", v, err)
	}
}

func TestOnVolumes(t *testing.T) {
	ctx := context.Background()
	for _, spec := range []string{"mem:8MiB?bs=4096", "sim:nand:8MiB?bs=4096", "file:" + t.TempDir() + "/leed.img?size=8MiB"} {
		t.Run(spec[:4], func(t *testing.T) {
			v, err := volume.Open(spec)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			s := open(t, v, smallOpts())
			if _, err := s.Put(ctx, []byte("hello"), []byte("world"), PutAny); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = open(t, v, smallOpts())
			if got, _, err := s.Get(ctx, []byte("hello")); err != nil || string(got) != "world" {
				t.Fatalf("%q %v", got, err)
			}
		})
	}
}

func TestNotFormatted(t *testing.T) {
	o := smallOpts()
	o.Create = false
	if _, err := Open(context.Background(), newMemDev(1<<20), o); !errors.Is(err, ErrNotFormatted) {
		t.Fatalf("%v", err)
	}
}

func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	s := open(t, newMemDev(8<<20), smallOpts())
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < 1500; i++ {
				k := []byte(fmt.Sprintf("w%d-%d", w, rng.IntN(50)))
				v := bytes.Repeat([]byte{byte(w)}, rng.IntN(900)+1)
				if _, err := s.Put(ctx, k, v, PutAny); err != nil {
					t.Error(err)
					return
				}
				got, _, err := s.Get(ctx, k)
				if err != nil || !bytes.Equal(got, v) {
					t.Errorf("get %s: %v", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s.Stats().Compactions == 0 {
		t.Fatal("no compaction ran")
	}
}

// ImportBatch stores what the same Puts would, in far fewer I/Os, and
// its counters match what recovery rebuilds.
func TestImportBatch(t *testing.T) {
	ctx := context.Background()
	dev := newMemDev(8 << 20)
	s := open(t, dev, smallOpts())
	want := map[string][]byte{}
	for i := 0; i < 50; i++ {
		k, v := fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("put %d", i))
		if _, err := s.Put(ctx, []byte(k), v, PutAny); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	rng := rand.New(rand.NewPCG(5, 5))
	var batch []KV
	for i := 0; i < 3000; i++ {
		k := fmt.Sprintf("k%d", rng.IntN(2500)) // overwrites, and keys twice in the batch
		v := value(rng, 200)
		batch = append(batch, KV{Key: []byte(k), Value: v})
		want[k] = v
	}
	c, err := s.ImportBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if segs := s.Stats().Segments; c.IOs() > 3*segs+8 {
		t.Fatalf("import of %d objects over %d segments took %d I/Os", len(batch), segs, c.IOs())
	}
	if _, err := s.ImportBatch(ctx, []KV{{Key: []byte("this key is far too long"), Value: []byte("v")}}); !errors.Is(err, ErrKeySize) {
		t.Fatalf("long key: %v", err)
	}
	check := func(s *Store) {
		t.Helper()
		for k, v := range want {
			got, _, err := s.Get(ctx, []byte(k))
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("%s: %q %v, want %q", k, got, err, v)
			}
		}
	}
	check(s)
	before := s.Stats()
	if before.Objects != int64(len(want)) {
		t.Fatalf("%d objects counted, %d stored", before.Objects, len(want))
	}
	s.Close()
	s = open(t, dev, smallOpts())
	defer s.Close()
	check(s)
	after := s.Stats()
	if after.Objects != before.Objects || after.LiveValueBytes != before.LiveValueBytes || after.LiveKeySlots != before.LiveKeySlots {
		t.Fatalf("counters before a reopen %+v, after %+v", before, after)
	}
}
