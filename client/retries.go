package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// Retries say how CallToolWithRetries makes a call again. The zero value
// (or a nil pointer) plans by a Planner of zero retry.Options: every tool
// is Unsafe, so only a request that provably never left the client is sent
// again.
type Retries struct {
	// Planner decides, from its table, its attempt cap and the target's
	// retry budget, whether a failed attempt is made again and after what
	// pause. Share one Planner among all the calls to one server, so that
	// they spend one budget; nil means a new one per call, of zero
	// retry.Options.
	Planner *retry.Planner
	// Tool is the tool as the server listed it (ListTools), or nil. Its
	// annotations and advertised retry class count only when the
	// planner's table trusts the server (retry.Table.TrustServer).
	Tool *mcp.Tool
}

// CallToolWithRetries calls a tool as CallTool does and, when an attempt
// fails, asks r's planner whether to make it again: each new attempt has a
// new JSON-RPC id and the same arguments, so the same idempotency key
// (args[mcp.ArgIdempotencyKey], or o.Meta's mcp.MetaIdempotencyKey); a
// Conditional tool called without a key is planned as Unsafe. The planner's pause honours a server's retry-after
// (retryAfterMs, HTTP Retry-After on a 429 or 503) and never ends after
// the call's deadline.
//
// One maximum deadline bounds the whole call, every attempt and pause
// included: o.Max (DefaultMax when zero) from now, or ctx's deadline when
// that is earlier. o's Idle applies to each attempt.
//
// It returns the first attempt that succeeds, or a failed tool result
// that may not be retried (IsError set, nil error), or the last attempt's
// error as CallTool returned it (a *DeadlineError, a *jsonrpc.Error,
// ErrConnectionLost, ...). A call that may have taken effect and that
// nothing deduplicates — an Unsafe call whose request may have reached the
// server — is never made again: it ends in a *retry.ReconcileError, which
// says what to find out before calling the tool again and wraps the
// attempt's error. A caller's cancel (ctx ending with any cause but a
// *DeadlineError) ends the call at once, with no retry: the attempt's
// error, or between attempts a *CancelledError.
//
// Why the planner stopped (attempts or budget spent, no time left) is
// reported to its retry.Options.Observe, with every other decision.
func (c *Client) CallToolWithRetries(ctx context.Context, name string, args map[string]any, o *CallOptions, r *Retries) (*mcp.CallToolResult, error) {
	var rs Retries
	if r != nil {
		rs = *r
	}
	if rs.Planner == nil {
		rs.Planner = retry.NewPlanner(retry.Options{})
	}
	limit := DefaultMax
	if o != nil && o.Max > 0 {
		limit = o.Max
	}
	// A deadline the caller set earlier stays the call's, with its own
	// cause (WithDeadlineCause is then a plain cancel).
	ctx, stop := context.WithDeadlineCause(ctx, time.Now().Add(limit), &DeadlineError{Clock: MaxClock, After: limit})
	defer stop()
	var arguments any // a nil map is no arguments, not "arguments": null
	if args != nil {
		arguments = args
	}
	var opts CallOptions
	if o != nil {
		opts = *o
	}
	req := &Request{Method: mcp.MethodToolsCall, Name: name, Params: map[string]any{"name": name, "arguments": arguments}, Options: &opts}
	raw, err, d := retrying(ctx, req, func(ctx context.Context, req *Request) (json.RawMessage, error) {
		return c.CallToolRaw(ctx, name, arguments, req.Options)
	}, &Plan{Planner: rs.Planner, Tool: rs.Tool}, nil)
	var maxFired *DeadlineError
	var between *CancelledError
	switch {
	case errors.As(d.Err, &between) && errors.As(context.Cause(ctx), &maxFired):
		return nil, maxFired // the maximum deadline fired between attempts
	case between != nil:
		return nil, between // the caller cancelled between attempts
	case ctx.Err() != nil && !errors.As(context.Cause(ctx), &maxFired):
		return decodeResult(raw, err) // the caller cancelled an attempt: no retry
	}
	// When the maximum deadline fired, the planner saw it passed: no
	// retry, and a *ReconcileError for an Unsafe call.
	if rec, ok := errors.AsType[*retry.ReconcileError](d.Err); ok {
		return nil, rec
	}
	return decodeResult(raw, err) // a failed result the planner did not retry stands
}

// decodeResult is a tools/call's answer as CallTool returns it.
func decodeResult(raw json.RawMessage, err error) (*mcp.CallToolResult, error) {
	if err != nil {
		return nil, err
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("client: tools/call answered %s: %w", clip(raw), err)
	}
	return &res, nil
}

// keyOf is the idempotency key a call carries, where the server reads it:
// the idempotencyKey argument, or else _meta's mcp.MetaIdempotencyKey. A
// key is a non-empty string: the server runs a call whose key is null as
// one without, which nothing dedupes.
func keyOf(args map[string]any, o *CallOptions) string {
	if k, _ := args[mcp.ArgIdempotencyKey].(string); k != "" {
		return k
	}
	if o == nil {
		return ""
	}
	switch k := o.Meta[mcp.MetaIdempotencyKey].(type) {
	case string:
		return k
	case json.RawMessage:
		var s string
		if json.Unmarshal(k, &s) == nil {
			return s
		}
	}
	return ""
}
