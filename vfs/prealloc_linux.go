package vfs

import (
	"errors"
	"os"
	"syscall"
)

// fallocKeepSize is FALLOC_FL_KEEP_SIZE: reserve without changing the
// size.
const fallocKeepSize = 1

// preallocate reserves blocks with fallocate(2); file systems that cannot
// (EOPNOTSUPP) are fine without.
func preallocate(f *os.File, off, length int64) error {
	if length <= 0 {
		return nil
	}
	for {
		err := syscall.Fallocate(int(f.Fd()), fallocKeepSize, off, length)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOSYS):
			return nil
		case err != nil:
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
		return nil
	}
}
