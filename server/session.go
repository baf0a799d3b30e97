package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
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
}

// StdioSession is the configuration of a stdio connection: both eras, ids
// tracked, one shared channel.
var StdioSession = SessionConfig{Legacy: true, Modern: true, TrackIDs: true}

// Session is one client's view of the server: the legacy handshake state if
// there is one, the requests in flight, and open subscriptions. A stdio
// connection is one session; so is a legacy Streamable HTTP session.
//
// A transport decodes each inbound frame and passes it to Handle with the
// Outbox its responses go to, then drains that Outbox.
type Session struct {
	srv *Server
	cfg SessionConfig

	mu          sync.Mutex
	all         map[*inflight]struct{}
	byID        map[jsonrpc.ID]*inflight
	subs        map[*inflight]struct{}
	initialized bool
	version     string
	clientCaps  mcp.ClientCapabilities
	clientInfo  *mcp.Implementation
	logLevel    mcp.LoggingLevel
	notify      *Outbox
	draining    bool
	closed      bool
	handlers    int           // tool handlers running
	idle        chan struct{} // closed when handlers drops to zero
}

// NewSession starts a session. Close it when its connection ends.
func (s *Server) NewSession(cfg SessionConfig) *Session {
	ss := &Session{
		srv:  s,
		cfg:  cfg,
		all:  make(map[*inflight]struct{}),
		byID: make(map[jsonrpc.ID]*inflight),
		subs: make(map[*inflight]struct{}),
	}
	s.mu.Lock()
	s.sessions[ss] = struct{}{}
	s.mu.Unlock()
	return ss
}

// SetNotifyOutbox sets where notifications not tied to a request go, such
// as a legacy tools/list_changed: the shared stdout of a stdio connection,
// or the GET stream of a legacy HTTP session. Nil drops them.
func (ss *Session) SetNotifyOutbox(out *Outbox) {
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
func (ss *Session) Handle(ctx context.Context, m jsonrpc.Message, out *Outbox) {
	switch m.Kind {
	case jsonrpc.KindRequest:
		ss.handleRequest(ctx, m, out)
	case jsonrpc.KindNotification:
		ss.handleNotification(m)
	case jsonrpc.KindResponse:
		// Responses answer server-to-client requests; none is outstanding
		// that this message could belong to.
		ss.srv.log.Debug("ignoring a response to no outstanding request", "id", m.ID)
	}
}

// Reject answers a frame that failed to decode. A frame that looked like a
// notification is never answered (notifications get no response, even
// broken ones); anything else gets err, with its id when one was read.
func (ss *Session) Reject(ctx context.Context, m jsonrpc.Message, err *jsonrpc.Error, out *Outbox) {
	if m.Kind == jsonrpc.KindNotification || m.Kind == jsonrpc.KindResponse {
		ss.srv.log.Debug("ignoring a malformed message", "kind", m.Kind.String(), "method", m.Method, "err", err.Message)
		return
	}
	if out.reserve(ctx) != nil {
		return
	}
	r := &inflight{sess: ss, out: out, id: m.ID, method: m.Method, start: time.Now()}
	r.fail(err)
}

func (ss *Session) handleRequest(ctx context.Context, m jsonrpc.Message, out *Outbox) {
	if out.reserve(ctx) != nil {
		return // the stream is gone or the connection is closing
	}
	r := &inflight{sess: ss, out: out, id: m.ID, method: m.Method, start: time.Now()}

	meta, rawMeta, err := mcp.ParseRequestMeta(m.Params)
	if err != nil {
		r.fail(invalidParams(err))
		return
	}
	if e := ss.selectEra(r, &meta, rawMeta != nil); e != nil {
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
		out.unreserve()
		return
	case dup:
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "request id %s is already in flight; ids must be unique among a client's outstanding requests", m.ID))
		return
	case draining:
		r.fail(unavailable())
		return
	}

	switch r.era {
	case mcp.Modern:
		ss.dispatchModern(ctx, r, m.Params, &meta, rawMeta)
	default:
		ss.dispatchLegacy(ctx, r, m.Params, &meta, rawMeta)
	}
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

