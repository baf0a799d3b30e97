package server

import (
	"context"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
)

// Observer is told when each request starts and when it ends: metrics,
// traces and logs attach here (Options.Observers; any number, each sees
// every request). The server itself imports no metrics or tracing library.
//
// RequestStarted is called once per request, as soon as its id, method
// and params._meta are read and before anything else is done for it, with the context the
// request will run in; the context it returns replaces it (a tracer starts
// a span there, and the handler's context descends from it). RequestEnded
// is called once, when the request's terminal state is recorded, with the
// context RequestStarted returned. For one request the two calls happen
// one after the other; calls for different requests run concurrently, on
// the goroutines of their transports, timers and handlers. Neither may
// block: the request waits for them.
type Observer interface {
	RequestStarted(ctx context.Context, info RequestInfo) context.Context
	RequestEnded(ctx context.Context, rec RequestRecord)
}

// HandlerObserver is an Observer that also wants to know when a tool
// handler returns, which may be after its request ended (see
// HandlerRecord). It is called on the handler's goroutine.
type HandlerObserver interface {
	Observer
	HandlerReturned(ctx context.Context, rec HandlerRecord)
}

// RequestInfo is what is known of a request when it starts.
type RequestInfo struct {
	ID     jsonrpc.ID
	Method string
	// Transport and Session name where the request came from
	// (conn.Config.Transport and Name).
	Transport string
	Session   string
	Tenant    string // see WithTenant
	Start     time.Time
	// TraceParent and TraceState are the W3C trace context the client
	// sent in params._meta (empty when it sent none, or the _meta could
	// not be read): a tracer continues the client's trace from them.
	TraceParent, TraceState string
}

// Annotate attaches a fact about the call to its RequestRecord
// (Annotations), for observers: an interceptor says what it did, such as
// the idempotency ledger's "executed" or "replayed". Later values for the
// same key replace earlier ones. Logs and spans show every annotation;
// package metrics makes labels of the "idempotency" and "task" ones only,
// whose values must therefore be few and bounded. An id (such as a task's,
// "task_id") goes under a key of its own.
func (q *Request) Annotate(key, value string) {
	r := q.r
	if r == nil {
		return // a detached call has no record
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.annotations == nil {
		r.annotations = map[string]string{}
	}
	r.annotations[key] = value
}

// observeStart tells the observers a request started and returns the
// context it runs in.
func (s *Server) observeStart(ctx context.Context, info RequestInfo) context.Context {
	for _, o := range s.opts.Observers {
		ctx = o.RequestStarted(ctx, info)
	}
	return ctx
}

// observeEnd tells the observers a request ended.
func (s *Server) observeEnd(ctx context.Context, rec RequestRecord) {
	for _, o := range s.opts.Observers {
		o.RequestEnded(ctx, rec)
	}
}

// observeHandler tells the observers that want it that a handler returned.
func (s *Server) observeHandler(ctx context.Context, rec HandlerRecord) {
	for _, o := range s.opts.Observers {
		if ho, ok := o.(HandlerObserver); ok {
			ho.HandlerReturned(ctx, rec)
		}
	}
}

// EventObserver is an Observer that also counts what happens between
// requests' starts and ends, or outside any one request: what an operator
// watches to see a client fall behind or get confused. ObserveEvent is
// called on the goroutine where the event happened (a session's reader, a
// transport's writer) and must not block.
//
// Events are counts, not records: a request's own story is its
// RequestRecord. They are reported where the server or a transport knows
// them, which for a progress notification is when the transport takes it
// to write, after the request's record may already have been reported.
type EventObserver interface {
	Observer
	ObserveEvent(ev Event)
}

// EventKind says what an Event was.
type EventKind uint8

// The events the server and its transports report.
const (
	// EventLateCancel: a notifications/cancelled named a request that had
	// already ended, or that the session does not know: it was ignored.
	// (A cancellation that crossed the response on the wire, usually.)
	EventLateCancel EventKind = iota + 1
	// EventProgressSent: a progress notification left the outbound queue for the
	// transport to write (one that a newer value had replaced, or that was
	// dropped or withdrawn, never does).
	EventProgressSent
	// EventRefetchFlagged: a response left with the refetch flag
	// (mcp.MetaRefetch): its client missed progress or notifications.
	EventRefetchFlagged
	// EventKeepalive: a transport wrote a keepalive on an idle stream.
	EventKeepalive
	// EventSlowConsumer: a transport cut off a connection or a stream
	// because its client stopped reading: a write waited past its
	// deadline (ErrSlowConsumer).
	EventSlowConsumer
	// EventProgressAfterEnd: a tool reported progress after its request
	// had ended (the report is refused with ErrRequestDone).
	EventProgressAfterEnd
)

// String returns the event's stable name, as logs and metrics use it.
func (k EventKind) String() string {
	switch k {
	case EventLateCancel:
		return "late_cancel"
	case EventProgressSent:
		return "progress_sent"
	case EventRefetchFlagged:
		return "refetch_flagged"
	case EventKeepalive:
		return "keepalive"
	case EventSlowConsumer:
		return "slow_consumer"
	}
	return "unknown"
}

// Event is what an EventObserver is told.
type Event struct {
	Kind EventKind
	// Transport is where it happened: "stdio" or "http"
	// (conn.Config.Transport), as in RequestRecord.
	Transport string
}

// ReportEvent tells the observers that want events (EventObserver) of ev.
// The server reports its own; a transport reports those only it can see:
// keepalives written, slow consumers cut off, a response it flagged for
// refetch itself (WithRefetchFlag).
func (s *Server) ReportEvent(ev Event) {
	for _, o := range s.opts.Observers {
		if eo, ok := o.(EventObserver); ok {
			eo.ObserveEvent(ev)
		}
	}
}
