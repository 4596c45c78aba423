//go:build !linux

package harness

import "errors"

// SnapshotTCP needs Linux's sock_diag; elsewhere it fails and reports
// give no network bytes.
func SnapshotTCP([]int) (TCPSnapshot, error) {
	return nil, errors.New("bench: TCP socket counters need Linux (sock_diag)")
}
