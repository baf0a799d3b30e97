package machine

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A command name holding spaces and a ')'.
	b := []byte("4242 (a b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 7 3 5 1 20 0 1 0 100 1000 200\n")
	s, err := parseStat(4242, b)
	if err != nil || s.pid != 4242 || s.ppid != 17 || s.cpu != 7+3+5+1 {
		t.Fatalf("parseStat = %+v, %v; want ppid 17, cpu 16", s, err)
	}
	if _, err := parseStat(1, []byte("1 (x) S 0 1")); err == nil {
		t.Fatal("short stat accepted")
	}
}

// TestTree follows a shell's children, and keeps the CPU of a child that
// has exited in its parent's cutime.
func TestTree(t *testing.T) {
	// The burner runs as a child of the outer shell, which waits for it,
	// then starts a sleep that outlives it.
	cmd := exec.Command("sh", "-c", `sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'; sleep 5 & wait`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var s TreeSample
	for deadline := time.Now().Add(20 * time.Second); ; {
		var err error
		if s, err = Tree(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if len(s.Pids) >= 2 && s.CPU > 0 {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(s.Pids[1]) + "/comm"); string(b) == "sleep\n" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tree never showed the sleep with the burner's CPU: %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.Pids[0] != cmd.Process.Pid || slices.Contains(s.Pids[1:], cmd.Process.Pid) {
		t.Fatalf("pids %v: want the root first, once", s.Pids)
	}
	if own, _ := ProcCPU(cmd.Process.Pid); s.CPU <= own {
		t.Errorf("tree CPU %v not above the root's own %v: the reaped burner is missing", s.CPU, own)
	}
	if rss := RSS(s.Pids); rss <= 0 {
		t.Errorf("RSS %d", rss)
	}
	if _, err := Tree(1 << 30); err == nil {
		t.Error("Tree of a pid that does not exist succeeded")
	}
}
