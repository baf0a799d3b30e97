// Package idempotency makes a mutating tool run at most once per
// idempotency key, by putting the durable ledger (package ledger) in front
// of its handler through the server's tool-interceptor seam.
//
// A tool registered with AddTool or AddTypedTool gets, from one
// declaration and one handler:
//
//   - a Check that finds the call's key — arguments.idempotencyKey or
//     params._meta["dev.mcprel/idempotencyKey"] — before the arguments are
//     validated or the call waits for admission, and refuses a call that
//     lacks a required key or gives a malformed one;
//   - a handler that runs inside the ledger: the key is claimed, the effect
//     runs in the same transaction (Call.Tx), and its result is stored, so
//     a retry replays it and a reused key is refused;
//   - the retry class RetryConditional and its key mode in the tool's
//     _meta, for clients to plan retries by;
//   - an annotation on the request's record for observers (AnnotationKey):
//     executed, replayed, conflict, in_progress, key_missing, unkeyed,
//     rolled_back or unavailable.
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
	"time"

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
)

// Call is what a keyed tool's handler sees of its call.
type Call struct {
	*server.CallRequest
	// Key is the call's idempotency key; "" for a call of a KeyOptional
	// tool made without one. Pass it on to any external service the effect
	// calls, as that service's own idempotency key.
	Key string
	// Tx is the transaction the call's effect writes through: it commits
	// with the idempotency record and the stored result, or rolls back
	// with them. It is nil in External mode, and valid only until the
	// handler returns.
	Tx *store.Tx
}

// Handler runs one call of a keyed tool. Its errors map to the wire as
// server.ToolHandler's do; which of them are stored is Policy's to say.
type Handler func(ctx context.Context, call *Call) (*mcp.CallToolResult, error)

// AddTool registers a tool whose calls run at most once per idempotency
// key through l, replacing any tool of the same name (see
// server.Server.AddTool; interceptors given here run inside this
// package's). The tool's retry class becomes RetryConditional unless it
// declares one.
func AddTool(srv *server.Server, l *ledger.Ledger, t server.Tool, p Policy, h Handler, interceptors ...server.ToolInterceptor) error {
	if h == nil {
		return fmt.Errorf("idempotency: tool %q has no handler", t.Name)
	}
	if l == nil {
		return fmt.Errorf("idempotency: tool %q has no ledger", t.Name)
	}
	k := &keyed{srv: srv, ledger: l, policy: p, log: srv.Logger()}
	inner := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		call, _ := ctx.Value(callKey{}).(*Call)
		if call == nil || call.CallRequest != req {
			return nil, errors.New("idempotency: the handler was called outside its ledger")
		}
		return h(ctx, call)
	}
	return srv.AddTool(t, inner, append([]server.ToolInterceptor{k.intercept}, interceptors...)...)
}

// AddTypedTool is AddTool for a handler that takes decoded arguments of
// type In and returns a value of type Out, as server.AddTypedTool.
func AddTypedTool[In, Out any](srv *server.Server, l *ledger.Ledger, t server.Tool, p Policy, h func(ctx context.Context, call *Call, in In) (Out, error), interceptors ...server.ToolInterceptor) error {
	if h == nil {
		return fmt.Errorf("idempotency: tool %q has no handler", t.Name)
	}
	t, err := server.TypedTool[In, Out](t)
	if err != nil {
		return err
	}
	return AddTool(srv, l, t, p, func(ctx context.Context, call *Call) (*mcp.CallToolResult, error) {
		in, err := server.TypedArguments[In](call.CallRequest)
		if err != nil {
			return nil, err
		}
		out, err := h(ctx, call, in)
		if err != nil {
			return nil, err
		}
		return server.TypedResult(out)
	}, interceptors...)
}

// callKey carries a call's *Call from the ledger's side of the interceptor
// to the handler adapter inside it.
type callKey struct{}

// keyed is the interceptor of one keyed tool.
type keyed struct {
	srv    *server.Server
	ledger *ledger.Ledger
	policy Policy
	class  server.RetryClass // the tool's, once intercepted
	log    *slog.Logger
}

