package machine

import (
	"encoding/binary"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Orphans collects the processes that leave a measured process tree by
// losing their parent — a wrapper shell killed with its process group, a
// per-request child whose parent exited first — which the kernel would
// otherwise hand to init, taking their CPU time out of every tree.
// AdoptOrphans makes this process their child subreaper instead
// (PR_SET_CHILD_SUBREAPER): such a process becomes our child, and when it
// exits we reap it and keep its CPU time (its own and that of the children
// it reaped).
//
// Children started through Start are tracked and left to exec.Cmd.Wait;
// every other child of ours is an orphan. All methods work on a nil
// *Orphans, which adopts nothing.
type Orphans struct {
	self    int
	mu      sync.Mutex
	tracked map[int]bool
	reaped  time.Duration
	// reaperCPU is the CPU time the thread reaping on SIGCHLD has used.
	reaperCPU atomic.Int64
}

const prSetChildSubreaper = 36 // linux/prctl.h

// AdoptOrphans makes this process the child subreaper of its descendants,
// and reaps the orphans it adopts as they exit.
func AdoptOrphans() (*Orphans, error) {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return nil, e
	}
	o := &Orphans{self: os.Getpid(), tracked: map[int]bool{}}
	ch := make(chan os.Signal, 64)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		// A thread of its own, so that its CPU time can be told apart
		// from the rest of the process's (ReaperCPU); what the thread
		// used before it was locked to this goroutine was other
		// goroutines'.
		runtime.LockOSThread()
		threadCPU := func() int64 {
			var ru syscall.Rusage
			if syscall.Getrusage(rusageThread, &ru) != nil {
				return 0
			}
			return ru.Utime.Nano() + ru.Stime.Nano()
		}
		base := threadCPU()
		for range ch {
			o.reapExited()
			o.reaperCPU.Store(threadCPU() - base)
		}
	}()
	return o, nil
}

const rusageThread = 1 // RUSAGE_THREAD

// ReaperCPU returns the CPU time spent reaping orphans as they exit, part of
// SelfCPU: a few system calls per SIGCHLD, which are not what a benchmark's
// client costs, and which a server that spawns a process per request would
// add to it.
func (o *Orphans) ReaperCPU() time.Duration {
	if o == nil {
		return 0
	}
	return time.Duration(o.reaperCPU.Load())
}

// Start starts cmd and tracks it, so that its exit is left to cmd.Wait.
func (o *Orphans) Start(cmd *exec.Cmd) error {
	if o == nil {
		return cmd.Start()
	}
	o.mu.Lock() // no Reap between the fork and tracking
	defer o.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	o.tracked[cmd.Process.Pid] = true
	return nil
}

// Untrack forgets a started process once cmd.Wait has returned.
func (o *Orphans) Untrack(pid int) {
	if o == nil {
		return
	}
	o.mu.Lock()
	delete(o.tracked, pid)
	o.mu.Unlock()
}

// adopted returns our children that Start did not start. Called with mu held.
func (o *Orphans) adopted(procs []procStat) []procStat {
	var out []procStat
	for _, p := range procs {
		if p.ppid == o.self && !o.tracked[p.pid] {
			out = append(out, p)
		}
	}
	return out
}

// reapLocked waits for the adopted children that have exited. Called with
// mu held.
func (o *Orphans) reapLocked(procs []procStat) {
	for _, p := range o.adopted(procs) {
		if p.state != 'Z' {
			continue
		}
		var ru syscall.Rusage
		if pid, err := syscall.Wait4(p.pid, nil, syscall.WNOHANG, &ru); err == nil && pid == p.pid {
			o.reaped += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
}

// reapExited reaps the adopted children that have exited without reading
// /proc, which would cost a few ms per SIGCHLD: waitid(P_ALL, WNOWAIT)
// names an exited child without reaping it, and one of ours that Start
// started stops the loop, to be reaped by its exec.Cmd.Wait. A child it
// does not reach is reaped by the next call, or by Sample or Drain.
func (o *Orphans) reapExited() {
	for {
		var info [128]byte // siginfo_t; si_pid is at offset 16 on 64-bit Linux
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info[0])),
			syscall.WEXITED|syscall.WNOHANG|wNoWait, 0, 0)
		pid := int(int32(binary.NativeEndian.Uint32(info[16:])))
		if e != 0 || pid <= 0 {
			return
		}
		o.mu.Lock()
		if o.tracked[pid] {
			o.mu.Unlock()
			return
		}
		var ru syscall.Rusage
		if wpid, err := syscall.Wait4(pid, nil, syscall.WNOHANG, &ru); err == nil && wpid == pid {
			o.reaped += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		o.mu.Unlock()
	}
}

const (
	pAll    = 0          // P_ALL
	wNoWait = 0x01000000 // WNOWAIT
)

// Reap waits for the adopted children that have exited and keeps their
// CPU time.
func (o *Orphans) Reap() {
	if o == nil {
		return
	}
	procs, err := readProcs()
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reapLocked(procs)
}

// Sample returns the CPU time of every orphan adopted so far: those reaped,
// and the live ones with their descendants; and the pids of the live ones
// and their descendants.
func (o *Orphans) Sample() (time.Duration, []int) {
	if o == nil {
		return 0, nil
	}
	procs, err := readProcs()
	if err != nil {
		return 0, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reapLocked(procs)
	cpu := o.reaped
	var pids []int
	for _, p := range o.adopted(procs) {
		if p.state == 'Z' {
			continue // exited since readProcs: its CPU is lost to this sample only
		}
		if t, err := tree(procs, p.pid); err == nil {
			cpu += t.CPU
			pids = append(pids, t.Pids...)
		}
	}
	return cpu, pids
}

// Drain waits up to grace for the live orphans to exit, then kills them
// (SIGKILL) and reaps them. It returns how many it killed.
func (o *Orphans) Drain(grace time.Duration) (killed int) {
	if o == nil {
		return 0
	}
	deadline := time.Now().Add(grace)
	signalled := map[int]bool{}
	for {
		procs, err := readProcs()
		if err != nil {
			return killed
		}
		o.mu.Lock()
		o.reapLocked(procs)
		var live []int
		for _, p := range o.adopted(procs) {
			if p.state != 'Z' {
				live = append(live, p.pid)
			}
		}
		if len(live) > 0 && time.Now().After(deadline) {
			for _, pid := range live {
				if !signalled[pid] && syscall.Kill(pid, syscall.SIGKILL) == nil {
					signalled[pid] = true
					killed++
				}
			}
		}
		o.mu.Unlock()
		if len(live) == 0 {
			return killed
		}
		time.Sleep(10 * time.Millisecond)
	}
}
