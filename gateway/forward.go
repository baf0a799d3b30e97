package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
)

// maxRelayedState bounds the upstream requestState the gateway carries in
// its own across a 2026-07-28 input round: the downstream client echoes it
// on every retry.
const maxRelayedState = 64 << 10

// defaultRetryAfter is the retryAfterMs of an unavailable upstream that
// said nothing of its own.
const defaultRetryAfter = time.Second

// maxRetryAfter bounds the Retry-After of an upstream's passed on as
// retryAfterMs: an upstream may say anything, up to centuries.
const maxRetryAfter = 10 * time.Minute

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
	if q.RequestState == nil {
		return relayState{}, nil // before st, which the decoder takes the address of: no allocation on a first attempt
	}
	var st relayState
	if err := json.Unmarshal(q.RequestState, &st); err != nil || st.Upstream != upstream {
		return st, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "the requestState was not issued for this tool")
	}
	return st, nil
}

// forwardTool is the handler of one upstream tool: it picks the upstream
// connection, calls through the client's seam (whose interceptors retry,
// count the circuit, trace and measure) and maps the verdict.
func (l *link) forwardTool(upstreamTool string, tp ToolPolicy, upTasks upstreamTasks, planner *retry.Planner) server.ToolHandler {
	return func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		// left ends when the call is left to another process: its task
		// taken over or ended elsewhere, its process shutting down. A
		// synchronous call is never left: it ends with its request. It
		// is made when first needed: most calls never run as a task.
		var left context.Context
		if taskserver.TaskID(call) != "" {
			var stop func()
			ctx, left, stop = watchTask(ctx, call)
			defer stop()
		}
		f := l.begin(ctx, mcp.MethodToolsCall, call.Name)
		defer f.end()
		st, err := relayStateOf(&call.Request, l.up.Name)
		if err != nil {
			f.rec.Outcome = OutcomeFailed
			return nil, idempotency.NotRun(err)
		}
		if st.Held != "" {
			res, err := l.g.resume(f.ctx, call, st, &f.rec)
			f.settle(res, err)
			return res, err
		}
		c, release, err := l.acquire(f.ctx, call.Tenant, relayed(call.ClientCapabilities))
		if err != nil {
			f.rec.Outcome = OutcomeUnavailable
			if errors.Is(context.Cause(f.ctx), errTaskCancelled) {
				return nil, l.taskCancelled(f.ctx, call, tp, false)
			}
			return nil, idempotency.NotRun(l.unavailable(err))
		}
		// The upstream runs the call as a task of its own when it must,
		// or when the gateway runs it as a task of its own: the gateway's
		// follows the upstream's. A 2025-era upstream may ask mid-call,
		// which a 2026-07-28 client can answer only across requests: the
		// call is held, unless the client declared nothing the upstream
		// could ask it (its questions are then refused on the way, as
		// anywhere), or the call is keyed: its claim is one request's,
		// and a held call would outlive it.
		asTask := upTasks == upstreamTaskRequired || upTasks != noUpstreamTask && taskserver.TaskID(call) != ""
		hold := !asTask && call.Era == mcp.Modern && c.Era() != mcp.Modern && answersAny(call.ClientCapabilities) && tp.Server.Retry != mcp.RetryConditional
		up := l.upstreamCall(f.ctx, call, upstreamTool, tp, st, hold)
		if hold {
			return l.forwardHeld(f, call, c, release, up, tp)
		}
		defer release()
		up.o.OnRequest = relay(&call.Request)
		sent := time.Now()
		var res *mcp.CallToolResult
		if !asTask {
			res, err = l.callTool(withRetries(f.ctx, planner, idempotency.Key(call) != "", &f.rec), c, upstreamTool, up.args, up.o)
			// A 2026-07-28 upstream that runs the tool only as a task
			// refuses a plain call (-32021, the tasks extension): nothing
			// ran, and the call is made again as a task.
			asTask = err != nil && upTasks != noUpstreamTask && needsTask(err)
		}
		if asTask {
			var started bool
			res, err, started = l.callAsUpstreamTask(f, cmp.Or(left, context.WithoutCancel(ctx)), call, c, upstreamTool, up.args, up.o, tp)
			if started {
				f.rec.InUpstream, f.rec.Reached = time.Since(sent), true
				if err != nil {
					err = ranFailure(tp, err) // the upstream's task was created: it ran
				}
				f.settle(res, err)
				return res, err
			}
		}
		f.rec.InUpstream, f.rec.Reached = time.Since(sent), true
		if err == nil {
			f.settle(res, nil)
			return res, nil
		}
		mapped := l.callFailure(f.ctx, err, tp, &call.Request, &f.rec)
		if errors.Is(context.Cause(f.ctx), errTaskCancelled) {
			return nil, l.taskCancelled(f.ctx, call, tp, !neverRan(err, f.rec.Outcome))
		}
		return nil, keyedFailure(tp, err, mapped, f.rec.Outcome)
	}
}

