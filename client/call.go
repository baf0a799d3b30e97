package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// CallOptions are one call's clocks and callbacks. The zero value (or a
// nil pointer) gives DefaultIdle and DefaultMax.
type CallOptions struct {
	// Idle is the longest the call may go without increasing progress;
	// Max the longest it may run at all. Both are real timers: Max fires
	// even while progress keeps coming.
	//
	// The client asks the server for progress (a progress token) only
	// when it has a use for it: an OnProgress callback, or an Idle set
	// here. Without either, only Max applies, and the server may answer
	// with a plain JSON body rather than a stream.
	Idle, Max time.Duration
	// OnProgress receives each progress report whose value increased, in
	// order, on the call's goroutine.
	OnProgress func(Progress)
	// Meta is added to the request's params._meta (an idempotency key).
	Meta map[string]any
	// OnRequest, when set, answers the requests the server sends for
	// this call, in place of Options.OnRequest: the input a 2026-07-28
	// server asks for in an input_required result, and a 2025 server's
	// requests that the transport ties to the call — those on the
	// call's own response stream over Streamable HTTP, and those that
	// arrive where nothing ties them to a call (stdio, HTTP+SSE, the 2025
	// session's own stream) while this call is the only one in flight on
	// the connection. It runs under the
	// call's maximum clock (not Options' answer timeout), and the idle
	// clock waits while it answers: a person filling a form is not a
	// server gone quiet.
	OnRequest RequestHandler
	// Input, when set, continues a multi-round-trip call (2026-07-28)
	// that was begun elsewhere: the first request already carries these
	// answers and the server's requestState, as the retry after an
	// input_required result would. A gateway that relays a server's
	// questions to its own client resumes the call this way.
	Input *InputAnswers
	// Capabilities, when set, are what this request declares in the
	// 2026-07-28 era, in place of Options.Capabilities (with the tasks
	// extension added when it asks for a task): a gateway declares the
	// capabilities of the client it forwards the call for, so that the
	// server asks only what that client can answer. A 2025 session
	// declared its capabilities once, at initialize: there it is ignored.
	Capabilities *mcp.ClientCapabilities
	// OnNotification, when set, receives the notifications other than
	// progress that the server sends for this call on its own response
	// stream (a log message, over Streamable HTTP), in place of
	// Options.OnNotification. It runs on the transport's reader and must
	// not block.
	OnNotification func(method string, params json.RawMessage)

	quiet   bool        // a probe: its failure is expected and not counted
	headers [][2]string // Mcp-Param-* headers (2026-07-28 HTTP tools/call)
	// asksTask: the request asks for a task, and in the 2026-07-28 era
	// declares the tasks extension whatever Options.Capabilities say.
	asksTask bool
}

// InputAnswers are the answers to an input_required result's requests,
// by their keys, and the result's requestState exactly as the server sent
// it (nil when it sent none).
type InputAnswers struct {
	Responses    map[string]json.RawMessage
	RequestState json.RawMessage
}

// Progress is one progress report of a call.
type Progress struct {
	Progress float64
	Total    *float64
	Message  string
}

// Clock names the deadline that ended a call.
type Clock string

// The two clocks.
const (
	IdleClock Clock = "idle"
	MaxClock  Clock = "max"
)

// Cancellation is what the client did about a request it gave up on, as
// far as it knows: the error that ends the call says it, and no more.
type Cancellation int

const (
	// CancelNotRecorded: the error does not speak for one request (a
	// task's whole wait: TaskAbandonedError says what became of
	// tasks/cancel).
	CancelNotRecorded Cancellation = iota
	// RequestNotSent: the request was withdrawn from the client's write
	// queue before any of it was written. The server never saw it, and
	// nothing needed cancelling.
	RequestNotSent
	// CancelSent: the request was cancelled the transport's way at once
	// (2026-07-28 HTTP: its stream was closed).
	CancelSent
	// CancelQueued: a notifications/cancelled was queued (stdio, behind
	// the client's other writes) or its POST begun (2025 HTTP), and not
	// waited for: whether it reaches the server is unknown, until
	// Client.WaitCancellations says.
	CancelQueued
	// CancelNotSent: the cancellation could not be sent (the write queue
	// was full, the connection closing, too many cancellations in
	// flight).
	CancelNotSent
)

