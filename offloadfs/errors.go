package offloadfs

import (
	"errors"
	"syscall"
)

// Errors returned by the file system. The errors actually returned wrap
// them (usually in an *fs.PathError naming the operation and path); test
// with errors.Is. Lookups of missing names return fs.ErrNotExist, creations
// of existing ones fs.ErrExist, operations on closed files or a closed file
// system fs.ErrClosed, and writes through read-only handles
// fs.ErrPermission, all from io/fs, so callers written against the os
// package keep working.
var (
	// ErrCorrupt means metadata failed its checksum or its structural
	// checks. Mount, Fsck and lookups report it; nothing is repaired
	// silently.
	ErrCorrupt = errors.New("offloadfs: corrupt metadata")
	// ErrNotFormatted means the device carries no offloadfs superblock.
	ErrNotFormatted = errors.New("offloadfs: no file system on the device")
	// ErrFailed means a device error interrupted a metadata commit. The
	// file system refuses further changes; the journal holds every
	// committed change, so unmount and mount again.
	ErrFailed = errors.New("offloadfs: file system failed after a device error; remount it")

	// ErrNoSpace means the device has no free blocks (or no free inodes)
	// for the request. The request changed nothing.
	ErrNoSpace error = &sysError{"offloadfs: no space left on device", syscall.ENOSPC}
	// ErrNotDir means a path went through something that is not a
	// directory, or a directory operation named a file.
	ErrNotDir error = &sysError{"offloadfs: not a directory", syscall.ENOTDIR}
	// ErrIsDir means a file operation named a directory.
	ErrIsDir error = &sysError{"offloadfs: is a directory", syscall.EISDIR}
	// ErrNotEmpty means Remove or Rename would discard a non-empty
	// directory.
	ErrNotEmpty error = &sysError{"offloadfs: directory not empty", syscall.ENOTEMPTY}
	// ErrNameTooLong means a path component exceeds MaxNameLen bytes.
	ErrNameTooLong error = &sysError{"offloadfs: file name too long", syscall.ENAMETOOLONG}
	// ErrReadOnly means a change was asked of a read-only mount.
	ErrReadOnly error = &sysError{"offloadfs: read-only file system", syscall.EROFS}
)

// sysError is a sentinel that also matches its errno, so code written
// for the os package (errors.Is(err, syscall.ENOSPC)) works unchanged.
type sysError struct {
	msg   string
	errno syscall.Errno
}

func (e *sysError) Error() string { return e.msg }

// Is matches the errno and whatever the errno itself matches (fs.ErrExist
// and friends).
func (e *sysError) Is(target error) bool { return target == e.errno || e.errno.Is(target) }
