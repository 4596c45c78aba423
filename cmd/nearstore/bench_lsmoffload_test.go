package main

import (
	"strings"
	"testing"
)

// TestBenchLSMOffloadFlags: an unknown or repeated mode is refused before
// any target starts. (tests/lsmoffload and bench/lsmbench run the modes.)
func TestBenchLSMOffloadFlags(t *testing.T) {
	for _, modes := range []string{"none,bogus", "none,none"} {
		_, err := runNearstore(t, "bench", "lsm", "--offload", modes)
		if err == nil || !strings.Contains(err.Error(), "offload mode") {
			t.Fatalf("--offload %s: %v; want it refused", modes, err)
		}
	}
}