// upstreamCallArgs are a forwarded call's arguments and options as they
// go upstream.
type upstreamCallArgs struct {
	tool string
	args any
	o    *client.CallOptions
	sink *sink
}

// upstreamCall is what a forwarded call sends upstream: the caller's
// arguments and _meta with their keys derived for the tenant, the
// policy's clocks with the gateway's slack, the caller's capabilities and
// any input it answered. A held call's copies outlive the request.
func (l *link) upstreamCall(ctx context.Context, call *server.CallRequest, upstreamTool string, tp ToolPolicy, st relayState, hold bool) upstreamCallArgs {
	sink := l.sink(&call.Request)
	caps := relayed(call.ClientCapabilities) // a 2026-07-28 upstream is told the caller's
	o := &client.CallOptions{
		Idle:           tp.Server.IdleTimeout + l.g.opts.ClockSlack,
		Max:            tp.Server.MaxTimeout + l.g.opts.ClockSlack,
		OnProgress:     sink.progress,
		OnNotification: sink.note,
		Meta:           passMeta(call.Meta, hold),
		Capabilities:   &caps,
	}
	if len(st.State) > 0 || call.InputResponses != nil {
		o.Input = &client.InputAnswers{Responses: call.InputResponses, RequestState: st.State}
	}
	var args any
	if len(call.Arguments) > 0 {
		args = json.RawMessage(call.Arguments)
		if hold {
			args = json.RawMessage(bytes.Clone(call.Arguments)) // a held call outlives the request's frame
		}
	}
	keyArg := "" // a tool the policy does not key: no argument is known to be its key
	if tp.Server.Retry == mcp.RetryConditional {
		keyArg = tp.keyArgument()
	}
	return upstreamCallArgs{tool: upstreamTool, args: withUpstreamKeys(args, o.Meta, keyArg, call.Tenant, upstreamTool), o: o, sink: sink}
}

// forwardHeld forwards a call the gateway holds: the upstream call runs
// apart from this request (it keeps its span, not its cancellation) and
// ends with the gateway; the downstream client answers the upstream's
// questions across its requests.
func (l *link) forwardHeld(f *forward, call *server.CallRequest, c *client.Client, release func(), up upstreamCallArgs, tp ToolPolicy) (*mcp.CallToolResult, error) {
	h := l.g.hold(call, l.up.Name, up.sink)
	up.o.OnRequest = h.ask
	cctx, cancel := context.WithCancelCause(context.WithoutCancel(f.ctx))
	stop := context.AfterFunc(l.ctx, func() { cancel(errClosing) })
	h.cancel = cancel
	l.g.heldCalls.Add(1)
	go func() {
		defer l.g.heldCalls.Done()
		defer release()
		defer stop()
		defer cancel(nil)
		res, err := l.callTool(cctx, c, up.tool, up.args, up.o)
		var rec ForwardRecord
		if err != nil {
			err = l.callFailure(cctx, err, tp, &call.Request, &rec)
		}
		h.ended <- heldEnd{res, err, rec.CancelPropagated}
	}()
	f.rec.Reached = true
	res, err := h.serve(f.ctx, call, &f.rec)
	f.rec.InUpstream = time.Since(f.start)
	f.settle(res, err)
	return res, err
}

// errTaskCancelled ends a task's forward when tasks/cancel was asked of
// its task: the upstream call is cancelled its own way, and what the
// task becomes depends on what the upstream may have done (taskCancelled).
var errTaskCancelled = errors.New("gateway: the task was cancelled (tasks/cancel)")

// taskCancelled ends a task whose forward tasks/cancel stopped before the
// upstream answered; sent says this attempt's request may have reached
// the upstream.
// The task ends cancelled only where that hides no effect: the tool is a
// read, or the request provably never reached the upstream. Otherwise the
// upstream may have acted before the cancellation reached it, and the
// task ends with the outcome unknown, as a call whose answer was lost
// does — never "cancelled", which would say nothing happened. (An answer
// that came first is the task's result: the forward returned it.)
func (l *link) taskCancelled(ctx context.Context, call *server.CallRequest, tp ToolPolicy, sent bool) error {
	// A task taken over from a gateway that stopped may have been sent
	// by that one.
	sent = sent || taskserver.Attempt(call) > 1
	if tp.Server.Retry == mcp.RetrySafe || !sent {
		// The checkpoint observes the intent and ends the task cancelled
		// (tasks.ErrCancelled); it must not be cut short by the cancel
		// that brought it here.
		return taskserver.Checkpoint(context.WithoutCancel(ctx), call, "")
	}
	return l.outcomeUnknown(tp, "its task was cancelled (tasks/cancel) while the call was in flight, and no answer came before the cancellation reached it")
}