// Propagated reports whether the server was told to cancel, or a
// cancellation was queued for it: what an observer counts as a
// cancellation passed on.
func (c Cancellation) Propagated() bool { return c == CancelSent || c == CancelQueued }

// clause is the end of an error message for c.
func (c Cancellation) clause() string {
	switch c {
	case RequestNotSent:
		return "; the request was never sent, so the server did not act on it"
	case CancelSent:
		return "; the server was told to cancel"
	case CancelQueued:
		return "; a cancellation was queued for the server, not waited for"
	case CancelNotSent:
		return "; the cancellation could not be sent to the server"
	}
	return ""
}

// DeadlineError ends a call whose idle or maximum deadline fired. Cancel
// says what became of the request; whether the server acted on one it
// received is unknown.
type DeadlineError struct {
	Clock  Clock
	After  time.Duration
	Cancel Cancellation
}

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("client: the call's %s deadline (%v) fired%s", e.Clock, e.After, e.Cancel.clause())
}

// CancelledError ends a call that the caller cancelled: its context ended.
// Cancel says what became of the request; whether the server acted on
// one it received is unknown.
type CancelledError struct {
	Cause  error
	Cancel Cancellation
}

func (e *CancelledError) Error() string {
	return fmt.Sprintf("client: the call was cancelled (%v)%s", e.Cause, e.Cancel.clause())
}

func (e *CancelledError) Unwrap() error { return e.Cause }

// CallTool calls a tool and returns its result. args is anything that
// encodes as a JSON object (json.RawMessage included), or nil. A tool's
// failure is a result whose IsError is set, not an error; errors are
// protocol errors (*jsonrpc.Error), deadlines (*DeadlineError),
// cancellation (*CancelledError), lost connections (ErrConnectionLost)
// and input the server asked for that the client did not give
// (*InputError, *InputRoundsError).
//
// A 2026-07-28 server may answer with an input_required result instead:
// the client answers its requests through Options.OnRequest and calls
// again with the answers (a new JSON-RPC id each round, at most
// Options.MaxInputRounds rounds), so the caller sees only the final
// result. Max bounds the whole call, answers included; Idle bounds each
// wait for the server, not the time OnRequest takes to answer.
//
// Over 2026-07-28 HTTP the arguments the tool's schema marks with
// x-mcp-header go in Mcp-Param-* headers too, as the last tools/list
// described them; a tool that listing left out for malformed annotations
// is refused (*ExcludedToolError).
func (c *Client) CallTool(ctx context.Context, name string, args any, o *CallOptions) (*mcp.CallToolResult, error) {
	return decodeResult(c.CallToolRaw(ctx, name, args, o))
}

