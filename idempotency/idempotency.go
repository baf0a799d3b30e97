// Package idempotency makes a mutating tool run at most once per
// idempotency key, by putting the durable ledger (package ledger) in front
// of its handler. It is a policy (server.ToolInterceptor): Keyed(l, p) is
// given to server.Server.AddTool, alone or stacked with others, and the
// tool's handler keeps its ordinary signature.
//
// A tool registered with Keyed gets, from one declaration and one handler:
//
//   - a Check that finds the call's key — arguments.idempotencyKey or
//     params._meta["dev.mcprel/idempotencyKey"] — before the arguments are
//     validated or the call waits for admission, and refuses a call that
//     lacks a required key or gives a malformed one;
//   - a handler that runs inside the ledger: the key is claimed, the effect
//     runs in the same transaction (Tx), and its result is stored, so a
//     retry replays it and a reused key is refused;
//   - the retry class RetryConditional and its key mode in the tool's
//     _meta, for clients to plan retries by;
//   - an annotation on the request's record for observers (AnnotationKey):
//     executed, replayed, conflict, in_progress, key_missing, unkeyed,
//     rolled_back, unavailable or unknown.
//
// An effect outside the database is External: claimed, run, then stored.
// Where its receiver honours the key, a claim whose holder died is taken
// over and run again with the same key. Where it does not (AtMostOnce: an
// MCP server behind mcprel gateway), a key is never run twice: a call
// that may have reached the receiver and got no answer leaves the key's
// outcome unknown, and retries are told so ("outcome_unknown") until an
// operator resolves it (ledger.Resolve, "mcprel ledger resolve").
//
// The handler reaches what the ledger gives it through Key(call) and
// Tx(call). A policy stacked inside Keyed (package taskserver's AsTask)
// writes through the same transaction, may start what it wrote once it
// commits (AfterTx), and may keep an outcome that is not a tool result
// (Keep, Replaying).
//
// This file is the one keyed core: key discovery and validation, the
// fingerprint, and the refusal codes of every keyed call, whatever runs
// behind the key.
//
// Package server knows none of this: it imports neither ledger nor store.
package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
)

// AnnotationKey is the key of the annotation this package adds to each
// call's RequestRecord (server.Request.Annotate): what the ledger did.
const AnnotationKey = "idempotency"

// The values of AnnotationKey.
const (
	Executed    = "executed"    // the effect ran and its result was stored
	Replayed    = "replayed"    // a stored result was returned; nothing ran
	Conflict    = "conflict"    // the key was used for another operation; nothing ran
	InProgress  = "in_progress" // another call holds the key; nothing ran
	KeyMissing  = "key_missing" // a required key was missing or malformed; refused
	Unkeyed     = "unkeyed"     // an optional key was absent: ran without the ledger's protection
	RolledBack  = "rolled_back" // the handler failed; nothing was stored
	Unavailable = "unavailable" // the ledger's database failed; nothing was stored
	Unknown     = "unknown"     // AtMostOnce: the outcome is unknown (recorded so, or found so); nothing ran again
)

// NotRun marks a handler's failure as one that provably did not start the
// effect — the request never left for its receiver — so that in
// AtMostOnce mode the key is freed and a retry runs. Every other failure
// of an AtMostOnce tool leaves the key's outcome unknown. errors.Is and
// errors.As see through it to err.
func NotRun(err error) error {
	if err == nil {
		return nil
	}
	return notRun{err}
}

type notRun struct{ err error }

func (n notRun) Error() string { return n.err.Error() }
func (n notRun) Unwrap() error { return n.err }

// Keyed is the policy that runs a tool's calls at most once per
// idempotency key through l (see the package doc and Policy). The tool's
// retry class becomes RetryConditional unless it declares one. Stacked
// with other policies, Keyed is given first of those whose work its
// transaction must hold: srv.AddTool(t, h, idempotency.Keyed(l, p),
// taskserver.AsTask(ts, tp)) creates each task in the transaction that
// claims its key.
func Keyed(l *ledger.Ledger, p Policy) server.ToolInterceptor {
	return func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		if l == nil {
			return nil, fmt.Errorf("idempotency: tool %q has no ledger", t.Name)
		}
		k := &keyed{ledger: l, policy: p}
		return k.intercept(t, next)
	}
}

// scope is what the ledger gives one call: its key, and while its effect
// runs, the transaction and what a policy inside asked of it. It is
// attached to the call under scopeKey.
type scope struct {
	key         string
	fingerprint ledger.Fingerprint
	tx          *store.Tx
	record      json.RawMessage        // an outcome that is not a tool result (Keep)
	replay      json.RawMessage        // a stored such outcome, being replayed
	settled     []func(committed bool) // AfterTx
}

type scopeKey struct{}

func scopeOf(call *server.CallRequest) *scope {
	sc, _ := call.Attached(scopeKey{}).(*scope)
	return sc
}

// Key returns the call's idempotency key, as Keyed found it: "" for a call
// of a KeyOptional tool made without one, or of a tool without Keyed. A
// task's handler reads the key of the call that created the task
// (WithKey). Pass it on to any external service the effect calls, as that service's
// own idempotency key.
func Key(call *server.CallRequest) string {
	if sc := scopeOf(call); sc != nil {
		return sc.key
	}
	return ""
}

