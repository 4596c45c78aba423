//go:build !race

package tcp

import (
	"syscall"
	"unsafe"
)

// rawRead and rawWritev are read(2) and writev(2) on a non-blocking socket
// without the runtime's system call bookkeeping (entersyscall and
// exitsyscall): a socket that is not ready answers EAGAIN at once, so the
// call never blocks the thread. Skipping the bookkeeping saves its cost,
// and above all the wake-up of the runtime's monitor thread (sysmon) that
// the first system call after an idle spell makes: at queue depth 1 every
// round trip begins with such a call, on both ends.
func rawRead(fd uintptr, b []byte) (int, syscall.Errno) { return rawIO(syscall.SYS_READ, fd, b) }

// rawWritev is writev(2) of (at most maxIovecs of) bufs on a non-blocking
// socket, as rawRead; iov is its scratch vector, kept by the caller.
func rawWritev(fd uintptr, bufs [][]byte, iov *[]syscall.Iovec) (int, syscall.Errno) {
	v := (*iov)[:0]
	for _, b := range bufs[:min(len(bufs), maxIovecs)] {
		if len(b) > 0 {
			iv := syscall.Iovec{Base: &b[0]}
			iv.SetLen(len(b))
			v = append(v, iv)
		}
	}
	*iov = v
	if len(v) == 0 {
		return 0, 0
	}
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	clear(v) // no references to callers' memory outlive the call
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}

// rawIO makes the system call trap (read) on fd with b.
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
