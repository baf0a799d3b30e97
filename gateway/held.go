package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// A held call is a forwarded call that outlives the downstream request
// that began it. A 2025-era upstream asks for input with a request in the
// middle of a call, and waits for the answer with the call open; a
// 2026-07-28 downstream client has no way to receive a request, only an
// input_required result that ends its request. So the gateway runs such a
// call apart from the downstream request (a held call): when the upstream
// asks, the downstream request ends with the gateway's own input_required
// result, the upstream call waits, and the downstream client's retry with
// the answers resumes it — the answers go upstream as the responses to
// its requests, and the retry's request waits for what the upstream does
// next. A held call that no retry resumes within Options.InputWait is
// cancelled upstream, the way its transport cancels.
//
// Held calls are bounded in number, in total (Options.MaxHeld) and per
// tenant (Options.MaxHeldPerTenant); the questions they hold are bounded
// by the client's message limit each, by maxQuestions per call, and in
// bytes in total and per tenant (Options.MaxHeldBytes,
// MaxHeldBytesPerTenant). The client's own bound on a server's requests
// answered at once is set above these on the gateway's upstream
// connections, so that they, not it, decide.
type held struct {
	id       string
	tenant   string
	tool     string // the downstream's name
	upstream string
	caps     mcp.ClientCapabilities
	sink     *sink // where its progress and log messages go: the request serving it
	g        *Gateway

	asked  chan *question // the upstream's requests, for the downstream to answer
	ended  chan heldEnd   // the upstream call's end, once
	cancel context.CancelCauseFunc

	// Guarded by Gateway.heldMu.
	parked  bool // in Gateway.held, counted against the bounds
	round   int
	serving bool                 // a downstream request is serving it now
	pending map[string]*question // asked downstream in the last round, by key
	expiry  *time.Timer
}

// maxQuestions bounds the upstream requests one held call asks at once.
const maxQuestions = 8

// question is one request of the upstream's, waiting for the downstream
// client's answer.
type question struct {
	method string
	params json.RawMessage
	answer chan answer // once
}

// answer is what the upstream's request gets: the downstream's result,
// or the gateway's refusal.
type answer struct {
	result json.RawMessage
	err    error
}

// heldEnd is how the upstream call ended: what the downstream request
// serving it returns.
type heldEnd struct {
	res *mcp.CallToolResult
	err error
	// propagated: the call was cancelled and the upstream told.
	propagated bool
}

// errInputExpired ends a held call that no retry resumed in time.
var errInputExpired = errors.New("gateway: the downstream client did not answer the upstream's question in time")

// hold makes the held call of the downstream request q. It is counted
// against the bounds only while it waits for a retry (park): while a
// downstream request serves it, the server's admission bounds it.
func (g *Gateway) hold(q *server.CallRequest, upstream string, sink *sink) *held {
	var b [10]byte
	rand.Read(b[:])
	return &held{
		id: base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]), tenant: q.Tenant, tool: q.Name,
		upstream: upstream, caps: q.ClientCapabilities, sink: sink, g: g,
		asked: make(chan *question, maxQuestions), ended: make(chan heldEnd, 1), serving: true,
	}
}

// errTooManyHeld refuses an upstream's question when the gateway already
// holds as many calls waiting for answers as it may.
type errTooManyHeld struct{ all, perTenant int }

func (e *errTooManyHeld) Error() string {
	return fmt.Sprintf("the gateway already holds as many calls waiting for their clients' answers as it may (%d in all, %d for one tenant); ask again later", e.all, e.perTenant)
}

// register counts h against the bounds, the first time it parks.
// Guarded by heldMu.
func (g *Gateway) registerLocked(h *held) error {
	if h.parked {
		return nil
	}
	if len(g.held) >= g.opts.MaxHeld || g.heldPerTenant[h.tenant] >= g.opts.MaxHeldPerTenant {
		return &errTooManyHeld{g.opts.MaxHeld, g.opts.MaxHeldPerTenant}
	}
	h.parked = true
	g.held[h.id] = h
	g.heldPerTenant[h.tenant]++
	return nil
}

// takeQuestion counts the params of a question a held call of tenant's
// waits on against the bounds in bytes, or refuses it (overloaded) past
// them.
func (g *Gateway) takeQuestion(tenant string, size int) error {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	if g.heldBytes+size > g.opts.MaxHeldBytes || g.heldBytesOf[tenant]+size > g.opts.MaxHeldBytesPerTenant {
		return jsonrpc.NewError(mcp.CodeOverloaded, "the gateway already holds as many bytes of questions waiting for their clients' answers as it may (%d in all, %d for one tenant); ask again later",
			g.opts.MaxHeldBytes, g.opts.MaxHeldBytesPerTenant)
	}
	g.heldBytes += size
	g.heldBytesOf[tenant] += size
	return nil
}

// giveQuestion returns what takeQuestion counted.
func (g *Gateway) giveQuestion(tenant string, size int) {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	g.heldBytes -= size
	if g.heldBytesOf[tenant] -= size; g.heldBytesOf[tenant] <= 0 {
		delete(g.heldBytesOf, tenant)
	}
}

// unhold forgets h: its upstream call ended, or it expired.
func (g *Gateway) unhold(h *held) {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	g.unholdLocked(h)
}

func (g *Gateway) unholdLocked(h *held) {
	if h.expiry != nil {
		h.expiry.Stop()
	}
	if !h.parked {
		return
	}
	h.parked = false
	delete(g.held, h.id)
	if g.heldPerTenant[h.tenant]--; g.heldPerTenant[h.tenant] <= 0 {
		delete(g.heldPerTenant, h.tenant)
	}
}