// WithKey gives a call detached from its request (server.Server.Detached:
// a task's worker, here or after a takeover) the idempotency key its
// request was made with, so that Key(call) reads it there too: the
// handler, which runs outside any transaction and may run again after a
// takeover, passes it on to the external services it calls. The call has
// no transaction (Tx is nil). An empty key does nothing.
func WithKey(call *server.CallRequest, key string) {
	if key != "" {
		call.Attach(scopeKey{}, &scope{key: key})
	}
}

// Tx returns the transaction the call's effect writes through: it commits
// with the idempotency record and the stored result, or rolls back with
// them. It is nil in External mode, for a tool without Keyed, and in a
// detached call (a task's worker), and valid only until the handler
// returns.
func Tx(call *server.CallRequest) *store.Tx {
	if sc := scopeOf(call); sc != nil {
		return sc.tx
	}
	return nil
}

// AfterTx runs fn once the call's transaction (Tx) has ended, with
// committed true if it committed: for a policy inside Keyed that must not
// start what the transaction records (a task's worker) before its rows are
// visible, and must undo what it reserved if they never will be. Without
// a transaction fn runs at once, with true.
func AfterTx(call *server.CallRequest, fn func(committed bool)) {
	if sc := scopeOf(call); sc != nil && sc.tx != nil {
		sc.settled = append(sc.settled, fn)
		return
	}
	fn(true)
}

// Keep is for a policy inside Keyed whose answer is not a tool result (a
// created task): record is what the ledger stores as the operation's
// outcome, in place of the answer, and hands back through Replaying when
// the same key is used again. It must be a JSON object without a
// "content" member (by which a stored tool result is known). Only a tool
// a policy marked with KeepsRecords (as taskserver.AsTask does) may keep
// one: a record is answered from only by the policy that kept it, so a
// tool without it refuses the key rather than run again.
func Keep(call *server.CallRequest, record json.RawMessage) {
	if sc := scopeOf(call); sc != nil {
		sc.record = record
	}
}

// Replaying returns the record a policy inside Keyed kept (Keep) when the
// call is a retry of that operation: the policy answers it from the
// record, and runs nothing.
func Replaying(call *server.CallRequest) (json.RawMessage, bool) {
	if sc := scopeOf(call); sc != nil && sc.replay != nil {
		return sc.replay, true
	}
	return nil, false
}

// PolicyOf returns the policy Keyed wrapped t with, and whether Keyed
// wrapped it: for a policy given outside Keyed (package delivery's
// Outbox, which needs its transaction) or one that must not be (package
// taskserver's AsTask) to check the order it was stacked in. It reads
// Keyed's mark (server.Tool.Mark), never the key mode the tool's _meta
// advertises, which the tool's author may have written by hand.
func PolicyOf(t *server.Tool) (Policy, bool) {
	m, ok := server.Marked[keyedMark](t)
	m.policy.Fields = slices.Clone(m.policy.Fields)
	m.policy.Preconditions = slices.Clone(m.policy.Preconditions)
	return m.policy, ok
}

// keyedMark is the mark Keyed gives a tool it wraps.
type keyedMark struct{ policy Policy }

// KeepsRecords marks t as a tool that a policy given inside Keyed may
// answer with a record it keeps (Keep) rather than a tool result: package
// taskserver's AsTask, whose answer is a created task, marks its tools so
// when it wraps them. Keyed, outside it, stores and answers from kept
// records only for a tool so marked, and refuses External mode for one,
// whose calls have no transaction to create a task in with the key.
func KeepsRecords(t *server.Tool) { t.Mark(keeper{}) }

// keeper is the mark KeepsRecords gives a tool.
type keeper struct{}

// keyed is the policy of one keyed tool.
type keyed struct {
	ledger *ledger.Ledger
	policy Policy
	class  mcp.RetryClass // the tool's, once intercepted
	log    *slog.Logger
	// maxRun is the longest a call of the tool may run (the server's
	// maximum deadline for it); zero if it has none.
	maxRun time.Duration
	// keeps: the tool runs as a task, so a policy inside may keep a
	// record in place of a tool result (Keep) and answer its replays.
	keeps bool
}

// intercept amends the declaration and wraps the handler.
func (k *keyed) intercept(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
	if t.Policy.Retry == mcp.RetryUnsafe {
		t.Policy.Retry = mcp.RetryConditional
	}
	k.class = t.Policy.Retry
	srv := t.Server()
	k.log = srv.Logger()
	k.maxRun = srv.Deadlines(t.Policy).Max
	if err := k.policy.check(t.Name); err != nil {
		return nil, err
	}
	_, k.keeps = server.Marked[keeper](t)
	if k.policy.External && k.keeps {
		return nil, fmt.Errorf("idempotency: tool %q: a task's creation commits with its key in one transaction; External mode has none", t.Name)
	}
	t.Mark(keyedMark{k.policy})
	if t.Meta == nil {
		t.Meta = mcp.Meta{}
	}
	t.Meta[mcp.MetaKeyMode] = k.policy.Key.String()
	maps.Copy(t.Meta, ledgerMeta(k.ledger, k.policy.External, k.policy.AtMostOnce))
	prev := t.Check
	t.Check = func(ctx context.Context, call *server.CallRequest) (context.Context, error) {
		if prev != nil {
			var err error
			if ctx, err = prev(ctx, call); err != nil {
				return ctx, err
			}
		}
		return ctx, k.check(call)
	}
	return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
		return k.run(ctx, call, next)
	}, nil
}

