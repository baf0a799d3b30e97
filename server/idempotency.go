package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/store"
)

// KeyMode says whether a tool's calls carry an idempotency key.
type KeyMode uint8

const (
	// KeyNone: the tool does not use the ledger (read-only tools, or
	// naturally idempotent ones).
	KeyNone KeyMode = iota
	// KeyOptional: a call with a key runs at most once per key; a call
	// without one runs every time, and its result says it is not safe to
	// retry (MetaRetrySafe false).
	KeyOptional
	// KeyRequired: a call without a key is refused with
	// "idempotency_key_required" before anything runs.
	KeyRequired
)

// String returns "none", "optional" or "required", as advertised.
func (m KeyMode) String() string {
	switch m {
	case KeyOptional:
		return "optional"
	case KeyRequired:
		return "required"
	}
	return "none"
}

// Idempotency is a mutating tool's contract with the server's ledger
// (Options.Ledger): a call carrying an idempotency key runs its effect at
// most once per key, whatever the retries, races, lost responses, restarts
// and replicas. The key is the argument "idempotencyKey" or, for tools
// whose arguments cannot hold it, params._meta["dev.mcprel/idempotencyKey"];
// it is scoped to the request's tenant and the tool.
//
// In the default mode the handler writes its business rows through
// CallRequest.Tx, the transaction that also claims the key and stores the
// result, so the effect, the record and the result commit together or not
// at all. The handler holds the database's write transaction while it
// runs: keep it to database work (on SQLite, writers take turns).
//
// What is stored and replayed: a successful result, and a failure that is
// the operation's outcome — the decision it made about this request (an
// *mcp.ToolError that is not Retryable, such as "insufficient stock"), so
// that every retry gets the same decision. Anything else — a retryable
// ToolError, a failure code listed in Preconditions, another error, a
// panic, a cancelled or timed-out call — rolls back and stores nothing,
// so a retry with the same key runs again. Arguments are never stored as
// refused: schema validation happens before the ledger, and a handler's
// own ToolError with code "invalid_arguments" rolls back too.
type Idempotency struct {
	Key KeyMode
	// Fields lists the top-level arguments that define the operation; their
	// canonical JSON is the fingerprint that tells a retry (same key, same
	// operation: replayed) from a reused key (refused with
	// "idempotency_conflict"). Nil means every argument. The key itself
	// never counts.
	Fields []string
	// External is for effects outside the database (a payment provider,
	// another service), which cannot share its transaction. The key is
	// claimed with a lease and committed first, the handler runs with no
	// Tx, and its result is stored in a second commit; a duplicate
	// arriving meanwhile gets "in_progress" with retryAfterMs. This is only
	// safe if the external service accepts CallRequest.IdempotencyKey as
	// its own idempotency key (or the handler writes an outbox row instead):
	// a claim whose process dies is taken over when its lease expires, and
	// the effect runs again. The ledger's lease must outlast the tool's
	// maximum deadline.
	External bool
	// Preconditions lists failure codes (mcp.ToolError.Code) that report a
	// precondition the call found unmet rather than a decision it made:
	// the SKU does not exist yet, the account is not open. Nothing was
	// decided, so such a failure is not stored: it rolls back, and a retry
	// with the same key runs again once the precondition may hold. A
	// failure that is the operation's own answer (insufficient stock, a
	// declined card) is not listed, and is replayed to every retry.
	Preconditions []string
}

// Tx is the transaction the call's effect writes through: it commits with
// the idempotency record and the stored result, or rolls back with them.
// It is nil for tools without an Idempotency policy and in External mode,
// and valid only until the handler returns.
func (c *CallRequest) Tx() *store.Tx { return c.tx }

// ledgerFor checks that a tool's idempotency policy can be served.
func (s *Server) ledgerFor(t Tool) error {
	idem := t.Policy.Idempotency
	if idem.Key == KeyNone {
		if idem.External || idem.Fields != nil || idem.Preconditions != nil {
			return fmt.Errorf("server: tool %q: Idempotency.Key must be KeyOptional or KeyRequired to use the ledger", t.Name)
		}
		return nil
	}
	if idem.Key > KeyRequired {
		return fmt.Errorf("server: tool %q: unknown idempotency key mode %d", t.Name, idem.Key)
	}
	if s.opts.Ledger == nil {
		return fmt.Errorf("server: tool %q has an Idempotency policy, but Options.Ledger is nil", t.Name)
	}
	if idem.External {
		if max := s.deadlines(t.Policy).Max; max == 0 || max > s.opts.Ledger.Lease() {
			return fmt.Errorf("server: tool %q: an External effect needs a maximum deadline (%v) within the ledger's lease (%v), or a second caller could take the key over while it runs",
				t.Name, max, s.opts.Ledger.Lease())
		}
	}
	return nil
}