// taskCheckEvery is how often a task's forward checks in with its task:
// it renews the task's lease (well within tasks.DefaultLease) and reads a
// tasks/cancel, which a forward otherwise never sees.
const taskCheckEvery = time.Second

// watchTask checks in with call's task while its forward runs. The
// context it returns ends — so the upstream call is cancelled its own
// way — once tasks/cancel was asked of the task (errTaskCancelled); it
// goes on renewing the task's lease while the forward finds out what the
// cancellation did. left, which the first context is under, ends once the
// task was ended or taken over elsewhere, or its process is shutting down
// (the cause says which, for the task's outcome). A store that fails for
// a moment stops nothing.
func watchTask(ctx context.Context, call *server.CallRequest) (_, left context.Context, stop func()) {
	left, leave := context.WithCancelCause(ctx)
	ctx, cancel := context.WithCancelCause(left)
	// check reads the intent, and does not act on it: the task ends once
	// the forward knows what its cancellation did (taskCancelled,
	// upstreamTaskEnd). It reports whether the watch is over.
	check := func() bool {
		asked, err := taskserver.Renew(left, call, "", nil)
		if asked {
			cancel(errTaskCancelled)
		}
		if errors.Is(err, tasks.ErrShutdown) || errors.Is(err, tasks.ErrTerminal) || errors.Is(err, tasks.ErrLeaseLost) {
			leave(err)
			return true
		}
		return false
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	// Checked once before the forward starts: a task taken over with
	// its cancellation requested meets it before anything is sent.
	if !check() {
		wg.Go(func() {
			t := time.NewTicker(taskCheckEvery)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-left.Done():
					return
				case <-t.C:
				}
				if check() {
					return
				}
			}
		})
	}
	return ctx, left, func() {
		close(done)
		wg.Wait()
		cancel(nil)
		leave(nil)
	}
}

// planner plans the gateway's own retries of a tool upstream, on the
// upstream's budget.
func (l *link) planner(tp ToolPolicy) *retry.Planner {
	return retry.NewPlanner(retry.Options{Table: retry.Table{Default: retry.Rule{Class: tp.retryClass()}},
		MaxAttempts: tp.MaxAttempts, Budget: l.budget, Backoff: retry.Backoff{Base: l.g.opts.RetryBase}})
}

// keyedFailure is how a keyed call's failure is told to the gateway's
// ledger (package idempotency, at most once unless the upstream honours
// the key): a request that provably never ran upstream is NotRun, which
// frees its key for a retry; every other failure leaves the outcome
// unknown, and the gateway's own words for one (a timeout, an HTTP 500,
// a malformed answer) say so, for they are no decision of the upstream's
// to replay. Where the upstream honours the key, the ledger keeps no
// unknown outcome — it frees the key, and a retry sends it again — and
// the caller is told that retrying with the key is safe. raw is the
// client's error, mapped what the downstream is told.
func keyedFailure(tp ToolPolicy, raw, mapped error, outcome Outcome) error {
	if tp.Server.Retry != mcp.RetryConditional {
		return mapped
	}
	if neverRan(raw, outcome) {
		return idempotency.NotRun(mapped)
	}
	return ranFailure(tp, mapped)
}

// ranFailure is keyedFailure of a call that may have run upstream (an
// upstream task that was created ran, whatever its failure's code): its
// key is kept, and a failure in the gateway's own words says the outcome
// is unknown.
func ranFailure(tp ToolPolicy, mapped error) error {
	if tp.Server.Retry != mcp.RetryConditional {
		return mapped
	}
	var te *mcp.ToolError
	if errors.As(mapped, &te) && te.Code != mcp.FailureOutcomeUnknown {
		advice := "check before calling again with a new key"
		if tp.upstreamHonoursKey() {
			advice = resendAdvice(tp)
		}
		return &mcp.ToolError{Code: mcp.FailureOutcomeUnknown, Retryable: tp.upstreamHonoursKey(),
			Message: te.Message + ": the call may or may not have taken effect; " + advice}
	}
	return mapped
}

