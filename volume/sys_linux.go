//go:build linux

package volume

import (
	"errors"
	"syscall"
	"unsafe"
)

// directSupported says O_DIRECT is available.
const directSupported = true

// oDirect is the open flag for direct I/O.
const oDirect = syscall.O_DIRECT

// fallocate modes from <linux/falloc.h>; package syscall does not name them.
const (
	fallocKeepSize  = 0x01 // FALLOC_FL_KEEP_SIZE
	fallocPunchHole = 0x02 // FALLOC_FL_PUNCH_HOLE
	fallocZeroRange = 0x10 // FALLOC_FL_ZERO_RANGE
)

// Block device ioctls from <linux/fs.h>.
const (
	ioctlBlkGetSize64 = 0x80081272 // BLKGETSIZE64: _IOR(0x12, 114, size_t)
	ioctlBlkSSZGet    = 0x1268     // BLKSSZGET: _IO(0x12, 104), logical sector size
)

// fallocate calls fallocate(2), retrying on EINTR.
func fallocate(fd uintptr, mode uint32, off, n int64) error {
	for {
		err := syscall.Fallocate(int(fd), mode, off, n)
		if err != syscall.EINTR {
			return err
		}
	}
}

// fallocUnsupported reports whether a fallocate error means "this mode does
// not work here" rather than a real failure: the file system or device lacks
// it (EOPNOTSUPP, ENOSYS, ENODEV), or rejects the range (EINVAL).
func fallocUnsupported(err error) bool {
	return errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) ||
		errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.EINVAL)
}

// isEINVAL reports whether err is EINVAL, which O_DIRECT returns for
// misaligned I/O.
func isEINVAL(err error) bool { return errors.Is(err, syscall.EINVAL) }

// sync calls fdatasync(2), retrying on EINTR: the size never changes, so
// data plus the allocation metadata needed to read it back is enough.
func (v *fileVolume) sync() error {
	var err error
	if cerr := v.rc.Control(func(fd uintptr) {
		for {
			err = syscall.Fdatasync(int(fd))
			if err != syscall.EINTR {
				return
			}
		}
	}); cerr != nil {
		return cerr
	}
	return err
}

// devSize returns a block device's size in bytes.
func devSize(fd uintptr) (int64, error) {
	var n uint64
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, ioctlBlkGetSize64, uintptr(unsafe.Pointer(&n))); e != 0 {
		return 0, e
	}
	return int64(n), nil
}

// devSectorSize returns a block device's logical sector size.
func devSectorSize(fd uintptr) (int, error) {
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, ioctlBlkSSZGet, uintptr(unsafe.Pointer(&n))); e != 0 {
		return 0, e
	}
	return int(n), nil
}
