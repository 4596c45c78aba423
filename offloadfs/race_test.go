//go:build race

package offloadfs_test

// raceEnabled trims the slowest tests under the race detector.
const raceEnabled = true