// CallToolRaw is CallTool, returning the result as the server sent it,
// undecoded: for a caller that passes it on (mcp.PassThrough) or decodes
// it its own way.
func (c *Client) CallToolRaw(ctx context.Context, name string, args any, o *CallOptions) (json.RawMessage, error) {
	// The request and its options, in one allocation: the options are
	// the caller's, copied, so that the headers can be set on them.
	req := &Request{Method: mcp.MethodToolsCall, Name: name}
	if o != nil {
		req.opts = *o
	}
	opts := &req.opts
	req.Options = opts
	if opts.Max <= 0 {
		opts.Max = DefaultMax
	}
	// One max clock for the call whole: a call refused for its
	// Mcp-Param headers, the listing after it and the call sent again.
	ctx, stop := maxClock(ctx, opts.Max)
	defer stop()
	raw, err := c.withParamHeaders(ctx, name, args, func(args any, headers [][2]string) (json.RawMessage, error) {
		params := map[string]any{"name": name}
		if args != nil {
			params["arguments"] = args
		}
		opts.headers = headers
		if req.Params != nil {
			// Sent again, with its headers: a request of its own, as an
			// interceptor sees it.
			req = &Request{Method: mcp.MethodToolsCall, Name: name, Options: opts}
		}
		req.Params = params
		return c.send(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return raw, nil
}

// ListTools returns every tool the server offers, following cursors, under
// one maximum deadline for the whole listing: ctx's, or DefaultMax when
// it has none. A server whose list runs past Options.MaxListPages pages or
// Options.MaxListBytes bytes gets a *ListLimitError, not the client's
// memory.
func (c *Client) ListTools(ctx context.Context) ([]mcp.Tool, error) {
	tools, err := listAll(ctx, c, mcp.MethodToolsList, func(r *mcp.ListToolsResult) ([]mcp.Tool, string) { return r.Tools, r.NextCursor })
	if err != nil {
		return nil, err
	}
	return c.keepTools(tools), nil
}

// ListPrompts returns every prompt the server offers, as ListTools does
// its tools.
func (c *Client) ListPrompts(ctx context.Context) ([]mcp.Prompt, error) {
	return listAll(ctx, c, mcp.MethodPromptsList, func(r *mcp.ListPromptsResult) ([]mcp.Prompt, string) { return r.Prompts, r.NextCursor })
}

// ListResources returns every resource the server lists, as ListTools
// does its tools.
func (c *Client) ListResources(ctx context.Context) ([]mcp.Resource, error) {
	return listAll(ctx, c, mcp.MethodResourcesList, func(r *mcp.ListResourcesResult) ([]mcp.Resource, string) { return r.Resources, r.NextCursor })
}

// ListResourceTemplates returns every resource template the server
// lists, as ListTools does its tools.
func (c *Client) ListResourceTemplates(ctx context.Context) ([]mcp.ResourceTemplate, error) {
	return listAll(ctx, c, mcp.MethodResourceTempls, func(r *mcp.ListResourceTemplatesResult) ([]mcp.ResourceTemplate, string) {
		return r.ResourceTemplates, r.NextCursor
	})
}

// listAll follows a list method's cursors under one maximum deadline and
// the client's bounds on pages and bytes; page reads one result's items
// and its next cursor.
func listAll[R, T any](ctx context.Context, c *Client, method string, page func(*R) ([]T, string)) ([]T, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, DefaultMax, &DeadlineError{Clock: MaxClock, After: DefaultMax})
		defer cancel()
	}
	var items []T
	cursor := ""
	total := 0
	for n := 1; ; n++ {
		if n > c.opts.MaxListPages {
			return nil, &ListLimitError{Method: method, Limit: "pages", Value: int64(c.opts.MaxListPages), Option: "MaxListPages"}
		}
		var params map[string]any
		if cursor != "" {
			params = map[string]any{"cursor": cursor}
		}
		raw, err := c.call(ctx, method, "", params, nil)
		if err != nil {
			return nil, err
		}
		if total += len(raw); int64(total) > c.opts.MaxListBytes {
			return nil, &ListLimitError{Method: method, Limit: "bytes", Value: c.opts.MaxListBytes, Option: "MaxListBytes"}
		}
		var res R
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("client: %s answered %s: %w", method, clip(raw), err)
		}
		got, next := page(&res)
		items = append(items, got...)
		if next == "" {
			return items, nil
		}
		if next == cursor {
			return nil, fmt.Errorf("client: %s answered the cursor %q with itself: the listing would never end", method, clip([]byte(next)))
		}
		cursor = next
	}
}

// ListLimitError ends a listing that ran past the client's bound: the
// server's list is longer than this client takes in.
type ListLimitError struct {
	Method string // tools/list, prompts/list, …
	Limit  string // "pages" or "bytes"
	Value  int64  // the bound
	Option string // the Options field that sets it
}

func (e *ListLimitError) Error() string {
	bound := fmt.Sprintf("%d %s", e.Value, e.Limit)
	if e.Limit == "bytes" && e.Value >= 1<<20 {
		bound = fmt.Sprintf("%d MiB", e.Value>>20)
	}
	return fmt.Sprintf("client: %s went on past %s (the client's limit, Options.%s); the server's list is longer than this client takes in",
		e.Method, bound, e.Option)
}

// Request sends any request and returns its raw result: for methods this
// package has no helper for. name is what the method's Mcp-Name header
// carries over 2026-07-28 HTTP ("" for none). An input_required result
// is answered and the request sent again, as CallTool does.
func (c *Client) Request(ctx context.Context, method, name string, params any, o *CallOptions) (json.RawMessage, error) {
	return c.call(ctx, method, name, params, o)
}

