package volume

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const benchSize = 64 << 20

// benchRead4K does random 4 KiB-aligned reads of 4 KiB from v.
func benchRead4K(b *testing.B, v Volume) {
	buf := alignedBuf(4096, 4096)
	for off := int64(0); off < v.Size(); off += 1 << 20 {
		if _, err := v.WriteAt(buf, off); err != nil { // make sure the data exists
			b.Fatal(err)
		}
	}
	blocks := v.Size() / 4096
	rng := rand.New(rand.NewPCG(1, 1))
	b.SetBytes(4096)
	b.ResetTimer()
	for b.Loop() {
		if _, err := v.ReadAt(buf, rng.Int64N(blocks)*4096); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMemReadAt4K(b *testing.B) {
	benchRead4K(b, openTest(b, fmt.Sprintf("mem:%d", benchSize)))
}

func BenchmarkFileReadAt4K(b *testing.B) {
	for _, q := range []string{"", "&direct=1"} {
		b.Run("direct="+fmt.Sprint(q != ""), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "vol.img")
			benchRead4K(b, openTest(b, fmt.Sprintf("file:%s?size=%d%s", path, benchSize, q)))
		})
	}
}

// benchSim measures what a sim volume achieves at queue depth qd (qd
// goroutines issuing random 4 KiB reads back to back) and reports mean,
// median and 99th percentile latency and the throughput, to compare with the
// model's. The median shows the wait's accuracy; the mean and tail also show
// whatever else competes for the CPU.
//
// spin makes the volume wait on the clock (waitUntil, the wait of
// platforms without an alarm) instead of its alarm, for comparison.
func benchSim(b *testing.B, spec string, qd int, spin bool) {
	v := openTest(b, spec)
	if sv := v.(*simVolume); spin && sv.waiter != nil {
		sv.waiter.close()
		sv.waiter = nil
	}
	blocks := v.Size() / 4096
	lats := make([][]time.Duration, qd)
	var issued atomic.Int64
	var wg sync.WaitGroup
	b.SetBytes(4096)
	b.ResetTimer()
	start := time.Now()
	cpu0 := processCPU(b)
	for g := range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			buf := make([]byte, 4096)
			for issued.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if _, err := v.ReadAt(buf, rng.Int64N(blocks)*4096); err != nil {
					b.Error(err)
					break
				}
				lats[g] = append(lats[g], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	all := slices.Concat(lats...)
	slices.Sort(all)
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(sum)/float64(len(all)), "µs/op")
	b.ReportMetric(us(all[len(all)/2]), "p50-µs")
	b.ReportMetric(us(all[len(all)*99/100]), "p99-µs")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "IOPS")
	// The process's CPU per read: the wait's cost (the issuing goroutines
	// and the copy are a few µs).
	b.ReportMetric(us(cpu)/float64(len(all)), "cpu-µs/op")
}

// processCPU returns the CPU time (user + system) the test process has
// used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkSimNAND(b *testing.B) { benchSimDepths(b, "nand") }

func BenchmarkSimOptane(b *testing.B) { benchSimDepths(b, "optane") }

func benchSimDepths(b *testing.B, profile string) {
	for _, qd := range []int{1, 32, 128} {
		for _, wait := range []string{"alarm", "spin"} {
			b.Run(fmt.Sprintf("qd%d/wait=%s", qd, wait), func(b *testing.B) {
				benchSim(b, fmt.Sprintf("sim:%s:%d", profile, benchSize), qd, wait == "spin")
			})
		}
	}
}