// intercept amends the declaration and wraps the handler.
func (k *keyed) intercept(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
	if t.Policy.Retry == server.RetryUnsafe {
		t.Policy.Retry = server.RetryConditional
	}
	k.class = t.Policy.Retry
	if err := k.policy.check(t.Name, k.srv.Deadlines(t.Policy).Max, k.ledger.Lease()); err != nil {
		return nil, err
	}
	if t.Meta == nil {
		t.Meta = mcp.Meta{}
	}
	t.Meta[mcp.MetaKeyMode] = k.policy.Key.String()
	maps.Copy(t.Meta, LedgerMeta(k.ledger, k.policy.External))
	prev := t.Check
	t.Check = func(ctx context.Context, call *server.CallRequest) (context.Context, error) {
		if prev != nil {
			var err error
			if ctx, err = prev(ctx, call); err != nil {
				return ctx, err
			}
		}
		return k.check(ctx, call)
	}
	return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
		return k.run(ctx, call, next)
	}, nil
}

// found is what a call's check found, handed to its run in the context.
type found struct {
	key         string
	fingerprint ledger.Fingerprint
}

type foundKey struct{}

// check finds the call's key before anything else is done with the call,
// so that a call missing it is told so whatever else is wrong with its
// arguments, and fingerprints the operation while the decoded arguments
// are at hand. A key given only in _meta is supplied to the input schema,
// for a schema that lists it as required; a call of a KeyOptional tool
// without a key is unsafe to retry.
func (k *keyed) check(ctx context.Context, call *server.CallRequest) (context.Context, error) {
	key, inArgs, te := keyOf(call)
	switch {
	case te != nil:
		call.Annotate(AnnotationKey, KeyMissing)
		return ctx, te
	case key == "" && k.policy.Key == KeyRequired:
		call.Annotate(AnnotationKey, KeyMissing)
		return ctx, errKeyRequired
	case key == "":
		// Nothing dedupes this call: unless its author declared the tool
		// safe to retry anyway, a retry may run it twice.
		if k.class == server.RetryConditional {
			call.NarrowRetry(server.RetryUnsafe)
		}
		return ctx, nil
	case !inArgs:
		call.SupplyArgument(mcp.ArgIdempotencyKey, key)
	}
	fp, err := ledger.FingerprintOf(call.DecodedArguments(), k.policy.Fields, mcp.ArgIdempotencyKey)
	if err != nil {
		return ctx, &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: err.Error()}
	}
	return context.WithValue(ctx, foundKey{}, found{key, fp}), nil
}

// keyOf finds a call's key in its arguments or its _meta. A key that is
// not a string, is malformed, or is given twice with two values is
// refused; "" means the call has none. inArgs says whether it was in the
// arguments.
func keyOf(call *server.CallRequest) (key string, inArgs bool, te *mcp.ToolError) {
	inMeta := call.KnownMeta.IdempotencyKey
	var fromMeta string
	if len(inMeta) > 0 && string(inMeta) != "null" {
		if err := json.Unmarshal(inMeta, &fromMeta); err != nil {
			return "", false, keyError("the idempotency key must be a string")
		}
		if !ledger.ValidKey(fromMeta) {
			return "", false, keyError("the idempotency key must be 1 to 255 bytes of printable text")
		}
	}
	v, ok := call.DecodedArguments()[mcp.ArgIdempotencyKey]
	if !ok || v == nil {
		return fromMeta, false, nil
	}
	fromArgs, isString := v.(string)
	if !isString {
		return "", false, keyError("the idempotency key must be a string")
	}
	if !ledger.ValidKey(fromArgs) {
		return "", false, keyError("the idempotency key must be 1 to 255 bytes of printable text")
	}
	if fromMeta != "" && fromMeta != fromArgs {
		return "", false, keyError(fmt.Sprintf("the idempotency key is given twice with two values (arguments.%s and _meta[%q])", mcp.ArgIdempotencyKey, mcp.MetaIdempotencyKey))
	}
	return fromArgs, true, nil
}

func keyError(msg string) *mcp.ToolError {
	return &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: msg, Details: map[string]any{"field": mcp.ArgIdempotencyKey}}
}

var errKeyRequired = &mcp.ToolError{
	Code: mcp.FailureKeyRequired,
	Message: "this tool changes state and needs an idempotency key: generate a unique key (a UUID) for this operation, " +
		"pass it as arguments." + mcp.ArgIdempotencyKey + " (or params._meta[\"" + mcp.MetaIdempotencyKey + "\"]), " +
		"and reuse the same key on every retry of it",
}

