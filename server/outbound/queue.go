// Package outbound is the bounded queue of encoded messages waiting to be
// written to one outbound stream of an MCP connection: what package server
// fills as requests progress and end, and what a transport drains and
// writes. It is its own package so that a tool author's view of server
// holds none of it; only transports (and server) use it.
//
// A transport uses New (or conn.Session.NewQueue), Next or TryNext and
// Ready, Hold and Release, Close, and the few inspection methods. The
// methods that fill the queue (Reserve, Unreserve, PushFinal, PushReserved,
// PushProgress, PushDroppable, Discard) belong to the request lifecycle in
// package server: a transport never calls them, since responses are
// admitted only against the reservation the lifecycle takes before
// dispatching a request.
package outbound

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/mcprel/mcprel/mcp"
)

// DefaultCapacity is the number of messages a Queue holds when none is
// configured.
const DefaultCapacity = 1024

// Kind says how an outbound message may be treated under pressure.
type Kind uint8

const (
	// Final is a response. It is never dropped.
	Final Kind = iota + 1
	// Essential is a request or notification that must not be dropped
	// either: a subscription acknowledgement, a server-sent cancellation.
	Essential
	// Progress is a progress notification. A newer one for the same
	// request replaces a queued older one; at capacity the oldest is dropped.
	Progress
	// Droppable is any other notification (logs, list changes); at
	// capacity it is dropped like progress.
	Droppable
)

// Frame is one encoded message leaving the server.
type Frame struct {
	Data []byte
	Kind Kind
	// ErrorCode is the JSON-RPC error code of a Final that is an error
	// response, and zero otherwise: Streamable HTTP picks the response's
	// status from it.
	ErrorCode int64
}

// Errors from the Queue.
var (
	// ErrClosed: the stream is gone; nothing more will be written.
	ErrClosed = errors.New("outbound: stream closed")
	// ErrFinalOverflow is a bug-level refusal: keeping a response would
	// require dropping another response. Responses are admitted only with
	// a reservation, so this means a reservation was skipped.
	ErrFinalOverflow = errors.New("outbound: queue full of responses; refusing to drop one to keep another")
)

// Queue is the bounded queue of messages waiting to be written to one
// outbound stream: the shared stdout of a stdio connection, or one HTTP
// response stream. The server fills it; a transport drains it with Next and
// writes what it gets, in order.
//
// Its policy is the one a slow reader needs. Responses are never dropped:
// every request reserves room for its response before it is dispatched, and
// when the queue is full of responses and reservations the server stops
// reading new requests instead of buffering more. Progress is replaceable: a
// newer value replaces a queued older one for the same request, and at
// capacity the oldest progress (or other droppable notification) is dropped
// and the stream is marked as needing a refetch from the authoritative
// source. Memory is bounded by the capacity times the message size,
// whatever the number of reports. The zero value is an empty Queue of
// DefaultCapacity.
type Queue struct {
	mu        sync.Mutex
	queue     []*frame
	head      int
	live      int // frames queued and not discarded
	dead      int // discarded frames still occupying queue slots
	essential int // queued frames of kinds Final and Essential
	reserved  int // promised room for Final/Essential frames not yet pushed
	capacity  int
	progress  map[any]*frame // the queued progress frame of each request
	ready     chan struct{}  // signalled when a frame is queued or on close
	space     chan struct{}  // closed when room for a reservation frees up
	closed    bool
	holds     int  // Hold calls not yet released
	held      bool // a signal was held back
	dropped   uint64
	coalesced uint64
	refetch   bool // something was ever dropped
	flagNext  bool // the next response must carry the refetch flag
}

type frame struct {
	Frame
	owner any
	dead  bool
}

// New returns a queue holding at most capacity messages; a capacity
// below 2 is raised to 2 (one response and one notification).
func New(capacity int) *Queue {
	return &Queue{
		capacity: max(capacity, 2),
		progress: make(map[any]*frame),
		ready:    make(chan struct{}, 1),
	}
}

// Next returns the oldest queued message, waiting for one if there is none.
// After Close it drains what is left and then returns io.EOF.
func (q *Queue) Next(ctx context.Context) (Frame, error) {
	for {
		q.mu.Lock()
		q.initLocked()
		if f, ok := q.popLocked(); ok {
			q.mu.Unlock()
			f.report()
			return f.Frame, nil
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return Frame{}, io.EOF
		}
		select {
		case <-q.ready:
		case <-ctx.Done():
			return Frame{}, ctx.Err()
		}
	}
}

