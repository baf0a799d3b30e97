package store

import "sync"

// writerQueue hands SQLite's one write connection to writers in the order
// they arrived. A writer is in the queue from the moment join returns, so
// arrival order is decided there and nowhere later: a buffered channel as
// the token would order only the writers already blocked on it, not those
// a moment away from blocking.
type writerQueue struct {
	mu      sync.Mutex
	held    bool
	waiting []chan struct{} // in arrival order
}

// closedTurn is the turn of a writer that found the connection free.
var closedTurn = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// join queues a writer. The returned channel is closed when the writer
// holds the connection: at once if it was free. A writer whose turn came
// must call release; one that stops waiting calls leave.
func (q *writerQueue) join() chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.held {
		q.held = true
		return closedTurn
	}
	turn := make(chan struct{})
	q.waiting = append(q.waiting, turn)
	return turn
}

// leave takes a writer that stopped waiting out of the queue. If its turn
// had already come, it passes the connection on instead.
func (q *writerQueue) leave(turn chan struct{}) {
	q.mu.Lock()
	for i, w := range q.waiting {
		if w == turn {
			q.waiting = append(q.waiting[:i:i], q.waiting[i+1:]...)
			q.mu.Unlock()
			return
		}
	}
	q.mu.Unlock()
	q.release() // handed over meanwhile: it holds the connection
}

// release hands the connection to the writer that has waited longest, or
// frees it.
func (q *writerQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.held = false
		return
	}
	next := q.waiting[0]
	q.waiting = q.waiting[1:]
	close(next)
}

// busy reports whether a writer holds the connection or waits for it.
func (q *writerQueue) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held
}
