package offloadfs_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// The data-path benchmarks run the same I/O pattern against the raw device
// and against one offloadfs file on an identical device, so the ratio is
// the file system's overhead.

const benchRegion = 256 << 20

// benchTarget is something to do I/O on: the raw device, or a file.
type benchTarget interface {
	io.ReaderAt
	io.WriterAt
}

// benchTargets returns the raw device and a file of benchRegion bytes
// (written once, so the device's memory is allocated in both cases).
func benchTargets(b *testing.B) map[string]benchTarget {
	raw := testfs.Device(b, "mem:512MiB")
	fsys := testfs.New(b, "mem:512MiB")
	f, err := fsys.Create("bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	buf := make([]byte, 1<<20)
	for off := int64(0); off < benchRegion; off += int64(len(buf)) {
		if _, err := raw.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	m, _ := f.Extents()
	b.Logf("bench file: %d extents", len(m.Extents))
	return map[string]benchTarget{"raw": raw, "offloadfs": f}
}

func benchIO(b *testing.B, size int, random, write bool) {
	targets := benchTargets(b)
	for _, name := range []string{"raw", "offloadfs"} {
		t := targets[name]
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, size)
			r := rand.New(rand.NewPCG(1, 2))
			slots := int64(benchRegion / size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := range b.N {
				slot := int64(i) % slots
				if random {
					slot = r.Int64N(slots)
				}
				var err error
				if write {
					_, err = t.WriteAt(buf, slot*int64(size))
				} else {
					_, err = t.ReadAt(buf, slot*int64(size))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSeqWrite1M(b *testing.B)  { benchIO(b, 1<<20, false, true) }
func BenchmarkSeqRead1M(b *testing.B)   { benchIO(b, 1<<20, false, false) }
func BenchmarkRandWrite4K(b *testing.B) { benchIO(b, 4096, true, true) }
func BenchmarkRandRead4K(b *testing.B)  { benchIO(b, 4096, true, false) }

// BenchmarkRandRead4KParallel reads one file from several goroutines.
func BenchmarkRandRead4KParallel(b *testing.B) {
	targets := benchTargets(b)
	for _, name := range []string{"raw", "offloadfs"} {
		t := targets[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(4096)
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 4096)
				r := rand.New(rand.NewPCG(rand.Uint64(), 2))
				for pb.Next() {
					if _, err := t.ReadAt(buf, r.Int64N(benchRegion/4096)*4096); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkAppend1M appends to fresh files: allocation included.
func BenchmarkAppend1M(b *testing.B) {
	fsys := testfs.New(b, "mem:1GiB")
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	var f *offloadfs.File
	for i := range b.N {
		if i%128 == 0 {
			if f != nil {
				f.Close()
				fsys.Remove(f.Name())
			}
			var err error
			if f, err = fsys.Create(fmt.Sprintf("f%d", i/128%2)); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	f.Close()
}

// BenchmarkCreateSync creates a small file and commits it, each time.
func BenchmarkCreateSync(b *testing.B) { benchCreate(b, true) }

// BenchmarkCreate creates small files without syncing (group commit).
func BenchmarkCreate(b *testing.B) { benchCreate(b, false) }

// benchCreate creates 4 KiB files, in a directory of 2000 at most,
// committing each (sync) or all at the end.
func benchCreate(b *testing.B, sync bool) {
	fsys := testfs.New(b, "mem:512MiB")
	if err := fsys.Mkdir("d"); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 4096)
	b.ResetTimer()
	for i := range b.N {
		f, err := fsys.Create(fmt.Sprintf("d/%d", i%2000))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			b.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		f.Close()
	}
	if sync {
		return
	}
	if err := fsys.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStat stats files in a directory of 1000.
func BenchmarkStat(b *testing.B) {
	fsys := testfs.New(b, "mem:512MiB")
	for i := range 1000 {
		f, err := fsys.Create(fmt.Sprintf("f%04d", i))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := fsys.Stat(fmt.Sprintf("f%04d", i%1000)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRatio alternates batches of the same I/O on the raw device and
// on the file, so load from elsewhere on the machine hits both alike, and
// reports each side's time per operation and their ratio (fs/raw: 1.00 is
// no overhead).
func BenchmarkRatio(b *testing.B) {
	targets := benchTargets(b)
	raw, file := targets["raw"], targets["offloadfs"]
	for _, tc := range []struct {
		name          string
		size          int
		random, write bool
	}{
		{"seqwrite1M", 1 << 20, false, true},
		{"seqread1M", 1 << 20, false, false},
		{"randwrite4K", 4096, true, true},
		{"randread4K", 4096, true, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, tc.size)
			slots := int64(benchRegion / tc.size)
			const batch = 32
			var spent [2]time.Duration
			var pos [2]int64
			r := rand.New(rand.NewPCG(3, 4))
			run := func(side int, t benchTarget, n int) {
				start := time.Now()
				for range n {
					slot := pos[side] % slots
					pos[side]++
					if tc.random {
						slot = r.Int64N(slots)
					}
					var err error
					if tc.write {
						_, err = t.WriteAt(buf, slot*int64(tc.size))
					} else {
						_, err = t.ReadAt(buf, slot*int64(tc.size))
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				spent[side] += time.Since(start)
			}
			b.SetBytes(int64(tc.size))
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				n := min(batch, b.N-done)
				run(0, raw, n)
				run(1, file, n)
			}
			ops := float64(b.N)
			b.ReportMetric(float64(spent[0].Nanoseconds())/ops, "raw-ns/op")
			b.ReportMetric(float64(spent[1].Nanoseconds())/ops, "fs-ns/op")
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "fs/raw")
		})
	}
}
