package lambda

import (
	"context"
	"fmt"
	"testing"

	"github.com/nearstore/nearstore/functions"
)

// BenchmarkRead reads a 32 MiB file of u64s with stats64 in 1 MiB λ reads,
// in each mode, with a cold and a warm host cache, on loopback: how the
// dispatcher (lambda) compares with the better of K and T.
func BenchmarkRead(b *testing.B) {
	const size, chunk = 32 << 20, 1 << 20
	for _, warm := range []float64{0, 1} {
		for _, mode := range []Mode{Buffered, Host, Target, Auto} {
			b.Run(fmt.Sprintf("warm=%v/%v", warm, mode), func(b *testing.B) {
				e := newEnv(b, envConfig{})
				ctx := context.Background()
				data := u64s(size)
				f := e.file("bench", data)
				c := e.d.Cache()
				fn := e.fns["stats64"]
				b.SetBytes(size)
				for b.Loop() {
					b.StopTimer()
					if err := c.Drop(ctx); err != nil {
						b.Fatal(err)
					}
					if err := c.Warm(ctx, f, warm, false, 0); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					for off := int64(0); off < size; off += chunk {
						if _, err := e.d.Read(ctx, mode, ReadCall{File: f, Fn: fn, Off: off, N: chunk, OutCap: functions.StatsSize}); err != nil {
							b.Fatal(err)
						}
					}
				}
				st := e.d.Stats()
				b.ReportMetric(float64(st.Ran[Host]), "host-runs")
				b.ReportMetric(float64(st.Ran[Target]), "target-runs")
				b.ReportMetric(float64(st.Profiled), "profiled")
			})
		}
	}
}
