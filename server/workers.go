package server

import (
	"sync/atomic"
	"time"
)

// workerIdle is how long a handler goroutine waits for another call of
// its session before it exits.
const workerIdle = 10 * time.Second

// workers keeps a session's handler goroutines alive between calls. A
// goroutine starts with a small stack that a handler grows (decoding and
// encoding JSON alone takes several KiB); a new goroutine for every call
// would grow it, copying, on every call. An idle worker takes the
// session's next call instead, and exits once no call came for workerIdle
// or the session closed, so the count follows the concurrency the session
// actually had (at most MaxConcurrentCalls busy in the whole server).
type workers struct {
	hand   chan *inflight // unbuffered: a send succeeds only to a waiting worker
	closed chan struct{}  // closed with the session
	live   atomic.Int32   // workers running or idle
}

func newWorkers() *workers {
	return &workers{hand: make(chan *inflight), closed: make(chan struct{})}
}

// run runs r on an idle worker of the session, or on a new one.
func (ss *session) run(r *inflight) {
	select {
	case ss.workers.hand <- r:
	default:
		go ss.work(r)
	}
}

// work runs calls until none comes for workerIdle or the session closes.
func (ss *session) work(r *inflight) {
	ss.workers.live.Add(1)
	defer ss.workers.live.Add(-1)
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		ss.srv.runCalls(r)
		idle.Reset(workerIdle)
		select {
		case r = <-ss.workers.hand:
		case <-ss.workers.closed:
			return
		case <-idle.C:
			return
		}
	}
}
