//go:build !race

package tcp

import (
	"syscall"
	"unsafe"
)

// rawRead and rawWrite are read(2) and write(2) on a non-blocking socket
// without the runtime's system call bookkeeping (entersyscall and
// exitsyscall): a socket that is not ready answers EAGAIN at once, so the
// call never blocks the thread. Skipping the bookkeeping saves its cost,
// and above all the wake-up of the runtime's monitor thread (sysmon) that
// the first system call after an idle spell makes: at queue depth 1 every
// round trip begins with such a call, on both ends.
func rawRead(fd uintptr, b []byte) (int, syscall.Errno) { return rawIO(syscall.SYS_READ, fd, b) }

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) { return rawIO(syscall.SYS_WRITE, fd, b) }

// rawIO makes the read or write system call trap on fd with b.
func rawIO(trap, fd uintptr, b []byte) (int, syscall.Errno) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	n, _, errno := syscall.RawSyscall(trap, fd, uintptr(p), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}