// check finds the call's key before anything else is done with the call,
// so that a call missing it is told so whatever else is wrong with its
// arguments, and fingerprints the operation while the decoded arguments
// are at hand. A key given only in _meta is supplied to the input schema,
// for a schema that lists it as required; a call of a KeyOptional tool
// without a key is unsafe to retry.
func (k *keyed) check(call *server.CallRequest) error {
	arg := k.policy.keyArgument()
	key, inArgs, te := keyOf(call, arg)
	switch {
	case te != nil:
		call.Annotate(AnnotationKey, KeyMissing)
		return te
	case key == "" && k.policy.Key == KeyRequired:
		call.Annotate(AnnotationKey, KeyMissing)
		return keyRequired(arg)
	case key == "":
		// Nothing dedupes this call: unless its author declared the tool
		// safe to retry anyway, a retry may run it twice.
		if k.class == mcp.RetryConditional {
			call.NarrowRetry(mcp.RetryUnsafe)
		}
		return nil
	case !inArgs:
		call.SupplyArgument(arg, key)
	}
	fp, err := ledger.FingerprintOf(call.DecodedArguments(), k.policy.Fields, arg)
	if err != nil {
		return &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: err.Error()}
	}
	call.Attach(scopeKey{}, &scope{key: key, fingerprint: fp})
	return nil
}

// keyOf finds a call's key in its argument arg or its _meta. A key that
// is not a string, is malformed, or is given twice with two values is
// refused; "" means the call has none. inArgs says whether it was in the
// arguments.
//
// So is a call with an argument or _meta member whose name is the key's
// spelt another way ("requestid" for "requestId"): the key is read under
// its exact name only, but a handler, or the upstream a gateway forwards
// to, that decodes as Go's encoding/json does matches names in any case,
// and would take that member for the key — one the ledger never saw, and,
// behind a gateway, the caller's own rather than the one derived for its
// tenant, which the gateway replaces under the exact name only.
func keyOf(call *server.CallRequest, arg string) (key string, inArgs bool, te *mcp.ToolError) {
	for name := range call.DecodedArguments() {
		if name != arg && strings.EqualFold(name, arg) {
			return "", false, keyError(arg, fmt.Sprintf("arguments.%s is the key's argument %s spelt another way; give the idempotency key as arguments.%s (or in _meta[%q]) only", name, arg, arg, mcp.MetaIdempotencyKey))
		}
	}
	var spelt string
	if len(call.Meta) > 0 {
		jsonrpc.Members(call.Meta, func(k, _ []byte) bool {
			if name := string(k); name != mcp.MetaIdempotencyKey && strings.EqualFold(name, mcp.MetaIdempotencyKey) {
				spelt = name
				return false
			}
			return true
		})
	}
	if spelt != "" {
		return "", false, keyError(arg, fmt.Sprintf("_meta[%q] is %q spelt another way; give the idempotency key as arguments.%s or in _meta[%q] only", spelt, mcp.MetaIdempotencyKey, arg, mcp.MetaIdempotencyKey))
	}
	inMeta := call.KnownMeta.IdempotencyKey
	var fromMeta string
	if len(inMeta) > 0 && string(inMeta) != "null" {
		if err := json.Unmarshal(inMeta, &fromMeta); err != nil {
			return "", false, keyError(arg, "the idempotency key must be a string")
		}
		if !ledger.ValidKey(fromMeta) {
			return "", false, keyError(arg, "the idempotency key must be 1 to 255 bytes of printable text")
		}
	}
	v, ok := call.DecodedArguments()[arg]
	if !ok || v == nil {
		return fromMeta, false, nil
	}
	fromArgs, isString := v.(string)
	if !isString {
		return "", false, keyError(arg, "the idempotency key must be a string")
	}
	if !ledger.ValidKey(fromArgs) {
		return "", false, keyError(arg, "the idempotency key must be 1 to 255 bytes of printable text")
	}
	if fromMeta != "" && fromMeta != fromArgs {
		return "", false, keyError(arg, fmt.Sprintf("the idempotency key is given twice with two values (arguments.%s and _meta[%q])", arg, mcp.MetaIdempotencyKey))
	}
	return fromArgs, true, nil
}

func keyError(arg, msg string) *mcp.ToolError {
	return &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: msg, Details: map[string]any{"field": arg}}
}

// keyRequired is the refusal of a call without the key its tool
// requires, in argument arg.
func keyRequired(arg string) *mcp.ToolError {
	return &mcp.ToolError{
		Code: mcp.FailureKeyRequired,
		Message: "this tool changes state and needs an idempotency key: generate a unique key (a UUID) for this operation, " +
			"pass it as arguments." + arg + " (or params._meta[\"" + mcp.MetaIdempotencyKey + "\"]), " +
			"and reuse the same key on every retry of it",
	}
}

