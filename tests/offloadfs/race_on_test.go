//go:build race

package offloadfs_test

// raceEnabled: the race detector slows everything down several times,
// so the race test widens its delays to keep the same overlaps.
const raceEnabled = true
