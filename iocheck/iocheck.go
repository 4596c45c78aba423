// Package iocheck proves a block device stores what it is given: it writes
// patterns a reader can recompute from their position alone, through every
// path a device offers (aligned and unaligned, small and large transfers,
// write zeroes, deallocate, flush), and reads them back.
//
// Patterns are seeded by run and byte offset, so a block that lands in the
// wrong place, a stale block, or a torn write shows up as a mismatch at a
// named offset rather than as a vague checksum failure.
package iocheck

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// Device is what iocheck needs of a block device: host.Namespace has it.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	BlockSize() int
	Flush(ctx context.Context) error
	WriteZeroes(ctx context.Context, off, n int64) error
	Deallocate(ctx context.Context, off, n int64) error
}

// zeroAfterDeallocate is implemented by devices that can say whether
// deallocated blocks read back as zeroes (NVMe's DLFEAT); without it, or
// when it says no, a deallocated range may read as anything, and only the
// blocks around it are checked.
type zeroAfterDeallocate interface {
	DeallocatedReadsZero() bool
}

// Options chooses the region and the run.
type Options struct {
	// Size is how many bytes from the start of the device the full sweep
	// covers (default min(64 MiB, device size)).
	Size int64
	// Seed distinguishes runs; zero picks one from the clock.
	Seed uint64
	// Progress, if set, is told the name of each step as it starts.
	Progress func(step string)
}

// Step is one check's outcome.
type Step struct {
	Name     string        `json:"name"`
	Bytes    int64         `json:"bytes"`
	Duration time.Duration `json:"-"`
	// Seconds is Duration, for JSON (every --json report gives times in
	// seconds).
	Seconds float64 `json:"seconds"`
	Err     string  `json:"error,omitempty"`
}

// Report is the outcome of a run: OK only if every step passed.
type Report struct {
	OK   bool   `json:"ok"`
	Seed uint64 `json:"seed"`
	// Interrupted says ctx ended the run: Steps holds the steps that
	// finished before it, and no step failed because of it.
	Interrupted bool   `json:"interrupted"`
	Steps       []Step `json:"steps"`
}

// fill writes the pattern for [off, off+len(b)) into b: each 8-byte word is
// a hash of the seed and its absolute offset, so any byte's expected value
// is known from where it is.
func fill(b []byte, off int64, seed uint64) {
	for i := 0; i < len(b); {
		pos := off + int64(i)
		word := pos &^ 7
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix(seed^uint64(word)))
		n := copy(b[i:], w[pos-word:])
		i += n
	}
}