// run runs one call through the ledger.
func (k *keyed) run(ctx context.Context, req *server.CallRequest, next server.CallHandler) (mcp.Result, error) {
	sc := scopeOf(req)
	if sc == nil || sc.key == "" {
		return k.runUnkeyed(ctx, req, next)
	}
	op := ledger.Op{Tenant: req.Tenant, Tool: req.Name, Key: sc.key, Fingerprint: sc.fingerprint}
	var res ledger.Result
	var ran mcp.Result // this call's own answer, when it executed
	var err error
	if k.policy.External {
		res, ran, err = k.runExternal(ctx, req, sc, op, next)
	} else {
		committed := false
		// Deferred, so that a panic in the handler, which rolls the
		// transaction back, tells the policies inside too.
		defer func() { sc.settle(committed) }()
		res, err = k.ledger.Do(ctx, op, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
			sc.tx = tx
			defer func() { sc.tx = nil }() // valid only until the effect returns
			out, err := next(tx.Within(ctx), req)
			var data json.RawMessage
			ran, data, err = k.kept(sc, out, err)
			return data, err
		})
		committed = err == nil && !res.Replayed
		sc.settle(committed)
	}
	if err != nil {
		return nil, k.ledgerError(req, sc.key, err)
	}
	if res.Replayed {
		req.Annotate(AnnotationKey, Replayed)
		return k.replay(ctx, req, sc, res, next)
	}
	req.Annotate(AnnotationKey, Executed)
	return withMarks(ran, res), nil
}

// settle tells the policies inside how the call's transaction ended
// (AfterTx).
func (sc *scope) settle(committed bool) {
	fns := sc.settled
	sc.settled = nil
	for _, fn := range fns {
		fn(committed)
	}
}

// replay answers a retry from its stored outcome: a tool result is
// rebuilt from its JSON, a copy no one else holds; an outcome a policy
// inside kept (Keep) is handed back to it to answer from.
func (k *keyed) replay(ctx context.Context, req *server.CallRequest, sc *scope, res ledger.Result, next server.CallHandler) (mcp.Result, error) {
	var probe struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(res.Data, &probe); err != nil {
		return nil, fmt.Errorf("decoding a stored result: %w", err)
	}
	if probe.Content == nil {
		if !k.keeps {
			// Kept by a policy this tool no longer has (it ran as a task
			// before a redeployment): nothing here can answer from it, and
			// running the handler would do the operation twice.
			req.Annotate(AnnotationKey, Conflict)
			return nil, &mcp.ToolError{Code: mcp.FailureKeyConflict,
				Message: "this idempotency key's operation was recorded as a task, which this tool no longer runs; nothing ran. Use a new key for a new operation",
				Details: map[string]any{"idempotencyKey": sc.key}}
		}
		sc.replay = res.Data
		return next(ctx, req)
	}
	out := new(mcp.CallToolResult)
	if err := json.Unmarshal(res.Data, out); err != nil {
		return nil, fmt.Errorf("decoding a stored result: %w", err)
	}
	return withMarks(out, res), nil
}

// withMarks adds the ledger's marks to a tool result's _meta: whether it
// was replayed, and when the effect ran. Another kind of answer (a
// created task) carries none.
func withMarks(out mcp.Result, res ledger.Result) mcp.Result {
	c, ok := out.(*mcp.CallToolResult)
	if !ok {
		return out
	}
	return withMeta(c, mcp.Meta{mcp.MetaReplayed: res.Replayed, mcp.MetaExecutedAt: res.ExecutedAt.UTC().Format(time.RFC3339Nano)})
}

