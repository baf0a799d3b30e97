package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/outbound"
)

// inflight is one request between its arrival and its terminal state.
type inflight struct {
	sess        *session
	out         *outbound.Queue
	id          jsonrpc.ID
	method      string
	toolName    string          // tools/call only
	args        json.RawMessage // tools/call: the arguments, summarised in the record (secrets left out)
	secret      []string
	era         mcp.Era
	start       time.Time
	ctx         context.Context
	cancel      context.CancelCauseFunc
	stop        func() bool                               // unhooks the parent-context watch; guarded by mu
	lane        *lane                                     // admission lane of a call
	group       *lane                                     // its tool's LimitGroup's lane, or nil
	exec        func(context.Context) (mcp.Result, error) // the handler, for calls; nil for a tool's (handler)
	handler     CallHandler                               // tools/call: the tool's handler, run with call
	call        *CallRequest
	finish      func(mcp.Result, error) (mcp.Result, *jsonrpc.Error) // how its return reaches the wire
	token       *jsonrpc.ID                                          // progress token
	scoped      bool                                                 // the request may ask for input (see verifyRetry)
	scope       string                                               // what, besides its method, an input_required state is bound to: the tool, prompt or resource
	scopeTenant string                                               // the tenant it is bound to
	scopeArgs   []byte                                               // the arguments it is bound to as well
	logLevel    mcp.LoggingLevel
	sub         *subscription // subscriptions/listen only

	queued bool   // guarded by admission.mu
	seq    uint64 // arrival order while queued; guarded by admission.mu

	retryable bool            // a timeout may be retried as it is (a class other than mcp.RetryUnsafe)
	tenant    string          // who the request is for (see WithTenant)
	obsCtx    context.Context // what the observers' RequestStarted returned
	coalesced atomic.Uint64   // its progress replaced before it was read (see pressureCounter)
	dropped   atomic.Uint64   // its messages dropped for lack of room
	size      int64           // bytes of the request's params, held until its handler returns

	mu           sync.Mutex
	annotations  map[string]string // see Request.Annotate
	queuedAt     time.Time         // when the call joined an admission queue (set by admit, before any runner can take it)
	ranAt        time.Time         // when its handler started
	outcome      Outcome           // zero while running
	ended        time.Time
	deadlines    Deadlines
	clock        *time.Timer // fires at the earlier deadline (see armDeadlines)
	activeAt     time.Time   // the last useful activity, from which the idle clock runs
	lastProgress float64
	hasProgress  bool                // a valid report was accepted
	progressDrop uint64              // non-increasing reports refused
	progressHeld uint64              // reports the rate limit held back and a newer one replaced
	lastSent     time.Time           // when the last progress notification was queued
	pending      *mcp.ProgressParams // the newest progress, held back by the rate limit
	flushTimer   *time.Timer         // sends pending when the rate limit allows
}

func (r *inflight) NoteCoalesced() { r.coalesced.Add(1) }
func (r *inflight) NoteDropped()   { r.dropped.Add(1) }

// FrameTaken reports that the transport took a progress notification of
// this request to write, or its response carrying the refetch flag.
func (r *inflight) FrameTaken(progress, flagged bool) {
	tr := r.sess.cfg.Transport
	if progress {
		r.sess.srv.ReportEvent(Event{Kind: EventProgressSent, Transport: tr})
	}
	if flagged {
		r.sess.srv.ReportEvent(Event{Kind: EventRefetchFlagged, Transport: tr})
	}
}

// done reports whether the terminal state is recorded.
func (r *inflight) done() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcome != 0
}

// claim records the terminal state if none is recorded yet. It is the
// single point where the cancel-versus-complete race is decided.
func (r *inflight) claim(o Outcome) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcome != 0 {
		return false
	}
	r.outcome = o
	r.ended = time.Now()
	return true
}

