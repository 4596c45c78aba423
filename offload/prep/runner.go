package prep

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nearstore/nearstore/offloadfs"
)

// Engine is a place images can go: an offload engine (on the storage
// node, or a peer), named for the report.
type Engine struct {
	Name string
	Peer offloadfs.Peer
}

// Runner runs the pipeline over images in a file system, on the host,
// on engines, or on both at once (split: whoever is free takes the next
// batch).
type Runner struct {
	FS      *offloadfs.FS
	Options Options
	Seed    uint64
	// Batch is how many images one offloaded task takes (8); InFlight
	// how many tasks each engine has at once (2).
	Batch, InFlight int
}

// Stats say where a run's images went.
type Stats struct {
	// Images counts the images each place did: "host", an engine's
	// name, or an engine's name + " (local)" for the tasks it turned
	// away, which ran on the host.
	Images map[string]int
}

// Run processes the images named (image i of names has index first+i)
// on the host (if host) and on engines, and calls each with every
// image's tensor, one call at a time, in no particular order.
func (r *Runner) Run(ctx context.Context, names []string, first uint64, host bool, engines []Engine, each func(index uint64, t []float32)) (Stats, error) {
	if !host && len(engines) == 0 {
		return Stats{}, errors.New("prep: nowhere to run: no host and no engine")
	}
	batch, inflight := r.Batch, r.InFlight
	if batch <= 0 {
		batch = 8
	}
	if inflight <= 0 {
		inflight = 2
	}
	tl := r.Options.TensorLen()
	if uint64(batch*tl*4) > 32<<20 {
		return Stats{}, fmt.Errorf("prep: a batch of %d tensors of %d values is too large for one task", batch, tl)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type job struct{ lo, hi int }
	jobs := make(chan job)
	go func() {
		defer close(jobs)
		for lo := 0; lo < len(names); lo += batch {
			select {
			case jobs <- job{lo, min(lo+batch, len(names))}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
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
	worker := func(do func(job) (string, [][]float32, error)) {
		defer wg.Done()
		for j := range jobs {
			where, ts, err := do(j)
			if err != nil {
				cancel(err)
				return
			}
			deliver(where, j.lo, ts)
		}
	}
	if host {
		wg.Add(1)
		go worker(func(j job) (string, [][]float32, error) {
			ts, err := r.host(ctx, names[j.lo:j.hi], first+uint64(j.lo))
			return "host", ts, err
		})
	}
	for _, e := range engines {
		for range inflight {
			wg.Add(1)
			go worker(func(j job) (string, [][]float32, error) {
				ts, local, err := r.offload(ctx, e.Peer, names[j.lo:j.hi], first+uint64(j.lo))
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

// host runs a batch here.
func (r *Runner) host(ctx context.Context, names []string, first uint64) ([][]float32, error) {
	ts := make([][]float32, len(names))
	err := parallel(ctx, len(names), func(i int) error {
		data, err := r.FS.ReadFile(names[i])
		if err != nil {
			return err
		}
		ts[i] = make([]float32, r.Options.TensorLen())
		if err := r.Options.Process(data, r.Seed, first+uint64(i), ts[i]); err != nil {
			return fmt.Errorf("%s: %w", names[i], err)
		}
		return nil
	})
	return ts, err
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
	ts, err := Floats(res.Output, r.Options.TensorLen())
	if err == nil && len(ts) != len(names) {
		err = fmt.Errorf("prep: %d tensors for %d images", len(ts), len(names))
	}
	return ts, res.Local, err
}
