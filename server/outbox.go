package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/mcprel/mcprel/mcp"
)

// DefaultOutboxCapacity is the number of messages an Outbox holds when none
// is configured.
const DefaultOutboxCapacity = 1024

// FrameKind says how an outbound message may be treated under pressure.
type FrameKind uint8

const (
	// FrameFinal is a response. It is never dropped.
	FrameFinal FrameKind = iota + 1
	// FrameEssential is a request or notification that must not be dropped
	// either: a subscription acknowledgement, a server-sent cancellation.
	FrameEssential
	// FrameProgress is a progress notification. A newer one for the same
	// request replaces a queued older one; at capacity the oldest is dropped.
	FrameProgress
	// FrameDroppable is any other notification (logs, list changes); at
	// capacity it is dropped like progress.
	FrameDroppable
)

// Frame is one encoded message leaving the server.
type Frame struct {
	Data []byte
	Kind FrameKind
	// ErrorCode is the JSON-RPC error code of a FrameFinal that is an error
	// response, and zero otherwise: Streamable HTTP picks the response's
	// status from it.
	ErrorCode int64
}

// Errors from the Outbox.
var (
	// ErrOutboxClosed: the stream is gone; nothing more will be written.
	ErrOutboxClosed = errors.New("server: outbound stream closed")
	// ErrFinalOverflow is a bug-level refusal: keeping a response would
	// require dropping another response. Responses are admitted only with
	// a reservation, so this means a reservation was skipped.
	ErrFinalOverflow = errors.New("server: outbox full of responses; refusing to drop one to keep another")
)

// Outbox is the bounded queue of messages waiting to be written to one
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
// whatever the number of reports. The zero value is an empty Outbox of
// DefaultOutboxCapacity.
type Outbox struct {
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

// NewOutbox returns an outbox holding at most capacity messages; a capacity
// below 2 is raised to 2 (one response and one notification).
func NewOutbox(capacity int) *Outbox {
	return &Outbox{
		capacity: max(capacity, 2),
		progress: make(map[any]*frame),
		ready:    make(chan struct{}, 1),
	}
}

// Next returns the oldest queued message, waiting for one if there is none.
// After Close it drains what is left and then returns io.EOF.
func (o *Outbox) Next(ctx context.Context) (Frame, error) {
	for {
		o.mu.Lock()
		o.initLocked()
		if f, ok := o.popLocked(); ok {
			o.mu.Unlock()
			f.report()
			return f.Frame, nil
		}
		closed := o.closed
		o.mu.Unlock()
		if closed {
			return Frame{}, io.EOF
		}
		select {
		case <-o.ready:
		case <-ctx.Done():
			return Frame{}, ctx.Err()
		}
	}
}

// Ready returns a channel that receives a value after a message is queued
// or the outbox is closed. A writer that must also wake for other reasons
// (keepalives, deadlines) loops on TryNext and selects on Ready; the signal
// persists, so a message queued between the two is never missed.
func (o *Outbox) Ready() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.initLocked()
	return o.ready
}

// initLocked makes a zero Outbox usable: DefaultOutboxCapacity, and the
// maps and channel NewOutbox would have made.
func (o *Outbox) initLocked() {
	if o.ready != nil {
		return
	}
	if o.capacity == 0 {
		o.capacity = DefaultOutboxCapacity
	}
	o.progress = make(map[any]*frame)
	o.ready = make(chan struct{}, 1)
}

// Closed reports whether Close was called.
func (o *Outbox) Closed() bool {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	return o.closed
}