func (ss *Session) dispatchLegacy(ctx context.Context, r *inflight, params json.RawMessage, meta *mcp.RequestMeta, rawMeta json.RawMessage) {
	switch r.method {
	case mcp.MethodInitialize:
		ss.initialize(r, params)
	case mcp.MethodPing:
		r.succeed(&mcp.EmptyResult{})
	case mcp.MethodSetLevel:
		var p mcp.SetLevelParams
		if err := decodeParams(params, &p); err != nil {
			r.fail(err)
			return
		}
		if p.Level == "" {
			r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.level is required"))
			return
		}
		ss.mu.Lock()
		ss.logLevel = p.Level
		ss.mu.Unlock()
		r.succeed(&mcp.EmptyResult{})
	case mcp.MethodToolsList:
		ss.listTools(r, params)
	case mcp.MethodToolsCall:
		ss.callTool(ctx, r, params, meta, rawMeta)
	default:
		r.fail(jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %q", r.method))
	}
}

// removedInModern are the methods of the handshake era that the 2026-07-28
// revision removed; they get a method-not-found that says so.
var removedInModern = map[string]bool{
	mcp.MethodInitialize: true, mcp.MethodPing: true, mcp.MethodSetLevel: true,
	mcp.MethodSubscribe: true, mcp.MethodUnsubscribe: true,
}

func (ss *Session) dispatchModern(ctx context.Context, r *inflight, params json.RawMessage, meta *mcp.RequestMeta, rawMeta json.RawMessage) {
	switch r.method {
	case mcp.MethodDiscover:
		ttl := ss.srv.opts.ListTTL.Milliseconds()
		r.succeed(&mcp.DiscoverResult{
			Cacheable:         mcp.Cacheable{TTLMs: &ttl, CacheScope: "public"},
			SupportedVersions: mcp.SupportedVersions(),
			Capabilities:      ss.srv.capabilities(),
			Instructions:      ss.srv.opts.Instructions,
		})
	case mcp.MethodToolsList:
		ss.listTools(r, params)
	case mcp.MethodToolsCall:
		ss.callTool(ctx, r, params, meta, rawMeta)
	case mcp.MethodListen:
		ss.listen(ctx, r, params)
	default:
		if removedInModern[r.method] {
			r.fail(jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %q is not part of protocol version %s", r.method, mcp.Version20260728))
			return
		}
		r.fail(jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %q", r.method))
	}
}

func (ss *Session) initialize(r *inflight, params json.RawMessage) {
	var p mcp.InitializeParams
	if err := decodeParams(params, &p); err != nil {
		r.fail(err)
		return
	}
	if p.ProtocolVersion == "" {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.protocolVersion is required"))
		return
	}
	version := mcp.NegotiateLegacy(p.ProtocolVersion)
	ss.mu.Lock()
	if ss.initialized {
		ss.mu.Unlock()
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "the session is already initialized"))
		return
	}
	ss.initialized = true
	ss.version = version
	ss.clientCaps = p.Capabilities
	info := p.ClientInfo
	ss.clientInfo = &info
	ss.mu.Unlock()
	r.succeed(&mcp.InitializeResult{
		ProtocolVersion: version,
		Capabilities:    ss.srv.capabilities(),
		ServerInfo:      ss.srv.info,
		Instructions:    ss.srv.opts.Instructions,
	})
}

func (ss *Session) listTools(r *inflight, params json.RawMessage) {
	var p mcp.ListParams
	if err := decodeParams(params, &p); err != nil {
		r.fail(err)
		return
	}
	if p.Cursor != nil {
		// Every tool fits on the first page, so no cursor was ever issued.
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid cursor %q", *p.Cursor))
		return
	}
	res := &mcp.ListToolsResult{Tools: ss.srv.listTools()}
	if res.Tools == nil {
		res.Tools = []mcp.Tool{}
	}
	if r.era == mcp.Modern {
		ttl := ss.srv.opts.ListTTL.Milliseconds()
		res.Cacheable = mcp.Cacheable{TTLMs: &ttl, CacheScope: "public"}
	}
	r.succeed(res)
}

func (ss *Session) callTool(ctx context.Context, r *inflight, params json.RawMessage, meta *mcp.RequestMeta, rawMeta json.RawMessage) {
	var p mcp.CallToolParams
	if err := decodeParams(params, &p); err != nil {
		r.fail(err)
		return
	}
	if p.Name == nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.name is required"))
		return
	}
	r.toolName = *p.Name
	rt := ss.srv.lookupTool(*p.Name)
	if rt == nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown tool %q", *p.Name))
		return
	}
	if len(p.Arguments) > 0 && p.Arguments[0] != '{' && string(p.Arguments) != "null" {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.arguments must be an object"))
		return
	}
	if string(p.Arguments) == "null" {
		p.Arguments = nil
	}
	if err := rt.validate(p.Arguments); err != nil {
		var te *mcp.ToolError
		errors.As(err, &te)
		r.succeed(te.Result())
		return
	}

	r.tool = rt
	r.token = meta.ProgressToken
	call := &CallRequest{ID: r.id, Name: *p.Name, Arguments: p.Arguments, Meta: rawMeta, Era: r.era, r: r}
	if r.era == mcp.Modern {
		call.ProtocolVersion = *meta.ProtocolVersion
		call.ClientCapabilities = *meta.ClientCapabilities
		call.ClientInfo = meta.ClientInfo
		if meta.LogLevel != nil {
			r.logLevel = *meta.LogLevel
		}
	} else {
		ss.mu.Lock()
		call.ProtocolVersion, call.ClientCapabilities, call.ClientInfo = ss.version, ss.clientCaps, ss.clientInfo
		ss.mu.Unlock()
	}
	r.call = call
	if !ss.track(ctx, r) {
		return
	}

	switch ss.srv.admit.admit(r) {
	case admitRun:
		go ss.srv.runCalls(r)
	case admitQueued:
		// A finishing handler goroutine will pick it up.
	case admitRefused:
		r.fail(overloaded(ss.srv.opts.OverloadRetryAfter))
	}
}

