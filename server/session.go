package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
)

// session is one client's view of the server, the conn.Session a
// transport feeds: the legacy handshake state if there is one, the
// requests in flight, and open subscriptions. Its exported methods are
// conn.Session's, documented there.
type session struct {
	srv   *Server
	cfg   conn.Config
	metas mcp.MetaCache // the last _meta parsed: a client repeats its own on every request

	mu           sync.Mutex
	all          map[*inflight]struct{}
	byID         map[jsonrpc.ID]*inflight
	subs         map[*inflight]struct{}
	resourceSubs map[string]struct{}                 // legacy resources/subscribe
	pending      map[jsonrpc.ID]chan jsonrpc.Message // server-to-client requests awaiting answers
	nextReq      uint64
	initialized  bool
	version      string
	clientCaps   mcp.ClientCapabilities
	clientInfo   *mcp.Implementation
	logLevel     mcp.LoggingLevel
	notify       *outbound.Queue
	draining     bool
	closed       bool
	handlers     int           // tool handlers running
	idle         chan struct{} // closed when nothing is in flight any more (quietLocked)
	workers      *workers      // handler goroutines kept between calls
}

// NewSession starts a session, for a transport: one per stdio connection
// or legacy HTTP session, one for all stateless requests. Close it when its
// connection ends.
func (s *Server) NewSession(cfg conn.Config) conn.Session { return s.newSession(cfg) }

func (s *Server) newSession(cfg conn.Config) *session {
	ss := &session{
		srv:          s,
		cfg:          cfg,
		all:          make(map[*inflight]struct{}),
		byID:         make(map[jsonrpc.ID]*inflight),
		subs:         make(map[*inflight]struct{}),
		resourceSubs: make(map[string]struct{}),
		pending:      make(map[jsonrpc.ID]chan jsonrpc.Message),
		workers:      newWorkers(),
	}
	s.mu.Lock()
	s.sessions[ss] = struct{}{}
	ss.draining = s.draining // a session opened during a shutdown takes no requests
	s.mu.Unlock()
	return ss
}

// NewQueue returns a queue sized by Options.QueueCapacity.
func (ss *session) NewQueue() *outbound.Queue {
	return outbound.New(ss.srv.opts.QueueCapacity)
}

// SetNotifyQueue sets where notifications not tied to a request go.
func (ss *session) SetNotifyQueue(out *outbound.Queue) {
	ss.mu.Lock()
	ss.notify = out
	ss.mu.Unlock()
}

// Version returns the negotiated legacy protocol version.
func (ss *session) Version() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.version
}

// Handle processes one decoded inbound message; see conn.Session.Handle
// for ctx and backpressure.
func (ss *session) Handle(ctx context.Context, m jsonrpc.Message, out *outbound.Queue) {
	switch m.Kind {
	case jsonrpc.KindRequest:
		ss.handleRequest(ctx, m, out, conn.Prepared{})
	case jsonrpc.KindNotification:
		ss.handleNotification(m)
	case jsonrpc.KindResponse:
		if !ss.deliver(m) {
			ss.srv.log.Debug("ignoring a response to no outstanding request", "id", m.ID)
		}
	}
}

// Reject answers a frame that failed to decode, unless it looked like a
// notification.
func (ss *session) Reject(ctx context.Context, m jsonrpc.Message, err *jsonrpc.Error, out *outbound.Queue) {
	if m.Kind == jsonrpc.KindNotification || m.Kind == jsonrpc.KindResponse {
		ss.srv.log.Debug("ignoring a malformed message", "kind", m.Kind.String(), "method", m.Method, "err", err.Message)
		return
	}
	if out.Reserve(ctx) != nil {
		return
	}
	r := ss.newRequest(ctx, m, out, nil)
	r.fail(err)
}

// newRequest starts a request's life: it is known from here on, and the
// observers are told (their context is the one the request runs in). meta
// is the request's params._meta when it could be read.
func (ss *session) newRequest(ctx context.Context, m jsonrpc.Message, out *outbound.Queue, meta *mcp.RequestMeta) *inflight {
	r := &inflight{sess: ss, out: out, id: m.ID, method: m.Method, start: time.Now(), tenant: TenantFrom(ctx)}
	info := RequestInfo{ID: r.id, Method: r.method, Transport: ss.cfg.Transport,
		Session: ss.cfg.Name, Tenant: r.tenant, Start: r.start}
	if meta != nil {
		info.TraceParent, info.TraceState = meta.TraceParent, meta.TraceState
	}
	r.obsCtx = ss.srv.observeStart(ctx, info)
	return r
}

