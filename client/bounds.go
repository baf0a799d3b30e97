package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds on what a server can make the client hold. A server that sends
// requests faster than the client answers them, or stops reading what the
// client writes, meets these limits and loses its excess, never the
// client's memory or its caller's deadlines.
const (
	// answerTimeout bounds the answer to one server request: the
	// handler and the sending of its answer (a POST in the 2025 HTTP
	// era) together.
	answerTimeout = 30 * time.Second
	// maxQueuedFrames and maxQueuedBytes bound what waits to be written
	// to a stdio server; at most maxQueuedAnswers of those frames are
	// answers to the server's own requests, so that a flood of them
	// never takes the room a request or a cancellation needs. A frame
	// larger than maxQueuedBytes is admitted alone.
	maxQueuedFrames  = 64
	maxQueuedAnswers = 16
	maxQueuedBytes   = 4 << 20
	// maxCancelPosts bounds the 2025 notifications/cancelled POSTs in
	// flight at once, each under cancelPostTimeout.
	maxCancelPosts    = 16
	cancelPostTimeout = 5 * time.Second
	// attributionGrace is how long after a call on a connection was given
	// up no request of the server's is taken for the one call left in
	// flight (see inflight.sole): the given-up call's own question may
	// still be on its way, written before the server read the
	// cancellation, and must not be shown to another call's handler.
	attributionGrace = 2 * time.Second
)

// budget admits work within a bound in count and in bytes, without ever
// waiting: what does not fit is refused at once.
type budget struct {
	mu             sync.Mutex
	n, bytes       int
	maxN, maxBytes int
}

// take admits one item of size bytes, or reports false. An item is
// always admitted when nothing else is in hand, so that one large item is
// never refused for ever.
func (b *budget) take(size int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n >= b.maxN || (b.n > 0 && b.bytes+size > b.maxBytes) {
		return false
	}
	b.n++
	b.bytes += size
	return true
}

// give returns what take admitted.
func (b *budget) give(size int) {
	b.mu.Lock()
	b.n--
	b.bytes -= size
	b.mu.Unlock()
}

// Frame states: a frame is queued, then taken by the writer (it may be on
// the wire) or withdrawn by its sender (it never will be).
const (
	frameQueued int32 = iota
	frameTaken
	frameWithdrawn
)

// frame is one message waiting to be written.
type frame struct {
	b      []byte // with its newline
	answer bool   // an answer to the server's request
	state  atomic.Int32
	done   chan error // receives the write's outcome; nil: nobody waits
	after  func()     // called once the frame left the queue, written or not
}

// withdraw takes back a frame the writer has not taken yet; false when it
// is (or was) being written.
func (f *frame) withdraw() bool { return f.state.CompareAndSwap(frameQueued, frameWithdrawn) }

// errQueueFull is a frame refused without waiting: the peer is not
// reading what the client already wrote.
var errQueueFull = errors.New("client: the server is not reading what the client writes; the write queue is full")

// writer writes frames to one stream from one goroutine, so that a peer
// that stops reading blocks that goroutine only: a sender waits for room
// in a bounded queue, or for its frame to be written, only as long as its
// context allows, and a cancellation is queued without waiting at all.
type writer struct {
	w io.Writer

	mu      sync.Mutex
	queue   []*frame
	bytes   int
	answers int
	err     error         // set once the stream failed or closing began: no new frames
	room    chan struct{} // closed (and replaced) when frames leave and roomWanted
	// roomWanted is set by a sender that waits for room. Only then do
	// frames leaving close room and make another: a channel a frame, on
	// the path every call takes, for a wait that a reading server never
	// causes.
	roomWanted bool
	wake       chan struct{} // one pending wake-up for the writer goroutine
	done       chan struct{} // closed when the writer goroutine returns

	onFail func(error) // called once if a write fails
}

func newWriter(w io.Writer, onFail func(error)) *writer {
	q := &writer{w: w, room: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}), onFail: onFail}
	go q.run()
	return q
}

// errWriterClosed is a frame offered after the connection began closing.
var errWriterClosed = errors.New("client: the connection is closing")