// neverRan reports whether a forward that failed with err (and was
// recorded as outcome) provably did not run upstream: the gateway refused
// it itself (its circuit open, no session), the upstream asked for input
// before acting, or the client's verdict says it was never sent or was
// refused (client.VerdictOf). A 503 is not proof: a proxy answers it
// after it passed the request on; nor is an invalid params error, which
// an SDK raises on a tool's output after the tool ran.
func neverRan(err error, outcome Outcome) bool {
	if outcome == OutcomeInput || errors.As(err, new(*errUnavailable)) {
		return true
	}
	return !client.VerdictOf(nil, err).Outcome.Ran()
}

// upstreamKey is the idempotency key an upstream is sent for a keyed
// call of tenant's to its tool upstreamTool: never the caller's key, which
// is the tenant's alone, but one derived from the tenant, the tool as the
// upstream names it, and the caller's key (ledger.DerivedKey). Two tenants
// who choose one key send two keys, so an upstream that deduplicates by
// the key never answers one tenant with another's result; every retry of
// one tenant's call sends the same key, so it still deduplicates those.
func upstreamKey(tenant, upstreamTool, key string) string {
	return ledger.DerivedKey(tenant, upstreamTool, key)
}

// withUpstreamKeys is a call's arguments and _meta as they go upstream,
// with its idempotency keys derived for tenant (upstreamKey), under their
// names in any case, for an upstream may read names in any case. The
// _meta key is this call's key whatever the tool, so it is derived for
// every tool: one the policy does not name may still reach an upstream
// that deduplicates by it. The argument arg is derived only where the
// policy says it is the call's key (arg "" derives none): an argument of
// a tool the gateway was told nothing of may be another call's key, one a
// read looks up. args is the call's raw arguments (or nil); the rest pass
// as they came, and a call that carries no key costs a scan of the names
// of its arguments.
func withUpstreamKeys(args any, meta map[string]any, arg, tenant, upstreamTool string) any {
	for k, v := range meta {
		if !strings.EqualFold(k, mcp.MetaIdempotencyKey) {
			continue
		}
		var key string
		if raw, ok := v.(json.RawMessage); ok && json.Unmarshal(raw, &key) == nil && key != "" {
			meta[k] = upstreamKey(tenant, upstreamTool, key)
		} else {
			// No key (null, "", not a string): nothing to derive, and
			// passed on as it came it would be the same for every tenant.
			delete(meta, k)
		}
	}
	raw, _ := args.(json.RawMessage)
	if arg == "" {
		return args
	}
	keyed := false
	jsonrpc.Members(raw, func(k, _ []byte) bool {
		keyed = strings.EqualFold(string(k), arg)
		return !keyed
	})
	if !keyed {
		return args
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return args
	}
	for k, v := range members {
		var key string
		if strings.EqualFold(k, arg) && json.Unmarshal(v, &key) == nil && key != "" {
			members[k], _ = json.Marshal(upstreamKey(tenant, upstreamTool, key))
		}
	}
	out, err := json.Marshal(members)
	if err != nil {
		return args
	}
	return json.RawMessage(out)
}

// callTool calls the upstream's tool and returns its result to pass on
// as it came: its content blocks never decoded and encoded again, so
// that one of a type this gateway does not know survives, and a call
// costs one decode.
func (l *link) callTool(ctx context.Context, c *client.Client, name string, args any, o *client.CallOptions) (*mcp.CallToolResult, error) {
	raw, err := c.CallToolRaw(ctx, name, args, o)
	if err != nil {
		return nil, err
	}
	res, err := mcp.PassThrough(raw)
	if err != nil {
		return nil, &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf("upstream %q answered tools/call with a malformed result", l.up.Name)}
	}
	withoutHop(res)
	return res, nil
}

// withoutHop takes from a result what its upstream's era added for its
// hop alone: a 2026-07-28 upstream's resultType and its serverInfo. The
// gateway's server adds its own for a downstream of that era; one of
// 2025-11-25 gets neither, and no one downstream learns the upstream's
// identity from a result.
func withoutHop(res *mcp.CallToolResult) {
	if res.ResultType == mcp.ResultComplete {
		res.ResultType = ""
	}
	if _, ok := res.Meta[mcp.MetaServerInfo]; ok {
		delete(res.Meta, mcp.MetaServerInfo)
		if len(res.Meta) == 0 {
			res.Meta = nil
		}
	}
}

// forward is one forwarded request's record and span.
type forward struct {
	ctx   context.Context
	rec   ForwardRecord
	start time.Time
	l     *link
	stop  func()
}

