//go:build !linux

package volume

import "errors"

// directSupported says O_DIRECT is available; only Linux has it here.
const directSupported = false

// oDirect is never used where direct I/O is unsupported.
const oDirect = 0

// fallocate modes; the values only matter on Linux.
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

// fallocate is not implemented here, so zeroing falls back to writing
// zeroes.
func fallocate(fd uintptr, mode uint32, off, n int64) error { return errors.ErrUnsupported }

func fallocUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }

func isEINVAL(err error) bool { return false }

// sync makes the file durable with fsync, the portable call.
func (v *fileVolume) sync() error { return v.f.Sync() }

func devSize(fd uintptr) (int64, error) { return 0, errors.ErrUnsupported }

func devSectorSize(fd uintptr) (int, error) { return 0, errors.ErrUnsupported }
