package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/outbound"
)

// SessionConfig says what kind of connection a Session serves.
type SessionConfig struct {
	// Legacy admits the initialize handshake and the 2025 revisions.
	Legacy bool
	// Modern admits stateless 2026-07-28 requests.
	Modern bool
	// TrackIDs rejects a request whose id is already in flight, and lets
	// notifications/cancelled find requests by id. Set it for stdio and
	// legacy HTTP sessions; modern HTTP scopes an id to its own stream.
	TrackIDs bool
	// StreamPerRequest is set when every request has its own response
	// stream (Streamable HTTP). It decides how the server ends a
	// subscriptions/listen it tears down: with a result on that stream, or,
	// on a shared channel such as stdio, with notifications/cancelled.
	StreamPerRequest bool
	// Name tells this session's requests apart from another session's in
	// the request log and in RequestRecord.Session, where JSON-RPC ids
	// repeat: a legacy HTTP session's tag, say. Empty for stdio and the
	// stateless era. It must not be a secret.
	Name string
	// Transport names the transport, for observers: "stdio" or "http".
	Transport string
}

// StdioSession returns the configuration of a stdio connection: both eras,
// ids tracked, one shared channel. (A function, so that no caller can change
// it for every other.)
func StdioSession() SessionConfig {
	return SessionConfig{Legacy: true, Modern: true, TrackIDs: true, Transport: "stdio"}
}

