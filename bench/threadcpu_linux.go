package bench

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time (user + system) the calling OS thread has
// used. The caller must have locked its goroutine to the thread.
func threadCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// processCPU returns the CPU time (user + system) the whole process has
// used: all its threads, the Go runtime's included.
func processCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