// track gives the request its context and registers it as in flight, so
// that a cancellation can find it. It returns false if ctx already ended.
func (ss *Session) track(ctx context.Context, r *inflight) bool {
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		r.cancel(ErrConnectionClosed)
		r.out.unreserve()
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
	r.stop = context.AfterFunc(ctx, func() { r.abort(context.Cause(ctx)) })
	return true
}

// forget removes a request that reached its terminal state.
func (ss *Session) forget(r *inflight) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.all, r)
	if ss.byID[r.id] == r {
		delete(ss.byID, r.id)
	}
	delete(ss.subs, r)
}

func (ss *Session) legacyLogLevel() mcp.LoggingLevel {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.logLevel == "" {
		return mcp.LevelInfo
	}
	return ss.logLevel
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
		if r == nil {
			// Unknown, finished, or never cancellable (initialize): the
			// cancellation crossed with the response, or was a mistake.
			ss.srv.log.Debug("ignoring a cancellation for no running request", "id", p.RequestID)
			return
		}
		cause := ErrPeerCancelled
		if p.Reason != "" {
			cause = fmt.Errorf("%w: %s", ErrPeerCancelled, p.Reason)
		}
		r.abort(cause)
	case mcp.NotificationInitialized:
	default:
		ss.srv.log.Debug("ignoring a notification", "method", m.Method)
	}
}