// roundTrip sends one request and waits for its response under the two
// clocks, cancelling it the transport's and era's way when it gives up.
func (c *Client) roundTrip(ctx context.Context, method, name string, params any, o *CallOptions) (json.RawMessage, error) {
	var opts CallOptions
	if o != nil {
		opts = *o
	}
	wantProgress := opts.OnProgress != nil || opts.Idle > 0
	if opts.Idle <= 0 {
		opts.Idle = DefaultIdle
	}
	if opts.Max <= 0 {
		opts.Max = DefaultMax
	}
	id := jsonrpc.IntID(c.nextID.Add(1))
	token := ""
	if wantProgress {
		var buf [24]byte
		token = string(strconv.AppendInt(append(buf[:0], 'p'), mustInt(id), 10))
	} else {
		opts.Idle = 0 // no progress will come: the idle clock has nothing to measure
	}
	declare, err := c.declared(&opts)
	if err != nil {
		return nil, err
	}
	body, err := c.params(params, token, opts.Meta, opts.asksTask, declare)
	if err != nil {
		return nil, err
	}
	out := outgoing{id: id, method: method, name: name, params: body, era: c.era, version: c.version, token: token,
		headers: opts.headers, onRequest: opts.OnRequest}
	out.onNote = opts.OnNotification
	// The max clock runs from before the request is sent: a server that
	// does not read it holds the caller no longer than one that does not
	// answer it.
	maxCtx, stopMax := maxClock(ctx, opts.Max)
	defer stopMax()
	t := c.transport()
	if ht, ok := ctx.Value(restartingKey{}).(transport); ok {
		t = ht // a handshake's request, over the connection it negotiates
	}
	ex, err := t.start(maxCtx, out)
	if errors.Is(err, ErrConnectionLost) && ctx.Value(restartingKey{}) == nil && c.restartOnCall {
		// The server died before this request left: start it again (if
		// the client restarts servers) and send it there — a request that
		// never left may always be sent.
		if t, err = c.restart(ctx, t); err == nil {
			out.era, out.version = c.era, c.version
			if declare, err = c.declared(&opts); err == nil {
				out.params, err = c.params(params, token, opts.Meta, opts.asksTask, declare)
			}
			if err == nil {
				ex, err = t.start(maxCtx, out)
			}
		}
	}
	if err != nil {
		if maxCtx.Err() != nil {
			// The request was withdrawn before it left.
			return nil, c.ended(ctx, maxCtx, RequestNotSent)
		}
		if errors.Is(err, ErrConnectionLost) {
			// The connection was gone (and not started again) before the
			// request was written.
			return nil, &NotSentError{Err: err}
		}
		return nil, err
	}
	var idleC <-chan time.Time
	var idle *time.Timer
	if opts.Idle > 0 {
		idle = time.NewTimer(opts.Idle)
		defer idle.Stop()
		idleC = idle.C
	}
	last, seen := 0.0, false
	report := func(p Progress) {
		if seen && p.Progress <= last {
			c.stats.refused.Add(1)
			return
		}
		last, seen = p.Progress, true
		if opts.Idle > 0 {
			idle.Reset(opts.Idle)
		}
		if opts.OnProgress != nil {
			opts.OnProgress(p)
		}
	}
	for {
		select {
		case p := <-ex.progress:
			report(p)
		case <-ex.answered:
			// The client answered a request of the server's for this
			// call: the server has work again, the idle clock starts over.
			if opts.Idle > 0 {
				idle.Reset(opts.Idle)
			}
		case <-ex.response:
			r, ok := ex.result()
			if !ok {
				return nil, ErrConnectionLost
			}
			ex.finish()
			// Progress that arrived before the response is reported
			// before the call returns, in order.
			for drained := false; !drained; {
				select {
				case p := <-ex.progress:
					report(p)
				default:
					drained = true
				}
			}
			switch {
			case r.err != nil && c.renewSession(ctx, r.err):
				// The server forgot the 2025 session and did not act on
				// the request: a new session, and the request again.
				return c.roundTrip(ctx, method, name, params, o)
			case r.err != nil:
				return nil, r.err
			case r.m.Error != nil:
				return nil, r.m.Error
			}
			c.noticeRefetch(r.m.Result)
			return r.m.Result, nil
		case <-maxCtx.Done():
			reason := "maximum deadline"
			if _, ok := c.ended(ctx, maxCtx, 0).(*CancelledError); ok {
				reason = "the caller cancelled: " + context.Cause(ctx).Error()
			}
			return nil, c.ended(ctx, maxCtx, c.giveUp(ex, id, reason, opts.quiet))
		case <-idleC:
			if ex.asking.Load() > 0 {
				// The server waits for the client's answer, not the other
				// way round: the call is not idle.
				idle.Reset(opts.Idle)
				continue
			}
			select {
			case <-ex.answered: // answered just now: the clock starts over
				idle.Reset(opts.Idle)
				continue
			default:
			}
			return nil, &DeadlineError{Clock: IdleClock, After: opts.Idle, Cancel: c.giveUp(ex, id, "idle deadline", opts.quiet)}
		}
	}
}