// Session is one client's view of the server: the legacy handshake state if
// there is one, the requests in flight, and open subscriptions. A stdio
// connection is one session; so is a legacy Streamable HTTP session.
//
// A transport decodes each inbound frame and passes it to Handle with the
// outbound.Queue its responses go to, then drains that queue.
type Session struct {
	srv *Server
	cfg SessionConfig

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

// NewSession starts a session. Close it when its connection ends.
func (s *Server) NewSession(cfg SessionConfig) *Session {
	ss := &Session{
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

// NewOutboundQueue returns a queue sized by Options.OutboxCapacity, for a
// transport's outbound stream.
func (s *Server) NewOutboundQueue() *outbound.Queue {
	return outbound.New(s.opts.OutboxCapacity)
}

// SetNotifyOutbox sets where notifications not tied to a request go, such
// as a legacy tools/list_changed: the shared stdout of a stdio connection,
// or the GET stream of a legacy HTTP session. Nil drops them.
func (ss *Session) SetNotifyOutbox(out *outbound.Queue) {
	ss.mu.Lock()
	ss.notify = out
	ss.mu.Unlock()
}

// Version returns the negotiated legacy protocol version, or "" before
// initialize.
func (ss *Session) Version() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.version
}

// Handle processes one decoded inbound message. Responses and notifications
// for a request go to out.
//
// For a request, ctx bounds its life: when ctx ends the request is
// cancelled with context.Cause(ctx) as its cause. Pass the connection's
// context on stdio and for legacy HTTP sessions, where a dropped stream is
// not a cancellation, and the request's own context for modern HTTP, where
// it is.
//
// Handle may block before dispatching a request while out is full of
// responses the client has not read: that is the backpressure that keeps a
// client from making the server buffer without bound.
func (ss *Session) Handle(ctx context.Context, m jsonrpc.Message, out *outbound.Queue) {
	switch m.Kind {
	case jsonrpc.KindRequest:
		ss.handleRequest(ctx, m, out, Prepared{})
	case jsonrpc.KindNotification:
		ss.handleNotification(m)
	case jsonrpc.KindResponse:
		if !ss.deliver(m) {
			ss.srv.log.Debug("ignoring a response to no outstanding request", "id", m.ID)
		}
	}
}

// Reject answers a frame that failed to decode. A frame that looked like a
// notification is never answered (notifications get no response, even
// broken ones); anything else gets err, with its id when one was read.
func (ss *Session) Reject(ctx context.Context, m jsonrpc.Message, err *jsonrpc.Error, out *outbound.Queue) {
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
func (ss *Session) newRequest(ctx context.Context, m jsonrpc.Message, out *outbound.Queue, meta *mcp.RequestMeta) *inflight {
	r := &inflight{sess: ss, out: out, id: m.ID, method: m.Method, start: time.Now(), tenant: TenantFrom(ctx)}
	info := RequestInfo{ID: r.id, Method: r.method, Transport: ss.cfg.Transport,
		Session: ss.cfg.Name, Tenant: r.tenant, Start: r.start}
	if meta != nil {
		info.TraceParent, info.TraceState = meta.TraceParent, meta.TraceState
	}
	r.obsCtx = ss.srv.observeStart(ctx, info)
	return r
}

// Prepared is what a transport already knows of a request it hands to
// HandleRequest.
type Prepared struct {
	// Meta and RawMeta are the request's params._meta as
	// mcp.ParseRequestMeta read it (without error), so that the server
	// does not parse it again. A nil Meta has the server parse it.
	Meta    *mcp.RequestMeta
	RawMeta json.RawMessage
	// RunHere runs a call admitted at once on the calling goroutine, to
	// its end, before HandleRequest returns, instead of on a handler
	// goroutine. It is for a transport that serves each request on a
	// goroutine of its own and writes nothing before the request's final
	// frame (a Streamable HTTP request answered with one JSON body): the
	// call is not handed to another goroutine and its answer handed back.
	// Cancellation and deadlines work as ever; they come from other
	// goroutines.
	RunHere bool
	// Begin, when set with RunHere, is called on the calling goroutine
	// just before an admitted call's handler runs there (and never for a
	// request that does not run a handler here): a transport that must
	// go on reading meanwhile arms a handoff to another goroutine here.
	Begin func()
}

// HandleRequest is Handle for a request, with what the transport already
// knows of it.
func (ss *Session) HandleRequest(ctx context.Context, m jsonrpc.Message, p Prepared, out *outbound.Queue) {
	ss.handleRequest(ctx, m, out, p)
}

func (ss *Session) handleRequest(ctx context.Context, m jsonrpc.Message, out *outbound.Queue, p Prepared) {
	if out.Reserve(ctx) != nil {
		return // the stream is gone or the connection is closing
	}
	meta, rawMeta := p.Meta, p.RawMeta
	var metaErr error
	if meta == nil {
		parsed, raw, err := mcp.ParseRequestMeta(m.Params)
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

	ss.dispatch(r, &incoming{ctx: ctx, params: m.Params, meta: meta, rawMeta: rawMeta, runHere: p.RunHere, begin: p.Begin})
}

// selectEra decides, per request, which era serves it: a request that
// declares a protocol version in _meta is modern and stateless; anything
// else belongs to the legacy handshake.
func (ss *Session) selectEra(r *inflight, meta *mcp.RequestMeta, hasMeta bool) *jsonrpc.Error {
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
// closed, or if ctx had already ended, which aborts the request.
func (ss *Session) track(ctx context.Context, r *inflight) bool {
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
	stop := context.AfterFunc(ctx, func() { r.abort(context.Cause(ctx)) })
	r.mu.Lock()
	r.stop = stop
	r.mu.Unlock()
	// A ctx that had already ended runs the abort at once (on its own
	// goroutine): the request is over before it started.
	return ctx.Err() == nil
}

// forget removes a request that reached its terminal state.
func (ss *Session) forget(r *inflight) {
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

func (ss *Session) legacyLogLevel() mcp.LoggingLevel {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.logLevel
}

// Streams reports whether a request can send messages before its result,
// so that a transport with per-request streams (Streamable HTTP) knows, before
// dispatching it, whether to open an event stream or answer with one JSON
// body. It can when it is a subscription, or a call (tool, resource read,
// prompt, completion, routed method) that asked for progress, asked for log messages (the
// request's logLevel in the modern era; logging/setLevel in the legacy
// one), or — in the legacy era — may be asked for input by its tool,
// because the client declared sampling, elicitation or roots.
func (ss *Session) Streams(method string, meta *mcp.RequestMeta) bool {
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

func (ss *Session) handleNotification(m jsonrpc.Message) {
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

func (ss *Session) handlerStarted() {
	ss.mu.Lock()
	ss.handlers++
	ss.mu.Unlock()
}

func (ss *Session) handlerReturned() {
	ss.mu.Lock()
	ss.handlers--
	ss.signalQuietLocked()
	ss.mu.Unlock()
}

// quietLocked reports whether nothing is in flight: no request waiting,
// running or streaming, and no handler running (one may outlive its
// request).
func (ss *Session) quietLocked() bool { return len(ss.all) == 0 && ss.handlers == 0 }

// signalQuietLocked wakes Wait once the session is quiet.
func (ss *Session) signalQuietLocked() {
	if ss.idle != nil && ss.quietLocked() {
		close(ss.idle)
		ss.idle = nil
	}
}

// Wait blocks until nothing is in flight in the session — no request
// waiting for admission, running or streaming, and no handler still
// running — or ctx ends.
func (ss *Session) Wait(ctx context.Context) error {
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

// Idle reports whether nothing is in flight in the session: no request
// waiting, running or streaming. An idle legacy HTTP session can be ended
// without cutting anything short.
func (ss *Session) Idle() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.quietLocked()
}

// Close ends the session: every request still in flight or queued is
// cancelled with cause (ErrConnectionClosed if nil) and later requests are
// ignored. It does not wait for handlers to return; Wait does.
func (ss *Session) Close(cause error) {
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

// Shutdown ends the session gracefully: new requests are refused as
// unavailable, subscriptions are ended by the server, and calls in flight
// (running or waiting for admission) may finish until ctx ends; whatever
// is still in flight then is cancelled with ErrShutdown. It returns ctx's
// error if calls had to be cancelled. Server.Shutdown does this for every
// session at once.
func (ss *Session) Shutdown(ctx context.Context) error {
	ss.drain()
	err := ss.Wait(ctx)
	ss.Close(ErrShutdown)
	return err
}

// drain refuses the session's new requests and ends its subscriptions.
func (ss *Session) drain() {
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