// ending says how a request ends: its terminal state, why, and the final
// message, if it gets one.
type ending struct {
	outcome Outcome
	cause   error // the handler's context's cause; nil means ErrRequestDone
	// withdraw takes back what the request still has queued (progress,
	// its place in an admission queue) instead of flushing it first.
	withdraw bool
	// message builds the final message; it runs only if this ending wins,
	// under the request's lock (it may read the clocks). An ending with
	// neither a message nor fixed data, or whose message returns no data,
	// ends the request without a response.
	message func() final
	// fixed is the final message when it was built beforehand (message
	// nil): a result or an error, with no closure to allocate for it.
	fixed final
}

// final is a request's last message and what its record says of it.
type final struct {
	data []byte
	kind outbound.Kind // outbound.Final, or outbound.Essential for a notification that ends it
	rec  RequestRecord
}

// end is the one way a request ends, whatever ended it: a result, an
// error, a cancellation, a deadline, the server ending a subscription. The
// first ending recorded wins (claim); for the loser end does nothing and
// returns false. The winner stops the clocks, leaves the session, sends its
// final message (after the latest held-back progress, unless it withdraws)
// or withdraws what it queued, ends the handler's context with its cause,
// and is recorded once.
func (r *inflight) end(e ending) bool {
	if !r.claim(e.outcome) {
		return false
	}
	r.mu.Lock()
	f := e.fixed
	if e.message != nil {
		f = e.message()
	}
	if f.data != nil && !e.withdraw && r.pending != nil {
		r.pushProgressLocked(r.pending) // the last progress a client sees is the latest
	}
	r.stopClocksLocked()
	r.mu.Unlock()
	r.sess.forget(r)
	if e.withdraw {
		r.sess.srv.admit.remove(r)
		r.out.Discard(r)
	}
	switch {
	case f.data == nil:
		r.out.Unreserve()
		if e.outcome == Cancelled && r.sess.cfg.StreamPerRequest {
			// The stream belongs to this request alone: end it now, with
			// no response, rather than leave it open until the client
			// gives up.
			r.out.Close()
		}
	case f.kind == outbound.Essential:
		if r.out.PushReserved(f.kind, r, f.data) != nil {
			r.out.Unreserve()
		}
	default:
		if err := r.out.PushFinal(r, f.data, f.rec.ErrorCode); err != nil {
			r.sess.srv.log.Error("response not queued", "id", r.id, "method", r.method, "err", err)
		}
	}
	r.release(cmp.Or(e.cause, ErrRequestDone))
	f.rec.Outcome, f.rec.Cause = e.outcome, e.cause
	r.record(f.rec)
	return true
}

// abort ends the request without a response: it was cancelled. Nothing
// more is written for it, and its queued progress is withdrawn.
func (r *inflight) abort(cause error) bool {
	return r.end(ending{outcome: Cancelled, cause: cause, withdraw: true})
}

func (r *inflight) release(cause error) {
	r.mu.Lock()
	stop := r.stop
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
	if r.cancel != nil {
		r.cancel(cause)
	}
}

// record completes rec with what the request knows and reports it.
func (r *inflight) record(rec RequestRecord) {
	rec.ID, rec.Method, rec.Tool, rec.Era = r.id, r.method, r.toolName, r.era
	rec.Transport, rec.Session, rec.Tenant = r.sess.cfg.Transport, r.sess.cfg.Name, r.tenant
	if rec.Outcome != Cancelled && rec.Outcome != TimedOut {
		rec.Cause = nil
	}
	r.mu.Lock()
	rec.Start, rec.Duration = r.start, r.ended.Sub(r.start)
	rec.ProgressRefused, rec.ProgressRateLimited = r.progressDrop, r.progressHeld
	rec.ProgressCoalesced, rec.ProgressDropped = r.coalesced.Load(), r.dropped.Load()
	if !r.ranAt.IsZero() && !r.queuedAt.IsZero() {
		rec.Queued = r.ranAt.Sub(r.queuedAt)
	}
	rec.Annotations = r.annotations
	rec.args, rec.secret = r.args, r.secret
	r.annotations = nil // the record's now; later Annotate calls get a map of their own
	obsCtx := r.obsCtx
	r.mu.Unlock()
	r.sess.srv.report(obsCtx, rec)
}

