//go:build race

package tcp

import "syscall"

// Under the race detector rawRead and rawWrite are syscall.Read and
// syscall.Write, and rawWritev writes its first non-empty buffer with
// syscall.Write (one system call per buffer): those tell the detector that what one end writes to a
// socket happens before what the other end reads from it, which raw system
// calls would hide (goroutines that synchronize through a connection would
// be reported racing).

func rawRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return n, errnoOf(err)
}

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	return n, errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return syscall.EIO
}

func rawWritev(fd uintptr, bufs [][]byte, _ *[]syscall.Iovec) (int, syscall.Errno) {
	for _, b := range bufs {
		if len(b) > 0 {
			return rawWrite(fd, b)
		}
	}
	return 0, 0
}
