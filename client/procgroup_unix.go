//go:build unix

package client

import (
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in a process group of its own, so that a stop
// reaches what it started too: a server launched through npx, uvx or a
// shell is a tree of processes, and signalling its root alone leaves the
// rest running, holding its pipes open.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup signals the process group cmd leads.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
		return cmd.Process.Signal(sig)
	}
	return nil
}

// groupAlive reports whether any process of cmd's group still runs.
func groupAlive(cmd *exec.Cmd) bool {
	return cmd.Process != nil && syscall.Kill(-cmd.Process.Pid, 0) == nil
}
