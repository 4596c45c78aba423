//go:build !race

package offloadfs_test

const raceEnabled = false
