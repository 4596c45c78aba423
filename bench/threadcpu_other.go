//go:build !linux

package bench

import "time"

// threadCPU is not available here: runs report wall time only.
func threadCPU() (time.Duration, bool) { return 0, false }

func processCPU() (time.Duration, bool) { return 0, false }
