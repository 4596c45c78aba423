package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/nearstore/nearstore/vfs"
)

// model is the reference: a map of live keys, copied whole for snapshots.
type model map[string]string

// modelIter iterates over a model's sorted keys within bounds.
type modelIter struct {
	keys         []string
	m            model
	lower, upper []byte
	i            int // -1 or len: invalid
}

func newModelIter(m model, lower, upper []byte) *modelIter {
	var ks []string
	for k := range m {
		if (lower == nil || k >= string(lower)) && (upper == nil || k < string(upper)) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return &modelIter{keys: ks, m: m, lower: lower, upper: upper, i: -1}
}

func (it *modelIter) valid() bool { return it.i >= 0 && it.i < len(it.keys) }
func (it *modelIter) first() bool { it.i = 0; return it.valid() }
func (it *modelIter) last() bool  { it.i = len(it.keys) - 1; return it.valid() }
func (it *modelIter) seekGE(k []byte) bool {
	it.i = sort.SearchStrings(it.keys, string(k))
	return it.valid()
}
func (it *modelIter) seekLT(k []byte) bool {
	it.i = sort.SearchStrings(it.keys, string(k)) - 1
	return it.valid()
}
func (it *modelIter) next() bool {
	if !it.valid() {
		return false
	}
	it.i++
	return it.valid()
}
func (it *modelIter) prev() bool {
	if !it.valid() {
		return false
	}
	it.i--
	return it.valid()
}

type modelRun struct {
	t     *testing.T
	rng   *rand.Rand
	fs    vfs.FS
	opts  Options
	d     *DB
	m     model
	snaps []*Snapshot
	smods []model
	nkeys int
	log   []string
}

func (r *modelRun) key() []byte { return []byte(fmt.Sprintf("k%04d", r.rng.IntN(r.nkeys))) }

func (r *modelRun) value() []byte {
	n := r.rng.IntN(100)
	if r.rng.IntN(20) == 0 {
		n = 2000 + r.rng.IntN(3000)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.rng.IntN(26))
	}
	return b
}

func (r *modelRun) fatalf(format string, args ...any) {
	r.t.Helper()
	if p := os.Getenv("LSM_MODEL_LOG"); p != "" {
		os.WriteFile(p, []byte(joinLines(r.log)), 0o644)
	}
	tail := r.log
	if len(tail) > 30 {
		tail = tail[len(tail)-30:]
	}
	r.t.Fatalf("%s\nlast operations:\n%s\nversion:\n%s", fmt.Sprintf(format, args...), joinLines(tail), r.d.current.String())
}

