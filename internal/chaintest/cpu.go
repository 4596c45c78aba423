package chaintest

import (
	"syscall"
	"testing"
	"time"
)

// CPUMeter measures the process's CPU time (user and system, every
// thread) across a benchmark's loop: on a shared machine it moves far
// less than wall time does.
type CPUMeter struct{ start time.Duration }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// StartCPU starts a meter; call it right after b.ResetTimer.
func StartCPU() CPUMeter { return CPUMeter{start: cpuNow()} }

// Report adds the CPU µs per operation to b's results ("cpu-µs/op").
func (m CPUMeter) Report(b *testing.B) {
	b.ReportMetric(float64(cpuNow()-m.start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
}