// TryNext returns the oldest queued message without waiting.
func (o *Outbox) TryNext() (Frame, bool) {
	o.mu.Lock()
	o.initLocked()
	f, ok := o.popLocked()
	o.mu.Unlock()
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
func (o *Outbox) ErrorFirst() bool {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	for i := o.head; i < len(o.queue); i++ {
		if f := o.queue[i]; !f.dead {
			return f.Kind == FrameFinal && f.ErrorCode != 0
		}
	}
	return false
}

// Len returns the number of messages queued.
func (o *Outbox) Len() int {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	return o.live
}

// Close ends the stream: Next drains what is queued, then reports io.EOF;
// reservations and pushes fail with ErrOutboxClosed.
func (o *Outbox) Close() {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.closed = true
	o.signalLocked()
	o.freeSpaceLocked()
}

// MetaRefetch is the _meta key of the refetch flag. When the server had to
// drop progress or notifications on a stream, or replace a queued progress
// value with a newer one, because the client read too slowly, the next
// response written on that stream carries
// "_meta": {"dev.mcprel/refetch": true}: what the client saw on the stream
// is incomplete, so it should refetch the state it cares about from the
// authoritative source (tools/list, resources/read, a lookup tool) rather
// than trust the notifications it got.
const MetaRefetch = mcp.MetaPrefix + "refetch"

// WithRefetchFlag adds the refetch flag (MetaRefetch) to an encoded result
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
	meta[MetaRefetch] = json.RawMessage("true")
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
// (RequestRecord.ProgressDropped and ProgressCoalesced).
func (o *Outbox) counts() (dropped, coalesced uint64, refetch bool) {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	return o.dropped, o.coalesced, o.refetch
}

// pressureCounter is a frame's owner that counts what happened to its
// frames under pressure: a request. Counted under the outbox's lock, so it
// must not lock anything itself.
type pressureCounter interface {
	noteCoalesced()
	noteDropped()
}

// taken is a frame a transport took off the queue, with what its owner
// is told of it once the outbox's lock is released: a progress
// notification sent, a response flagged for refetch.
type taken struct {
	Frame
	owner   any
	flagged bool
}

// report tells the request that owns the frame, which tells the observers.
func (t taken) report() {
	if t.Kind != FrameProgress && !t.flagged {
		return
	}
	if r, ok := t.owner.(*inflight); ok {
		r.frameTaken(t.Kind == FrameProgress, t.flagged)
	}
}

func (o *Outbox) popLocked() (taken, bool) {
	for o.head < len(o.queue) {
		f := o.queue[o.head]
		o.queue[o.head] = nil
		o.head++
		if f.dead {
			o.dead--
			continue
		}
		o.live--
		t := taken{Frame: f.Frame, owner: f.owner}
		switch f.Kind {
		case FrameFinal, FrameEssential:
			o.essential--
			o.freeSpaceLocked()
			if f.Kind == FrameFinal && o.flagNext {
				// An error response has no _meta to carry the flag; the
				// next result will.
				t.Data, o.flagNext = withRefetchFlag(f.Data)
				t.flagged = !o.flagNext
			}
		case FrameProgress:
			if o.progress[f.owner] == f {
				delete(o.progress, f.owner)
			}
		}
		o.compactLocked()
		return t, true
	}
	o.compactLocked()
	return taken{}, false
}

// compactLocked reclaims the consumed head of the queue.
func (o *Outbox) compactLocked() {
	if o.head == len(o.queue) {
		o.queue, o.head = o.queue[:0], 0
		return
	}
	if o.head > 64 && o.head > len(o.queue)/2 {
		n := copy(o.queue, o.queue[o.head:])
		clear(o.queue[n:])
		o.queue, o.head = o.queue[:n], 0
	}
}

func (o *Outbox) signalLocked() {
	// A hold never lets responses pile up toward the capacity: past half
	// of it the writer is woken anyway, so that no reservation can wait
	// on a holder that is itself waiting.
	if o.holds > 0 && !o.closed && 2*(o.essential+o.reserved) < o.capacity {
		o.held = true
		return
	}
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// Hold keeps what is queued from waking a writer waiting on Ready or Next
// until the matching Release: for a transport goroutine that will write
// what is queued itself once it is done (stdio's reader, after running a
// call on its own goroutine), so that no other goroutine is woken only to
// find the work done. Holds nest; Close is never held back, nor is a queue
// of responses past half the capacity.
func (o *Outbox) Hold() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.initLocked()
	o.holds++
}

// Release ends a Hold. When the last one ends, a writer is woken if
// anything is still queued.
func (o *Outbox) Release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.initLocked()
	if o.holds == 0 {
		return
	}
	o.holds--
	if o.holds == 0 && o.held {
		o.held = false
		if o.live > 0 || o.closed {
			o.signalLocked()
		}
	}
}

func (o *Outbox) freeSpaceLocked() {
	if o.space != nil {
		close(o.space)
		o.space = nil
	}
}