// begin starts a forward, whose context also ends (errClosing) when a
// Reload's drain of its link has outlasted the grace (link.cut). A
// client's request in flight does not end with its connection's Close on
// every transport (a Streamable HTTP request's stream is left as it is),
// so the forward ends it, cancelling it upstream as any cancellation
// does.
func (l *link) begin(ctx context.Context, method, name string) *forward {
	f := &forward{rec: ForwardRecord{Upstream: l.up.Name, Method: method, Name: name}, start: time.Now(), l: l}
	fctx, cancel := context.WithCancelCause(ctx)
	after := context.AfterFunc(l.cut, func() { cancel(errClosing) })
	f.ctx, f.stop = fctx, func() { after(); cancel(nil) }
	return f
}

func (f *forward) end() {
	f.stop()
	f.rec.Total = time.Since(f.start)
	f.l.g.obs.Forwarded(f.rec)
}

// settle records how a tool call that returned ended.
func (f *forward) settle(res *mcp.CallToolResult, err error) {
	if err == nil {
		f.rec.Outcome = OutcomeOK
		if res != nil && res.IsError {
			f.rec.Outcome = OutcomeToolError
		}
		return
	}
	// Declared after the return above: errors.As takes their addresses,
	// which puts them on the heap, and most calls succeed.
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
	case f.ctx.Err() != nil:
		f.rec.Outcome = OutcomeCancelled
	default:
		f.rec.Outcome = OutcomeProtocolError
	}
}

// callFailure maps how a request q forwarded failed to what the
// downstream is told, by the client's verdict (client.VerdictOf): a
// request that did not run upstream is unavailable there, and retryable;
// one whose outcome is unknown is an unknown outcome, retryable only for
// a tool that may be sent again; the upstream's own answers pass in their
// own words.
func (l *link) callFailure(ctx context.Context, err error, tp ToolPolicy, q *server.Request, rec *ForwardRecord) error {
	v := client.VerdictOf(nil, err)
	var de *client.DeadlineError
	var rpc *jsonrpc.Error
	var ie *client.InputError
	var se *client.StatusError
	var redirect *client.RedirectError
	if ce := (*client.CancelledError)(nil); errors.As(err, &ce) && errors.Is(context.Cause(ctx), errClosing) {
		// The gateway itself stopped the call — it is closing, or a
		// Reload took the upstream out and its grace has passed — not
		// the downstream: the call may have run upstream, so its outcome
		// is unknown, unless it never left.
		if v.Outcome == retry.OutcomeNotSent { // the client's one verdict
			rec.Outcome = OutcomeUnavailable
			return l.unavailable(&errUnavailable{after: defaultRetryAfter,
				why: fmt.Sprintf("upstream %q is no longer served (%v)", l.up.Name, errClosing)})
		}
		rec.Outcome = OutcomeLost
		rec.CancelPropagated = ce.Cancel.Propagated()
		return l.outcomeUnknown(tp, fmt.Sprintf("the gateway stopped forwarding to it while the call was in flight (%v)", errClosing))
	}
	switch {
	case ctx.Err() != nil || v.Kind == retry.Cancelled:
		// The downstream cancelled, or the server's clock fired: the
		// server has its own terminal state and discards this.
		rec.Outcome = OutcomeCancelled
		if ce := (*client.CancelledError)(nil); errors.As(err, &ce) {
			rec.CancelPropagated = ce.Cancel.Propagated()
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	case errors.As(err, new(*mcp.ToolError)):
		rec.Outcome = OutcomeFailed
		return err // the gateway's own words already
	case errors.As(err, new(*client.AuthorizationError)):
		rec.Outcome = OutcomeFailed
		return l.unauthorized(err)
	case errors.As(err, &ie) && errors.Is(err, errRelayInput):
		rec.Outcome = OutcomeInput
		return l.relayedInput(ie, q.ClientCapabilities)
	case errors.As(err, &rpc):
		rec.Outcome = OutcomeProtocolError
		return upstreamRPCError(l.up.Name, rpc)
	case errors.As(err, &de):
		// The client's backstop fired before the server's clock: the
		// upstream was cancelled all the same.
		rec.Outcome = OutcomeCancelled
		rec.CancelPropagated = de.Cancel.Propagated()
		return &mcp.ToolError{Code: mcp.FailureTimeout, Message: fmt.Sprintf("upstream %q did not answer in time (%s clock)", l.up.Name, de.Clock)}
	case v.Kind == retry.Unavailable:
		// The upstream, or a proxy in front of it, says it is
		// unavailable: probably it did not act on the request, but a
		// proxy can answer 503 after passing a request on. A tool that
		// may be sent again is told to retry; any other's outcome is
		// unknown.
		rec.Outcome = OutcomeUnavailable
		if tp.resendable() {
			return l.unavailable(err)
		}
		return l.outcomeUnknown(tp, "it answered HTTP 503 (unavailable): it probably did not act on the request, but an HTTP proxy can answer 503 after passing a request on")
	case v.Kind == retry.NotSent, v.Kind == retry.RateLimited:
		rec.Outcome = OutcomeUnavailable
		return l.unavailable(err)
	case errors.As(err, &redirect):
		// Where it pointed is for the operator's log, never downstream.
		rec.Outcome = OutcomeFailed
		l.log.Warn("gateway: the upstream answered with a redirect, which the gateway does not follow", "status", redirect.Status, "location", redirect.Location)
		return &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf("upstream %q answered HTTP %d, a redirect, which the gateway does not follow: the upstream did not run the request", l.up.Name, redirect.Status)}
	case v.Outcome == retry.OutcomeUnknown:
		rec.Outcome = OutcomeLost
		return l.outcomeUnknown(tp, l.lost(err, v))
	case errors.As(err, &se):
		rec.Outcome = OutcomeFailed
		return &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf("upstream %q answered HTTP %d", l.up.Name, se.Status)}
	default:
		rec.Outcome = OutcomeFailed
		return &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf("upstream %q: %s", l.up.Name, l.redact(err))}
	}
}