// run runs one call through the ledger.
func (k *keyed) run(ctx context.Context, req *server.CallRequest, next server.CallHandler) (mcp.Result, error) {
	f, ok := ctx.Value(foundKey{}).(found)
	if !ok {
		return k.runUnkeyed(ctx, req, next)
	}
	key := f.key
	op := ledger.Op{Tenant: req.Tenant, Tool: req.Name, Key: key, Fingerprint: f.fingerprint}
	var res ledger.Result
	var ran *mcp.CallToolResult // this call's own result, when it executed
	var err error
	if k.policy.External {
		res, ran, err = k.runExternal(ctx, req, key, op, next)
	} else {
		res, err = k.ledger.Do(ctx, op, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
			out, err := k.kept(next(context.WithValue(ctx, callKey{}, &Call{CallRequest: req, Key: key, Tx: tx}), req))
			if err != nil {
				return nil, err
			}
			ran = out
			return encodeKept(out)
		})
	}
	if err != nil {
		return nil, k.ledgerError(req, key, err)
	}
	mark := Executed
	if res.Replayed {
		mark = Replayed
		// Rebuilt from the stored JSON: a copy no one else holds.
		ran = new(mcp.CallToolResult)
		if err := json.Unmarshal(res.Data, ran); err != nil {
			return nil, fmt.Errorf("decoding a stored result: %w", err)
		}
	}
	req.Annotate(AnnotationKey, mark)
	return withMeta(ran, mcp.Meta{mcp.MetaReplayed: res.Replayed, mcp.MetaExecutedAt: res.ExecutedAt.UTC().Format(time.RFC3339Nano)}), nil
}

// runExternal runs an External tool in two phases: claim the key, run the
// handler outside any transaction, store its result. It returns the
// handler's kept result when this call ran it.
func (k *keyed) runExternal(ctx context.Context, req *server.CallRequest, key string, op ledger.Op, next server.CallHandler) (ledger.Result, *mcp.CallToolResult, error) {
	claim, replayed, err := k.ledger.Claim(ctx, op)
	if err != nil {
		return ledger.Result{}, nil, err
	}
	if replayed != nil {
		return *replayed, nil, nil
	}
	completed := false
	defer func() {
		if completed {
			return
		}
		// The effect did not complete (the handler failed, or panicked):
		// free the key so a retry runs; the external service dedupes by
		// the same key.
		if err := claim.Release(context.WithoutCancel(ctx)); err != nil {
			k.log.Warn("releasing an idempotency claim failed; it frees itself when its lease expires",
				"tool", req.Name, "error", err)
		}
	}()
	out, err := k.kept(next(context.WithValue(ctx, callKey{}, &Call{CallRequest: req, Key: key}), req))
	if err != nil {
		return ledger.Result{}, nil, err
	}
	data, err := encodeKept(out)
	if err != nil {
		return ledger.Result{}, nil, err
	}
	completed = true
	// Store the outcome even if the call was cancelled meanwhile: the
	// effect happened.
	res, err := claim.Complete(context.WithoutCancel(ctx), data)
	if err != nil {
		k.log.Warn("the effect completed but its result could not be stored", "tool", req.Name, "error", err)
		return ledger.Result{}, nil, err
	}
	return res, out, nil
}

// runUnkeyed runs a call of a KeyOptional tool made without a key: in a
// transaction, so the handler writes the same way, but with nothing to
// stop a retry from running it again — which its result says.
func (k *keyed) runUnkeyed(ctx context.Context, req *server.CallRequest, next server.CallHandler) (mcp.Result, error) {
	req.Annotate(AnnotationKey, Unkeyed)
	var out *mcp.CallToolResult
	var err error
	if k.policy.External {
		out, err = k.kept(next(context.WithValue(ctx, callKey{}, &Call{CallRequest: req}), req))
	} else {
		err = k.ledger.DB().WriteBatched(ctx, func(tx *store.Tx) (err error) {
			out, err = k.kept(next(context.WithValue(ctx, callKey{}, &Call{CallRequest: req, Tx: tx}), req))
			return err
		})
	}
	if err != nil {
		var h handlerFailed
		if errors.As(err, &h) {
			return nil, h.err // the server maps it, storage failures included
		}
		return nil, err
	}
	return withMeta(out, mcp.Meta{mcp.MetaRetrySafe: false}), nil
}

// handlerFailed carries an error the handler returned out of the ledger's
// transaction, to tell it from the ledger's own failures.
type handlerFailed struct{ err error }

func (h handlerFailed) Error() string { return h.err.Error() }
func (h handlerFailed) Unwrap() error { return h.err }