// ask is the held call's upstream request handler: the question waits for
// the downstream client's answer, within the upstream call's context.
func (h *held) ask(ctx context.Context, method string, params json.RawMessage) (any, error) {
	if err := lacks(h.caps, method, params); err != nil {
		return nil, err
	}
	if err := h.g.takeQuestion(h.tenant, len(params)); err != nil {
		return nil, err // refused at once: the upstream's call goes on
	}
	defer h.g.giveQuestion(h.tenant, len(params))
	q := &question{method: method, params: params, answer: make(chan answer, 1)}
	select {
	case h.asked <- q:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	select {
	case a := <-q.answer:
		return a.result, a.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// serve waits, for the downstream request in ctx, for what the upstream
// does next: it ends the call, or it asks (the request then ends with
// input_required and the call waits for a retry), or the downstream
// request ends first (the upstream call is cancelled).
func (h *held) serve(ctx context.Context, call *server.CallRequest, rec *ForwardRecord) (*mcp.CallToolResult, error) {
	h.sink.serve(&call.Request)
	defer h.sink.serve(nil) // until a retry serves it, nothing reaches a client
	for {
		select {
		case e := <-h.ended:
			h.g.unhold(h)
			rec.CancelPropagated = e.propagated
			return e.res, e.err
		case q := <-h.asked:
			qs := []*question{q}
		more: // what the upstream asked at once is asked at once
			for len(qs) < maxQuestions {
				select {
				case q := <-h.asked:
					qs = append(qs, q)
				default:
					break more
				}
			}
			err := h.park(qs)
			var full *errTooManyHeld
			if !errors.As(err, &full) {
				return nil, err
			}
			// No room to wait: the upstream is told, and the call goes on.
			for _, q := range qs {
				q.answer <- answer{err: jsonrpc.NewError(mcp.CodeOverloaded, "%s", full.Error())}
			}
		case <-ctx.Done():
			// The downstream cancelled, or the server's clock fired: the
			// upstream call is cancelled its own way, and its end waited
			// for.
			h.cancel(context.Cause(ctx))
			rec.CancelPropagated = (<-h.ended).propagated
			h.g.unhold(h)
			return nil, context.Cause(ctx)
		}
	}
}

// park ends the downstream request with the gateway's input_required
// result for qs, and keeps the call waiting for a retry.
func (h *held) park(qs []*question) error {
	reqs := make(map[string]mcp.InputRequest, len(qs))
	h.g.heldMu.Lock()
	if err := h.g.registerLocked(h); err != nil {
		h.g.heldMu.Unlock()
		return err
	}
	h.round++
	h.pending = make(map[string]*question, len(qs))
	for i, q := range qs {
		key := fmt.Sprintf("r%d.%d", h.round, i+1)
		h.pending[key] = q
		reqs[key] = mcp.InputRequest{Method: q.method, Params: q.params}
	}
	round := h.round
	h.serving = false
	h.expiry = time.AfterFunc(h.g.opts.InputWait, func() { h.expire(round) })
	h.g.heldMu.Unlock()
	state, _ := json.Marshal(relayState{Upstream: h.upstream, Held: h.id, Round: round})
	return &server.InputRequired{Requests: reqs, State: state}
}

// expire cancels a call still parked at round when its wait is over. The
// check and the removal are one step under heldMu: a retry that takes the
// call first (resume) finds it serving, and one that comes after finds it
// gone.
func (h *held) expire(round int) {
	g := h.g
	g.heldMu.Lock()
	if h.serving || h.round != round || g.held[h.id] != h {
		g.heldMu.Unlock()
		return
	}
	g.unholdLocked(h)
	g.heldMu.Unlock()
	h.cancel(errInputExpired)
	// No downstream request serves it now: its end is recorded here, as
	// it was — cancelled, or already over while it waited (the upstream
	// stopped asking and answered), with an answer no client received.
	e := <-h.ended
	rec := ForwardRecord{Upstream: h.upstream, Method: mcp.MethodToolsCall, Name: h.tool, Outcome: OutcomeLost, Reached: true}
	if errors.Is(e.err, errInputExpired) {
		rec.Outcome, rec.CancelPropagated = OutcomeCancelled, e.propagated
	}
	g.obs.Forwarded(rec)
}

// resume is a downstream retry of a parked call: the answers it carries
// go upstream, and the retry serves the call from there. Answers the retry
// lacks are asked again.
func (g *Gateway) resume(ctx context.Context, call *server.CallRequest, st relayState, rec *ForwardRecord) (*mcp.CallToolResult, error) {
	g.heldMu.Lock()
	h := g.held[st.Held]
	switch {
	case h == nil || h.tenant != call.Tenant || h.tool != call.Name || !h.parked:
		g.heldMu.Unlock()
		return nil, &mcp.ToolError{Code: mcp.FailureOutcomeUnknown, Message: "the upstream call these answers were for has ended: its wait for them expired, and it was cancelled upstream " +
			"unless it had ended on its own; whether it took effect is unknown: check before calling again"}
	case h.serving || h.round != st.Round:
		g.heldMu.Unlock()
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "these answers are for round %d of the call, which is not the round waiting for answers (another retry answered it)", st.Round)
	}
	h.serving = true
	h.expiry.Stop()
	var missing []*question
	keys := make([]string, 0, len(h.pending))
	for k := range h.pending {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q := h.pending[k]
		if a, ok := call.InputResponses[k]; ok {
			q.answer <- answer{result: a}
		} else {
			missing = append(missing, q)
		}
	}
	h.pending = nil
	g.heldMu.Unlock()
	if len(missing) > 0 {
		return nil, h.park(missing)
	}
	return h.serve(ctx, call, rec)
}