// maxClock is ctx under a max clock of d, whose cause is a
// *DeadlineError. When ctx already ends no later — a call passes through
// three layers, each making sure of its clock — it is ctx itself:
// context.WithDeadline would then add only a cancel of its own, which
// nothing here needs, and its allocations.
func maxClock(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if end, ok := ctx.Deadline(); ok && !end.After(time.Now().Add(d)) {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, d, &DeadlineError{Clock: MaxClock, After: d})
}

// ended is the error of a call whose max context ended: its own max
// clock, a clock the caller set in ctx with a *DeadlineError as its cause
// (a task's whole wait, a command's listing), or the caller's cancel —
// with what became of the request. The cause is copied, not changed: one
// clock's cause is shared by every request made under it.
func (c *Client) ended(ctx, maxCtx context.Context, cancel Cancellation) error {
	var de *DeadlineError
	if errors.As(context.Cause(maxCtx), &de) {
		d := *de
		d.Cancel = cancel
		return &d
	}
	return &CancelledError{Cause: context.Cause(ctx), Cancel: cancel}
}

// giveUp tells the server the call is cancelled, as the transport and era
// say, and stops waiting for it: a late response is counted and dropped.
// It reports what became of the cancellation.
func (c *Client) giveUp(ex *exchange, id jsonrpc.ID, reason string, quiet bool) Cancellation {
	if !quiet {
		c.stats.cancelled.Add(1)
	}
	return ex.cancel(id, reason)
}

func mustInt(id jsonrpc.ID) int64 {
	n, _ := id.Int()
	return n
}

// declared is what a request of o declares in the 2026-07-28 era when o
// says (CallOptions.Capabilities), encoded; nil for the client's own.
// A gateway declares its caller's capabilities on every call, and few
// callers differ: each distinct value is encoded once (declaredCache).
func (c *Client) declared(o *CallOptions) (encoded, error) {
	if o.Capabilities == nil || c.era != mcp.Modern {
		return nil, nil
	}
	if b := c.declares.lookup(o.Capabilities, o.asksTask); b != nil {
		return b, nil
	}
	caps := *o.Capabilities
	if o.asksTask && caps.Extensions[mcp.ExtensionTasks] == nil {
		caps.Extensions = maps.Clone(caps.Extensions)
		if caps.Extensions == nil {
			caps.Extensions = map[string]json.RawMessage{}
		}
		caps.Extensions[mcp.ExtensionTasks] = json.RawMessage(`{}`)
	}
	b, err := json.Marshal(caps)
	if err != nil {
		return nil, fmt.Errorf("client: CallOptions.Capabilities: %w", err)
	}
	c.declares.store(o.Capabilities, o.asksTask, b)
	return b, nil
}

// declaredCache holds the last few capabilities requests declared,
// encoded: those without experimental members or extensions (maps), by
// the bytes of their other members, which encode the same every time.
type declaredCache struct {
	slots [4]atomic.Pointer[declaredEntry]
	next  atomic.Uint32
}

type declaredEntry struct {
	roots, sampling, elicitation, tasks []byte
	asksTask                            bool
	enc                                 encoded
}