// HandleRequest is Handle for a request, with what the transport already
// knows of it.
func (ss *session) HandleRequest(ctx context.Context, m jsonrpc.Message, p conn.Prepared, out *outbound.Queue) {
	ss.handleRequest(ctx, m, out, p)
}

func (ss *session) handleRequest(ctx context.Context, m jsonrpc.Message, out *outbound.Queue, p conn.Prepared) {
	if out.Reserve(ctx) != nil {
		return // the stream is gone or the connection is closing
	}
	meta, rawMeta := p.Meta, p.RawMeta
	var metaErr error
	if meta == nil {
		parsed, raw, err := ss.metas.Parse(TenantFrom(ctx), m.Params)
		meta, rawMeta, metaErr = &parsed, raw, err
	}
	r := ss.newRequest(ctx, m, out, meta)
	ctx = r.obsCtx
	if metaErr != nil {
		r.fail(invalidParams(metaErr))
		return
	}
	if e := ss.selectEra(r, meta, rawMeta != nil); e != nil {
		r.fail(e)
		return
	}

	ss.mu.Lock()
	draining, closed := ss.draining, ss.closed
	_, dup := ss.byID[m.ID]
	dup = dup && ss.cfg.TrackIDs
	ss.mu.Unlock()
	switch {
	case closed:
		out.Unreserve()
		return
	case dup:
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "request id %s is already in flight; ids must be unique among a client's outstanding requests", m.ID))
		return
	case draining:
		r.fail(unavailable())
		return
	}

	in := &incoming{ctx: ctx, params: m.Params, meta: meta, rawMeta: rawMeta, runHere: p.RunHere, begin: p.Begin}
	if p.SessionCtx {
		in.sessionDone = ctx.Done()
	}
	ss.dispatch(r, in)
}

// selectEra decides, per request, which era serves it: a request that
// declares a protocol version in _meta is modern and stateless; anything
// else belongs to the legacy handshake.
func (ss *session) selectEra(r *inflight, meta *mcp.RequestMeta, hasMeta bool) *jsonrpc.Error {
	if meta.IsModern() {
		if !ss.cfg.Modern {
			return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "protocol version %s is not served on this connection", *meta.ProtocolVersion)
		}
		r.era = mcp.Modern
		if err := meta.CheckModern(hasMeta); err != nil {
			return invalidParams(err)
		}
		if v := *meta.ProtocolVersion; !mcp.IsModernVersion(v) {
			return jsonrpc.NewError(mcp.CodeUnsupportedVersion, "unsupported protocol version %q", v).
				WithData(mcp.UnsupportedVersionData{Supported: mcp.SupportedVersions(), Requested: v})
		}
		return nil
	}
	if !ss.cfg.Legacy {
		r.era = mcp.Modern
		return invalidParams(meta.CheckModern(hasMeta))
	}
	r.era = mcp.Legacy
	ss.mu.Lock()
	initialized := ss.initialized
	ss.mu.Unlock()
	if !initialized && r.method != mcp.MethodInitialize && r.method != mcp.MethodPing {
		if !ss.cfg.Modern {
			return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "the session is not initialized: send initialize first")
		}
		return invalidParams(meta.CheckModern(hasMeta))
	}
	return nil
}

// track gives the request its context and registers it as in flight, so
// that a cancellation can find it. It returns false if the session is
// closed, or if ctx had already ended, which aborts the request. A ctx
// whose Done channel is sessionDone ends only with the session, whose
// Close aborts the request: it is not watched (conn.Prepared.SessionCtx).
func (ss *session) track(ctx context.Context, r *inflight, sessionDone <-chan struct{}) bool {
	// The handler's context keeps ctx's values but not its cancellation:
	// it ends only when the request reaches its terminal state (release),
	// so a handler can never observe an ending that was not recorded first
	// and return a result that would then be taken for a completion.
	r.ctx, r.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		r.cancel(ErrConnectionClosed)
		r.out.Unreserve()
		return false
	}
	ss.all[r] = struct{}{}
	if ss.cfg.TrackIDs {
		ss.byID[r.id] = r
	}
	if r.sub != nil {
		ss.subs[r] = struct{}{}
	}
	ss.mu.Unlock()
	if sessionDone != nil && ctx.Done() == sessionDone && ctx.Err() == nil {
		return true
	}
	stop := context.AfterFunc(ctx, func() { r.abort(context.Cause(ctx)) })
	r.mu.Lock()
	r.stop = stop
	r.mu.Unlock()
	// A ctx that had already ended runs the abort at once (on its own
	// goroutine): the request is over before it started.
	return ctx.Err() == nil
}

// forget removes a request that reached its terminal state.
func (ss *session) forget(r *inflight) {
	ss.mu.Lock()
	delete(ss.all, r)
	if ss.byID[r.id] == r {
		delete(ss.byID, r.id)
	}
	delete(ss.subs, r)
	ss.signalQuietLocked()
	ss.mu.Unlock()
	if r.sub != nil {
		r.sub.end()
	}
}

