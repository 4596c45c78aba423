package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// childAttr puts a child in its own process group, so that killing the
// group takes its children too, and has the kernel kill it if we die.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Pin restricts every thread of this process to the CPUs in list
// (taskset syntax: "0", "0-1", "0,2"). Threads created later inherit the
// mask from the thread that creates them, so the whole process stays
// pinned. It does not change GOMAXPROCS; it returns how many CPUs the
// list names, for a caller that wants to.
func Pin(list string) (int, error) {
	cpus, err := parseCPUList(list)
	if err != nil {
		return 0, err
	}
	var mask [16]uint64 // 1024 CPUs, as glibc's cpu_set_t
	for _, c := range cpus {
		if c >= len(mask)*64 {
			return 0, fmt.Errorf("bench: CPU %d out of range", c)
		}
		mask[c/64] |= 1 << (c % 64)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("bench: pinning: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask)))
		if e != 0 && e != syscall.ESRCH {
			return 0, fmt.Errorf("bench: pinning thread %d to CPUs %s: %w", tid, list, e)
		}
	}
	return len(cpus), nil
}

// parseCPUList reads a CPU list in taskset's syntax.
func parseCPUList(list string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if isRange && err == nil {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a {
			return nil, fmt.Errorf("bench: bad CPU list %q", list)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