// report logs a terminal record and hands it to the observers. A listen
// stream that ends because its client left is how every modern client says
// goodbye, not news: it is logged at debug.
func (s *Server) report(ctx context.Context, rec RequestRecord) {
	level := slog.LevelInfo
	if rec.Method == mcp.MethodListen && rec.Outcome == Cancelled {
		level = slog.LevelDebug
	}
	if s.log.Enabled(ctx, level) {
		s.logRequest(ctx, level, rec)
	}
	s.observeEnd(ctx, rec)
}

// logRequest writes rec's line. A call's arguments are the caller's data
// (a file's contents, a message's text), not the operator's: the line
// holds their summary only when the logger is at debug.
func (s *Server) logRequest(ctx context.Context, level slog.Level, rec RequestRecord) {
	args := s.log.Enabled(ctx, slog.LevelDebug)
	h, ok := s.log.Handler().(attrsHandler)
	if !ok {
		s.log.Handler().Handle(ctx, requestLine(level, rec, args))
		return
	}
	ap := linePool.Get().(*[maxLineAttrs]slog.Attr)
	attrs := requestAttrs(ap[:0], rec, args)
	h.HandleAttrs(ctx, rec.endedAt(), level, requestMsg, attrs)
	clear(ap[:min(len(attrs), maxLineAttrs)]) // nothing of this request's kept alive by the pool
	linePool.Put(ap)
}

// attrsHandler is a slog.Handler that takes a record's parts as they
// are, without a slog.Record: logbuf's handlers, which mcprel's command
// uses. The request line, written for every request at the default
// level, then goes from the array requestAttrs fills to the line's bytes,
// never copied into a record and out again.
type attrsHandler interface {
	HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error
}

// requestMsg is the request line's message.
const requestMsg = "request"

// maxLineAttrs is what a request line's attributes take without
// growing: a request's annotations can add more.
const maxLineAttrs = 16

// linePool holds the arrays of request lines' attributes: passed to an
// interface's method, an array of the stack's would escape to the heap,
// one for every request.
var linePool = sync.Pool{New: func() any { return new([maxLineAttrs]slog.Attr) }}

// requestLine is the log record of a request that ended: built here
// rather than through Logger.LogAttrs, because it is written for every
// request at the default level — so without the caller's stack (a
// source would name this function, for every request alike), with the
// id's value unboxed and its attributes in one array, timed when the
// request ended; with args, a call's argument summary.
func requestLine(level slog.Level, rec RequestRecord, args bool) slog.Record {
	var buf [maxLineAttrs]slog.Attr
	r := slog.NewRecord(rec.endedAt(), level, requestMsg, 0)
	r.AddAttrs(requestAttrs(buf[:0], rec, args)...)
	return r
}

// endedAt is when the request ended, the time of its log line.
func (rec RequestRecord) endedAt() time.Time {
	if rec.Start.IsZero() {
		return time.Now()
	}
	return rec.Start.Add(rec.Duration)
}

