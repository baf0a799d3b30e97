package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/mcprel/mcprel/mcp"
)

// DefaultMaxInputRounds is how many input_required results one call
// answers when Options.MaxInputRounds is zero: enough for a tool that
// asks, then asks again about the answer, with room to spare; few enough
// that a server asking for ever is stopped long before the max clock.
const DefaultMaxInputRounds = 10

// maxInputRequests bounds the input requests of one input_required
// result: each may be a person's form or a model's sampling, and a server
// that asks for hundreds at once is not asking a client.
const maxInputRequests = 32

// ErrNoRequestHandler is the Err of an *InputError when the server asked
// for input and Options.OnRequest is not set: the client has nobody to
// ask.
var ErrNoRequestHandler = errors.New("client: the server asked for input and Options.OnRequest is not set")

// InputError ends a call for which a 2026-07-28 server asked for input
// (an input_required result) that the client did not give: no
// Options.OnRequest (Err is ErrNoRequestHandler), OnRequest failed (Err
// is its error, errors.As finds it), or its answer was not a JSON object.
// The server keeps nothing for the call between rounds (its state
// travels in the request), so there is nothing to cancel; the call may be
// made again from the start.
type InputError struct {
	Method  string // the call's method: tools/call, prompts/get, …
	Round   int    // the input_required result that asked, from 1
	Key     string // the input request's key
	Request string // the input request's method: elicitation/create, …
	Err     error
	// Result is the input_required result as the server sent it
	// (inputRequests, requestState): what a caller that answers on its
	// own terms, or relays the question to its own client (a gateway),
	// needs. Nil for a task's input, which tasks/get still shows.
	Result json.RawMessage
}

func (e *InputError) Error() string {
	what := e.Request
	if e.Key != "" {
		what = fmt.Sprintf("%s %q", e.Request, e.Key)
	}
	return fmt.Sprintf("client: %s asked for input (round %d: %s) that the client did not give: %s",
		e.Method, e.Round, what, bare(e.Err))
}

func (e *InputError) Unwrap() error { return e.Err }

// InputRoundsError ends a call whose server asked for input more times
// than the client answers (Options.MaxInputRounds): a server that keeps
// asking is stopped, not followed for ever.
type InputRoundsError struct {
	Method string
	Limit  int
}

func (e *InputRoundsError) Error() string {
	return fmt.Sprintf("client: %s asked for input again after %d rounds (the client's limit, Options.MaxInputRounds); the call was given up",
		e.Method, e.Limit)
}

// inputRequired is an input_required result as the client reads it.
type inputRequired struct {
	ResultType    string `json:"resultType"`
	InputRequests map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	} `json:"inputRequests"`
	// RequestState is kept exactly as the server sent it: a string the
	// client must echo unchanged, never read.
	RequestState json.RawMessage `json:"requestState"`
}

// asksForInput decodes raw when it is an input_required result of the
// 2026-07-28 era. A result without resultType is complete.
func (c *Client) asksForInput(raw json.RawMessage) (*inputRequired, bool) {
	if c.era != mcp.Modern || !bytes.Contains(raw, []byte(mcp.ResultInputRequired)) {
		return nil, false
	}
	var ir inputRequired
	if json.Unmarshal(raw, &ir) != nil || ir.ResultType != mcp.ResultInputRequired {
		return nil, false
	}
	return &ir, true
}

func (c *Client) maxInputRounds() int {
	if c.opts.MaxInputRounds > 0 {
		return c.opts.MaxInputRounds
	}
	return DefaultMaxInputRounds
}

// call sends a request and, in the 2026-07-28 era, follows its
// multi-round-trip exchange: each input_required result is answered
// through Options.OnRequest and the request is sent again — under a new
// JSON-RPC id, with the answers (inputResponses) and the server's
// requestState echoed unchanged (left out when the server gave none) —
// until the result is complete, at most Options.MaxInputRounds times.
//
// The call's max clock covers every round and every answer; the idle
// clock runs while the client waits for the server, round by round, and
// not while OnRequest answers (a person filling a form is not a server
// gone quiet). Everything a round carries lives in this call alone: two
// calls in flight never see each other's state, and the caller's params
// are never changed.
func (c *Client) call(ctx context.Context, method, name string, params any, o *CallOptions) (json.RawMessage, error) {
	if c.intercepted == nil {
		return c.exchange(ctx, method, name, params, o)
	}
	if o == nil {
		o = &CallOptions{}
	}
	return c.intercepted(ctx, &Request{Method: method, Name: name, Params: params, Options: o})
}