func joinLines(s []string) string {
	var b bytes.Buffer
	for _, l := range s {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

func (r *modelRun) check(err error) {
	r.t.Helper()
	if err != nil {
		r.fatalf("%v", err)
	}
}

// applyToModel applies a batch's ops to a model.
func applyToModel(m model, ops [][3]string) {
	for _, op := range ops {
		switch op[0] {
		case "set":
			m[op[1]] = op[2]
		case "del":
			delete(m, op[1])
		case "rangedel":
			for k := range m {
				if k >= op[1] && k < op[2] {
					delete(m, k)
				}
			}
		}
	}
}

func (r *modelRun) write() {
	n := 1
	if r.rng.IntN(5) == 0 {
		n = 1 + r.rng.IntN(10)
	}
	b := NewBatch()
	var ops [][3]string
	for i := 0; i < n; i++ {
		switch p := r.rng.IntN(100); {
		case p < 70:
			k, v := r.key(), r.value()
			b.Set(k, v)
			ops = append(ops, [3]string{"set", string(k), string(v)})
		case p < 92:
			k := r.key()
			b.Delete(k)
			ops = append(ops, [3]string{"del", string(k), ""})
		default:
			a, z := r.key(), r.key()
			if bytes.Compare(a, z) > 0 {
				a, z = z, a
			}
			b.DeleteRange(a, z)
			ops = append(ops, [3]string{"rangedel", string(a), string(z)})
		}
	}
	r.log = append(r.log, fmt.Sprintf("batch %v", summarize(ops)))
	r.check(r.d.Apply(context.Background(), b, &WriteOptions{Sync: r.rng.IntN(10) == 0}))
	applyToModel(r.m, ops)
}

func summarize(ops [][3]string) string {
	var out []string
	for _, o := range ops {
		if o[0] == "set" {
			out = append(out, fmt.Sprintf("set %s (%d bytes)", o[1], len(o[2])))
		} else {
			out = append(out, fmt.Sprintf("%s %s %s", o[0], o[1], o[2]))
		}
	}
	return fmt.Sprint(out)
}

func (r *modelRun) get() {
	k := r.key()
	src, m, name := interface{ Get([]byte) ([]byte, error) }(r.d), r.m, "db"
	if len(r.snaps) > 0 && r.rng.IntN(2) == 0 {
		i := r.rng.IntN(len(r.snaps))
		src, m, name = r.snaps[i], r.smods[i], fmt.Sprintf("snapshot %d", r.snaps[i].Seq())
	}
	got, err := src.Get(k)
	want, ok := m[string(k)]
	r.log = append(r.log, fmt.Sprintf("get %s from %s", k, name))
	switch {
	case !ok && !errors.Is(err, ErrNotFound):
		r.fatalf("%s Get(%s) = %d bytes, %v; want not found", name, k, len(got), err)
	case ok && (err != nil || string(got) != want):
		r.fatalf("%s Get(%s) = %d bytes, %v; want %d bytes", name, k, len(got), err, len(want))
	}
}

func (r *modelRun) iterate() {
	var o *IterOptions
	var lower, upper []byte
	if r.rng.IntN(2) == 0 {
		lower, upper = r.key(), r.key()
		if bytes.Compare(lower, upper) > 0 {
			lower, upper = upper, lower
		}
		if r.rng.IntN(3) == 0 {
			lower = nil
		}
		o = &IterOptions{LowerBound: lower, UpperBound: upper}
	}
	m, name := r.m, "db"
	var it *Iterator
	var err error
	if len(r.snaps) > 0 && r.rng.IntN(2) == 0 {
		i := r.rng.IntN(len(r.snaps))
		m, name = r.smods[i], fmt.Sprintf("snapshot %d", r.snaps[i].Seq())
		it, err = r.snaps[i].NewIter(o)
	} else {
		it, err = r.d.NewIter(o)
	}
	r.check(err)
	mi := newModelIter(m, lower, upper)
	r.log = append(r.log, fmt.Sprintf("iter on %s [%s, %s)", name, lower, upper))
	for step := 0; step < 30; step++ {
		var got, want bool
		var op string
		switch p := r.rng.IntN(100); {
		case p < 5:
			op, got, want = "First", it.First(), mi.first()
		case p < 10:
			op, got, want = "Last", it.Last(), mi.last()
		case p < 20:
			k := r.key()
			op, got, want = "SeekGE "+string(k), it.SeekGE(k), mi.seekGE(k)
		case p < 30:
			k := r.key()
			op, got, want = "SeekLT "+string(k), it.SeekLT(k), mi.seekLT(k)
		case p < 65:
			op, got, want = "Next", it.Next(), mi.next()
		default:
			op, got, want = "Prev", it.Prev(), mi.prev()
		}
		r.log = append(r.log, fmt.Sprintf("  %s -> %v %q", op, got, it.Key()))
		if got != want {
			r.fatalf("%s: iterator %s = %v (at %q), model %v (at %q)\n%s", name, op, got, it.Key(), want, mkey(mi), dumpInternal(r.d, it.Key(), []byte(mkey(mi))))
		}
		if got {
			if string(it.Key()) != mi.keys[mi.i] || string(it.Value()) != m[mi.keys[mi.i]] {
				lo, hi := slices.Clone(it.Key()), []byte(mi.keys[mi.i])
				if bytes.Compare(lo, hi) > 0 {
					lo, hi = hi, lo
				}
				r.fatalf("%s: iterator %s at %q (%d bytes), model at %q (%d bytes)\n%s", name, op, it.Key(), len(it.Value()), mi.keys[mi.i], len(m[mi.keys[mi.i]]), dumpInternal(r.d, lo, hi))
			}
		}
	}
	r.check(it.Close())
}

// checkAll compares every key of the db and its snapshots with the model.
func (r *modelRun) checkAll() {
	r.t.Helper()
	for k := 0; k < r.nkeys; k++ {
		key := []byte(fmt.Sprintf("k%04d", k))
		got, err := r.d.Get(key)
		want, ok := r.m[string(key)]
		if ok != (err == nil) || string(got) != want {
			r.fatalf("checkAll Get(%s) = %d bytes, %v; want present=%v\n%s", key, len(got), err, ok, dumpInternal(r.d, key, key))
		}
		for i, s := range r.snaps {
			got, err := s.Get(key)
			want, ok := r.smods[i][string(key)]
			if ok != (err == nil) || string(got) != want {
				r.fatalf("checkAll snapshot %d Get(%s) = %d bytes, %v; want present=%v\n%s", s.Seq(), key, len(got), err, ok, dumpInternal(r.d, key, key))
			}
		}
	}
}

func mkey(mi *modelIter) string {
	if mi.valid() {
		return mi.keys[mi.i]
	}
	return ""
}

func (r *modelRun) closeSnapshots() {
	for _, s := range r.snaps {
		r.check(s.Close())
	}
	r.snaps, r.smods = nil, nil
}

func (r *modelRun) step() {
	switch p := r.rng.IntN(1000); {
	case p < 550:
		r.write()
	case p < 800:
		r.get()
	case p < 900:
		r.iterate()
	case p < 930:
		if len(r.snaps) < 4 {
			r.log = append(r.log, "snapshot")
			r.snaps = append(r.snaps, r.d.NewSnapshot())
			r.smods = append(r.smods, maps.Clone(r.m))
		}
	case p < 950:
		if len(r.snaps) > 0 {
			i := r.rng.IntN(len(r.snaps))
			r.log = append(r.log, fmt.Sprintf("close snapshot %d", r.snaps[i].Seq()))
			r.check(r.snaps[i].Close())
			r.snaps = slices.Delete(r.snaps, i, i+1)
			r.smods = slices.Delete(r.smods, i, i+1)
		}
	case p < 970:
		r.log = append(r.log, "flush")
		r.check(r.d.Flush(context.Background()))
	case p < 990:
		a, z := r.key(), r.key()
		if bytes.Compare(a, z) > 0 {
			a, z = z, a
		}
		r.log = append(r.log, fmt.Sprintf("compact %s %s", a, z))
		r.check(r.d.Compact(context.Background(), a, z))
	default:
		r.log = append(r.log, "reopen")
		r.closeSnapshots()
		r.check(r.d.Close())
		d, err := Open(r.fs, "db", r.opts)
		r.check(err)
		r.d = d
	}
}

// TestModel runs random operations — writes, deletes, range deletes,
// batches, gets, iterators both ways with bounds, snapshots, flushes,
// compactions, reopens — against a map, checking every read.
//
// To debug a failure: LSM_MODEL_PARANOID=1 checks every key (and every
// snapshot's) after each step, so the first wrong step is found;
// LSM_MODEL_LOG=FILE writes the whole operation log on failure;
// LSM_MODEL_DEBUG=1 logs each flush and compaction's inputs and outputs.
// LSM_MODEL_SEEDS=N runs N seeds per configuration (default 2), for soaks.
func TestModel(t *testing.T) {
	configs := []struct {
		name  string
		opts  func() Options
		nkeys int
	}{
		{"small", smallOptions, 300},
		{"concurrent-compactions", func() Options {
			o := smallOptions()
			o.MaxConcurrentCompactions = 2
			o.L0CompactionThreshold = 3
			return o
		}, 1000},
		{"no-cache", func() Options {
			o := smallOptions()
			o.BlockCacheSize = -1
			o.TableCacheSize = 2
			o.MemTableSize = 8 << 10
			return o
		}, 100},
	}
	steps := 4000
	if testing.Short() {
		steps = 1000
	}
	seeds := uint64(2)
	if n, err := strconv.ParseUint(os.Getenv("LSM_MODEL_SEEDS"), 10, 64); err == nil && n > 0 {
		seeds = n
	}
	for _, c := range configs {
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", c.name, seed), func(t *testing.T) {
				fs := newMemFS()
				opts := c.opts()
				if os.Getenv("LSM_MODEL_DEBUG") != "" {
					opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
				}
				d, err := Open(fs, "db", opts)
				if err != nil {
					t.Fatal(err)
				}
				r := &modelRun{t: t, rng: rand.New(rand.NewPCG(seed, 99)), fs: fs, opts: opts, d: d, m: model{}, nkeys: c.nkeys}
				paranoid := os.Getenv("LSM_MODEL_PARANOID") != ""
				for i := 0; i < steps; i++ {
					r.step()
					if paranoid {
						r.checkAll()
					}
				}
				// Everything, one last time, after a full compaction.
				r.closeSnapshots()
				r.check(r.d.Compact(context.Background(), []byte(""), []byte("z")))
				for k := 0; k < r.nkeys; k++ {
					key := fmt.Sprintf("k%04d", k)
					got, err := r.d.Get([]byte(key))
					want, ok := r.m[key]
					if ok != (err == nil) || string(got) != want {
						r.fatalf("final Get(%s) = %d bytes, %v; want present=%v", key, len(got), err, ok)
					}
				}
				t.Logf("metrics:\n%s", r.d.Metrics())
				r.check(r.d.Close())
			})
		}
	}
}