// lost says why a request's outcome is unknown, in the downstream's
// terms.
func (l *link) lost(err error, v retry.Verdict) string {
	var tl *client.ResponseTooLargeError
	switch {
	case errors.Is(err, client.ErrConnectionLost):
		return "the connection to it ended while the call was in flight"
	case errors.As(err, &tl):
		return fmt.Sprintf("it answered with more than the gateway takes in (%d bytes), and the answer was dropped unread", tl.Limit)
	case v.Status == http.StatusBadGateway || v.Status == http.StatusGatewayTimeout:
		// An intermediary passed the request on, or may have, and got no
		// answer it could pass back.
		return fmt.Sprintf("an HTTP intermediary in front of it answered %d", v.Status)
	case v.Status >= 200 && v.Status < 300:
		// The upstream took the request and sent back what is no
		// JSON-RPC response (a truncated body, a page): what it did is
		// in the answer nobody can read.
		return fmt.Sprintf("it answered HTTP %d with no JSON-RPC response in the body", v.Status)
	case v.Status != 0:
		return fmt.Sprintf("it answered HTTP %d", v.Status)
	}
	return l.redact(err)
}

// outcomeUnknown is the failure of a call that may have reached the
// upstream and whose answer did not come back: whether it took effect is
// unknown. Only a tool that may be sent again (ToolPolicy.resendable) —
// a read, or a keyed call whose upstream honours the key — is told it
// may simply be made again.
func (l *link) outcomeUnknown(tp ToolPolicy, why string) error {
	advice := "check before calling again"
	if tp.resendable() {
		advice = resendAdvice(tp)
	}
	return &mcp.ToolError{
		Code:      mcp.FailureOutcomeUnknown,
		Message:   fmt.Sprintf("upstream %q: %s: the call may or may not have taken effect; %s", l.up.Name, why, advice),
		Retryable: tp.resendable(),
	}
}

// resendAdvice says why a tool that may be sent again is safe to retry.
func resendAdvice(tp ToolPolicy) string {
	if tp.Server.Retry == mcp.RetryConditional {
		return "retrying with the same idempotency key is safe: the upstream deduplicates by it"
	}
	return "retrying is safe: the tool only reads"
}

