package prep

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
)

// Engine is a place images can go: an offload engine (on the storage
// node, or a peer), named for the report.
type Engine struct {
	Name string
	Peer offloadfs.Peer
}

// Runner runs the pipeline over images in a file system, on the host,
// on engines, or on both at once (split). Work is pulled, not dealt:
// the host takes the next image whenever one of its workers is free, an
// engine the next batch whenever one of its task slots is, so a faster
// side does more and neither waits on the other's share.
type Runner struct {
	FS      *offloadfs.FS
	Options Options
	Seed    uint64
	// Batch is how many images one offloaded task takes (8); InFlight
	// how many tasks each engine has at once (4): enough that an engine
	// works on the next batches while the host receives a result.
	Batch, InFlight int
}

// Stats say where a run's images went.
type Stats struct {
	// Images counts the images each place did: "host", an engine's
	// name, or an engine's name + " (local)" for the tasks it turned
	// away, which ran on the host.
	Images map[string]int
}

// cursor hands out the images of a run in order, any number at a time.
type cursor struct {
	mu   sync.Mutex
	next int
	n    int
}

// take returns the next up to k images [lo, hi); ok is false when none
// are left.
func (c *cursor) take(k int) (lo, hi int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lo = c.next
	hi = min(lo+k, c.n)
	c.next = hi
	return lo, hi, lo < hi
}

// Run processes the images named (image i of names has index first+i)
// on the host (if host: GOMAXPROCS workers, an image at a time) and on
// engines (InFlight tasks of Batch images each), and calls each with
// every image's tensor, one call at a time, in no particular order.
func (r *Runner) Run(ctx context.Context, names []string, first uint64, host bool, engines []Engine, each func(index uint64, t []float32)) (Stats, error) {
	if !host && len(engines) == 0 {
		return Stats{}, errors.New("prep: nowhere to run: no host and no engine")
	}
	batch, inflight := r.Batch, r.InFlight
	if batch <= 0 {
		batch = 8
	}
	if inflight <= 0 {
		inflight = 4
	}
	if uint64(batch)*uint64(r.Options.PixelLen()) > offload.MaxOutput {
		return Stats{}, fmt.Errorf("prep: a batch of %d images of %d bytes is too large for one task", batch, r.Options.PixelLen())
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		cur   = &cursor{n: len(names)}
		norm  = r.Options.Normalizer()
		mu    sync.Mutex
		stats = Stats{Images: map[string]int{}}
		wg    sync.WaitGroup
	)
	deliver := func(where string, lo int, ts [][]float32) {
		mu.Lock()
		defer mu.Unlock()
		stats.Images[where] += len(ts)
		for i, t := range ts {
			each(first+uint64(lo+i), t)
		}
	}
	worker := func(k int, do func(lo, hi int) (string, [][]float32, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				lo, hi, ok := cur.take(k)
				if !ok {
					return
				}
				where, ts, err := do(lo, hi)
				if err != nil {
					cancel(err)
					return
				}
				deliver(where, lo, ts)
			}
		}()
	}
	if host {
		for range runtime.GOMAXPROCS(0) {
			worker(1, func(lo, _ int) (string, [][]float32, error) {
				t, err := r.host(names[lo], first+uint64(lo), norm)
				return "host", [][]float32{t}, err
			})
		}
	}
	for _, e := range engines {
		for range inflight {
			worker(batch, func(lo, hi int) (string, [][]float32, error) {
				ts, local, err := r.offload(ctx, e.Peer, names[lo:hi], first+uint64(lo))
				if local {
					return e.Name + " (local)", ts, err
				}
				return e.Name, ts, err
			})
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return stats, err
	}
	return stats, nil
}

// host runs one image here.
func (r *Runner) host(name string, index uint64, norm *Normalizer) ([]float32, error) {
	data, err := r.FS.ReadFile(name)
	if err != nil {
		return nil, err
	}
	pix := make([]uint8, r.Options.PixelLen())
	if err := r.Options.ProcessPixels(data, r.Seed, index, pix); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	t := make([]float32, len(pix))
	return t, norm.Normalize(pix, t)
}

// offload runs a batch as one task on peer.
func (r *Runner) offload(ctx context.Context, peer offloadfs.Peer, names []string, first uint64) ([][]float32, bool, error) {
	files := make([]offloadfs.OffloadFile, len(names))
	for i, n := range names {
		f, err := r.FS.Open(n)
		if err != nil {
			return nil, false, err
		}
		defer f.Close()
		files[i] = offloadfs.OffloadFile{In: f}
	}
	res, err := r.FS.Offload(ctx, peer, TaskName, files, EncodeArgs(r.Options, r.Seed, first))
	if err != nil {
		return nil, false, err
	}
	ts, err := Tensors(res.Output, r.Options)
	if err == nil && len(ts) != len(names) {
		err = fmt.Errorf("prep: %d images' pixels for %d images", len(ts), len(names))
	}
	if err != nil {
		return nil, res.Local, err
	}
	return ts, res.Local, nil
}
