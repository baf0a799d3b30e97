package server

import "sync"

// admission bounds how many tool handlers run at once: server-wide, and
// per tool where the tool's Policy sets a limit. Each tool has its own
// lane (limit and FIFO queue), so calls of a slow tool wait in their own
// queue instead of starving other tools. A queued call holds no goroutine;
// past the queue bounds a call is refused at once. A handler goroutine that
// finishes picks up the oldest queued call that may now run, so the number
// of handler goroutines never exceeds the server-wide limit.
type admission struct {
	mu       sync.Mutex
	limit    int // server-wide running limit
	maxQueue int // server-wide queued limit
	running  int
	queued   int
	seq      uint64             // arrival order across lanes
	waiting  map[*lane]struct{} // lanes with queued calls
}

// lane is one tool's share of the admission.
type lane struct {
	limit    int // 0: only the server-wide limit applies
	maxQueue int // 0: only the server-wide queue bound applies
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
	return &admission{limit: limit, maxQueue: maxQueue, waiting: make(map[*lane]struct{})}
}

func (ln *lane) hasRoom() bool { return ln.limit == 0 || ln.running < ln.limit }

func (a *admission) admit(r *inflight) admitDecision {
	a.mu.Lock()
	defer a.mu.Unlock()
	ln := r.lane
	switch {
	case a.running < a.limit && ln.hasRoom() && len(ln.queue) == 0:
		ln.running++
		a.running++
		return admitRun
	case a.queued < a.maxQueue && (ln.maxQueue == 0 || len(ln.queue) < ln.maxQueue):
		a.seq++
		r.queued, r.seq = true, a.seq
		ln.queue = append(ln.queue, r)
		a.queued++
		a.waiting[ln] = struct{}{}
		return admitQueued
	}
	return admitRefused
}

// next releases the slot of done and returns the oldest queued call that
// may run now (its slot already taken), or nil.
func (a *admission) next(done *inflight) *inflight {
	a.mu.Lock()
	defer a.mu.Unlock()
	done.lane.running--
	a.running--
	var best *lane
	for ln := range a.waiting {
		if ln.hasRoom() && (best == nil || ln.queue[0].seq < best.queue[0].seq) {
			best = ln
		}
	}
	if best == nil {
		return nil
	}
	r := best.queue[0]
	best.queue[0] = nil
	best.queue = best.queue[1:]
	if len(best.queue) == 0 {
		delete(a.waiting, best)
	}
	a.queued--
	r.queued = false
	best.running++
	a.running++
	return r
}

// remove takes a call out of its queue; it reports false if the call was
// not waiting (it is running, or already gone).
func (a *admission) remove(r *inflight) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !r.queued {
		return false
	}
	ln := r.lane
	for i, q := range ln.queue {
		if q == r {
			ln.queue = append(ln.queue[:i], ln.queue[i+1:]...)
			if len(ln.queue) == 0 {
				delete(a.waiting, ln)
			}
			a.queued--
			r.queued = false
			return true
		}
	}
	return false
}