// runExternal runs an External tool in two phases: claim the key, run the
// handler outside any transaction, store its result. It returns the
// handler's kept answer when this call ran it.
//
// What this call answers is what the ledger records for the key, as every
// retry with it is answered: one key, one outcome. While the handler ran,
// its claim may have been lost — its process was stopped, or its store out
// of reach, past the lease, and another caller took the key over or made
// its outcome unknown, or an operator resolved it. Then nothing this call
// stores or releases is kept (each is conditional on the claim still
// holding the key), and its caller is told what the ledger records instead
// of what its own handler returned (answerLost).
func (k *keyed) runExternal(ctx context.Context, req *server.CallRequest, sc *scope, op ledger.Op, next server.CallHandler) (ledger.Result, mcp.Result, error) {
	claimKey := k.ledger.Claim
	if k.policy.AtMostOnce {
		claimKey = k.ledger.ClaimOnce
	}
	// The claim records the call's deadline — the server ends the call
	// at most maxRun after it arrived, so by maxRun from now at the
	// latest — and a duplicate is never told to come back after it.
	claimCtx := ctx
	if k.maxRun > 0 {
		var cancel context.CancelFunc
		claimCtx, cancel = context.WithDeadline(ctx, time.Now().Add(k.maxRun))
		defer cancel()
	}
	claim, replayed, err := claimKey(claimCtx, op)
	if err != nil {
		return ledger.Result{}, nil, err
	}
	if replayed != nil {
		return *replayed, nil, nil
	}
	completed := false // the key's outcome is this call's to store, or recorded unknown
	released := false
	// release frees the key: the effect did not complete (the handler
	// failed, or panicked), so a retry runs; the external service dedupes
	// by the same key. It reports whether the claim was lost.
	release := func() (lost bool) {
		released = true
		err := claim.Release(context.WithoutCancel(ctx))
		if errors.Is(err, ledger.ErrLeaseLost) {
			return true
		}
		if err != nil {
			k.log.Warn("releasing an idempotency claim failed; it frees itself when its lease expires",
				"tool", req.Name, "error", err)
		}
		return false
	}
	defer func() {
		if !completed && !released { // the handler panicked
			release()
		}
	}()
	// The lease is renewed while the handler runs, so a call may run
	// longer than it; a holder that dies stops renewing.
	stop := k.renew(ctx, req, claim)
	defer stop()
	var out mcp.Result
	if k.policy.AtMostOnce {
		out, err = k.runOnce(ctx, req, claim, next, stop, &completed)
	} else {
		out, err = next(ctx, req)
		stop()
	}
	var lost claimLost
	if errors.As(err, &lost) {
		// The key's outcome was to be recorded unknown, and the claim was
		// no longer there to record it.
		return k.answerLost(ctx, req, claim, ledger.Result{}, nil, lost.err)
	}
	if err == nil {
		// A failed result the receiver says may be retried decided
		// nothing: it is not the key's outcome to replay.
		if te := retryableResult(out); te != nil {
			err = te
		}
	}
	var nr notRun
	if errors.As(err, &nr) {
		if release() { // not this call's key to free any more
			return k.answerLost(ctx, req, claim, ledger.Result{}, nil, handlerFailed{err})
		}
		return ledger.Result{}, nil, handlerFailed{err} // the key is released: a retry runs
	}
	out, data, err := k.kept(sc, out, err)
	if err != nil {
		if !completed && release() {
			return k.answerLost(ctx, req, claim, ledger.Result{}, nil, err)
		}
		return ledger.Result{}, nil, err
	}
	completed = true
	// Store the outcome even if the call was cancelled meanwhile: the
	// effect happened.
	res, err := claim.Complete(context.WithoutCancel(ctx), data)
	own := ledger.Result{Data: data, ExecutedAt: time.Now()} // what this call ran, if nothing records another
	switch {
	case err == nil:
		return res, out, nil
	case errors.Is(err, ledger.ErrLeaseLost):
		return k.answerLost(ctx, req, claim, own, out, nil)
	case k.policy.AtMostOnce:
		// The receiver answered, and the store failed to take the answer.
		// The key is never run again, and no retry can be given this
		// answer: the key's outcome is unknown, recorded so now or read
		// so once this claim's lease runs out (the renewals have
		// stopped). So this caller is told outcome_unknown too, not a
		// success every retry contradicts. If the store did take the
		// answer — only its acknowledgement was lost — recording unknown
		// finds the claim gone, and the caller gets the stored answer;
		// if the store takes neither, the caller is told unknown and a
		// retry may later find the answer stored, which resolves that
		// unknown rather than contradicting it.
		k.log.Warn("a keyed call's answer could not be stored; its key's outcome is unknown, and its caller is told so",
			"id", req.ID, "tool", req.Name, "tenant", req.Tenant, "error", err)
		const reason = "the answer could not be stored"
		if err := k.markUnknown(ctx, req, claim, reason); errors.Is(err, ledger.ErrLeaseLost) {
			return k.answerLost(ctx, req, claim, own, out, nil)
		}
		return ledger.Result{}, nil, &ledger.UnknownError{Reason: reason}
	}
	// The claim stays until its lease runs out; then a retry takes the
	// key over and calls again with it, which the receiver dedupes: this
	// caller is told the ledger failed and that retrying with the key is
	// safe, which is true.
	k.log.Warn("the effect completed but its result could not be stored", "tool", req.Name, "error", err)
	return ledger.Result{}, nil, err
}

// answerLost answers a call whose claim was lost while its handler ran
// with what the ledger records for the key (ledger.Claim.Outcome) — a
// stored result, replayed; outcome_unknown; or in_progress while another
// call holds the key — never with what the handler returned, so that the
// key has one outcome whoever answers. The call's own answer (res, out,
// err) is given only when nothing records an outcome for the key (a later
// holder released it, an operator forgot it): then a retry runs afresh,
// and this answer contradicts nothing.
func (k *keyed) answerLost(ctx context.Context, req *server.CallRequest, claim *ledger.Claim, res ledger.Result, out mcp.Result, err error) (ledger.Result, mcp.Result, error) {
	k.log.Warn("a keyed call's claim was lost while it ran (its lease ran out, and the key was taken over, made unknown or resolved); its caller is told what the ledger records, not what the call returned",
		"id", req.ID, "tool", req.Name, "tenant", req.Tenant)
	recorded, rerr := claim.Outcome(context.WithoutCancel(ctx))
	if errors.Is(rerr, ledger.ErrNotFound) {
		return res, out, err
	}
	return recorded, nil, rerr
}