// idempotentArgs finds a call's key, in its arguments or its _meta, and
// the fingerprint of the operation, from one decode of the arguments' top
// level. A key that is not a string, is given twice with two values, or
// is missing for a tool that requires one is refused before anything
// runs; "" means the call has none. metaKey is the key when it came in
// _meta only, so that the arguments can be checked as if they held it.
func idempotentArgs(p Idempotency, args json.RawMessage, rawMetaKey json.RawMessage) (key string, fp ledger.Fingerprint, metaKey string, te *mcp.ToolError) {
	var fields map[string]json.RawMessage
	if len(args) > 0 {
		if err := json.Unmarshal(args, &fields); err != nil {
			return "", fp, "", &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: "arguments must be a JSON object"}
		}
	}
	inArgs := false
	for i, raw := range []json.RawMessage{fields[mcp.ArgIdempotencyKey], rawMetaKey} {
		if raw == nil || string(raw) == "null" {
			continue
		}
		var k string
		if err := json.Unmarshal(raw, &k); err != nil {
			return "", fp, "", keyError("the idempotency key must be a string")
		}
		if !ledger.ValidKey(k) {
			return "", fp, "", keyError("the idempotency key must be 1 to 255 bytes of printable text")
		}
		if key != "" && k != key {
			return "", fp, "", keyError(fmt.Sprintf("the idempotency key is given twice with two values (arguments.%s and _meta[%q])", mcp.ArgIdempotencyKey, mcp.MetaIdempotencyKey))
		}
		key, inArgs = k, inArgs || i == 0
	}
	if key == "" {
		if p.Key == KeyRequired {
			return "", fp, "", errKeyRequired
		}
		return "", fp, "", nil
	}
	fp, err := ledger.FingerprintFields(fields, p.Fields, mcp.ArgIdempotencyKey)
	if err != nil {
		return "", fp, "", &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: err.Error()}
	}
	if !inArgs {
		metaKey = key
	}
	return key, fp, metaKey, nil
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

// handlerFailed carries an error the handler returned out of the ledger's
// transaction, to tell it from the ledger's own failures.
type handlerFailed struct{ err error }

func (h handlerFailed) Error() string { return h.err.Error() }
func (h handlerFailed) Unwrap() error { return h.err }

// outcome sorts what a handler returned into a result to keep — a
// success, or a business failure (a ToolError neither retryable, nor about
// the arguments, nor an unmet precondition) as its isError result — or an
// error that must roll back, wrapped in handlerFailed. The kept result is
// the server's own shallow copy: the handler's value is never written to.
func outcome(p Idempotency, res *mcp.CallToolResult, err error) (*mcp.CallToolResult, error) {
	if err != nil {
		var te *mcp.ToolError
		if !errors.As(err, &te) || te.Retryable || te.Code == mcp.FailureInvalidArguments || slices.Contains(p.Preconditions, te.Code) {
			return nil, handlerFailed{err}
		}
		return te.Result(), nil
	}
	var kept mcp.CallToolResult
	if res != nil {
		kept = *res
	}
	if kept.Content == nil {
		kept.Content = []mcp.Content{}
	}
	return &kept, nil
}

// runInTx runs the handler with tx as the call's transaction.
func runInTx(ctx context.Context, rt *registeredTool, call *CallRequest, tx *store.Tx) (*mcp.CallToolResult, error) {
	call.tx = tx
	defer func() { call.tx = nil }()
	out, err := rt.handler(ctx, call)
	return outcome(rt.policy.Idempotency, out, err)
}