func (ss *session) legacyLogLevel() mcp.LoggingLevel {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.logLevel
}

// Streams reports whether a request can send messages before its result;
// conn.Session.Streams says when it can.
func (ss *session) Streams(method string, meta *mcp.RequestMeta) bool {
	switch method {
	case mcp.MethodListen:
		return true
	case mcp.MethodToolsCall, mcp.MethodResourcesRead, mcp.MethodPromptsGet, mcp.MethodComplete:
	default:
		if builtIn(method) || ss.srv.lookupRoute(method) == nil {
			return false
		}
	}
	if meta.ProgressToken != nil {
		return true
	}
	if meta.IsModern() {
		return meta.LogLevel != nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	caps := ss.clientCaps
	return ss.logLevel != "" || caps.Sampling != nil || caps.Elicitation != nil || caps.Roots != nil
}

func (ss *session) handleNotification(m jsonrpc.Message) {
	switch m.Method {
	case mcp.NotificationCancelled:
		var p mcp.CancelledParams
		if err := json.Unmarshal(m.Params, &p); err != nil || !p.RequestID.IsValid() {
			ss.srv.log.Debug("ignoring a malformed cancellation", "params", string(m.Params))
			return
		}
		ss.mu.Lock()
		r := ss.byID[p.RequestID]
		ss.mu.Unlock()
		cause := ErrPeerCancelled
		if p.Reason != "" {
			cause = fmt.Errorf("%w: %s", ErrPeerCancelled, p.Reason)
		}
		if r == nil || !r.abort(cause) {
			// Unknown, finished (or finishing: its end won the race), or
			// never cancellable (initialize): the cancellation crossed
			// with the response, or was a mistake.
			ss.srv.log.Debug("ignoring a cancellation for no running request", "id", p.RequestID)
			ss.srv.ReportEvent(Event{Kind: EventLateCancel, Transport: ss.cfg.Transport})
		}
	case mcp.NotificationInitialized:
	default:
		ss.srv.log.Debug("ignoring a notification", "method", m.Method)
	}
}

func (ss *session) handlerStarted() {
	ss.mu.Lock()
	ss.handlers++
	ss.mu.Unlock()
}

func (ss *session) handlerReturned() {
	ss.mu.Lock()
	ss.handlers--
	ss.signalQuietLocked()
	ss.mu.Unlock()
}

// quietLocked reports whether nothing is in flight: no request waiting,
// running or streaming, and no handler running (one may outlive its
// request).
func (ss *session) quietLocked() bool { return len(ss.all) == 0 && ss.handlers == 0 }

// signalQuietLocked wakes Wait once the session is quiet.
func (ss *session) signalQuietLocked() {
	if ss.idle != nil && ss.quietLocked() {
		close(ss.idle)
		ss.idle = nil
	}
}

// Wait blocks until nothing is in flight in the session or ctx ends.
func (ss *session) Wait(ctx context.Context) error {
	ss.mu.Lock()
	if ss.quietLocked() {
		ss.mu.Unlock()
		return nil
	}
	if ss.idle == nil {
		ss.idle = make(chan struct{})
	}
	idle := ss.idle
	ss.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Idle reports whether nothing is in flight in the session.
func (ss *session) Idle() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.quietLocked()
}

// Close cancels every request still in flight or queued with cause
// (ErrConnectionClosed if nil) and ignores later requests.
func (ss *session) Close(cause error) {
	if cause == nil {
		cause = ErrConnectionClosed
	}
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return
	}
	ss.closed = true
	close(ss.workers.closed)
	pending := make([]*inflight, 0, len(ss.all))
	for r := range ss.all {
		pending = append(pending, r)
	}
	ss.mu.Unlock()
	for _, r := range pending {
		r.abort(cause)
	}
	ss.srv.mu.Lock()
	delete(ss.srv.sessions, ss)
	ss.srv.mu.Unlock()
}

// Shutdown ends the session gracefully (drain, Wait until ctx ends, then
// Close with ErrShutdown).
func (ss *session) Shutdown(ctx context.Context) error {
	ss.drain()
	err := ss.Wait(ctx)
	ss.Close(ErrShutdown)
	return err
}

// drain refuses the session's new requests and ends its subscriptions.
func (ss *session) drain() {
	ss.mu.Lock()
	ss.draining = true
	subs := make([]*inflight, 0, len(ss.subs))
	for r := range ss.subs {
		subs = append(subs, r)
	}
	ss.mu.Unlock()
	for _, r := range subs {
		r.endSubscription("server shutting down")
	}
}
