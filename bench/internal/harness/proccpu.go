package harness

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// ProcCPU returns a process's user + system CPU time from
// /proc/PID/stat ("self" for this process).
func ProcCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: CPU time: %w", err)
	}
	return parseProcStatCPU(b)
}

// parseProcStatCPU reads utime and stime, fields 14 and 15, counting
// after the command name (field 2, which may hold spaces and parens).
func parseProcStatCPU(b []byte) (time.Duration, error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: /proc stat %q", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is f[11], stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc stat has %d fields", len(f)+2)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("bench: /proc stat: %w", err)
	}
	return time.Duration(ut+st) * clockTick, nil
}
