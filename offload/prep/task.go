package prep

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/nearstore/nearstore/offload"
)

// TaskName is the offload task OffloadPrep registers.
const TaskName = "prep"

// Register adds the prep task to r: its files are the images (inputs),
// its arguments EncodeArgs', and it returns the images' tensors end to
// end, each TensorLen float32 values, little-endian.
func Register(r *offload.Registry) error { return r.Register(TaskName, task) }

func task(ctx context.Context, env *offload.Env, args []byte) ([]byte, error) {
	o, seed, first, err := DecodeArgs(args)
	if err != nil {
		return nil, err
	}
	n := env.NumFiles()
	tl := o.TensorLen()
	if uint64(n)*uint64(tl)*4 > offload.MaxOutput {
		return nil, fmt.Errorf("prep: %d images of %d values do not fit a task's %d-byte output", n, tl, offload.MaxOutput)
	}
	out := make([]byte, n*tl*4)
	err = parallel(ctx, n, func(i int) error {
		size := env.Size(i)
		if size < 0 || size > 64<<20 {
			return fmt.Errorf("prep: image %d is %d bytes", i, size)
		}
		data := make([]byte, size)
		if _, err := env.ReadAt(ctx, i, data, 0); err != nil {
			return err
		}
		t := make([]float32, tl)
		if err := o.Process(data, seed, first+uint64(i), t); err != nil {
			return fmt.Errorf("image %d: %w", first+uint64(i), err)
		}
		putFloats(out[i*tl*4:], t)
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

func putFloats(b []byte, fs []float32) {
	for i, f := range fs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
}

// Floats decodes a task's output into tensors of tl values each.
func Floats(b []byte, tl int) ([][]float32, error) {
	if tl <= 0 || len(b)%(4*tl) != 0 {
		return nil, fmt.Errorf("prep: %d bytes are not whole tensors of %d values", len(b), tl)
	}
	out := make([][]float32, len(b)/(4*tl))
	for i := range out {
		t := make([]float32, tl)
		for j := range t {
			t[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*(i*tl+j):]))
		}
		out[i] = t
	}
	return out, nil
}