// Ready returns a channel that receives a value after a message is queued
// or the queue is closed. A writer that must also wake for other reasons
// (keepalives, deadlines) loops on TryNext and selects on Ready; the signal
// persists, so a message queued between the two is never missed.
func (q *Queue) Ready() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.initLocked()
	return q.ready
}

// initLocked makes a zero Queue usable: DefaultCapacity, and the
// maps and channel New would have made.
func (q *Queue) initLocked() {
	if q.ready != nil {
		return
	}
	if q.capacity == 0 {
		q.capacity = DefaultCapacity
	}
	q.progress = make(map[any]*frame)
	q.ready = make(chan struct{}, 1)
}

// Closed reports whether Close was called.
func (q *Queue) Closed() bool {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	return q.closed
}

// TryNext returns the oldest queued message without waiting.
func (q *Queue) TryNext() (Frame, bool) {
	q.mu.Lock()
	q.initLocked()
	f, ok := q.popLocked()
	q.mu.Unlock()
	if !ok {
		return Frame{}, false
	}
	f.report()
	return f.Frame, true
}

// ErrorFirst reports whether the next message is an error response: a
// request refused while it was dispatched (overloaded, invalid), before
// anything else was sent for it. A transport with per-request streams can
// then answer it with an HTTP status of its own instead of opening an
// event stream.
func (q *Queue) ErrorFirst() bool {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	for i := q.head; i < len(q.queue); i++ {
		if f := q.queue[i]; !f.dead {
			return f.Kind == Final && f.ErrorCode != 0
		}
	}
	return false
}

// Len returns the number of messages queued.
func (q *Queue) Len() int {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	return q.live
}

// Close ends the stream: Next drains what is queued, then reports io.EOF;
// reservations and pushes fail with ErrClosed.
func (q *Queue) Close() {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	q.signalLocked()
	q.freeSpaceLocked()
}

// WithRefetchFlag adds the refetch flag (mcp.MetaRefetch) to an encoded result
// response's _meta, for a transport that replays a stream whose messages
// were shed (a resumed 2025 stream). An error response, or anything that
// does not parse, comes back unchanged, with ok false.
func WithRefetchFlag(response []byte) (flagged []byte, ok bool) {
	flagged, pending := withRefetchFlag(response)
	return flagged, !pending
}

