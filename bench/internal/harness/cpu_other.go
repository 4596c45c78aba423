//go:build !linux

package harness

import "time"

// ThreadCPU is not available here: runs report wall time only.
func ThreadCPU() (time.Duration, bool) { return 0, false }

// ProcessCPU is not available here either.
func ProcessCPU() (time.Duration, bool) { return 0, false }
