package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// Request is one request the client sends, as an Interceptor sees it: a
// tools/call (CallTool, CallToolRaw, CallToolTask's first request), a
// listing page, or any Request. The handshake and a task's polls are the
// client's own and pass no interceptor.
type Request struct {
	// Method is the JSON-RPC method; Name what its Mcp-Name header
	// carries (a tool's name for tools/call).
	Method, Name string
	// Params are the request's params as the caller gave them; for
	// tools/call a map with "name" and "arguments".
	Params any
	// Options are the request's clocks and callbacks (never nil in an
	// interceptor). An interceptor may read them, and must not change
	// them: another attempt sends the same.
	Options *CallOptions

	opts CallOptions // what Options points to, for a request that copies its caller's
}

// Key returns the idempotency key the request carries, where a server
// reads it: its idempotencyKey argument, or else _meta's
// mcp.MetaIdempotencyKey; "" for none. A key is a non-empty string.
func (r *Request) Key() string {
	if p, ok := r.Params.(map[string]any); ok {
		switch args := p["arguments"].(type) {
		case map[string]any:
			if k, _ := args[mcp.ArgIdempotencyKey].(string); k != "" {
				return k
			}
		case json.RawMessage:
			if k := stringMember(args, mcp.ArgIdempotencyKey); k != "" {
				return k
			}
		}
	}
	return keyOf(nil, r.Options)
}

// stringMember is raw's member name when it is a string, "" otherwise:
// found without decoding the rest.
func stringMember(raw json.RawMessage, name string) string {
	var v []byte
	jsonrpc.Members(raw, func(k, val []byte) bool {
		if string(k) == name {
			v = val
			return false
		}
		return true
	})
	if v == nil {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// CallFunc sends a request and returns its raw result.
type CallFunc func(ctx context.Context, req *Request) (json.RawMessage, error)

// Interceptor wraps every request the client sends: it may look at it,
// send it (next) once, more than once or not at all, and read what came
// back (VerdictOfRaw says what happened). Options.Interceptors are
// applied in order, the first outermost. Progress, the server's requests
// and cancellation flow beneath them unchanged: they belong to the
// request's Options and context.
type Interceptor func(next CallFunc) CallFunc

// chain wraps send in the interceptors, the first outermost.
func chain(interceptors []Interceptor, send CallFunc) CallFunc {
	for i := len(interceptors) - 1; i >= 0; i-- {
		send = interceptors[i](send)
	}
	return send
}

// VerdictOfRaw is VerdictOf for a request's raw result: a tools/call
// result is a failure when its isError is set (it is decoded only then).
func VerdictOfRaw(req *Request, raw json.RawMessage, err error) retry.Verdict {
	if err != nil || req.Method != mcp.MethodToolsCall || !bytes.Contains(raw, []byte(`"isError"`)) {
		return VerdictOf(nil, err)
	}
	var res mcp.CallToolResult
	if derr := json.Unmarshal(raw, &res); derr != nil {
		// An answer nobody can read, as CallTool finds it: what the call
		// did is in it, so its outcome is unknown.
		return retry.Of(retry.Lost, fmt.Errorf("client: tools/call answered %s: %w", clip(raw), derr))
	}
	return VerdictOf(&res, nil)
}

// Plan is how Retrying makes one request again.
type Plan struct {
	// Planner decides; its table classes the tool.
	Planner *retry.Planner
	// Tool is the tool as the server listed it, or nil.
	Tool *mcp.Tool
	// Keyed says the call carries an idempotency key the server
	// deduplicates by under a name of its own, which Request.Key does
	// not know (a policy's key argument).
	Keyed bool
}

// Retrying returns an Interceptor that makes a failed tools/call again
// while the plan that plan gives it allows (nil: the call is not
// retried): each attempt a new request with the same params, and so the
// same idempotency key, after the planner's pause, never past ctx's
// deadline. It returns the last attempt's answer. A caller's cancel ends
// it at once. observe, when set, is told of each attempt made again.
func Retrying(plan func(context.Context, *Request) *Plan, observe func(ctx context.Context, d retry.Decision)) Interceptor {
	return func(next CallFunc) CallFunc {
		return func(ctx context.Context, req *Request) (json.RawMessage, error) {
			if req.Method != mcp.MethodToolsCall {
				return next(ctx, req)
			}
			p := plan(ctx, req)
			if p == nil || p.Planner == nil {
				return next(ctx, req)
			}
			raw, err, _ := retrying(ctx, req, next, p, observe)
			return raw, err
		}
	}
}

// retrying makes req while p allows, and returns the answer that says
// what became of the call and the decision that ended it (Retry false).
// That answer is the last attempt's, unless the last did not run (never
// sent, or refused) and an earlier one may have: then the latest such
// earlier answer, for the call as a whole may have taken effect — a lost
// first attempt whose retry was refused is no call that nothing ran.
func retrying(ctx context.Context, req *Request, next CallFunc, p *Plan, observe func(context.Context, retry.Decision)) (json.RawMessage, error, retry.Decision) {
	deadline, _ := ctx.Deadline()
	attempts := p.Planner.Start(retry.Call{Tool: req.Name, Advertised: p.Tool, HasIdempotencyKey: p.Keyed || req.Key() != "", Deadline: deadline})
	var ranRaw json.RawMessage
	var ranErr error
	ran := false
	answer := func(raw json.RawMessage, err error, v retry.Verdict) (json.RawMessage, error) {
		if !v.Outcome.Ran() && ran {
			return ranRaw, ranErr
		}
		return raw, err
	}
	for {
		raw, err := next(ctx, req)
		v := VerdictOfRaw(req, raw, err)
		if v.Kind == retry.Succeeded || errors.Is(ctx.Err(), context.Canceled) {
			// Done, or the caller cancelled: no retry. A deadline that
			// passed is the planner's to see (a reconcile for an unsafe
			// call).
			raw, err = answer(raw, err, v)
			return raw, err, retry.Decision{}
		}
		d := attempts.Next(v, time.Now())
		if !d.Retry {
			raw, err = answer(raw, err, v)
			return raw, err, d
		}
		if v.Outcome.Ran() {
			ranRaw, ranErr, ran = raw, err, true
		}
		if !retry.Wait(ctx, d.Delay) {
			raw, err = answer(raw, err, v)
			return raw, err, retry.Decision{Err: &CancelledError{Cause: context.Cause(ctx)}}
		}
		if observe != nil {
			observe(ctx, d)
		}
	}
}