// kept sorts what a handler returned into a result to keep — a success,
// or a business failure (a ToolError neither retryable, nor about the
// arguments, nor an unmet precondition) as its isError result — or an
// error that must roll back, wrapped in handlerFailed. The kept result is
// this package's own shallow copy: the handler's value is never written
// to.
func (k *keyed) kept(res mcp.Result, err error) (*mcp.CallToolResult, error) {
	if err != nil {
		var te *mcp.ToolError
		if !errors.As(err, &te) || te.Retryable || te.Code == mcp.FailureInvalidArguments || slices.Contains(k.policy.Preconditions, te.Code) {
			return nil, handlerFailed{err}
		}
		return te.Result(), nil
	}
	var kept mcp.CallToolResult
	switch r := res.(type) {
	case nil:
	case *mcp.CallToolResult:
		if r != nil {
			kept = *r
		}
	default:
		return nil, handlerFailed{fmt.Errorf("idempotency: the tool answered with a %T, which the ledger cannot store", res)}
	}
	if kept.Content == nil {
		kept.Content = []mcp.Content{}
	}
	return &kept, nil
}

// encodeKept encodes a kept result for the ledger to store.
func encodeKept(res *mcp.CallToolResult) (json.RawMessage, error) {
	data, err := json.Marshal(res)
	if err != nil {
		return nil, handlerFailed{fmt.Errorf("encoding the result to store it: %w", err)}
	}
	return data, nil
}

// withMeta returns res with marks added to a copy of its _meta.
func withMeta(res *mcp.CallToolResult, marks mcp.Meta) *mcp.CallToolResult {
	meta := make(mcp.Meta, len(res.Meta)+len(marks))
	maps.Copy(meta, res.Meta)
	maps.Copy(meta, marks)
	res.Meta = meta
	return res
}

// storageFailure is a failure of the database, as package store reports
// it (store.Error): its text is the driver's, for the log only.
type storageFailure interface {
	error
	StorageUnavailable() bool
}

// ledgerError maps what the ledger path failed with onto a tool failure,
// and annotates the call with it.
func (k *keyed) ledgerError(req *server.CallRequest, key string, err error) error {
	var h handlerFailed
	if errors.As(err, &h) {
		var sf storageFailure
		if !errors.As(h.err, &sf) {
			req.Annotate(AnnotationKey, RolledBack)
			return h.err // the handler's own failure, mapped by the server
		}
		// The database failed under the handler: its text is the driver's,
		// for the log only.
		req.Annotate(AnnotationKey, Unavailable)
		k.log.Warn("a keyed call's database operation failed", "id", req.ID, "tool", req.Name,
			"unavailable", sf.StorageUnavailable(), "err", h.err)
		if !sf.StorageUnavailable() {
			return &mcp.ToolError{Code: mcp.FailureInternal, Message: "the database refused an operation of this call; the server log has the details"}
		}
		return &mcp.ToolError{Code: mcp.FailureLedger, Retryable: true, RetryAfter: server.StorageRetryAfter,
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
	k.log.Warn("the idempotency ledger failed", "id", req.ID, "tool", req.Name, "err", err)
	return &mcp.ToolError{Code: mcp.FailureLedger, Retryable: true, RetryAfter: server.StorageRetryAfter,
		Message: "the idempotency ledger could not be reached; retrying with the same key is safe"}
}

// LedgerMeta is what a tool's _meta says of the ledger behind it (see
// mcp.MetaLedgerStore and the keys beside it), for a reviewer to read from
// tools/list: the store and whether replicas share it, what commits in
// the ledger's transaction, where the effect lies and how replays are
// returned. AddTool sets it on every keyed tool; a tool that writes through
// the ledger's database without a key (a versioned write) may set it too,
// with external false.
func LedgerMeta(l *ledger.Ledger, external bool) mcp.Meta {
	d := l.DB().Dialect()
	m := mcp.Meta{
		mcp.MetaLedgerStore:     d.String(),
		mcp.MetaLedgerShared:    d == store.Postgres,
		mcp.MetaReturnedRecords: "defensive-copy",
	}
	if external {
		// The claim and its fingerprint commit first, the result in a
		// second commit of the same record; the effect is the provider's,
		// under the key the handler passes on (Call.Key).
		m[mcp.MetaLedgerTransaction] = []string{"key_claim", "argument_fingerprint", "result"}
		m[mcp.MetaEffect] = "upstream_key"
	} else {
		m[mcp.MetaLedgerTransaction] = []string{"key_claim", "argument_fingerprint", "effect_record", "result"}
		m[mcp.MetaEffect] = "in_transaction"
	}
	return m
}
