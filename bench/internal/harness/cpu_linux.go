package harness

import (
	"time"

	"golang.org/x/sys/unix"
)

// ThreadCPU returns the CPU time (user + system) the calling OS thread has
// used. The caller must have locked its goroutine to the thread.
func ThreadCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// ProcessCPU returns the CPU time (user + system) the whole process has
// used: all its threads, the Go runtime's included.
func ProcessCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
