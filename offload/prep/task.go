package prep

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/nearstore/nearstore/offload"
)

// TaskName is the offload task OffloadPrep registers.
const TaskName = "prep"

// Register adds the prep task to r: its files are the images (inputs),
// its arguments EncodeArgs', and it returns the images' 8-bit pixels end
// to end, each PixelLen bytes (ProcessPixels'), which the host normalises
// (Normalizer): a quarter of the bytes of float tensors to send, receive
// and copy.
func Register(r *offload.Registry) error { return r.Register(TaskName, task) }

func task(ctx context.Context, env *offload.Env, args []byte) ([]byte, error) {
	o, seed, first, err := DecodeArgs(args)
	if err != nil {
		return nil, err
	}
	n := env.NumFiles()
	pl := o.PixelLen()
	if uint64(n)*uint64(pl) > offload.MaxOutput {
		return nil, fmt.Errorf("prep: %d images of %d bytes do not fit a task's %d-byte output", n, pl, offload.MaxOutput)
	}
	out := make([]byte, n*pl)
	err = parallel(ctx, n, func(i int) error {
		size := env.Size(i)
		if size < 0 || size > 64<<20 {
			return fmt.Errorf("prep: image %d is %d bytes", i, size)
		}
		data := make([]byte, size)
		if _, err := env.ReadAt(ctx, i, data, 0); err != nil {
			return err
		}
		if err := o.ProcessPixels(data, seed, first+uint64(i), out[i*pl:(i+1)*pl]); err != nil {
			return fmt.Errorf("image %d: %w", first+uint64(i), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parallel runs f(0..n-1) on GOMAXPROCS workers and returns the first
// error.
func parallel(ctx context.Context, n int, f func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
		ferr error
	)
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := ferr != nil || i >= n
				mu.Unlock()
				if stop {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = f(i)
				}
				if err != nil {
					mu.Lock()
					if ferr == nil {
						ferr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return ferr
}

// Tensors normalises a task's output, whole images of o.PixelLen bytes,
// into one tensor each.
func Tensors(b []byte, o Options) ([][]float32, error) {
	pl := o.PixelLen()
	if len(b)%pl != 0 {
		return nil, fmt.Errorf("prep: %d bytes are not whole images of %d bytes", len(b), pl)
	}
	n := o.Normalizer()
	out := make([][]float32, len(b)/pl)
	for i := range out {
		out[i] = make([]float32, pl)
		if err := n.Normalize(b[i*pl:(i+1)*pl], out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
