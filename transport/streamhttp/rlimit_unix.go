//go:build unix

package streamhttp

import "syscall"

// openFileLimit is the process's soft limit on open files, or 0.
func openFileLimit() int {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil || l.Cur > 1<<30 {
		return 0
	}
	return int(l.Cur)
}
