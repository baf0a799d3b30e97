package machine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// procStat is what Tree reads of one process's /proc/<pid>/stat.
type procStat struct {
	pid, ppid int
	state     byte // R, S, Z…
	// cpu is utime+stime+cutime+cstime in clock ticks: the process's own
	// threads and those of its children it has waited for, which is where
	// a child's CPU goes when it exits and is reaped.
	cpu int64
}

// parseStat parses the fields of /proc/<pid>/stat that Tree needs.
func parseStat(pid int, b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	// The command name may hold spaces and parentheses; fields resume after
	// the last ')'. f[0] is field 3 (state), so ppid (field 4) is f[1] and
	// utime, stime, cutime, cstime (fields 14 to 17) are f[11] to f[14].
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	s := procStat{pid: pid, state: f[0][0]}
	var err error
	if s.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, err
	}
	for _, v := range f[11:15] {
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return procStat{}, err
		}
		s.cpu += t
	}
	return s, nil
}

// TreeSample is one reading of a process and all its live descendants.
type TreeSample struct {
	// Pids is the root first, then its descendants (parents before children).
	Pids []int
	// CPU is the user+system time of every process in the tree, plus what
	// their exited children used, once reaped (cutime+cstime). A descendant
	// whose parent exits first is reparented out of the tree and its CPU is
	// lost to the sample.
	CPU time.Duration
}

// readProcs reads /proc/<pid>/stat of every process, skipping those that
// exit meanwhile.
func readProcs() ([]procStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	procs := make([]procStat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		if s, err := parseStat(pid, b); err == nil {
			procs = append(procs, s)
		}
	}
	return procs, nil
}

// Tree walks /proc and returns root and every live process descending from
// it (by parent pid), with their CPU time. It fails only when root itself
// cannot be read: processes that exit during the walk are skipped.
func Tree(root int) (TreeSample, error) {
	procs, err := readProcs()
	if err != nil {
		return TreeSample{}, err
	}
	return tree(procs, root)
}

func tree(procs []procStat, root int) (TreeSample, error) {
	children := map[int][]procStat{}
	var rootStat *procStat
	for i, s := range procs {
		if s.pid == root {
			rootStat = &procs[i]
			continue
		}
		children[s.ppid] = append(children[s.ppid], s)
	}
	if rootStat == nil {
		return TreeSample{}, fmt.Errorf("process %d: %w", root, os.ErrNotExist)
	}
	t := TreeSample{Pids: []int{root}}
	ticks := rootStat.cpu
	for i := 0; i < len(t.Pids); i++ {
		for _, c := range children[t.Pids[i]] {
			t.Pids = append(t.Pids, c.pid)
			ticks += c.cpu
		}
	}
	t.CPU = time.Duration(ticks) * time.Second / time.Duration(ClockTicks)
	return t, nil
}

// RSS returns the resident set sizes (VmRSS of /proc/<pid>/status) of pids
// summed, in bytes. Pages shared between the processes (libraries, a
// forked parent's) count once per process. Processes that have exited, or
// have no VmRSS (zombies), count 0.
func RSS(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		kb, err := vmRSS(pid)
		if err == nil {
			sum += kb << 10
		}
	}
	return sum
}

// vmRSS returns VmRSS of /proc/<pid>/status in KiB.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "1234 kB"
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("bad VmRSS line %q", line)
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, errors.New("no VmRSS")
}