func mix(x uint64) uint64 { // splitmix64 finalizer
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// compare checks got against the pattern (or zeroes when seed is nil) and
// names the first wrong byte.
func compare(got []byte, off int64, want func(b []byte, off int64)) error {
	exp := make([]byte, len(got))
	want(exp, off)
	for i := range got {
		if got[i] != exp[i] {
			return fmt.Errorf("mismatch at byte %d: got %#02x, want %#02x", off+int64(i), got[i], exp[i])
		}
	}
	return nil
}

func zeroes(b []byte, _ int64) { clear(b) }

// Run writes and checks patterns in the device's first opts.Size bytes.
// The device's previous contents there are overwritten.
func Run(ctx context.Context, d Device, opts Options) Report {
	size := opts.Size
	if size <= 0 {
		size = min(64<<20, d.Size())
	}
	bs := int64(d.BlockSize())
	size = size / bs * bs
	seed := opts.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rep := Report{OK: true, Seed: seed}
	rng := rand.New(rand.NewPCG(seed, 0x6e656172))
	step := func(name string, bytes int64, fn func() error) {
		if rep.Interrupted {
			return
		}
		if ctx.Err() != nil {
			rep.Interrupted, rep.OK = true, false
			return
		}
		if opts.Progress != nil {
			opts.Progress(name)
		}
		start := time.Now()
		err := fn()
		if err != nil && ctx.Err() != nil {
			// Stopped part-way: not a failure of the device.
			rep.Interrupted, rep.OK = true, false
			return
		}
		d := time.Since(start)
		s := Step{Name: name, Bytes: bytes, Duration: d, Seconds: d.Seconds()}
		if err != nil {
			s.Err = err.Error()
			rep.OK = false
		}
		rep.Steps = append(rep.Steps, s)
	}
	pat := func(b []byte, off int64) { fill(b, off, seed) }
	writeCheck := func(off int64, n int) error {
		b := make([]byte, n)
		pat(b, off)
		if _, err := d.WriteAt(b, off); err != nil {
			return fmt.Errorf("write %d bytes at %d: %w", n, off, err)
		}
		clear(b)
		if _, err := d.ReadAt(b, off); err != nil {
			return fmt.Errorf("read %d bytes at %d: %w", n, off, err)
		}
		return compare(b, off, pat)
	}
	randOff := func(n int64, align int64) int64 {
		if size <= n {
			return 0
		}
		return rng.Int64N((size-n)/align+1) * align
	}

	// 1. The whole region, in 128 KiB writes, then read back in 96 KiB reads
	// so read and write boundaries differ.
	step("sequential sweep", size, func() error {
		const wchunk = 128 << 10
		b := make([]byte, wchunk)
		for off := int64(0); off < size; off += wchunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(wchunk, size-off)
			pat(b[:n], off)
			if _, err := d.WriteAt(b[:n], off); err != nil {
				return fmt.Errorf("write at %d: %w", off, err)
			}
		}
		const rchunk = 96 << 10
		for off := int64(0); off < size; off += rchunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(rchunk, size-off)
			if _, err := d.ReadAt(b[:n], off); err != nil {
				return fmt.Errorf("read at %d: %w", off, err)
			}
			if err := compare(b[:n], off, pat); err != nil {
				return err
			}
		}
		return nil
	})
	// 2. Aligned transfers from one block up to sizes that need R2T and
	// several C2H PDUs, and past MDTS so the host must split.
	for _, n := range []int64{bs, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 3 << 20} {
		if n > size {
			continue
		}
		step(fmt.Sprintf("aligned %s", human(n)), n, func() error {
			return writeCheck(randOff(n, bs), int(n))
		})
	}
	// 3. Unaligned offsets and lengths (read-modify-write on the host).
	for _, n := range []int64{1, 3, 777, 5000, 70001} {
		if n+bs > size {
			continue
		}
		step(fmt.Sprintf("unaligned %d bytes", n), n, func() error {
			off := randOff(n+bs, 1)
			if err := writeCheck(off, int(n)); err != nil {
				return err
			}
			// Neighbours in the same blocks must keep their pattern.
			lo := off / bs * bs
			hi := min((off+n+bs-1)/bs*bs, size)
			b := make([]byte, hi-lo)
			if _, err := d.ReadAt(b, lo); err != nil {
				return err
			}
			return compare(b, lo, pat)
		})
	}
	// 4. Write Zeroes and Deallocate: the range reads as zeroes, neighbours
	// keep their data.
	deallocZero := false
	if z, ok := d.(zeroAfterDeallocate); ok {
		deallocZero = z.DeallocatedReadsZero()
	}
	for _, tc := range []struct {
		name   string
		op     func(ctx context.Context, off, n int64) error
		zeroes bool
	}{{"write zeroes", d.WriteZeroes, true}, {"deallocate", d.Deallocate, deallocZero}} {
		n := min(256*bs, size/4)
		step(tc.name, n, func() error {
			off := randOff(n+2*bs, bs) + bs
			if err := writeCheck(off-bs, int(n+2*bs)); err != nil {
				return err
			}
			if err := tc.op(ctx, off, n); err != nil {
				return err
			}
			b := make([]byte, n+2*bs)
			if _, err := d.ReadAt(b, off-bs); err != nil {
				return err
			}
			if err := compare(b[:bs], off-bs, pat); err != nil {
				return fmt.Errorf("block before the range: %w", err)
			}
			if tc.zeroes {
				if err := compare(b[bs:bs+n], off, zeroes); err != nil {
					return err
				}
			}
			if err := compare(b[bs+n:], off+n, pat); err != nil {
				return fmt.Errorf("block after the range: %w", err)
			}
			return nil
		})
	}
	// 5. Flush.
	step("flush", 0, func() error { return d.Flush(ctx) })
	return rep
}

func human(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