// redact is err's text with the upstream's URL, which may carry
// credentials (a key in its query) or name an internal host, replaced by
// the upstream's name: what a downstream client is told never shows it.
func (l *link) redact(err error) string {
	msg := strings.TrimPrefix(err.Error(), "client: ")
	if l.up.URL != "" {
		msg = strings.ReplaceAll(msg, l.up.URL, "upstream "+strconv.Quote(l.up.Name))
		if u, perr := url.Parse(l.up.URL); perr == nil && u.Host != "" {
			msg = strings.ReplaceAll(msg, u.Host, "upstream "+strconv.Quote(l.up.Name))
		}
	}
	return msg
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
// be reached or refused it (429), or the gateway holds as much as it may —
// or, for a tool that may be sent again, that it answered 503. It names
// the upstream, never its URL.
func (l *link) unavailable(err error) error {
	if errors.As(err, new(*client.AuthorizationError)) {
		return l.unauthorized(err) // not connected for want of credentials
	}
	after := defaultRetryAfter
	var ue *errUnavailable
	var se *client.StatusError
	var ce *client.ConnectError
	msg := fmt.Sprintf("upstream %q is unavailable", l.up.Name)
	reached := "; the request never reached it"
	switch {
	case errors.As(err, &ue):
		after = max(ue.after, 10*time.Millisecond)
		msg = ue.why
	case errors.As(err, &se):
		msg = fmt.Sprintf("upstream %q answered HTTP %d", l.up.Name, se.Status)
		if se.Status == http.StatusServiceUnavailable {
			reached = "; it probably did not act on the request (a proxy may have passed it on), and this tool may be sent again"
		}
		if d, ok := retry.ParseRetryAfter(se.RetryAfter, time.Now()); ok {
			after = min(max(d, 10*time.Millisecond), maxRetryAfter)
		}
	case errors.As(err, &ce):
		msg = fmt.Sprintf("upstream %q could not be reached", l.up.Name)
		if errors.Is(err, syscall.ECONNREFUSED) {
			msg += " (connection refused)"
		}
	}
	return &mcp.ToolError{Code: mcp.FailureUpstreamUnavailable, Message: msg + reached, Retryable: true, RetryAfter: after.Round(time.Millisecond)}
}

// unauthorized is the failure of a request the upstream refused for the
// gateway's credentials (err holds a *client.AuthorizationError): not
// retryable, naming the upstream and what the operator must do. Its
// words are the gateway's: a token, a code or a secret never reaches a
// caller (package client/oauth's errors hold none, and only their step
// and OAuth error code are passed on); the whole reason goes to the log.
func (l *link) unauthorized(err error) error {
	var ae *client.AuthorizationError
	errors.As(err, &ae)
	action := l.action()
	details := map[string]any{"upstream": l.up.Name, "action": action}
	why := ""
	if ae != nil && ae.Status != 0 {
		details["status"] = ae.Status
		why = fmt.Sprintf(" (HTTP %d)", ae.Status)
	}
	var oe *oauth.Error
	if errors.As(err, &oe) {
		details["step"] = oe.Step
		if oe.Code != "" {
			details["oauthError"] = oe.Code
		}
	}
	// Every call of the upstream's tools is refused until the operator
	// acts: one line per refusedLogEvery says so, with how many more.
	logged := false
	l.refusedLog.Do(func() {
		logged = true
		l.log.Warn("gateway: the upstream refused the gateway's credentials", "err", l.redact(err), "action", action,
			"refused_since_last_line", l.refusedQuiet.Swap(0))
	})
	if !logged {
		l.refusedQuiet.Add(1)
	}
	return &mcp.ToolError{Code: mcp.FailureUpstreamUnauthorized, Details: details,
		Message: fmt.Sprintf("upstream %q refused the gateway's credentials%s and no others could be had: the request never ran there; the operator must %s", l.up.Name, why, action)}
}

// action is what the operator must do when the upstream refuses the
// gateway's credentials.
func (l *link) action() string {
	if l.up.AuthorizationAction != "" {
		return l.up.AuthorizationAction
	}
	return fmt.Sprintf("renew the credentials the gateway is given for upstream %q", l.up.Name)
}

// answersAny reports whether a client declared any of the capabilities
// an upstream's request during a call needs.
func answersAny(caps mcp.ClientCapabilities) bool {
	return caps.Elicitation != nil || caps.Sampling != nil || caps.Roots != nil
}

// lacks is the error an upstream's request gets when the downstream
// client did not declare the capability it needs: for an elicitation in
// URL mode, elicitation's url (an empty elicitation capability is the
// form mode's alone).
func lacks(caps mcp.ClientCapabilities, method string, params json.RawMessage) error {
	var have json.RawMessage
	switch method {
	case mcp.MethodElicit:
		have = caps.Elicitation
		var p struct {
			Mode string `json:"mode"`
		}
		if have != nil && json.Unmarshal(params, &p) == nil && p.Mode == "url" {
			var modes struct {
				URL json.RawMessage `json:"url"`
			}
			if json.Unmarshal(have, &modes) != nil || modes.URL == nil {
				return jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "the downstream client did not declare elicitation in URL mode, which this elicitation/create needs")
			}
		}
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
func relay(q *server.Request) client.RequestHandler {
	return func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		if err := lacks(q.ClientCapabilities, method, params); err != nil {
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

// sink is where what an upstream sends for a call goes downstream: to the
// downstream request that serves the call now. A held call is served by
// one request after another, and by none while it waits for a retry:
// what comes then reaches no client.
type sink struct {
	l  *link
	mu sync.Mutex
	q  *server.Request
}

func (l *link) sink(q *server.Request) *sink { return &sink{l: l, q: q} }

// serve makes q the request the call's progress and log messages go to
// (nil: none).
func (s *sink) serve(q *server.Request) {
	s.mu.Lock()
	s.q = q
	s.mu.Unlock()
}

// progress reports an increasing upstream report (the client drops the
// rest) on the serving request, which is what resets the server's idle
// clock; the server rate-limits, coalesces and bounds what it sends.
func (s *sink) progress(p client.Progress) {
	var total float64
	if p.Total != nil {
		total = *p.Total
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q != nil {
		_ = s.q.ReportProgress(p.Progress, total, p.Message)
	}
}

// note passes an upstream's log message for the call to the client that
// made it, as far as it asked for them; any other notification sent on
// the call's stream (a list change) is the upstream's, as if it had come
// on its session.
func (s *sink) note(method string, params json.RawMessage) {
	if method != mcp.NotificationMessage {
		s.l.onNotification(method, params)
		return
	}
	var m struct {
		Level  mcp.LoggingLevel `json:"level"`
		Logger string           `json:"logger"`
		Data   json.RawMessage  `json:"data"`
	}
	if json.Unmarshal(params, &m) != nil || m.Level == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q != nil {
		_ = s.q.Log(m.Level, m.Logger, m.Data)
	}
}

// relayedInput turns an upstream's input_required result into the
// gateway's own, for a client that declared caps: a round asking for
// what the client did not declare is refused as the upstream's would be.
func (l *link) relayedInput(ie *client.InputError, caps mcp.ClientCapabilities) error {
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
		if err := lacks(caps, r.Method, r.Params); err != nil {
			return err
		}
		reqs[k] = mcp.InputRequest{Method: r.Method, Params: r.Params}
	}
	state, _ := json.Marshal(relayState{Upstream: l.up.Name, State: round.RequestState})
	return &server.InputRequired{Requests: reqs, State: state}
}

// protocolMeta begins the names of the protocol's own _meta members.
// (No letter of it folds to one of another length, so any spelling of it
// is as long.)
const protocolMeta = "io.modelcontextprotocol/"

// passMeta is what of the downstream request's _meta goes upstream: the
// caller's own members (an idempotency key among them), never the
// protocol's, which speak of this hop (the progress token, the
// 2026-07-28 era's per-request members), nor the caller's trace context,
// which a tracing interceptor (Options.Interceptors) replaces with its
// own span's. Nor is any of
// those names spelt another way: an upstream that matches names in any
// case, as Go's encoding/json does, would take "progresstoken" for the
// gateway's own token, and report the call's progress under another
// call's.
//
// Its values are the request's bytes, valid while the request's handler
// runs; keep copies them, for a call that outlives it.
func passMeta(raw json.RawMessage, keep bool) map[string]any {
	var out map[string]any
	if len(raw) > 0 {
		jsonrpc.Members(raw, func(k, v []byte) bool {
			key := string(k)
			switch {
			case strings.EqualFold(key, mcp.MetaProgressToken), strings.EqualFold(key, "traceparent"), strings.EqualFold(key, "tracestate"),
				len(key) >= len(protocolMeta) && strings.EqualFold(key[:len(protocolMeta)], protocolMeta):
				return true
			}
			if out == nil {
				out = map[string]any{}
			}
			if keep {
				v = bytes.Clone(v)
			}
			out[key] = json.RawMessage(v)
			return true
		})
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
	caps := relayed(q.ClientCapabilities)
	c, release, err := l.acquire(f.ctx, q.Tenant, caps)
	if err != nil {
		f.rec.Outcome = OutcomeUnavailable
		return asRPC(l.unavailable(err))
	}
	defer release()
	sent := time.Now()
	raw, err := c.Request(f.ctx, method, upName, params, &client.CallOptions{Meta: passMeta(q.Meta, false), OnNotification: l.sink(q).note,
		Capabilities: &caps})
	f.rec.InUpstream, f.rec.Reached = time.Since(sent), true
	if err == nil {
		if uerr := json.Unmarshal(raw, out); uerr != nil {
			f.rec.Outcome = OutcomeFailed
			return jsonrpc.NewError(jsonrpc.CodeInternalError, "upstream %q answered %s with a malformed result", l.up.Name, method)
		}
		f.rec.Outcome = OutcomeOK
		return nil
	}
	return asRPC(l.callFailure(f.ctx, err, ToolPolicy{Server: server.Policy{Retry: mcp.RetrySafe}}, q, &f.rec))
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
	if te.Retryable && te.Code != mcp.FailureOutcomeUnknown {
		// -31002 says nothing ran: an unknown outcome never says so,
		// retryable or not; its body's code says what it is.
		code = mcp.CodeUnavailable
	}
	return jsonrpc.NewError(code, "%s", te.Message).WithData(te.Failure())
}
