// Package machine reads CPU accounting from /proc, so that benchmarks can
// charge CPU time to processes and notice other load on the machine.
package machine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcCPU returns the user+system CPU time a process has used, from
// /proc/<pid>/stat (all its threads).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses; fields resume after
	// the last ')'. f[0] is field 3 (state), so utime and stime (fields 14
	// and 15) are f[11] and f[12].
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / time.Duration(ClockTicks), nil
}

// ClockTicks is sysconf(_SC_CLK_TCK), the unit of /proc/<pid>/stat times.
// glibc reads it from the AT_CLKTCK auxiliary vector entry, as we do here
// without cgo; 100 is the fallback glibc uses too.
var ClockTicks = func() int64 {
	const atClkTck = 17
	b, err := os.ReadFile("/proc/self/auxv")
	for ; err == nil && len(b) >= 16; b = b[16:] { // 64-bit (type, value) pairs
		if binary.NativeEndian.Uint64(b) == atClkTck {
			if v := int64(binary.NativeEndian.Uint64(b[8:])); v > 0 {
				return v
			}
		}
	}
	return 100
}()

// SelfCPU returns the user+system CPU time of this process.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// SysBusy returns the CPU time all CPUs together have spent not idle, from
// the first line of /proc/stat.
func SysBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal guest…
	if len(f) < 9 {
		return 0, errors.New("short /proc/stat")
	}
	var ticks int64
	for i, s := range f[1:9] { // guest time is already counted in user
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		if i != 3 && i != 4 { // idle, iowait
			ticks += v
		}
	}
	return time.Duration(ticks) * time.Second / time.Duration(ClockTicks), nil
}

// WaitIdle returns once the machine has used less than maxCPU CPUs over a
// window of length window, or after giveUp. The benchmark shares the machine
// with builds and tests, which would skew both throughput and CPU figures.
func WaitIdle(window time.Duration, maxCPU float64, giveUp time.Duration) (waited time.Duration, idle bool) {
	t0 := time.Now()
	for {
		b0, err0 := SysBusy()
		time.Sleep(window)
		b1, err1 := SysBusy()
		if err0 != nil || err1 != nil {
			return time.Since(t0), false
		}
		if used := (b1 - b0).Seconds() / window.Seconds(); used < maxCPU {
			return time.Since(t0), true
		}
		if time.Since(t0) > giveUp {
			return time.Since(t0), false
		}
	}
}
