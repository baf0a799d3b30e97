package machine

import (
	"os/exec"
	"testing"
	"time"
)

// TestOrphans adopts a background shell whose parent exits at once, and
// keeps its CPU time once it exits.
func TestOrphans(t *testing.T) {
	o, err := AdoptOrphans()
	if err != nil {
		t.Skip("no PR_SET_CHILD_SUBREAPER:", err)
	}
	before, _ := o.Sample()
	burn := `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`
	cmd := exec.Command("sh", "-c", "sh -c '"+burn+"' & exit 0")
	if err := o.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	o.Untrack(cmd.Process.Pid)
	for deadline := time.Now().Add(20 * time.Second); ; {
		cpu, live := o.Sample()
		if len(live) == 0 && cpu > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan never reaped with its CPU: cpu %v, live %v", cpu-before, live)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A live orphan is killed by Drain.
	cmd = exec.Command("sh", "-c", "sleep 30 & exit 0")
	if err := o.Start(cmd); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	o.Untrack(cmd.Process.Pid)
	if _, live := o.Sample(); len(live) != 1 {
		t.Fatalf("live orphans %v, want the sleep", live)
	}
	if n := o.Drain(50 * time.Millisecond); n != 1 {
		t.Errorf("Drain killed %d, want 1", n)
	}
	if _, live := o.Sample(); len(live) != 0 {
		t.Errorf("live orphans after Drain: %v", live)
	}
}
