package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/stamptest"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
)

// The race test's clock: a counter every event takes a tick of, so "before"
// and "after" are exact whatever the scheduler does.
type clock struct{ n atomic.Uint64 }

func (c *clock) tick() uint64 { return c.n.Add(1) }

// generation is one content of a file: current from tick from until tick
// to (0: still current, or the file was closed with it).
type generation struct{ gen, from, to uint64 }

// handle is a test file: an open handle, its inode, and the generations
// it has had.
type handle struct {
	f   *offloadfs.File
	ino uint64

	mu   sync.Mutex
	gens []generation
}

// current reports whether generation gen of the file was current at some
// point in [t0, t1].
func (h *handle) current(gen, t0, t1 uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range h.gens {
		if g.gen == gen {
			return g.from <= t1 && (g.to == 0 || g.to >= t0)
		}
	}
	return false
}

// slot is a file name and the handle now behind it.
type slot struct {
	name string

	mu   sync.Mutex
	h    *handle
	size int64 // what readers may ask for: at most the file's size
}

func (s *slot) get() (*handle, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h, s.size
}

func (s *slot) setSize(n int64) {
	s.mu.Lock()
	s.size = n
	s.mu.Unlock()
}

// raceRun is the state of TestPushdownRaces.
type raceRun struct {
	t    *testing.T
	e    *env
	clk  clock
	gens atomic.Uint64

	checked, outside, closed, nospace atomic.Int64
	mu                                sync.Mutex
	failures                          []string
}

func (r *raceRun) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failures) < 20 {
		r.failures = append(r.failures, fmt.Sprintf(format, args...))
	}
}

// rewrite gives h's file a new generation of n bytes: truncated to
// nothing, then written in two appends. The old generation stays
// acceptable until the truncation has happened; the new one is from
// before its first byte is written.
func (r *raceRun) rewrite(s *slot, h *handle, n int) error {
	gen := r.gens.Add(1)
	h.mu.Lock()
	h.gens = append(h.gens, generation{gen: gen, from: r.clk.tick()})
	h.mu.Unlock()
	if s != nil {
		s.setSize(0)
	}
	if err := h.f.Truncate(0); err != nil {
		return err
	}
	h.mu.Lock()
	if k := len(h.gens); k > 1 {
		h.gens[k-2].to = r.clk.tick()
	}
	h.mu.Unlock()
	data := stamptest.Blocks(h.ino, gen, 0, n, bs)
	half := n / 2 &^ (bs - 1)
	if _, err := h.f.WriteAt(data[:half], 0); err != nil {
		return err
	}
	if _, err := h.f.WriteAt(data[half:], int64(half)); err != nil {
		return err
	}
	if s != nil {
		s.setSize(int64(n))
	}
	return nil
}

// check validates a stamp a request returned for byte off of h's file,
// issued at t0 and answered at t1.
func (r *raceRun) check(what string, h *handle, b []byte, off int64, t0, t1 uint64) (uint64, bool) {
	st, ok := stamptest.Parse(b)
	switch {
	case !ok:
		r.fail("%s: inode %d offset %d: no stamp in % x", what, h.ino, off, b[:stamptest.Size])
	case st.Ino != h.ino:
		r.fail("%s: inode %d offset %d: a block of inode %d (generation %d, offset %d)", what, h.ino, off, st.Ino, st.Gen, st.Off)
	case st.Off != uint64(off):
		r.fail("%s: inode %d offset %d: the block of offset %d", what, h.ino, off, st.Off)
	case !h.current(st.Gen, t0, t1):
		r.fail("%s: inode %d offset %d: generation %d was not current during the call", what, h.ino, off, st.Gen)
	case !bytes.Equal(b[:stamptest.Size], stamptest.Blocks(st.Ino, st.Gen, int(off), bs, bs)[:stamptest.Size]):
		r.fail("%s: inode %d offset %d: stamp differs from the reference", what, h.ino, off)
	default:
		return st.Gen, true
	}
	return 0, false
}

// acceptable reports whether a request's error is one the churn explains:
// the range was cut off by a truncation, or the handle was closed.
func (r *raceRun) acceptable(what string, err error) bool {
	switch {
	case errors.Is(err, pushdown.ErrOutsideFile):
		r.outside.Add(1)
	case errors.Is(err, iofs.ErrClosed):
		r.closed.Add(1)
	default:
		r.fail("%s: %v", what, err)
		return false
	}
	return true
}