// requestAttrs appends the request line's attributes to attrs, a call's
// argument summary among them with args.
func requestAttrs(attrs []slog.Attr, rec RequestRecord, args bool) []slog.Attr {
	attrs = append(attrs,
		slog.Attr{Key: "id", Value: rec.ID.LogValue()},
		slog.String("method", rec.Method))
	if rec.Era != 0 {
		attrs = append(attrs, slog.String("era", rec.Era.String()))
	}
	if rec.Transport != "" {
		attrs = append(attrs, slog.String("transport", rec.Transport))
	}
	if rec.Session != "" {
		attrs = append(attrs, slog.String("session", rec.Session))
	}
	if rec.Tool != "" {
		attrs = append(attrs, slog.String("tool", rec.Tool))
		if args {
			if summary := rec.ArgumentSummary(); summary != "" {
				attrs = append(attrs, slog.String("args", summary))
			}
		}
	}
	attrs = append(attrs,
		slog.String("outcome", rec.Outcome.String()),
		slog.Duration("duration", rec.Duration),
	)
	if rec.Queued > 0 {
		attrs = append(attrs, slog.Duration("queued", rec.Queued))
	}
	if len(rec.Annotations) > 0 {
		for _, k := range slices.Sorted(maps.Keys(rec.Annotations)) {
			attrs = append(attrs, slog.String(k, rec.Annotations[k]))
		}
	}
	if rec.Cause != nil {
		attrs = append(attrs, slog.String("cause", rec.Cause.Error()))
	}
	if rec.ErrorCode != 0 {
		attrs = append(attrs, slog.Int64("code", rec.ErrorCode))
	}
	if rec.IsError {
		attrs = append(attrs, slog.Bool("is_error", true))
	}
	if rec.ProgressRefused > 0 {
		attrs = append(attrs, slog.Uint64("progress_refused", rec.ProgressRefused))
	}
	if rec.ProgressDropped > 0 {
		attrs = append(attrs, slog.Uint64("progress_dropped", rec.ProgressDropped))
	}
	if rec.ProgressRateLimited > 0 {
		attrs = append(attrs, slog.Uint64("progress_rate_limited", rec.ProgressRateLimited))
	}
	return attrs
}

// encodeResult encodes a result response for this request, adding the
// modern era's resultType and serverInfo.
func (r *inflight) encodeResult(res mcp.Result) ([]byte, error) {
	if c, ok := res.(*mcp.CallToolResult); ok && c != nil {
		if data, ok := r.sess.srv.appendToolResponse(nil, r.era, r.id, c); ok {
			return data, nil
		}
	}
	return r.sess.srv.encodeResultReflect(r.era, r.id, res)
}