// callIdempotent runs a call of a tool with an Idempotency policy.
func (s *Server) callIdempotent(ctx context.Context, rt *registeredTool, call *CallRequest) (mcp.Result, error) {
	if call.IdempotencyKey == "" {
		return s.callUnkeyed(ctx, rt, call)
	}
	op := ledger.Op{Tenant: call.Tenant, Tool: call.Name, Key: call.IdempotencyKey, Fingerprint: call.fingerprint}
	var res ledger.Result
	var ran *mcp.CallToolResult // this call's own result, when it executed
	var err error
	if rt.policy.Idempotency.External {
		res, ran, err = s.callExternal(ctx, rt, call, op)
	} else {
		res, err = s.opts.Ledger.Do(ctx, op, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
			out, err := runInTx(ctx, rt, call, tx)
			if err != nil {
				return nil, err
			}
			ran = out
			return encodeKept(out)
		})
	}
	if err != nil {
		return nil, s.ledgerError(call, err)
	}
	if res.Replayed {
		// Rebuilt from the stored JSON: a copy no one else holds.
		ran = new(mcp.CallToolResult)
		if err := json.Unmarshal(res.Data, ran); err != nil {
			return nil, fmt.Errorf("decoding a stored result: %w", err)
		}
	}
	return withMeta(ran, mcp.Meta{mcp.MetaReplayed: res.Replayed, mcp.MetaExecutedAt: res.ExecutedAt.UTC().Format(time.RFC3339Nano)}), nil
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

// callExternal runs an External tool in two phases: claim the key, run the
// handler outside any transaction, store its result. It returns the
// handler's kept result when this call ran it.
func (s *Server) callExternal(ctx context.Context, rt *registeredTool, call *CallRequest, op ledger.Op) (ledger.Result, *mcp.CallToolResult, error) {
	claim, replayed, err := s.opts.Ledger.Claim(ctx, op)
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
			s.log.Warn("releasing an idempotency claim failed; it frees itself when its lease expires",
				"tool", call.Name, "error", err)
		}
	}()
	out, err := rt.handler(ctx, call)
	out, err = outcome(rt.policy.Idempotency, out, err)
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
		s.log.Warn("the effect completed but its result could not be stored", "tool", call.Name, "error", err)
		return ledger.Result{}, nil, err
	}
	return res, out, nil
}

// callUnkeyed runs a call of a KeyOptional tool made without a key: in a
// transaction, so the handler writes the same way, but with nothing to
// stop a retry from running it again — which its result says.
func (s *Server) callUnkeyed(ctx context.Context, rt *registeredTool, call *CallRequest) (mcp.Result, error) {
	var out *mcp.CallToolResult
	var err error
	if rt.policy.Idempotency.External {
		out, err = runInTx(ctx, rt, call, nil)
	} else {
		err = s.opts.Ledger.DB().WriteBatched(ctx, func(tx *store.Tx) (err error) {
			out, err = runInTx(ctx, rt, call, tx)
			return err
		})
	}
	if err != nil {
		return nil, s.ledgerError(call, err)
	}
	return withMeta(out, mcp.Meta{mcp.MetaRetrySafe: false}), nil
}

// ledgerError maps what the ledger path failed with onto a tool failure.
func (s *Server) ledgerError(call *CallRequest, err error) error {
	key := call.IdempotencyKey
	var h handlerFailed
	if errors.As(err, &h) {
		return s.hideStorageFailure(call.r, h.err, true)
	}
	var conflict *ledger.ConflictError
	if errors.As(err, &conflict) {
		return &mcp.ToolError{
			Code: mcp.FailureKeyConflict,
			Message: "this idempotency key was already used for a different operation (other arguments); nothing ran. " +
				"Use a new key for a new operation, or repeat the original arguments to get its result",
			Details: map[string]any{"idempotencyKey": key},
		}
	}
	var busy *ledger.InProgressError
	if errors.As(err, &busy) {
		return &mcp.ToolError{
			Code:       mcp.FailureInProgress,
			Message:    "the operation with this idempotency key is still running; retry after retryAfterMs with the same key to get its result",
			Retryable:  true,
			RetryAfter: busy.RetryAfter,
			Details:    map[string]any{"idempotencyKey": key},
		}
	}
	s.log.Warn("the idempotency ledger failed", "id", call.ID, "tool", call.Name, "err", err)
	msg := "the idempotency ledger could not be reached; retrying with the same key is safe"
	if key == "" {
		msg = "the database could not be reached or refused the commit; this call's writes were not kept"
	}
	return &mcp.ToolError{Code: mcp.FailureLedger, Message: msg, Retryable: true, RetryAfter: storageRetryAfter}
}
