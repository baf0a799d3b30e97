package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/server"
)

// maxRelayedState bounds the upstream requestState the gateway carries in
// its own across a 2026-07-28 input round: the downstream client echoes it
// on every retry.
const maxRelayedState = 64 << 10

// defaultRetryAfter is the retryAfterMs of an unavailable upstream that
// said nothing of its own.
const defaultRetryAfter = time.Second

// errRelayInput is what the gateway's per-call request handler answers a
// 2026-07-28 upstream's input round with when the downstream client is of
// that era too: the client ends the call with an *InputError carrying the
// round as the upstream sent it, and the gateway asks its own client the
// same questions in its own round.
var errRelayInput = errors.New("gateway: the input round is relayed to the downstream client")

// relayState is the gateway's requestState for an input round it asks
// downstream: the upstream it came from and either that upstream's own
// state (a 2026-07-28 upstream's round, relayed) or the held call waiting
// for the answers (a 2025-era upstream's requests) and its round. The
// server signs it, binding it to the tenant, the tool and the arguments.
type relayState struct {
	Upstream string          `json:"u"`
	State    json.RawMessage `json:"s,omitempty"`
	Held     string          `json:"h,omitempty"`
	Round    int             `json:"r,omitempty"`
}

// relayStateOf reads the gateway's state from a downstream retry; the
// zero state on a first attempt.
func relayStateOf(q *server.Request, upstream string) (relayState, error) {
	var st relayState
	if q.RequestState == nil {
		return st, nil
	}
	if err := json.Unmarshal(q.RequestState, &st); err != nil || st.Upstream != upstream {
		return st, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "the requestState was not issued for this tool")
	}
	return st, nil
}

// forwardTool is the handler of one upstream tool: it forwards the call
// and maps how it ended.
func (l *link) forwardTool(upstreamTool string, tp ToolPolicy) server.ToolHandler {
	return func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		f := l.begin(ctx, mcp.MethodToolsCall, call.Name)
		defer f.end()
		st, err := relayStateOf(&call.Request, l.up.Name)
		if err != nil {
			f.rec.Outcome = OutcomeFailed
			return nil, err
		}
		if st.Held != "" {
			res, err := l.g.resume(f.ctx, call, st, &f.rec)
			f.settle(res, err)
			return res, err
		}
		c, release, err := l.acquire(f.ctx, call.Tenant)
		if err != nil {
			f.rec.Outcome = OutcomeUnavailable
			return nil, unavailable(err)
		}
		o := &client.CallOptions{
			Idle: tp.Idle + l.g.opts.ClockSlack,
			Max:  tp.Max + l.g.opts.ClockSlack,
			// Upstream progress reaches the downstream through the call:
			// only an increasing value is reported (the client drops the
			// rest), which is what resets the server's idle clock, and the
			// server rate-limits, coalesces and bounds what it sends.
			OnProgress: func(p client.Progress) {
				var total float64
				if p.Total != nil {
					total = *p.Total
				}
				_ = call.ReportProgress(p.Progress, total, p.Message)
			},
			OnNotification: relayLog(&call.Request),
			Meta:           l.g.passMeta(f.ctx, call.Meta),
		}
		if len(st.State) > 0 || call.InputResponses != nil {
			o.Input = &client.InputAnswers{Responses: call.InputResponses, RequestState: st.State}
		}
		var args any
		if len(call.Arguments) > 0 {
			args = json.RawMessage(bytes.Clone(call.Arguments)) // a held call outlives the request's frame
		}
		if call.Era == mcp.Modern && c.Era() != mcp.Modern {
			// A 2025-era upstream may ask mid-call, which a 2026-07-28
			// client can answer only across requests: the call is held.
			h := l.g.hold(call, l.up.Name)
			o.OnRequest = h.ask
			// The upstream call runs apart from this request (it keeps
			// its span, not its cancellation), and ends with the gateway.
			cctx, cancel := context.WithCancelCause(context.WithoutCancel(f.ctx))
			stop := context.AfterFunc(l.g.ctx, func() { cancel(errClosing) })
			h.cancel = cancel
			l.g.heldCalls.Add(1)
			go func() {
				defer l.g.heldCalls.Done()
				defer release()
				defer stop()
				defer cancel(nil)
				res, err := c.CallTool(cctx, upstreamTool, args, o)
				l.record(err)
				var rec ForwardRecord
				if err != nil {
					err = l.callFailure(cctx, err, tp, &rec)
				}
				h.ended <- heldEnd{res, err, rec.CancelPropagated}
			}()
			f.rec.Reached = true
			res, err := h.serve(f.ctx, call, l.up.Name, &f.rec)
			f.rec.InUpstream = time.Since(f.start)
			f.settle(res, err)
			return res, err
		}
		defer release()
		o.OnRequest = l.relay(&call.Request, c)
		sent := time.Now()
		res, err := c.CallTool(f.ctx, upstreamTool, args, o)
		f.rec.InUpstream, f.rec.Reached = time.Since(sent), true
		l.record(err)
		if err == nil {
			f.settle(res, nil)
			return res, nil
		}
		return nil, l.callFailure(f.ctx, err, tp, &f.rec)
	}
}

