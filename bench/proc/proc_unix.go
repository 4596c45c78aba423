//go:build unix

package proc

import (
	"errors"
	"os"
	"syscall"
)

const sigTerm = syscall.SIGTERM

// signalGroup sends sig to p's process group (p leads it: see childAttr).
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if p == nil {
		return nil
	}
	err := syscall.Kill(-p.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// killGroup kills p's process group.
func killGroup(p *os.Process) error { return signalGroup(p, syscall.SIGKILL) }