// encodeResultReflect is encodeResult by json.Marshal, for any result.
func (s *Server) encodeResultReflect(era mcp.Era, id jsonrpc.ID, res mcp.Result) ([]byte, error) {
	if era == mcp.Modern {
		if data, ok, err := s.encodeModern(id, res); ok || err != nil {
			return data, err
		}
		res = s.modernize(res)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return jsonrpc.AppendResult(make([]byte, 0, len(raw)+48), id, raw), nil
}

// encodeModern encodes a modern result response the quick way, when the
// result sets neither a resultType nor _meta of its own (a plain tool
// result): the result is encoded as it is, and resultType and serverInfo
// are written in front of its members, so that it is neither copied nor
// encoded twice. ok is false for a result it leaves to modernize.
func (s *Server) encodeModern(id jsonrpc.ID, res mcp.Result) (data []byte, ok bool, err error) {
	if b := res.Base(); b.ResultType != "" || len(b.Meta) > 0 {
		return nil, false, nil
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, true, err
	}
	if len(raw) < 2 || raw[0] != '{' {
		return nil, false, nil
	}
	out := make([]byte, 0, len(raw)+len(s.modernHead)+48)
	out = append(out, `{"jsonrpc":"2.0","id":`...)
	out = id.AppendJSON(out)
	out = append(out, `,"result":`...)
	out = append(out, s.modernHead...)
	if raw[1] != '}' {
		out = append(out, ',')
	}
	out = append(out, raw[1:]...)
	return append(out, '}'), true, nil
}

// modernize returns res with resultType and serverInfo set, on a shallow
// copy of whatever result type it is rather than in the handler's value:
// a handler may return the same value to many calls at once.
func (s *Server) modernize(res mcp.Result) mcp.Result {
	v := reflect.ValueOf(res).Elem()
	cp := reflect.New(v.Type())
	cp.Elem().Set(v)
	res = cp.Interface().(mcp.Result)
	b := res.Base()
	if b.ResultType == "" {
		b.ResultType = mcp.ResultComplete
	}
	meta := make(mcp.Meta, len(b.Meta)+1)
	maps.Copy(meta, b.Meta)
	meta[mcp.MetaServerInfo] = s.serverInfo
	b.Meta = meta
	return res
}

// fail ends the request with a JSON-RPC error.
func (r *inflight) fail(e *jsonrpc.Error) bool {
	data := jsonrpc.AppendError(nil, r.id, e)
	return r.end(ending{outcome: Failed, fixed: final{data: data, rec: RequestRecord{ErrorCode: e.Code}}})
}

// succeed ends the request with a result.
func (r *inflight) succeed(res mcp.Result) bool {
	data, err := r.encodeResult(res)
	if err != nil {
		r.sess.srv.log.Error("encoding a result failed", "id", r.id, "method", r.method, "err", err)
		return r.fail(jsonrpc.NewError(jsonrpc.CodeInternalError, "internal error: the result could not be encoded"))
	}
	isErr := false
	if c, ok := res.(*mcp.CallToolResult); ok {
		isErr = c.IsError
	}
	return r.end(ending{outcome: Completed, fixed: final{data: data, rec: RequestRecord{IsError: isErr}}})
}

func (r *inflight) reportProgress(progress, total float64, message string) error {
	r.mu.Lock()
	if r.outcome != 0 {
		r.mu.Unlock()
		// The request has ended and its record is out: a tool that goes
		// on reporting is told so here, and observers by an event.
		r.sess.srv.ReportEvent(Event{Kind: EventProgressAfterEnd, Transport: r.sess.cfg.Transport})
		return ErrRequestDone
	}
	defer r.mu.Unlock()
	if r.hasProgress && progress <= r.lastProgress {
		r.progressDrop++
		return ErrProgressNotIncreasing
	}
	// A valid report is useful activity, whether or not the client asked
	// to hear about it: it restarts the idle clock.
	r.lastProgress, r.hasProgress = progress, true
	r.touchLocked()
	if r.token == nil {
		return nil
	}
	p := mcp.ProgressParams{ProgressToken: *r.token, Progress: progress, Message: message}
	if total > 0 {
		p.Total = &total
	}
	now := time.Now()
	if wait := r.lastSent.Add(r.sess.srv.opts.ProgressInterval).Sub(now); !r.lastSent.IsZero() && wait > 0 {
		// Too soon after the last one: keep only the newest (encoded only
		// if it is ever sent), and send it when the interval has passed.
		if r.pending != nil {
			r.progressHeld++
		}
		r.pending = &p
		if r.flushTimer == nil {
			r.flushTimer = time.AfterFunc(wait, r.flushProgress)
		}
		return nil
	}
	// This one is the newest: anything held back is older and must never
	// follow it.
	if r.pending != nil {
		r.progressHeld++
	}
	r.pending = nil
	r.lastSent = now
	return r.pushProgressLocked(&p)
}

// pushProgressLocked encodes a progress notification and queues it.
func (r *inflight) pushProgressLocked(p *mcp.ProgressParams) error {
	params, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return r.out.PushProgress(r, jsonrpc.AppendNotification(nil, mcp.NotificationProgress, params))
}

// flushProgress sends the progress the rate limit held back.
func (r *inflight) flushProgress() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushTimer = nil
	if r.outcome != 0 || r.pending == nil {
		return
	}
	p := r.pending
	r.pending = nil
	r.lastSent = time.Now()
	r.pushProgressLocked(p)
}

func (r *inflight) log(level mcp.LoggingLevel, logger string, data any) error {
	if !level.Valid() {
		return errors.New("server: unknown logging level " + string(level))
	}
	min := r.logLevel
	if r.era == mcp.Legacy {
		min = r.sess.legacyLogLevel()
	}
	if min == "" || !level.AtLeast(min) {
		return nil
	}
	params, err := json.Marshal(mcp.LoggingMessageParams{Level: level, Logger: logger, Data: data})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcome != 0 {
		return ErrRequestDone
	}
	return r.out.PushDroppable(r, jsonrpc.AppendNotification(nil, mcp.NotificationMessage, params))
}
