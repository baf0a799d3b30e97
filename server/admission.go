package server

import "sync"

// admission bounds how many tool handlers run at once. A call past the
// limit waits in a bounded FIFO queue, holding no goroutine; a call past the
// queue bound is refused at once. A handler goroutine that finishes picks up
// the next queued call itself, so the number of handler goroutines never
// exceeds the limit.
type admission struct {
	mu       sync.Mutex
	limit    int
	maxQueue int
	running  int
	queue    []*inflight
}

type admitDecision uint8

const (
	admitRun admitDecision = iota + 1
	admitQueued
	admitRefused
)

func newAdmission(limit, maxQueue int) *admission {
	return &admission{limit: limit, maxQueue: maxQueue}
}

func (a *admission) admit(r *inflight) admitDecision {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.running < a.limit:
		a.running++
		return admitRun
	case len(a.queue) < a.maxQueue:
		r.queued = true
		a.queue = append(a.queue, r)
		return admitQueued
	}
	return admitRefused
}

// next hands the caller's slot to the oldest queued call, or frees the slot
// and returns nil when none is waiting.
func (a *admission) next() *inflight {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) > 0 {
		r := a.queue[0]
		a.queue[0] = nil
		a.queue = a.queue[1:]
		r.queued = false
		return r
	}
	a.running--
	return nil
}

// remove takes a call out of the queue; it reports false if the call was not
// waiting (it is running, or already gone).
func (a *admission) remove(r *inflight) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !r.queued {
		return false
	}
	for i, q := range a.queue {
		if q == r {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			r.queued = false
			return true
		}
	}
	return false
}

// load reports the calls running and waiting.
func (a *admission) load() (running, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, len(a.queue)
}