// forward is one forwarded request's record and span.
type forward struct {
	ctx     context.Context
	rec     ForwardRecord
	start   time.Time
	endSpan func(string)
	l       *link
}

func (l *link) begin(ctx context.Context, method, name string) *forward {
	f := &forward{rec: ForwardRecord{Upstream: l.up.Name, Method: method, Name: name}, start: time.Now(), l: l}
	f.ctx, f.endSpan = l.g.span(ctx, l.up.Name, method, name)
	return f
}

func (f *forward) end() {
	f.rec.Total = time.Since(f.start)
	f.endSpan(string(f.rec.Outcome))
	f.l.g.obs.Forwarded(f.rec)
}

// settle records how a tool call that returned ended.
func (f *forward) settle(res *mcp.CallToolResult, err error) {
	var ir *server.InputRequired
	var te *mcp.ToolError
	switch {
	case errors.As(err, &ir):
		f.rec.Outcome = OutcomeInput
	case errors.As(err, &te):
		f.rec.Outcome = OutcomeFailed
		if te.Code == mcp.FailureOutcomeUnknown {
			f.rec.Outcome = OutcomeLost
		}
	case err != nil && f.ctx.Err() != nil:
		f.rec.Outcome = OutcomeCancelled
	case err != nil:
		f.rec.Outcome = OutcomeProtocolError
	case res != nil && res.IsError:
		f.rec.Outcome = OutcomeToolError
	default:
		f.rec.Outcome = OutcomeOK
	}
}

// callFailure maps how a forwarded request failed to what the downstream
// is told.
func (l *link) callFailure(ctx context.Context, err error, tp ToolPolicy, rec *ForwardRecord) error {
	var ce *client.CancelledError
	var de *client.DeadlineError
	var rpc *jsonrpc.Error
	var ie *client.InputError
	var tl *client.ResponseTooLargeError
	cancelled := errors.As(err, &ce)
	switch {
	case ctx.Err() != nil || cancelled:
		// The downstream cancelled, or the server's clock fired: the
		// server has its own terminal state and discards this.
		rec.Outcome = OutcomeCancelled
		if ce != nil {
			rec.CancelPropagated = ce.Cancel == client.CancelSent || ce.Cancel == client.CancelQueued
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	case errors.As(err, &ie) && errors.Is(err, errRelayInput):
		rec.Outcome = OutcomeInput
		return l.relayedInput(ie)
	case errors.As(err, &rpc):
		rec.Outcome = OutcomeProtocolError
		return upstreamRPCError(l.up.Name, rpc)
	case isUnreachable(err):
		rec.Outcome = OutcomeUnavailable
		return unavailable(err)
	case errors.Is(err, client.ErrConnectionLost):
		rec.Outcome = OutcomeLost
		return &mcp.ToolError{
			Code: mcp.FailureOutcomeUnknown,
			Message: fmt.Sprintf("the connection to upstream %q ended while the call was in flight: it may or may not have taken effect", l.up.Name) +
				"; check before calling again",
			Retryable: tp.Retry == server.RetrySafe,
		}
	case errors.As(err, &de):
		// The client's backstop fired before the server's clock: the
		// upstream was cancelled all the same.
		rec.Outcome = OutcomeCancelled
		rec.CancelPropagated = de.Cancel == client.CancelSent || de.Cancel == client.CancelQueued
		return &mcp.ToolError{Code: mcp.FailureTimeout, Message: fmt.Sprintf("upstream %q did not answer in time (%s clock)", l.up.Name, de.Clock)}
	case errors.As(err, &tl):
		rec.Outcome = OutcomeFailed
		return &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf(
			"upstream %q answered with more than the gateway takes in (%d bytes); the answer was dropped unread, and the call may have taken effect", l.up.Name, tl.Limit)}
	default:
		rec.Outcome = OutcomeFailed
		var se *client.StatusError
		if errors.As(err, &se) {
			return &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf("upstream %q answered HTTP %d", l.up.Name, se.Status)}
		}
		return &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf("upstream %q: %v", l.up.Name, err)}
	}
}