// runCalls runs r and then, with the same goroutine, every queued call the
// admission hands over, until none is waiting.
func (s *Server) runCalls(r *inflight) {
	for r != nil {
		r.sess.runCall(r)
		r = s.admit.next(r)
	}
}

func (ss *Session) runCall(r *inflight) {
	if r.done() { // cancelled while it waited in the queue
		return
	}
	ss.handlerStarted()
	defer ss.handlerReturned()
	start := time.Now()
	res, err := ss.invoke(r)
	ran := time.Since(start)

	discarded := true
	if !r.done() {
		res, rpcErr := toolResult(res, err)
		if rpcErr != nil {
			discarded = !r.fail(rpcErr)
		} else {
			discarded = !r.succeed(res)
		}
	}
	rec := HandlerRecord{ID: r.id, Tool: r.toolName, Ran: ran, Discarded: discarded}
	if discarded {
		r.mu.Lock()
		rec.Overrun = max(0, start.Add(ran).Sub(r.ended))
		outcome := r.outcome
		r.mu.Unlock()
		ss.srv.log.Info("handler returned after the request ended; result discarded",
			"id", r.id, "tool", r.toolName, "outcome", outcome.String(), "overrun", rec.Overrun)
	}
	if h := ss.srv.opts.OnHandlerDone; h != nil {
		h(rec)
	}
}

// invoke calls the tool handler, turning a panic into an internal error.
func (ss *Session) invoke(r *inflight) (res *mcp.CallToolResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			ss.srv.log.Error("tool handler panicked", "id", r.id, "tool", r.toolName,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res, err = nil, &mcp.ToolError{Code: mcp.FailureInternal, Message: "the tool failed unexpectedly"}
		}
	}()
	return r.tool.handler(r.ctx, r.call)
}

func (ss *Session) handlerStarted() {
	ss.mu.Lock()
	ss.handlers++
	ss.mu.Unlock()
}

func (ss *Session) handlerReturned() {
	ss.mu.Lock()
	ss.handlers--
	if ss.handlers == 0 && ss.idle != nil {
		close(ss.idle)
		ss.idle = nil
	}
	ss.mu.Unlock()
}

// Wait blocks until no tool handler of this session is running, or ctx
// ends.
func (ss *Session) Wait(ctx context.Context) error {
	ss.mu.Lock()
	if ss.handlers == 0 {
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
// unavailable, subscriptions are ended by the server, and running calls may
// finish until ctx ends; whatever is still running then is cancelled with
// ErrShutdown. It returns ctx's error if calls had to be cancelled.
func (ss *Session) Shutdown(ctx context.Context) error {
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
	err := ss.Wait(ctx)
	ss.Close(ErrShutdown)
	return err
}

func decodeParams(params json.RawMessage, v any) *jsonrpc.Error {
	if len(params) == 0 {
		return nil
	}
	if err := json.Unmarshal(params, v); err != nil {
		return invalidParams(err)
	}
	return nil
}

// invalidParams turns a decoding error into a -32602 whose message names
// the member at fault.
func invalidParams(err error) *jsonrpc.Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %s must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	}
	return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %v", err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "float32", "float64":
		return "a number"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	}
	return "of another type"
}

func overloaded(retryAfter time.Duration) *jsonrpc.Error {
	te := &mcp.ToolError{Code: mcp.FailureOverloaded, Message: "the server is at its concurrency limit and its queue is full", Retryable: true, RetryAfter: retryAfter}
	return jsonrpc.NewError(mcp.CodeOverloaded, "server overloaded: retry after %d ms", retryAfter.Milliseconds()).WithData(te.Failure())
}

func unavailable() *jsonrpc.Error {
	te := &mcp.ToolError{Code: mcp.FailureShuttingDown, Message: "the server is shutting down and takes no new requests", Retryable: true}
	return jsonrpc.NewError(mcp.CodeUnavailable, "server shutting down").WithData(te.Failure())
}

var _ = slog.LevelInfo