func (e *declaredEntry) is(caps *mcp.ClientCapabilities, asksTask bool) bool {
	return e.asksTask == asksTask && bytes.Equal(e.roots, caps.Roots) && bytes.Equal(e.sampling, caps.Sampling) &&
		bytes.Equal(e.elicitation, caps.Elicitation) && bytes.Equal(e.tasks, caps.Tasks)
}

func cacheable(caps *mcp.ClientCapabilities) bool {
	return len(caps.Experimental) == 0 && len(caps.Extensions) == 0
}

// lookup returns caps encoded, or nil when it is not held.
func (dc *declaredCache) lookup(caps *mcp.ClientCapabilities, asksTask bool) encoded {
	if !cacheable(caps) {
		return nil
	}
	for i := range dc.slots {
		if e := dc.slots[i].Load(); e != nil && e.is(caps, asksTask) {
			return e.enc
		}
	}
	return nil
}

// store holds enc, caps encoded, in place of the oldest entry.
func (dc *declaredCache) store(caps *mcp.ClientCapabilities, asksTask bool, enc encoded) {
	if !cacheable(caps) {
		return
	}
	e := &declaredEntry{roots: bytes.Clone(caps.Roots), sampling: bytes.Clone(caps.Sampling), elicitation: bytes.Clone(caps.Elicitation),
		tasks: bytes.Clone(caps.Tasks), asksTask: asksTask, enc: enc}
	dc.slots[(dc.next.Add(1)-1)%uint32(len(dc.slots))].Store(e)
}

// params encodes a request's params with the era's _meta: in the modern
// era the protocol version, capabilities (declare, when not nil, in place
// of the client's) and client info, and in both a progress token and the
// caller's members.
func (c *Client) params(params any, token string, extra map[string]any, asksTask bool, declare encoded) (json.RawMessage, error) {
	if p, ok := params.(map[string]any); ok || params == nil {
		// The common case, encoded once into a buffer of its size: the
		// helpers build maps.
		if _, has := p["_meta"]; !has {
			fixed := c.fixedMembers(token, asksTask, declare)
			b := make([]byte, 0, objectSize(p)+objectSize(extra)+fixed.size()+len(`,"_meta":{}}`))
			b, err := appendObject(b, p)
			if err == nil {
				if len(p) > 0 {
					b = append(b, ',')
				}
				b = append(b, `"_meta":`...)
				b, err = appendMeta(b, &fixed, extra)
			}
			if err != nil {
				return nil, fmt.Errorf("client: params: %w", err)
			}
			return append(b, '}'), nil
		}
	}
	var obj map[string]json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("client: params: %w", err)
		}
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, fmt.Errorf("client: params must be a JSON object: %w", err)
		}
	}
	if obj == nil {
		obj = map[string]json.RawMessage{}
	}
	meta := map[string]any{}
	if raw, ok := obj["_meta"]; ok {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("client: params._meta must be an object: %w", err)
		}
	}
	b, err := json.Marshal(c.meta(meta, token, extra, asksTask, declare))
	if err != nil {
		return nil, fmt.Errorf("client: _meta: %w", err)
	}
	obj["_meta"] = b
	return json.Marshal(obj)
}