// upstreamRPCError is an upstream's JSON-RPC error as the downstream gets
// it: the same code where it still means the same thing downstream, and
// an internal error for the codes that speak of the gateway's own framing
// (a parse error, an invalid request), which the downstream client did not
// send. The message and data pass unchanged.
func upstreamRPCError(upstream string, e *jsonrpc.Error) error {
	switch e.Code {
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest:
		return jsonrpc.NewError(jsonrpc.CodeInternalError, "upstream %q refused the forwarded request (%d): %s", upstream, e.Code, e.Message).WithData(e.Data)
	}
	return e
}

// unavailable is the retryable failure of a request that never reached
// the upstream: the circuit was open, it was not connected, it could not
// be reached, or the gateway holds as much as it may.
func unavailable(err error) error {
	after := defaultRetryAfter
	var ue *errUnavailable
	var se *client.StatusError
	switch {
	case errors.As(err, &ue):
		after = max(ue.after, 10*time.Millisecond)
	case errors.As(err, &se) && se.RetryAfter != "":
		if d, ok := retry.ParseRetryAfter(se.RetryAfter, time.Now()); ok {
			after = d
		}
	}
	return &mcp.ToolError{Code: mcp.FailureUpstreamUnavailable, Message: strings.TrimPrefix(err.Error(), "gateway: "), Retryable: true, RetryAfter: after.Round(time.Millisecond)}
}

// lacks is the error an upstream's request gets when the downstream
// client did not declare the capability it needs.
func lacks(caps mcp.ClientCapabilities, method string) error {
	var have json.RawMessage
	switch method {
	case mcp.MethodElicit:
		have = caps.Elicitation
	case mcp.MethodCreateMessage:
		have = caps.Sampling
	case mcp.MethodListRoots:
		have = caps.Roots
	default:
		return jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "the gateway relays elicitation, sampling and roots requests only, not %s", method)
	}
	if have == nil {
		return jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "the downstream client did not declare the capability %s needs", method)
	}
	return nil
}

// relay answers the requests an upstream sends during one call, on the
// downstream client's behalf: a request on its 2025 session, or, for a
// 2026-07-28 upstream's input round when the downstream is of that era
// too, the gateway's own round (errRelayInput).
func (l *link) relay(q *server.Request, c *client.Client) client.RequestHandler {
	return func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		if err := lacks(q.ClientCapabilities, method); err != nil {
			return nil, err
		}
		if q.Era == mcp.Modern {
			return nil, errRelayInput // asked back as the gateway's own input_required
		}
		raw, err := q.CallClient(ctx, method, params)
		if errors.Is(err, server.ErrNoCapability) {
			return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "the downstream client did not declare the capability %s needs", method)
		}
		if err != nil {
			return nil, err
		}
		return raw, nil
	}
}

// relayLog passes an upstream's log messages for a call to the
// downstream client that made it, as far as it asked for them.
func relayLog(q *server.Request) func(string, json.RawMessage) {
	return func(method string, params json.RawMessage) {
		if method != mcp.NotificationMessage {
			return
		}
		var m struct {
			Level  mcp.LoggingLevel `json:"level"`
			Logger string           `json:"logger"`
			Data   json.RawMessage  `json:"data"`
		}
		if json.Unmarshal(params, &m) == nil && m.Level != "" {
			_ = q.Log(m.Level, m.Logger, m.Data)
		}
	}
}

// relayedInput turns an upstream's input_required result into the
// gateway's own.
func (l *link) relayedInput(ie *client.InputError) error {
	var round struct {
		InputRequests map[string]struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"` // passed on exactly as sent
		} `json:"inputRequests"`
		RequestState json.RawMessage `json:"requestState"`
	}
	if err := json.Unmarshal(ie.Result, &round); err != nil || len(round.InputRequests) == 0 {
		return &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf("upstream %q asked for input in a malformed input_required result", l.up.Name)}
	}
	if len(round.RequestState) > maxRelayedState {
		return &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf("upstream %q's requestState is larger than the gateway carries (%d bytes)", l.up.Name, maxRelayedState)}
	}
	reqs := make(map[string]mcp.InputRequest, len(round.InputRequests))
	for k, r := range round.InputRequests {
		reqs[k] = mcp.InputRequest{Method: r.Method, Params: r.Params}
	}
	state, _ := json.Marshal(relayState{Upstream: l.up.Name, State: round.RequestState})
	return &server.InputRequired{Requests: reqs, State: state}
}