// retryableResult is the failure a failed tool result carries in its
// _meta (mcp.MetaFailure), when it says the call may be retried; nil
// otherwise.
func retryableResult(out mcp.Result) *mcp.ToolError {
	c, ok := out.(*mcp.CallToolResult)
	if !ok || c == nil || !c.IsError {
		return nil
	}
	raw, err := json.Marshal(c.Meta[mcp.MetaFailure])
	if err != nil {
		return nil
	}
	var f mcp.Failure
	if json.Unmarshal(raw, &f) != nil || !f.Retryable || f.Code == "" {
		return nil
	}
	return &mcp.ToolError{Code: f.Code, Message: f.Message, Retryable: true, RetryAfter: time.Duration(f.RetryAfterMs) * time.Millisecond, Details: f.Details}
}

// runOnce runs an AtMostOnce handler under its claim (stop ends the
// claim's renewals). Whatever it answers is left to the caller to keep,
// except a failure that may have reached the receiver: the key's outcome
// is then recorded unknown (*completed set: the claim is not released),
// so that no retry runs it again — or, if the claim was lost meanwhile,
// the failure comes back as claimLost, for the caller to be told what
// the ledger records. A failure marked NotRun is left to release.
func (k *keyed) runOnce(ctx context.Context, req *server.CallRequest, claim *ledger.Claim, next server.CallHandler, stop func(), completed *bool) (mcp.Result, error) {
	out, err := func() (out mcp.Result, err error) {
		defer func() {
			if p := recover(); p != nil {
				stop()
				k.log.Warn("a keyed call's handler panicked; its key's outcome is unknown", "tool", req.Name, "panic", p)
				k.markUnknown(ctx, req, claim, "the handler failed unexpectedly after it may have reached the receiver")
				*completed = true
				panic(p)
			}
		}()
		return next(ctx, req)
	}()
	stop()
	var nr notRun
	if err == nil || errors.As(err, &nr) {
		return out, err
	}
	if _, _, kerr := k.kept(&scope{}, out, err); kerr == nil {
		return out, err // a decision the handler made: stored as the outcome
	}
	*completed = true
	reason := unknownReason(ctx, err)
	if err := k.markUnknown(ctx, req, claim, reason); errors.Is(err, ledger.ErrLeaseLost) {
		return nil, claimLost{outcomeUnknownError{err}}
	}
	// An operator acts on these (mcprel ledger resolve): said above info.
	k.log.Warn("a keyed call's outcome is unknown: it may have taken effect, and its key is not run again until the record is resolved",
		"id", req.ID, "tool", req.Name, "tenant", req.Tenant, "reason", reason, "err", err)
	req.Annotate(AnnotationKey, Unknown)
	return nil, outcomeUnknownError{err}
}

// claimLost is a failure a call could not record as its key's outcome,
// because its claim was lost: its caller is told what the ledger records
// instead (answerLost), and err only if nothing records anything.
type claimLost struct{ err error }

func (c claimLost) Error() string { return c.err.Error() }
func (c claimLost) Unwrap() error { return c.err }

// outcomeUnknownError is a failure after which the key's outcome was
// recorded unknown: it goes to the caller as the handler gave it, and is
// not the ledger's to map.
type outcomeUnknownError struct{ err error }

func (o outcomeUnknownError) Error() string { return o.err.Error() }
func (o outcomeUnknownError) Unwrap() error { return o.err }