// withRefetchFlag adds the refetch flag to a result response's _meta. Error
// responses and anything that does not parse are returned unchanged, with
// the flag still pending for the next response.
func withRefetchFlag(data []byte) (flagged []byte, pending bool) {
	var env map[string]json.RawMessage
	if json.Unmarshal(data, &env) != nil || env["result"] == nil {
		return data, true
	}
	var result map[string]json.RawMessage
	if json.Unmarshal(env["result"], &result) != nil {
		return data, true
	}
	var meta map[string]json.RawMessage
	if raw := result["_meta"]; raw != nil {
		json.Unmarshal(raw, &meta) // "_meta": null leaves it nil
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta[mcp.MetaRefetch] = json.RawMessage("true")
	var err error
	if result["_meta"], err = json.Marshal(meta); err != nil {
		return data, true
	}
	if env["result"], err = json.Marshal(result); err != nil {
		return data, true
	}
	out, err := json.Marshal(env)
	if err != nil {
		return data, true
	}
	return out, false
}

// counts returns how many messages were dropped for lack of room and how
// many queued progress messages newer ones replaced, and whether the
// stream needs a refetch. Observers see the same per request
// (server.RequestRecord.ProgressDropped and ProgressCoalesced).
func (q *Queue) counts() (dropped, coalesced uint64, refetch bool) {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	return q.dropped, q.coalesced, q.refetch
}

// Owner is the owner of frames (a request, in package server) that wants
// to know what became of them, so that its observers can be told. The
// owner passed to the Push methods may be any comparable value; one that
// implements Owner is told.
type Owner interface {
	// NoteCoalesced: a queued progress frame of the owner was replaced by
	// a newer one. Called under the queue's lock, so it must not lock
	// anything itself.
	NoteCoalesced()
	// NoteDropped: a frame of the owner was dropped for lack of room.
	// Called under the queue's lock, like NoteCoalesced.
	NoteDropped()
	// FrameTaken: a transport took a progress frame of the owner
	// (progress), or a response of the owner that carries the refetch
	// flag (flagged). Called after the queue's lock is released.
	FrameTaken(progress, flagged bool)
}

// taken is a frame a transport took off the queue, with what its owner
// is told of it once the queue's lock is released: a progress
// notification sent, a response flagged for refetch.
type taken struct {
	Frame
	owner   any
	flagged bool
}

// report tells the request that owns the frame, which tells the observers.
func (t taken) report() {
	if t.Kind != Progress && !t.flagged {
		return
	}
	if r, ok := t.owner.(Owner); ok {
		r.FrameTaken(t.Kind == Progress, t.flagged)
	}
}

func (q *Queue) popLocked() (taken, bool) {
	for q.head < len(q.queue) {
		f := q.queue[q.head]
		q.queue[q.head] = nil
		q.head++
		if f.dead {
			q.dead--
			continue
		}
		q.live--
		t := taken{Frame: f.Frame, owner: f.owner}
		switch f.Kind {
		case Final, Essential:
			q.essential--
			q.freeSpaceLocked()
			if f.Kind == Final && q.flagNext {
				// An error response has no _meta to carry the flag; the
				// next result will.
				t.Data, q.flagNext = withRefetchFlag(f.Data)
				t.flagged = !q.flagNext
			}
		case Progress:
			if q.progress[f.owner] == f {
				delete(q.progress, f.owner)
			}
		}
		q.compactLocked()
		return t, true
	}
	q.compactLocked()
	return taken{}, false
}

// compactLocked reclaims the consumed head of the queue.
func (q *Queue) compactLocked() {
	if q.head == len(q.queue) {
		q.queue, q.head = q.queue[:0], 0
		return
	}
	if q.head > 64 && q.head > len(q.queue)/2 {
		n := copy(q.queue, q.queue[q.head:])
		clear(q.queue[n:])
		q.queue, q.head = q.queue[:n], 0
	}
}

func (q *Queue) signalLocked() {
	// A hold never lets responses pile up toward the capacity: past half
	// of it the writer is woken anyway, so that no reservation can wait
	// on a holder that is itself waiting.
	if q.holds > 0 && !q.closed && 2*(q.essential+q.reserved) < q.capacity {
		q.held = true
		return
	}
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Hold keeps what is queued from waking a writer waiting on Ready or Next
// until the matching Release: for a transport goroutine that will write
// what is queued itself once it is done (stdio's reader, after running a
// call on its own goroutine), so that no other goroutine is woken only to
// find the work done. Holds nest; Close is never held back, nor is a queue
// of responses past half the capacity.
func (q *Queue) Hold() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.initLocked()
	q.holds++
}

// Release ends a Hold. When the last one ends, a writer is woken if
// anything is still queued.
func (q *Queue) Release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.initLocked()
	if q.holds == 0 {
		return
	}
	q.holds--
	if q.holds == 0 && q.held {
		q.held = false
		if q.live > 0 || q.closed {
			q.signalLocked()
		}
	}
}

func (q *Queue) freeSpaceLocked() {
	if q.space != nil {
		close(q.space)
		q.space = nil
	}
}