// enqueue queues f. With wait, it waits for room until ctx ends (and
// returns its cause); without, a full queue refuses f with errQueueFull.
func (q *writer) enqueue(ctx context.Context, f *frame, wait bool) error {
	for {
		q.mu.Lock()
		if q.err != nil {
			err := q.err
			q.mu.Unlock()
			return err
		}
		fits := len(q.queue) < maxQueuedFrames && (len(q.queue) == 0 || q.bytes+len(f.b) <= maxQueuedBytes) &&
			(!f.answer || q.answers < maxQueuedAnswers)
		if fits {
			q.queue = append(q.queue, f)
			q.bytes += len(f.b)
			if f.answer {
				q.answers++
			}
			q.mu.Unlock()
			select {
			case q.wake <- struct{}{}:
			default:
			}
			return nil
		}
		if !wait {
			q.mu.Unlock()
			return errQueueFull
		}
		q.roomWanted = true
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// send writes b and waits until it is written or ctx ends. A frame still
// queued when ctx ends is withdrawn: it never reaches the server, and
// sent reports false. When ctx ends with the frame on its way, sent is
// true: the server may read it.
func (q *writer) send(ctx context.Context, b []byte) (sent bool, err error) {
	f := &frame{b: append(b, '\n'), done: make(chan error, 1)}
	if err := q.enqueue(ctx, f, true); err != nil {
		return false, err
	}
	select {
	case err := <-f.done:
		return err == nil, err
	case <-ctx.Done():
		if f.withdraw() {
			return false, context.Cause(ctx)
		}
		return true, context.Cause(ctx)
	}
}

// enqueueFrame queues b, waiting for room until ctx ends, and returns its frame
// without waiting for it to be written: a caller that waits for an answer
// anyway need not wake up in between, and one that gives up first can
// still withdraw it (frame.withdraw) if it never left.
func (q *writer) enqueueFrame(ctx context.Context, b []byte) (*frame, error) {
	f := &frame{b: append(b, '\n')}
	if err := q.enqueue(ctx, f, true); err != nil {
		return nil, err
	}
	return f, nil
}

// post queues b without waiting; after, if set, runs once the frame left
// the queue (written, failed or dropped with the connection).
func (q *writer) post(b []byte, answer bool, after func()) error {
	f := &frame{b: append(b, '\n'), answer: answer, after: after}
	return q.enqueue(context.Background(), f, false)
}

// postWithin queues the answer b to a server's request as post does,
// but waits for room until ctx ends (and returns its cause).
func (q *writer) postWithin(ctx context.Context, b []byte, after func()) error {
	f := &frame{b: append(b, '\n'), answer: true, after: after}
	return q.enqueue(ctx, f, true)
}

func (q *writer) run() {
	defer close(q.done)
	var batch []*frame
	var buf []byte
	for {
		q.mu.Lock()
		for len(q.queue) == 0 {
			closing := q.err != nil
			q.mu.Unlock()
			if closing {
				return
			}
			<-q.wake
			q.mu.Lock()
		}
		// Every frame queued now goes in one write: under load a burst
		// costs one system call and one wake-up of the server, not one a
		// frame. A frame withdrawn meanwhile is left out.
		batch = batch[:0]
		size := 0
		taken := 0
		for taken < len(q.queue) && (taken == 0 || size+len(q.queue[taken].b) <= maxBatchBytes) {
			batch = append(batch, q.queue[taken])
			size += len(q.queue[taken].b)
			taken++
		}
		// What stays moves to the front: the queue's array is used again,
		// not grown anew a frame at a time.
		left := copy(q.queue, q.queue[taken:])
		clear(q.queue[left:])
		q.queue = q.queue[:left]
		q.mu.Unlock()
		buf = buf[:0]
		for _, f := range batch {
			if f.state.CompareAndSwap(frameQueued, frameTaken) {
				buf = append(buf, f.b...)
			}
		}
		var err error
		if len(buf) > 0 {
			_, err = q.w.Write(buf)
		}
		q.release(batch, err)
		if cap(buf) > maxBatchBytes {
			buf = nil // one large frame's buffer is not kept
		}
		if err != nil {
			q.fail(err)
			return
		}
	}
}

// maxBatchBytes bounds the frames the writer joins into one write.
const maxBatchBytes = 64 << 10

// release accounts for frames that left the queue, wakes the senders
// waiting for room (each checks again whether its frame fits) and tells
// the frames' senders.
func (q *writer) release(frames []*frame, err error) {
	q.mu.Lock()
	for _, f := range frames {
		q.bytes -= len(f.b)
		if f.answer {
			q.answers--
		}
	}
	if q.roomWanted {
		close(q.room)
		q.room = make(chan struct{})
		q.roomWanted = false
	}
	q.mu.Unlock()
	for _, f := range frames {
		if f.done != nil {
			f.done <- err
		}
		if f.after != nil {
			f.after()
		}
	}
}

// fail ends the queue after a write failed: what is queued is dropped and
// its senders told.
func (q *writer) fail(err error) {
	q.mu.Lock()
	if q.err == nil || q.err == errWriterClosed {
		q.err = err
	}
	rest := q.queue
	q.queue = nil
	q.mu.Unlock()
	q.release(rest, err)
	if q.onFail != nil {
		q.onFail(err)
	}
}

// close stops taking frames and waits until what is queued is written,
// until deadline at the latest; it reports whether the queue drained.
func (q *writer) close(deadline time.Time) bool {
	q.mu.Lock()
	if q.err == nil {
		q.err = errWriterClosed
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-q.done:
		return true
	case <-timer.C:
		return false
	}
}