// unknownReason says, for the record, why a call's outcome is unknown.
func unknownReason(ctx context.Context, err error) string {
	var te *mcp.ToolError
	switch {
	case errors.Is(context.Cause(ctx), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "the call ran out of time after it may have reached the receiver"
	case ctx.Err() != nil:
		return "the call was cancelled after it may have reached the receiver"
	case errors.As(err, &te):
		return te.Message // the handler's words for callers
	}
	// Another error's text is the handler's internals, logged, not told
	// to every caller that retries the key.
	return "the call failed after it may have reached the receiver"
}

// markUnknown records the claim's outcome unknown. If the store cannot be
// reached, the claim's lease runs out instead, with the same result. It
// returns ledger.ErrLeaseLost if the claim was lost before: the key's
// record is then another's (answerLost).
func (k *keyed) markUnknown(ctx context.Context, req *server.CallRequest, claim *ledger.Claim, reason string) error {
	err := claim.Unknown(context.WithoutCancel(ctx), reason)
	if err != nil && !errors.Is(err, ledger.ErrLeaseLost) {
		k.log.Warn("recording an unknown outcome failed; the key reads as unknown once its lease expires",
			"tool", req.Name, "error", err)
	}
	return err
}

// renew extends the claim's lease every third of it until stop is
// called, so that a handler that runs longer than the lease keeps its
// key, and one whose process dies loses it within a lease.
func (k *keyed) renew(ctx context.Context, req *server.CallRequest, claim *ledger.Claim) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(max(k.ledger.Lease()/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := claim.Extend(context.WithoutCancel(ctx)); err != nil {
					k.log.Warn("renewing an idempotency claim's lease failed", "tool", req.Name, "error", err)
					if errors.Is(err, ledger.ErrLeaseLost) {
						return
					}
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-ended
	}
}

// runUnkeyed runs a call of a KeyOptional tool made without a key: in a
// transaction, so the handler writes the same way, but with nothing to
// stop a retry from running it again — which its result says.
func (k *keyed) runUnkeyed(ctx context.Context, req *server.CallRequest, next server.CallHandler) (mcp.Result, error) {
	req.Annotate(AnnotationKey, Unkeyed)
	sc := &scope{}
	req.Attach(scopeKey{}, sc)
	var out mcp.Result
	var err error
	if k.policy.External {
		out, err = k.unkeyedKept(sc)(next(ctx, req))
	} else {
		committed := false
		defer func() { sc.settle(committed) }() // a panic rolled it back
		err = k.ledger.DB().WriteBatched(ctx, func(tx *store.Tx) (err error) {
			sc.tx = tx
			defer func() { sc.tx = nil }()
			out, err = k.unkeyedKept(sc)(next(tx.Within(ctx), req))
			return err
		})
		committed = err == nil
		sc.settle(committed)
	}
	if err != nil {
		var h handlerFailed
		if errors.As(err, &h) {
			return nil, h.err // the server maps it, storage failures included
		}
		return nil, err
	}
	if c, ok := out.(*mcp.CallToolResult); ok {
		return withMeta(c, mcp.Meta{mcp.MetaRetrySafe: false}), nil
	}
	return out, nil
}

// unkeyedKept sorts an unkeyed call's answer as kept does, but lets an
// answer that is not a tool result through: nothing is stored of it.
func (k *keyed) unkeyedKept(sc *scope) func(mcp.Result, error) (mcp.Result, error) {
	return func(res mcp.Result, err error) (mcp.Result, error) {
		if _, isTool := res.(*mcp.CallToolResult); err == nil && res != nil && !isTool {
			return res, nil
		}
		out, _, err := k.kept(sc, res, err)
		return out, err
	}
}

// handlerFailed carries an error the handler returned out of the ledger's
// transaction, to tell it from the ledger's own failures.
type handlerFailed struct{ err error }

func (h handlerFailed) Error() string { return h.err.Error() }
func (h handlerFailed) Unwrap() error { return h.err }

// kept sorts what a handler returned into an answer to keep and the
// JSON the ledger stores of it — a success, or a business failure (a
// ToolError neither retryable, nor about the arguments, nor an unmet
// precondition) as its isError result, or the record a policy inside kept
// of an answer that is not a tool result (Keep) — or an error that must
// roll back, wrapped in handlerFailed. A kept tool result is this
// package's own shallow copy: the handler's value is never written to.
func (k *keyed) kept(sc *scope, res mcp.Result, err error) (mcp.Result, json.RawMessage, error) {
	if err != nil {
		var te *mcp.ToolError
		if !errors.As(err, &te) || te.Retryable || te.Code == mcp.FailureInvalidArguments || te.Code == mcp.FailureOutcomeUnknown || slices.Contains(k.policy.Preconditions, te.Code) {
			return nil, nil, handlerFailed{err}
		}
		res = te.Result()
	}
	var kept mcp.CallToolResult
	switch r := res.(type) {
	case nil:
	case *mcp.CallToolResult:
		if r != nil {
			kept = *r
		}
	default:
		if sc.record == nil {
			return nil, nil, handlerFailed{fmt.Errorf("idempotency: the tool answered with a %T and kept no record of it, which the ledger cannot store", res)}
		}
		if !k.keeps {
			return nil, nil, handlerFailed{fmt.Errorf("idempotency: the tool answered with a %T, but only a tool a policy marked with KeepsRecords (a task) may keep a record in place of a tool result (Keep)", res)}
		}
		if !keepable(sc.record) {
			return nil, nil, handlerFailed{fmt.Errorf("idempotency: the record kept of a %T is not a JSON object without a \"content\" member (Keep)", res)}
		}
		return res, sc.record, nil
	}
	if kept.Content == nil {
		kept.Content = []mcp.Content{}
	}
	data, err := json.Marshal(&kept)
	if err != nil {
		return nil, nil, handlerFailed{fmt.Errorf("encoding the result to store it: %w", err)}
	}
	return &kept, data, nil
}

// keepable reports whether a record kept in place of an answer (Keep) can
// be stored: one that is no JSON object would fail every replay of its
// key until the record expires, and one with a "content" member would be
// replayed as a tool result, not handed back to the policy that kept it.
func keepable(record json.RawMessage) bool {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(record, &fields); err != nil || fields == nil {
		return false
	}
	_, content := fields["content"]
	return !content
}

// withMeta returns res with marks added to a copy of its _meta.
func withMeta(res *mcp.CallToolResult, marks mcp.Meta) *mcp.CallToolResult {
	meta := make(mcp.Meta, len(res.Meta)+len(marks))
	maps.Copy(meta, res.Meta)
	maps.Copy(meta, marks)
	res.Meta = meta
	return res
}

// ledgerError maps what the ledger path failed with onto a tool failure,
// and annotates the call with it. A storage failure is the server's to
// classify and log (server.StorageAdvice words the retryable answer).
func (k *keyed) ledgerError(req *server.CallRequest, key string, err error) error {
	var lost outcomeUnknownError
	if errors.As(err, &lost) {
		req.Annotate(AnnotationKey, Unknown)
		return lost.err // the handler's own words; the record says unknown
	}
	var unknown *ledger.UnknownError
	if errors.As(err, &unknown) {
		req.Annotate(AnnotationKey, Unknown)
		return k.unknownFailure(key, unknown)
	}
	var h handlerFailed
	if errors.As(err, &h) {
		if !isStorageFailure(h.err) {
			req.Annotate(AnnotationKey, RolledBack)
			return h.err // the handler's own failure, mapped by the server
		}
		// The database failed under the handler.
		req.Annotate(AnnotationKey, Unavailable)
		return &server.StorageAdvice{Err: h.err, Code: mcp.FailureLedger,
			Message: "the database lost or refused this call's transaction; nothing of it was kept, and retrying with the same idempotency key is safe"}
	}
	var conflict *ledger.ConflictError
	if errors.As(err, &conflict) {
		req.Annotate(AnnotationKey, Conflict)
		return &mcp.ToolError{
			Code: mcp.FailureKeyConflict,
			Message: "this idempotency key was already used for a different operation (other arguments); nothing ran. " +
				"Use a new key for a new operation, or repeat the original arguments to get its result",
			Details: map[string]any{"idempotencyKey": key},
		}
	}
	var busy *ledger.InProgressError
	if errors.As(err, &busy) {
		req.Annotate(AnnotationKey, InProgress)
		return &mcp.ToolError{
			Code:       mcp.FailureInProgress,
			Message:    "the operation with this idempotency key is still running; retry after retryAfterMs with the same key to get its result",
			Retryable:  true,
			RetryAfter: busy.RetryAfter,
			Details:    map[string]any{"idempotencyKey": key},
		}
	}
	req.Annotate(AnnotationKey, Unavailable)
	const unreachable = "the idempotency ledger could not be reached; retrying with the same key is safe"
	if isStorageFailure(err) {
		return &server.StorageAdvice{Err: err, Code: mcp.FailureLedger, Message: unreachable}
	}
	k.log.Warn("the idempotency ledger failed", "id", req.ID, "tool", req.Name, "err", err)
	return &mcp.ToolError{Code: mcp.FailureLedger, Retryable: true, RetryAfter: server.StorageRetryAfter, Message: unreachable}
}

// unknownFailure is what a retry of an operation whose outcome is unknown
// is told: nothing ran, and a retry will not run it either — find out what
// happened first.
func (k *keyed) unknownFailure(key string, u *ledger.UnknownError) error {
	check := "lookup_operation (the ledger's record of the key)"
	if k.policy.ReconcileWith != "" {
		check = k.policy.ReconcileWith + ", or lookup_operation for the ledger's record of the key"
	}
	details := map[string]any{"idempotencyKey": key, "reason": u.Reason}
	if !u.Since.IsZero() {
		details["since"] = u.Since.UTC().Format(time.RFC3339Nano)
	}
	if k.policy.ReconcileWith != "" {
		details["reconcileWith"] = k.policy.ReconcileWith
	}
	return &mcp.ToolError{
		Code: mcp.FailureOutcomeUnknown,
		Message: "an earlier call with this idempotency key may have taken effect, and its answer was lost (" + u.Reason + "); " +
			"it is not run again with this key. Check with " + check + " before deciding: a new operation needs a new key",
		Details: details,
	}
}

// isStorageFailure reports whether err is a failure of the database, as
// package store reports it (store.Error).
func isStorageFailure(err error) bool {
	var sf interface{ StorageUnavailable() bool }
	return errors.As(err, &sf)
}

// LedgerMeta is what a tool's _meta says of the ledger behind it (see
// mcp.MetaLedgerStore and the keys beside it), for a reviewer to read from
// tools/list: the store and whether replicas share it, what commits in
// the ledger's transaction, where the effect lies and how replays are
// returned. AddTool sets it on every keyed tool; a tool that writes through
// the ledger's database without a key (a versioned write) may set it too,
// with external false.
func LedgerMeta(l *ledger.Ledger, external bool) mcp.Meta {
	return ledgerMeta(l, external, false)
}

// ledgerMeta is LedgerMeta for a tool of any mode.
func ledgerMeta(l *ledger.Ledger, external, atMostOnce bool) mcp.Meta {
	d := l.DB().Dialect()
	m := mcp.Meta{
		mcp.MetaLedgerStore:     d.String(),
		mcp.MetaLedgerShared:    d == store.Postgres,
		mcp.MetaReturnedRecords: mcp.ReturnedRecordsDefensiveCopy,
	}
	switch {
	case external && atMostOnce:
		m[mcp.MetaLedgerTransaction] = []string{mcp.LedgerKeyClaim, mcp.LedgerArgumentFingerprint, mcp.LedgerResult}
		m[mcp.MetaEffect] = mcp.EffectAtMostOnce
	case external:
		// The claim and its fingerprint commit first, the result in a
		// second commit of the same record; the effect is the provider's,
		// under the key the handler passes on (Call.Key).
		m[mcp.MetaLedgerTransaction] = []string{mcp.LedgerKeyClaim, mcp.LedgerArgumentFingerprint, mcp.LedgerResult}
		m[mcp.MetaEffect] = mcp.EffectUpstreamKey
	default:
		m[mcp.MetaLedgerTransaction] = []string{mcp.LedgerKeyClaim, mcp.LedgerArgumentFingerprint, mcp.LedgerEffectRecord, mcp.LedgerResult}
		m[mcp.MetaEffect] = mcp.EffectInTransaction
	}
	return m
}