// Reserve promises room for one Final or Essential frame, waiting while
// the queue is full of them. This wait is the backpressure that stops a
// connection from reading more requests than it can answer. For the
// request lifecycle (package server); a transport never calls it.
func (q *Queue) Reserve(ctx context.Context) error {
	for {
		q.mu.Lock()
		q.initLocked()
		if q.closed {
			q.mu.Unlock()
			return ErrClosed
		}
		if q.essential+q.reserved < q.capacity {
			q.reserved++
			q.mu.Unlock()
			return nil
		}
		if q.space == nil {
			q.space = make(chan struct{})
		}
		space := q.space
		q.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Unreserve gives back a reservation that will not be used. For the
// request lifecycle.
func (q *Queue) Unreserve() {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	if q.reserved > 0 {
		q.reserved--
		q.freeSpaceLocked()
	}
}

// PushFinal queues a response of owner against its reservation; code is
// its JSON-RPC error code, zero for a result. For the request lifecycle.
func (q *Queue) PushFinal(owner any, data []byte, code int64) error {
	return q.push(Frame{Data: data, Kind: Final, ErrorCode: code}, owner)
}

// PushReserved queues a Final or Essential frame of owner against a
// reservation taken earlier. It never blocks and never drops: room is
// made, if needed, by dropping the oldest replaceable frame. For the
// request lifecycle.
func (q *Queue) PushReserved(kind Kind, owner any, data []byte) error {
	return q.push(Frame{Data: data, Kind: kind}, owner)
}

func (q *Queue) push(f Frame, owner any) error {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if q.reserved > 0 {
		q.reserved--
	} else if q.essential+q.reserved >= q.capacity {
		// Without a reservation there is no room left that is not already
		// promised to another response.
		return ErrFinalOverflow
	}
	if q.live >= q.capacity && !q.evictOldestLocked() {
		return ErrFinalOverflow
	}
	q.appendLocked(&frame{Frame: f, owner: owner})
	q.essential++
	return nil
}

// PushProgress queues a progress frame for owner, replacing a queued older
// one for the same owner. It never blocks. For the request lifecycle.
func (q *Queue) PushProgress(owner any, data []byte) error {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if f := q.progress[owner]; f != nil {
		// The reader has not taken the older value yet: the newer one
		// replaces it, and the client will be told it fell behind.
		f.Data = data
		q.coalesced++
		q.flagNext = true
		if c, ok := owner.(Owner); ok {
			c.NoteCoalesced()
		}
		return nil
	}
	f := &frame{Frame: Frame{Data: data, Kind: Progress}, owner: owner}
	if !q.makeRoomLocked() {
		q.noteDropLocked(owner)
		return nil
	}
	q.appendLocked(f)
	q.progress[owner] = f
	return nil
}

// PushDroppable queues a notification of owner that may be dropped under
// pressure. For the request lifecycle.
func (q *Queue) PushDroppable(owner any, data []byte) error {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if !q.makeRoomLocked() {
		q.noteDropLocked(owner)
		return nil
	}
	q.appendLocked(&frame{Frame: Frame{Data: data, Kind: Droppable}, owner: owner})
	return nil
}

// noteDropLocked records that a message of owner was dropped: the stream
// is marked, and the next response written on it carries the refetch flag.
func (q *Queue) noteDropLocked(owner any) {
	q.dropped++
	q.refetch = true
	q.flagNext = true
	if c, ok := owner.(Owner); ok {
		c.NoteDropped()
	}
}

// makeRoomLocked ensures one more replaceable frame fits, leaving the room
// promised to reservations alone.
func (q *Queue) makeRoomLocked() bool {
	for q.live+q.reserved >= q.capacity {
		if !q.evictOldestLocked() {
			return false
		}
	}
	return true
}

// evictOldestLocked drops the oldest queued replaceable frame.
func (q *Queue) evictOldestLocked() bool {
	for i := q.head; i < len(q.queue); i++ {
		f := q.queue[i]
		if f.dead || f.Kind == Final || f.Kind == Essential {
			continue
		}
		owner := f.owner
		q.killLocked(f)
		q.sweepIfBloatedLocked()
		q.noteDropLocked(owner)
		return true
	}
	return false
}

func (q *Queue) killLocked(f *frame) {
	f.dead = true
	f.Data = nil
	q.live--
	q.dead++
	if f.Kind == Progress && q.progress[f.owner] == f {
		delete(q.progress, f.owner)
	}
}

// sweepIfBloatedLocked removes discarded frames once they outnumber the
// capacity: a reader that stops reading leaves them in place, and the
// queue must stay bounded and its scans short. Callers sweep after their
// scan of the queue is over, never during it, since a sweep moves frames.
func (q *Queue) sweepIfBloatedLocked() {
	if q.dead > q.capacity {
		q.sweepLocked()
	}
}

// sweepLocked removes discarded frames from the queue.
func (q *Queue) sweepLocked() {
	kept := q.queue[:0]
	for _, f := range q.queue[q.head:] {
		if !f.dead {
			kept = append(kept, f)
		}
	}
	clear(q.queue[len(kept):])
	q.queue, q.head, q.dead = kept, 0, 0
}

func (q *Queue) appendLocked(f *frame) {
	q.queue = append(q.queue, f)
	q.live++
	q.signalLocked()
}

// Discard removes the queued replaceable frames of owner: after a request
// is cancelled none of its progress may still go out. For the request
// lifecycle.
func (q *Queue) Discard(owner any) {
	q.mu.Lock()
	q.initLocked()
	defer q.mu.Unlock()
	for i := q.head; i < len(q.queue); i++ {
		if f := q.queue[i]; !f.dead && f.owner == owner && (f.Kind == Progress || f.Kind == Droppable) {
			q.killLocked(f)
		}
	}
	q.sweepIfBloatedLocked()
}
