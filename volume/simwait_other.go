//go:build !linux

package volume

import "errors"

// newAlarm has no kernel timer the poller watches outside Linux: sim
// volumes wait on the clock (waitUntil).
func newAlarm() (alarm, error) { return nil, errors.New("volume: no timerfd on this platform") }