// passMeta is what of the downstream request's _meta goes upstream: the
// caller's own members (an idempotency key among them), never the
// protocol's, which speak of this hop (the progress token, the
// 2026-07-28 era's per-request members), nor the caller's trace context,
// which the gateway's own span continues and replaces.
func (g *Gateway) passMeta(ctx context.Context, raw json.RawMessage) map[string]any {
	out := map[string]any{}
	if len(raw) > 0 {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil {
			for k, v := range m {
				switch {
				case k == mcp.MetaProgressToken, k == "traceparent", k == "tracestate", strings.HasPrefix(k, "io.modelcontextprotocol/"):
					continue
				}
				out[k] = v
			}
		}
	}
	if g.opts.Propagate != nil {
		for k, v := range g.opts.Propagate(ctx) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// forwardPrompt is the handler of one upstream prompt.
func (l *link) forwardPrompt(upstreamName string) server.PromptHandler {
	return func(ctx context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
		var res mcp.GetPromptResult
		name := upstreamName
		err := l.request(ctx, &req.Request, mcp.MethodPromptsGet, req.Name, upstreamName,
			mcp.GetPromptParams{Name: &name, Arguments: req.Arguments}, &res)
		if err != nil {
			return nil, err
		}
		return &res, nil
	}
}

// forwardRead is the handler of an upstream's resources and templates.
func (l *link) forwardRead() server.ResourceHandler {
	return func(ctx context.Context, req *server.ReadRequest) (*mcp.ReadResourceResult, error) {
		var res mcp.ReadResourceResult
		uri := req.URI
		if err := l.request(ctx, &req.Request, mcp.MethodResourcesRead, req.URI, req.URI, mcp.ReadResourceParams{URI: &uri}, &res); err != nil {
			return nil, err
		}
		return &res, nil
	}
}

// request forwards a request other than a tool call and decodes its
// result. Its failures are protocol errors: these methods have no failed
// result to carry them.
func (l *link) request(ctx context.Context, q *server.Request, method, downName, upName string, params, out any) error {
	f := l.begin(ctx, method, downName)
	defer f.end()
	c, release, err := l.acquire(f.ctx, q.Tenant)
	if err != nil {
		f.rec.Outcome = OutcomeUnavailable
		return asRPC(unavailable(err))
	}
	defer release()
	sent := time.Now()
	raw, err := c.Request(f.ctx, method, upName, params, &client.CallOptions{Meta: l.g.passMeta(f.ctx, q.Meta), OnNotification: relayLog(q)})
	f.rec.InUpstream, f.rec.Reached = time.Since(sent), true
	l.record(err)
	if err == nil {
		if uerr := json.Unmarshal(raw, out); uerr != nil {
			f.rec.Outcome = OutcomeFailed
			return jsonrpc.NewError(jsonrpc.CodeInternalError, "upstream %q answered %s with a malformed result", l.up.Name, method)
		}
		f.rec.Outcome = OutcomeOK
		return nil
	}
	return asRPC(l.callFailure(f.ctx, err, ToolPolicy{Retry: server.RetrySafe}, &f.rec))
}

// asRPC carries a gateway failure as a JSON-RPC error, its structured
// body in the data member: a method other than tools/call has no failed
// result.
func asRPC(err error) error {
	var te *mcp.ToolError
	if !errors.As(err, &te) {
		return err
	}
	code := jsonrpc.CodeInternalError
	if te.Retryable {
		code = mcp.CodeUnavailable
	}
	return jsonrpc.NewError(code, "%s", te.Message).WithData(te.Failure())
}

// span starts the span of a forwarded request when tracing is on.
func (g *Gateway) span(ctx context.Context, upstream, method, name string) (context.Context, func(string)) {
	if g.opts.Trace == nil {
		return ctx, func(string) {}
	}
	return g.opts.Trace(ctx, upstream, method, name)
}
