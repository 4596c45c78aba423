//go:build !unix

package proc

import (
	"errors"
	"os"
	"syscall"
)

const sigTerm = syscall.SIGTERM

func childAttr() *syscall.SysProcAttr { return nil }

// signalGroup kills p: without process groups, that is all we can do.
func signalGroup(p *os.Process, _ syscall.Signal) error {
	if p == nil {
		return nil
	}
	return p.Kill()
}

func killGroup(p *os.Process) error { return signalGroup(p, syscall.SIGKILL) }

// Pin is not supported here.
func Pin(string) (int, error) {
	return 0, errors.New("bench: pinning is only supported on Linux")
}
