package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// ErrProgressNotIncreasing is returned by CallRequest.ReportProgress for a
// value that is not above the last one sent; the report is dropped, because
// MCP requires progress to increase with every notification.
var ErrProgressNotIncreasing = errors.New("server: progress must increase with every report")

// CallRequest is what a tool handler sees of its call.
type CallRequest struct {
	// ID is the JSON-RPC id. It correlates messages; it is never an
	// idempotency key.
	ID jsonrpc.ID
	// Name is the tool's name.
	Name string
	// Arguments are the call's arguments, already validated against the
	// tool's input schema. Nil when the call had none.
	Arguments json.RawMessage
	// Meta is the request's raw params._meta (nil when absent), for keys
	// the protocol does not define.
	Meta json.RawMessage
	// Era and ProtocolVersion say how the request is being served.
	Era             mcp.Era
	ProtocolVersion string
	// ClientCapabilities are the capabilities the client declared: in the
	// request's _meta (modern) or at initialize (legacy).
	ClientCapabilities mcp.ClientCapabilities
	// ClientInfo is the client's self-description, when it gave one.
	ClientInfo *mcp.Implementation

	r *inflight
}

// HasProgressToken reports whether the client asked for progress.
func (c *CallRequest) HasProgressToken() bool { return c.r.token != nil }

// ReportProgress sends a progress notification if the client asked for
// progress; without a progress token it does nothing and returns nil.
// total <= 0 means the total is unknown.
//
// Values must increase: a value not above the last one sent is dropped and
// ErrProgressNotIncreasing returned. After the request has ended (completed,
// cancelled, timed out) nothing is sent and ErrRequestDone is returned.
// Reporting never blocks: under pressure a queued older value for the same
// request is replaced by the newer one.
func (c *CallRequest) ReportProgress(progress, total float64, message string) error {
	return c.r.reportProgress(progress, total, message)
}

// Log sends a notifications/message for this request if the client asked
// for messages at this level: in the modern era through the request's
// logLevel _meta (none means no messages), in the legacy era through
// logging/setLevel (info and above until the client sets a level).
// Messages are dropped, like progress, when the client reads too slowly.
func (c *CallRequest) Log(level mcp.LoggingLevel, logger string, data any) error {
	return c.r.log(level, logger, data)
}

// inflight is one request between its arrival and its terminal state.
type inflight struct {
	sess     *Session
	out      *Outbox
	id       jsonrpc.ID
	method   string
	toolName string
	tool     *registeredTool
	era      mcp.Era
	start    time.Time
	ctx      context.Context
	cancel   context.CancelCauseFunc
	stop     func() bool // unhooks the parent-context watch
	call     *CallRequest
	token    *jsonrpc.ID // progress token
	logLevel mcp.LoggingLevel
	sub      *subscription // subscriptions/listen only

	queued bool   // guarded by admission.mu
	seq    uint64 // arrival order while queued; guarded by admission.mu

	mu           sync.Mutex
	outcome      Outcome // zero while running
	ended        time.Time
	lastProgress float64
	sentProgress bool
	progressDrop uint64 // non-increasing reports refused
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

// respond ends the request with a response, unless it already ended. It
// reports whether the response was queued.
func (r *inflight) respond(o Outcome, data []byte, rec RequestRecord) bool {
	if !r.claim(o) {
		return false
	}
	r.sess.forget(r)
	if err := r.out.pushReserved(FrameFinal, r, data); err != nil {
		r.sess.srv.log.Error("response not queued", "id", r.id, "method", r.method, "err", err)
	}
	r.release(ErrRequestDone)
	r.record(rec)
	return true
}

// abort ends the request without a response: it was cancelled. Nothing
// more is written for it, and its queued progress is withdrawn.
func (r *inflight) abort(cause error) bool {
	if !r.claim(Cancelled) {
		return false
	}
	r.sess.forget(r)
	r.sess.srv.admit.remove(r)
	r.out.discard(r)
	r.out.unreserve()
	r.release(cause)
	r.record(RequestRecord{Outcome: Cancelled, Cause: cause})
	return true
}

func (r *inflight) release(cause error) {
	if r.stop != nil {
		r.stop()
	}
	if r.cancel != nil {
		r.cancel(cause)
	}
}

// record completes rec with what the request knows and reports it.
func (r *inflight) record(rec RequestRecord) {
	rec.ID, rec.Method, rec.Tool, rec.Era = r.id, r.method, r.toolName, r.era
	r.mu.Lock()
	rec.Start, rec.Duration = r.start, r.ended.Sub(r.start)
	r.mu.Unlock()
	r.sess.srv.report(rec)
}

// report logs a terminal record and hands it to the hook.
func (s *Server) report(rec RequestRecord) {
	if s.log.Enabled(context.Background(), slog.LevelInfo) {
		attrs := []slog.Attr{
			slog.Any("id", rec.ID),
			slog.String("method", rec.Method),
		}
		if rec.Tool != "" {
			attrs = append(attrs, slog.String("tool", rec.Tool))
		}
		attrs = append(attrs,
			slog.String("outcome", rec.Outcome.String()),
			slog.Duration("duration", rec.Duration),
		)
		if rec.Cause != nil {
			attrs = append(attrs, slog.String("cause", rec.Cause.Error()))
		}
		if rec.ErrorCode != 0 {
			attrs = append(attrs, slog.Int64("code", rec.ErrorCode))
		}
		if rec.IsError {
			attrs = append(attrs, slog.Bool("is_error", true))
		}
		s.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
	}
	if s.opts.OnRequestDone != nil {
		s.opts.OnRequestDone(rec)
	}
}

// encodeResult encodes a result response for this request, adding the
// modern era's resultType and serverInfo.
func (r *inflight) encodeResult(res mcp.Result) ([]byte, error) {
	if r.era == mcp.Modern {
		res = r.sess.srv.modernize(res)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return jsonrpc.AppendResult(make([]byte, 0, len(raw)+48), r.id, raw), nil
}

// modernize returns res with resultType and serverInfo set, copying a
// handler's result rather than writing into it: a handler may return the
// same value to many calls at once.
func (s *Server) modernize(res mcp.Result) mcp.Result {
	if c, ok := res.(*mcp.CallToolResult); ok {
		cp := *c
		res = &cp
	}
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
	return r.respond(Failed, data, RequestRecord{Outcome: Failed, ErrorCode: e.Code})
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
	return r.respond(Completed, data, RequestRecord{Outcome: Completed, IsError: isErr})
}

func (r *inflight) reportProgress(progress, total float64, message string) error {
	if r.token == nil {
		return nil
	}
	p := mcp.ProgressParams{ProgressToken: *r.token, Progress: progress, Message: message}
	if total > 0 {
		p.Total = &total
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcome != 0 {
		return ErrRequestDone
	}
	if r.sentProgress && progress <= r.lastProgress {
		r.progressDrop++
		return ErrProgressNotIncreasing
	}
	params, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := r.out.pushProgress(r, jsonrpc.AppendNotification(nil, mcp.NotificationProgress, params)); err != nil {
		return err
	}
	r.lastProgress, r.sentProgress = progress, true
	return nil
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
	return r.out.pushDroppable(r, jsonrpc.AppendNotification(nil, mcp.NotificationMessage, params))
}