// TestPushdownRaces is issue 4's race test: pushdowns and λ reads run on
// files while other goroutines rewrite them (truncate to nothing, write a
// new generation), truncate them, rename them and remove and recreate
// them, and commits make the freed blocks other files' quickly. Every
// block of every file carries a stamp of (inode, generation, offset), and
// every result must show the stamp of the file asked for, at the offset
// asked for, of a generation current at some point during the call:
// never a block of another file, or of a generation already gone. Requests
// are delayed on the way to the target and back, so files change between
// the plan, the run and the check; the test goes on until requests have
// both been refused as stale and discarded after completion, so both
// fallback paths ran. It ends with the results of quiet files checked
// against ordinary reads.
func TestPushdownRaces(t *testing.T) {
	e := newEnv(t, envConfig{
		wrap: func(r offloadfs.Remote) offloadfs.Remote {
			d := &delayRemote{Remote: r, req: 4 * time.Millisecond, put: 3 * time.Millisecond, rng: rand.New(rand.NewPCG(3, 4))}
			if raceEnabled {
				d.req *= 3
			}
			return d
		},
		commitInterval: 2 * time.Millisecond,
		// Small, so the allocator comes round to freed blocks often.
		size: 8 << 20,
	})
	r := &raceRun{t: t, e: e}
	ctx := context.Background()
	// Fill the file system but for 2 MiB, so freed blocks are allocated
	// again soon after their commit: a request that read a file's old
	// blocks would find another file's stamps there. (The files need at
	// most a third of that, with their reserves; blocks freed but not yet
	// committed make up the rest, and a write that finds no space is
	// skipped.)
	ballast, err := e.fsys.Create("ballast")
	if err != nil {
		t.Fatal(err)
	}
	u := e.fsys.Usage()
	if err := ballast.Truncate(int64(u.FreeBlocks)*int64(u.BlockSize) - 2<<20); err != nil {
		t.Fatal(err)
	}
	if err := ballast.Close(); err != nil {
		t.Fatal(err)
	}
	const nslots = 6
	slots := make([]*slot, nslots)
	open := func(s *slot, n int) (*handle, error) {
		f, err := e.fsys.Create(s.name)
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		h := &handle{f: f, ino: fi.Sys().(*offloadfs.FileInfo).Ino()}
		return h, r.rewrite(nil, h, n)
	}
	for i := range slots {
		s := &slot{name: fmt.Sprintf("dir%d/f%d", i%2, i)}
		if err := e.fsys.MkdirAll(fmt.Sprintf("dir%d", i%2)); err != nil {
			t.Fatal(err)
		}
		h, err := open(s, 16<<10)
		if err != nil {
			t.Fatal(err)
		}
		s.h, s.size = h, 16<<10
		slots[i] = s
	}
	e.syncRemote()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Two churners, each owning half the slots.
	for c := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 99))
			mine := slots[c*nslots/2 : (c+1)*nslots/2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := mine[rng.IntN(len(mine))]
				h, size := s.get()
				n := (1 + rng.IntN(64)) * bs
				var err error
				switch op := rng.IntN(10); {
				case op < 4:
					err = r.rewrite(s, h, n)
				case op < 6:
					cut := size / 2 &^ (bs - 1)
					s.setSize(cut)
					err = h.f.Truncate(cut)
				case op < 8:
					moved := s.name + ".moved"
					if err = e.fsys.Rename(s.name, moved); err == nil {
						err = e.fsys.Rename(moved, s.name)
					}
				default:
					// Remove the file while readers use it, recreate the
					// name, then close the old handle: its blocks are
					// freed for other files to take.
					if err = e.fsys.Remove(s.name); err != nil {
						break
					}
					var nh *handle
					if nh, err = open(s, n); err != nil {
						break
					}
					s.mu.Lock()
					s.h, s.size = nh, int64(n)
					s.mu.Unlock()
					err = h.f.Close()
				}
				if errors.Is(err, offloadfs.ErrNoSpace) {
					r.nospace.Add(1)
					err = nil
				}
				if err != nil {
					r.fail("churn: %v", err)
					return
				}
				if rng.IntN(4) == 0 {
					if err := e.fsys.Sync(ctx); err != nil {
						r.fail("sync: %v", err)
						return
					}
				}
			}
		}()
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				r.read(ctx, rng, slots)
			}
		}()
	}
	// Run until both fallback paths have been taken often enough, for at
	// least a second and at most half a minute.
	start := time.Now()
	for {
		time.Sleep(50 * time.Millisecond)
		s := e.fsys.Stats()
		el := time.Since(start)
		r.mu.Lock()
		failed := len(r.failures) > 0
		r.mu.Unlock()
		if failed || el > 30*time.Second || (el > time.Second && s.Stale >= 2 && s.Discarded >= 3 && s.Remote >= 20 && r.checked.Load() >= 200) {
			break
		}
	}
	close(stop)
	wg.Wait()
	for _, f := range r.failures {
		t.Error(f)
	}
	s := e.fsys.Stats()
	t.Logf("%v of churn: %d results checked, %d cut off by truncations, %d on closed handles, %d writes out of space; stats %+v",
		time.Since(start).Round(time.Millisecond), r.checked.Load(), r.outside.Load(), r.closed.Load(), r.nospace.Load(), s)
	if s.Fallbacks == 0 || s.Stale == 0 || s.Discarded == 0 || s.Remote == 0 || s.NotSynced == 0 {
		t.Errorf("the churn did not exercise every path: %+v", s)
	}
	if got := e.srv.Metric("nearstore_target_stale_requests_total", nil); got != float64(s.Stale) {
		t.Errorf("the target counted %v stale requests, the file system %d", got, s.Stale)
	}
	if s.Fallbacks != s.Requests-s.Remote {
		t.Errorf("%d requests, %d served by the target, %d fallbacks", s.Requests, s.Remote, s.Fallbacks)
	}
	if r.checked.Load() < 100 {
		t.Errorf("only %d results checked", r.checked.Load())
	}

	// Quiet: every file's current generation, from the target, matching
	// ordinary reads.
	e.syncRemote()
	before := e.fsys.Stats()
	for _, s := range slots {
		h, size := s.get()
		for off := int64(0); off < size; off += 4 * bs {
			res, err := e.fsys.Pushdown(ctx, e.fn, []*offloadfs.File{h.f}, host.Start{Offset: uint64(off), Length: stamptest.Size}, stamptest.Scratch(-1, 0))
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, stamptest.Size)
			if _, err := h.f.ReadAt(want, off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(res.Output[64:96], want) {
				t.Fatalf("%s offset %d: the pushdown's stamp differs from an ordinary read", s.name, off)
			}
		}
	}
	if after := e.fsys.Stats(); after.Remote-before.Remote != after.Requests-before.Requests {
		t.Errorf("quiet files: %d requests, %d served by the target", after.Requests-before.Requests, after.Remote-before.Remote)
	}
}

