//go:build linux

package volume

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerfdAlarm is an alarm on a non-blocking timerfd (CLOCK_MONOTONIC,
// the clock Go's monotonic time reads), read through the runtime's
// network poller: a goroutine waiting on it holds no thread, and the
// poller's epoll wakes when the timer expires.
type timerfdAlarm struct {
	fd int
	f  *os.File
}

// newAlarm returns a timerfd alarm.
func newAlarm() (alarm, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("volume: timerfd_create: %w", err)
	}
	// A non-blocking descriptor goes to the poller.
	return &timerfdAlarm{fd: fd, f: os.NewFile(uintptr(fd), "sim-timerfd")}, nil
}

func (a *timerfdAlarm) set(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	return unix.TimerfdSettime(a.fd, 0, &spec, nil)
}

// wait reads the expiration count (8 bytes), blocking in the poller until
// the timer has expired.
func (a *timerfdAlarm) wait() error {
	var b [8]byte
	n, err := a.f.Read(b[:])
	if err != nil {
		return err
	}
	if n != len(b) || binary.NativeEndian.Uint64(b[:]) == 0 {
		return fmt.Errorf("volume: timerfd read %d bytes", n)
	}
	return nil
}

func (a *timerfdAlarm) close() error { return a.f.Close() }