// reserve promises room for one Final or Essential frame, waiting while
// the outbox is full of them. This wait is the backpressure that stops a
// connection from reading more requests than it can answer.
func (o *Outbox) reserve(ctx context.Context) error {
	for {
		o.mu.Lock()
		o.initLocked()
		if o.closed {
			o.mu.Unlock()
			return ErrOutboxClosed
		}
		if o.essential+o.reserved < o.capacity {
			o.reserved++
			o.mu.Unlock()
			return nil
		}
		if o.space == nil {
			o.space = make(chan struct{})
		}
		space := o.space
		o.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// unreserve gives back a reservation that will not be used.
func (o *Outbox) unreserve() {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	if o.reserved > 0 {
		o.reserved--
		o.freeSpaceLocked()
	}
}

// pushFinal queues a response against its reservation; code is its
// JSON-RPC error code, zero for a result.
func (o *Outbox) pushFinal(owner any, data []byte, code int64) error {
	return o.push(Frame{Data: data, Kind: FrameFinal, ErrorCode: code}, owner)
}

// pushReserved queues a Final or Essential frame against a reservation
// taken earlier. It never blocks and never drops: room is made, if needed,
// by dropping the oldest replaceable frame.
func (o *Outbox) pushReserved(kind FrameKind, owner any, data []byte) error {
	return o.push(Frame{Data: data, Kind: kind}, owner)
}

func (o *Outbox) push(f Frame, owner any) error {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	if o.closed {
		return ErrOutboxClosed
	}
	if o.reserved > 0 {
		o.reserved--
	} else if o.essential+o.reserved >= o.capacity {
		// Without a reservation there is no room left that is not already
		// promised to another response.
		return ErrFinalOverflow
	}
	if o.live >= o.capacity && !o.evictOldestLocked() {
		return ErrFinalOverflow
	}
	o.appendLocked(&frame{Frame: f, owner: owner})
	o.essential++
	return nil
}

// pushProgress queues a progress frame for owner, replacing a queued older
// one for the same owner. It never blocks.
func (o *Outbox) pushProgress(owner any, data []byte) error {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	if o.closed {
		return ErrOutboxClosed
	}
	if f := o.progress[owner]; f != nil {
		// The reader has not taken the older value yet: the newer one
		// replaces it, and the client will be told it fell behind.
		f.Data = data
		o.coalesced++
		o.flagNext = true
		if c, ok := owner.(pressureCounter); ok {
			c.noteCoalesced()
		}
		return nil
	}
	f := &frame{Frame: Frame{Data: data, Kind: FrameProgress}, owner: owner}
	if !o.makeRoomLocked() {
		o.noteDropLocked(owner)
		return nil
	}
	o.appendLocked(f)
	o.progress[owner] = f
	return nil
}

// pushDroppable queues a notification that may be dropped under pressure.
func (o *Outbox) pushDroppable(owner any, data []byte) error {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	if o.closed {
		return ErrOutboxClosed
	}
	if !o.makeRoomLocked() {
		o.noteDropLocked(owner)
		return nil
	}
	o.appendLocked(&frame{Frame: Frame{Data: data, Kind: FrameDroppable}, owner: owner})
	return nil
}

// noteDropLocked records that a message of owner was dropped: the stream
// is marked, and the next response written on it carries the refetch flag.
func (o *Outbox) noteDropLocked(owner any) {
	o.dropped++
	o.refetch = true
	o.flagNext = true
	if c, ok := owner.(pressureCounter); ok {
		c.noteDropped()
	}
}

// makeRoomLocked ensures one more replaceable frame fits, leaving the room
// promised to reservations alone.
func (o *Outbox) makeRoomLocked() bool {
	for o.live+o.reserved >= o.capacity {
		if !o.evictOldestLocked() {
			return false
		}
	}
	return true
}

// evictOldestLocked drops the oldest queued replaceable frame.
func (o *Outbox) evictOldestLocked() bool {
	for i := o.head; i < len(o.queue); i++ {
		f := o.queue[i]
		if f.dead || f.Kind == FrameFinal || f.Kind == FrameEssential {
			continue
		}
		owner := f.owner
		o.killLocked(f)
		o.sweepIfBloatedLocked()
		o.noteDropLocked(owner)
		return true
	}
	return false
}

func (o *Outbox) killLocked(f *frame) {
	f.dead = true
	f.Data = nil
	o.live--
	o.dead++
	if f.Kind == FrameProgress && o.progress[f.owner] == f {
		delete(o.progress, f.owner)
	}
}

// sweepIfBloatedLocked removes discarded frames once they outnumber the
// capacity: a reader that stops reading leaves them in place, and the
// queue must stay bounded and its scans short. Callers sweep after their
// scan of the queue is over, never during it, since a sweep moves frames.
func (o *Outbox) sweepIfBloatedLocked() {
	if o.dead > o.capacity {
		o.sweepLocked()
	}
}

// sweepLocked removes discarded frames from the queue.
func (o *Outbox) sweepLocked() {
	kept := o.queue[:0]
	for _, f := range o.queue[o.head:] {
		if !f.dead {
			kept = append(kept, f)
		}
	}
	clear(o.queue[len(kept):])
	o.queue, o.head, o.dead = kept, 0, 0
}

func (o *Outbox) appendLocked(f *frame) {
	o.queue = append(o.queue, f)
	o.live++
	o.signalLocked()
}

// discard removes the queued replaceable frames of owner: after a request
// is cancelled none of its progress may still go out.
func (o *Outbox) discard(owner any) {
	o.mu.Lock()
	o.initLocked()
	defer o.mu.Unlock()
	for i := o.head; i < len(o.queue); i++ {
		if f := o.queue[i]; !f.dead && f.owner == owner && (f.Kind == FrameProgress || f.Kind == FrameDroppable) {
			o.killLocked(f)
		}
	}
	o.sweepIfBloatedLocked()
}

// NewOutbox returns an outbox sized by Options.OutboxCapacity, for a
// transport's outbound stream.
func (s *Server) NewOutbox() *Outbox { return NewOutbox(s.opts.OutboxCapacity) }