// read makes one random request on the slots and checks its result.
func (r *raceRun) read(ctx context.Context, rng *rand.Rand, slots []*slot) {
	e := r.e
	s := slots[rng.IntN(len(slots))]
	h, size := s.get()
	if size < bs {
		return
	}
	off := rng.Int64N(size/bs) * bs
	switch rng.IntN(3) {
	case 0:
		t0 := r.clk.tick()
		res, err := e.fsys.Pushdown(ctx, e.fn, []*offloadfs.File{h.f}, host.Start{Offset: uint64(off), Length: stamptest.Size}, stamptest.Scratch(-1, 0))
		t1 := r.clk.tick()
		if err != nil {
			r.acceptable("pushdown", err)
			return
		}
		if _, ok := r.check("pushdown", h, res.Output[64:], off, t0, t1); ok {
			r.checked.Add(1)
		}
	case 1:
		// Two files: the second read goes to another slot's file.
		s2 := slots[rng.IntN(len(slots))]
		h2, size2 := s2.get()
		if size2 < bs {
			return
		}
		off2 := rng.Int64N(size2/bs) * bs
		t0 := r.clk.tick()
		res, err := e.fsys.Pushdown(ctx, e.fn, []*offloadfs.File{h.f, h2.f}, host.Start{Offset: uint64(off), Length: stamptest.Size}, stamptest.Scratch(off2, 1))
		t1 := r.clk.tick()
		if err != nil {
			r.acceptable("two-file pushdown", err)
			return
		}
		_, ok1 := r.check("two-file pushdown, file 0", h, res.Output[64:], off, t0, t1)
		_, ok2 := r.check("two-file pushdown, file 1", h2, res.Output[96:], off2, t0, t1)
		if ok1 && ok2 {
			r.checked.Add(1)
		}
	default:
		blocks := min(8, int((size-off)/bs))
		t0 := r.clk.tick()
		res, err := h.f.LambdaRead(ctx, e.fn, off, blocks*bs, stamptest.Params(1, bs), 8*stamptest.Size)
		t1 := r.clk.tick()
		if err != nil {
			r.acceptable("λ read", err)
			return
		}
		if len(res.Output) != blocks*stamptest.Size {
			r.fail("λ read: %d bytes of output for %d blocks", len(res.Output), blocks)
			return
		}
		// One request sees one version of the file, so one generation.
		var first uint64
		for i := range blocks {
			gen, ok := r.check("λ read", h, res.Output[i*stamptest.Size:], off+int64(i*bs), t0, t1)
			if !ok {
				return
			}
			if i == 0 {
				first = gen
			} else if gen != first {
				r.fail("λ read: inode %d: blocks of generations %d and %d in one request", h.ino, first, gen)
				return
			}
		}
		r.checked.Add(1)
	}
}
