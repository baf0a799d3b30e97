//go:build !unix

package client

import (
	"os/exec"
	"syscall"
)

// ownGroup leaves cmd as it is: process groups are a Unix notion.
func ownGroup(*exec.Cmd) {}

// signalGroup signals cmd's process alone.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error { return cmd.Process.Signal(sig) }

// groupAlive is false: without groups there is nothing left to stop.
func groupAlive(*exec.Cmd) bool { return false }