// appendObject appends the opening brace and the members of a JSON
// object, not its closing one: one pass, members in no particular order
// (a map's encoding would sort them), each value encoded on its own, raw
// JSON appended as it is once it is known to be valid.
func appendObject(b []byte, members map[string]any) ([]byte, error) {
	b = append(b, '{')
	first := true
	for k, v := range members {
		if !first {
			b = append(b, ',')
		}
		first = false
		if err := appendMember(&b, k, v); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// objectSize is about what members take encoded: exactly, for the raw
// JSON and plain strings a request's params and _meta are made of, so
// that the buffer they go in is allocated once.
func objectSize(members map[string]any) int {
	n := 0
	for k, v := range members {
		n += len(k) + 4 // quotes, colon, comma
		switch v := v.(type) {
		case json.RawMessage:
			n += len(v)
		case encoded:
			n += len(v)
		case string:
			n += len(v) + 2
		default:
			n += 32
		}
	}
	return n
}

func appendMember(b *[]byte, k string, v any) error {
	appendString(b, k)
	*b = append(*b, ':')
	return appendValue(b, v)
}

// metaMembers are the members of a request's _meta that the client gives
// it itself, in the order of their names: in the 2026-07-28 era the
// capabilities, client info and protocol version (each encoded), and in
// both eras the progress token when there is one. The token's key sorts
// after the others'.
type metaMembers struct {
	n     int
	keys  [3]string
	vals  [3]encoded
	token string
}

// size is what m takes encoded, the braces and commas of the object it
// is in included.
func (m *metaMembers) size() int {
	n := 2
	for i := range m.n {
		n += len(m.keys[i]) + len(m.vals[i]) + 4
	}
	if m.token != "" {
		n += len(mcp.MetaProgressToken) + len(m.token) + 6
	}
	return n
}

// has reports whether k is a key of m: a caller's member of that name
// gives way to the client's.
func (m *metaMembers) has(k string) bool {
	if m.token != "" && k == mcp.MetaProgressToken {
		return true
	}
	return slices.Contains(m.keys[:m.n], k)
}

// fixedMembers are the members of a request's _meta the client gives it:
// a 2026-07-28 request declares declare when it is not nil, in place of
// the client's capabilities (those with the tasks extension when it asks
// for a task).
func (c *Client) fixedMembers(token string, asksTask bool, declare encoded) metaMembers {
	m := metaMembers{token: token}
	if c.era != mcp.Modern {
		return m
	}
	caps := encoded(c.capsJSON)
	switch {
	case declare != nil:
		caps = declare
	case asksTask:
		caps = encoded(c.taskCapsJSON)
	}
	m.n = 3
	m.keys = [3]string{mcp.MetaClientCapabilities, mcp.MetaClientInfo, mcp.MetaProtocolVersion}
	m.vals = [3]encoded{caps, encoded(c.infoJSON), c.versionJSON()}
	return m
}

// appendMeta appends a request's _meta: the client's members (fixed) and
// the caller's (extra, those whose names the client's do not take), all
// in the order of their names — a server may recognise a _meta byte for
// byte, and a map's order changes from call to call — without a map of
// them built first.
func appendMeta(b []byte, fixed *metaMembers, extra map[string]any) ([]byte, error) {
	var keysArray [8]string
	keys := keysArray[:0]
	for k := range extra {
		if !fixed.has(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	b = append(b, '{')
	first := true
	comma := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	i := 0 // the next of fixed's members
	for _, k := range keys {
		for ; i < fixed.n && fixed.keys[i] < k; i++ {
			comma()
			appendString(&b, fixed.keys[i])
			b = append(append(b, ':'), fixed.vals[i]...)
		}
		if fixed.token != "" && i == fixed.n && mcp.MetaProgressToken < k {
			comma()
			b = appendToken(b, fixed.token)
			i++
		}
		comma()
		if err := appendMember(&b, k, extra[k]); err != nil {
			return nil, err
		}
	}
	for ; i < fixed.n; i++ {
		comma()
		appendString(&b, fixed.keys[i])
		b = append(append(b, ':'), fixed.vals[i]...)
	}
	if fixed.token != "" && i == fixed.n {
		comma()
		b = appendToken(b, fixed.token)
	}
	return append(b, '}'), nil
}

// appendToken appends the progress token's member. A token is "p" or "l"
// and digits, the client's own, and needs no escaping.
func appendToken(b []byte, token string) []byte {
	b = append(b, `"`+mcp.MetaProgressToken+`":"`...)
	b = append(b, token...)
	return append(b, '"')
}

// versionJSON is the negotiated protocol version as a JSON string,
// encoded once per version.
func (c *Client) versionJSON() encoded {
	f := c.fixed.Load()
	if f == nil || f.version != c.version {
		f = &fixedMetas{version: c.version}
		appendString((*[]byte)(&f.json), c.version)
		c.fixed.Store(f)
	}
	return f.json
}

// fixedMetas is a protocol version, encoded.
type fixedMetas struct {
	version string
	json    encoded
}

// appendString appends s as a JSON string.
func appendString(b *[]byte, s string) {
	if plainASCII(s) {
		*b = append(append(append(*b, '"'), s...), '"')
		return
	}
	enc, _ := json.Marshal(s) // JSON's escapes, not Go's; a string always encodes
	*b = append(*b, enc...)
}

// appendValue appends v's JSON: raw JSON compacted (checked in the same
// pass: a newline inside it would end a stdio frame early; nil is null,
// as encoding/json has it), a string quoted, anything else through
// encoding/json.
func appendValue(b *[]byte, v any) error {
	switch v := v.(type) {
	case json.RawMessage:
		if v == nil {
			*b = append(*b, "null"...)
			return nil
		}
		if compact(v) && jsonrpc.Valid(v) {
			// Already compact (a forwarded call's arguments, as decoded):
			// checked, and appended as it is.
			*b = append(*b, v...)
			return nil
		}
		buf := bytes.NewBuffer(*b)
		if err := json.Compact(buf, v); err != nil {
			return fmt.Errorf("invalid JSON %s", clip(v))
		}
		*b = buf.Bytes()
		return nil
	case encoded:
		*b = append(*b, v...)
		return nil
	case string:
		appendString(b, v)
		return nil
	}
	enc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	*b = append(*b, enc...)
	return nil
}

// compact reports whether b, taken as JSON, has no whitespace outside
// its strings: what json.Compact would leave as it is, when b is valid.
func compact(b []byte) bool {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ' ', '\t', '\n', '\r':
			return false
		}
	}
	return true
}

// encoded is JSON this client encoded itself, compact and valid: appended
// as it is, never checked again.
type encoded []byte

func (e encoded) MarshalJSON() ([]byte, error) { return e, nil }

// plainASCII reports whether s needs no escaping in JSON (nor in
// encoding/json's HTML-safe output: no <, > or &).
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// meta is a request's _meta: the caller's members, a progress token, and
// in the modern era the protocol version, capabilities (with the tasks
// extension when the request asks for a task) and client info.
func (c *Client) meta(meta map[string]any, token string, extra map[string]any, asksTask bool, declare encoded) map[string]any {
	if meta == nil {
		meta = make(map[string]any, len(extra)+4)
	}
	for k, v := range extra {
		meta[k] = v
	}
	if token != "" {
		meta[mcp.MetaProgressToken] = token
	}
	if c.era == mcp.Modern {
		meta[mcp.MetaProtocolVersion] = c.version
		caps := encoded(c.capsJSON)
		switch {
		case declare != nil:
			caps = declare
		case asksTask:
			caps = encoded(c.taskCapsJSON)
		}
		meta[mcp.MetaClientCapabilities] = caps
		meta[mcp.MetaClientInfo] = encoded(c.infoJSON)
	}
	return meta
}

// renewSession starts a new 2025 session when err says the server no
// longer knows the old one (HTTP 404 with its session id): the spec's
// answer to an expired session, which the server did not act on.
func (c *Client) renewSession(ctx context.Context, err error) bool {
	ht, ok := c.transport().(*httpTransport)
	if !ok || c.era != mcp.Legacy || ctx.Value(restartingKey{}) != nil || !ht.sessionGone(err) {
		return false
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.log.Warn("the server no longer knows the session; starting a new one")
	if c.handshake(ctx, ht) != nil {
		return false
	}
	c.stats.reconnects.Add(1)
	return true
}

// noticeRefetch calls OnRefetch, and refetches every subscription, when a
// result carries the server's refetch flag: notifications or progress
// were dropped on the way, so what the client followed is incomplete.
func (c *Client) noticeRefetch(result json.RawMessage) {
	if !bytes.Contains(result, []byte(mcp.MetaRefetch)) {
		return
	}
	var r struct {
		Meta map[string]any `json:"_meta"`
	}
	if json.Unmarshal(result, &r) != nil || r.Meta[mcp.MetaRefetch] != true {
		return
	}
	c.stats.refetches.Add(1)
	if c.opts.OnRefetch != nil {
		c.opts.OnRefetch()
	}
	c.subsMu.Lock()
	for s := range c.subs {
		select {
		case s.refetchNow <- struct{}{}:
		default: // one is already pending
		}
	}
	c.subsMu.Unlock()
}