// send is call for a request already made (Options not nil).
func (c *Client) send(ctx context.Context, r *Request) (json.RawMessage, error) {
	if c.intercepted == nil {
		return c.exchange(ctx, r.Method, r.Name, r.Params, r.Options)
	}
	return c.intercepted(ctx, r)
}

// exchange is call beneath the interceptors.
func (c *Client) exchange(ctx context.Context, method, name string, params any, o *CallOptions) (json.RawMessage, error) {
	maxAfter := DefaultMax
	if o != nil && o.Max > 0 {
		maxAfter = o.Max
	}
	// One max clock for the whole call: every round's roundTrip reads its
	// cause, so the call ends with the same *DeadlineError whichever
	// round (or answer) it fires in.
	ctx, stop := maxClock(ctx, maxAfter)
	defer stop()
	h := c.opts.OnRequest
	if o != nil && o.OnRequest != nil {
		h = o.OnRequest
	}
	var base map[string]any
	first := params
	if o != nil && o.Input != nil {
		if c.era != mcp.Modern {
			return nil, fmt.Errorf("client: CallOptions.Input continues a 2026-07-28 multi-round-trip call; this server speaks %s", c.version)
		}
		var err error
		if base, err = paramsObject(params); err != nil {
			return nil, err
		}
		first = withAnswers(base, o.Input.Responses, o.Input.RequestState)
	}
	raw, err := c.roundTrip(ctx, method, name, first, o)
	for round := 1; err == nil; round++ {
		ir, ok := c.asksForInput(raw)
		if !ok {
			return raw, nil
		}
		if round > c.maxInputRounds() {
			return nil, &InputRoundsError{Method: method, Limit: c.maxInputRounds()}
		}
		c.log.Debug("the server asked for input", "method", method, "round", round, "requests", len(ir.InputRequests))
		answers, aerr := c.answerInput(ctx, h, method, round, ir)
		if ie, ok := aerr.(*InputError); ok {
			ie.Result = raw
		}
		if aerr != nil {
			return nil, aerr
		}
		if base == nil {
			if base, aerr = paramsObject(params); aerr != nil {
				return nil, aerr
			}
		}
		raw, err = c.roundTrip(ctx, method, name, withAnswers(base, answers, ir.RequestState), o)
	}
	return nil, err
}

// withAnswers is base (a request's own params, never changed) with a
// round's answers and the server's requestState, echoed unchanged (left
// out when the server gave none).
func withAnswers(base map[string]any, answers map[string]json.RawMessage, state json.RawMessage) map[string]any {
	retry := make(map[string]any, len(base)+2)
	for k, v := range base {
		retry[k] = v
	}
	retry["inputResponses"] = answers
	delete(retry, "requestState")
	if len(state) > 0 && string(state) != "null" {
		retry["requestState"] = state
	}
	return retry
}

