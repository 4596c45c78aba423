//go:build unix && !linux

package proc

import (
	"errors"
	"syscall"
)

// childAttr puts a child in its own process group, so that killing the
// group takes its children too.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// Pin is not supported here.
func Pin(string) (int, error) {
	return 0, errors.New("bench: pinning is only supported on Linux")
}