// answerInput answers one input_required result's requests through
// OnRequest, one after another in key order (a person answers one form
// at a time), under the call's max clock.
func (c *Client) answerInput(ctx context.Context, h RequestHandler, method string, round int, ir *inputRequired) (map[string]json.RawMessage, error) {
	if len(ir.InputRequests) > maxInputRequests {
		return nil, &InputError{Method: method, Round: round, Request: fmt.Sprintf("%d requests", len(ir.InputRequests)),
			Err: fmt.Errorf("the server asked for %d inputs at once; this client answers at most %d", len(ir.InputRequests), maxInputRequests)}
	}
	answers := make(map[string]json.RawMessage, len(ir.InputRequests))
	keys := make([]string, 0, len(ir.InputRequests))
	for k := range ir.InputRequests {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		req := ir.InputRequests[k]
		fail := func(err error) error {
			return &InputError{Method: method, Round: round, Key: k, Request: req.Method, Err: err}
		}
		if h == nil {
			return nil, fail(ErrNoRequestHandler)
		}
		params := req.Params
		if len(params) == 0 || string(params) == "null" {
			params = json.RawMessage(`{}`)
		}
		res, err := ask(ctx, h, req.Method, params)
		if err != nil {
			if ctx.Err() != nil {
				// The max clock or the caller ended the call while it
				// was being answered: that, not the handler, ended it.
				return nil, c.ended(ctx, ctx, CancelNotRecorded)
			}
			return nil, fail(err)
		}
		b, err := json.Marshal(res)
		if err != nil {
			return nil, fail(fmt.Errorf("its answer could not be encoded: %w", err))
		}
		if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
			return nil, fail(fmt.Errorf("its answer %s is not a JSON object", clip(b)))
		}
		answers[k] = b
	}
	if ctx.Err() != nil {
		return nil, c.ended(ctx, ctx, CancelNotRecorded)
	}
	return answers, nil
}

// ask runs h for one input request and waits for it no longer
// than ctx: a handler that does not heed its context (a person who
// left, a model that hangs) must not hold the call past its max clock.
// Such a handler's late answer is dropped; its goroutine ends when the
// handler returns.
func ask(ctx context.Context, h RequestHandler, method string, params json.RawMessage) (any, error) {
	type answer struct {
		res any
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := h(ctx, method, params)
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		return a.res, a.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// paramsObject is a request's params as an object whose members are sent
// again unchanged on every round: a copy, never the caller's own map.
func paramsObject(params any) (map[string]any, error) {
	if p, ok := params.(map[string]any); ok || params == nil {
		out := make(map[string]any, len(p)+2)
		for k, v := range p {
			out[k] = v
		}
		return out, nil
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("client: params: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("client: params must be a JSON object: %w", err)
	}
	out := make(map[string]any, len(obj)+2)
	for k, v := range obj {
		out[k] = v
	}
	return out, nil
}

// taskInput answers the input a 2026-07-28 task asks for while it runs
// (status input_required, its requests in tasks/get) through OnRequest,
// and gives the answers with tasks/update: each key once, at most
// Options.MaxInputRounds times in the task's life.
type taskInput struct {
	c         *Client
	onRequest RequestHandler // the call's, or else the client's
	rounds    int
	answered  map[string]bool
}

// answer answers the requests in raw that were not answered yet; it
// reports whether it gave any. OnRequest runs under pollCtx (the task's
// max clock) and ends when ctx (the caller's) does; tasks/update is sent
// under pollCtx alone.
func (ti *taskInput) answer(ctx, pollCtx context.Context, id string, raw json.RawMessage) (bool, error) {
	if ti.c.era != mcp.Modern || len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var ir inputRequired
	if err := json.Unmarshal(raw, &ir.InputRequests); err != nil {
		return false, fmt.Errorf("client: task %s asks for input this client cannot read: %s", id, clip(raw))
	}
	for k := range ir.InputRequests {
		if ti.answered[k] {
			delete(ir.InputRequests, k) // answered; the server has not caught up yet
		}
	}
	if len(ir.InputRequests) == 0 {
		return false, nil
	}
	if ti.rounds++; ti.rounds > ti.c.maxInputRounds() {
		return false, &InputRoundsError{Method: mcp.MethodToolsCall, Limit: ti.c.maxInputRounds()}
	}
	actx, stop := context.WithCancelCause(pollCtx)
	defer stop(nil)
	defer context.AfterFunc(ctx, func() { stop(context.Cause(ctx)) })()
	answers, err := ti.c.answerInput(actx, ti.onRequest, mcp.MethodToolsCall, ti.rounds, &ir)
	if err != nil {
		return false, err
	}
	if _, err := ti.c.roundTrip(pollCtx, mcp.MethodTasksUpdate, id, map[string]any{"taskId": id, "inputResponses": answers}, taskRequest); err != nil {
		return false, err
	}
	if ti.answered == nil {
		ti.answered = map[string]bool{}
	}
	for k := range answers {
		ti.answered[k] = true
	}
	return true, nil
}
