package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
// the business outcome (an *mcp.ToolError that is not Retryable, such as
// "insufficient stock"). Anything else — a retryable ToolError, another
// error, a panic, a cancelled or timed-out call — rolls back and stores
// nothing, so a retry with the same key runs again. Arguments are never
// stored as refused: schema validation happens before the ledger, and a
// handler's own ToolError with code "invalid_arguments" rolls back too.
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
		if idem.External || idem.Fields != nil {
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

// idempotencyKey finds a call's key in its arguments or its _meta. A key
// that is not a string, or is given twice with two values, is an argument
// error; "" means the call has none.
func idempotencyKey(args, meta json.RawMessage) (string, error) {
	var fromArgs, fromMeta json.RawMessage
	if len(args) > 0 {
		var a map[string]json.RawMessage
		if json.Unmarshal(args, &a) == nil {
			fromArgs = a[mcp.ArgIdempotencyKey]
		}
	}
	if len(meta) > 0 {
		var m map[string]json.RawMessage
		if json.Unmarshal(meta, &m) == nil {
			fromMeta = m[mcp.MetaIdempotencyKey]
		}
	}
	var key, other string
	for _, raw := range []json.RawMessage{fromArgs, fromMeta} {
		if raw == nil || string(raw) == "null" {
			continue
		}
		var k string
		if err := json.Unmarshal(raw, &k); err != nil {
			return "", keyError("the idempotency key must be a string")
		}
		if !ledger.ValidKey(k) {
			return "", keyError("the idempotency key must be 1 to 255 bytes of printable text")
		}
		if key == "" {
			key = k
		} else {
			other = k
		}
	}
	if other != "" && other != key {
		return "", keyError(fmt.Sprintf("the idempotency key is given twice with two values (arguments.%s and _meta[%q])", mcp.ArgIdempotencyKey, mcp.MetaIdempotencyKey))
	}
	return key, nil
}

func keyError(msg string) *mcp.ToolError {
	return &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: msg, Details: map[string]any{"field": mcp.ArgIdempotencyKey}}
}

var errKeyRequired = &mcp.ToolError{
	Code: mcp.FailureKeyRequired,
	Message: "this tool changes state and needs an idempotency key: generate a unique key (a UUID) for this operation, " +
		"pass it as arguments." + mcp.ArgIdempotencyKey + ", and reuse the same key on every retry of it",
}

// handlerFailed carries an error the handler returned out of the ledger's
// transaction, to tell it from the ledger's own failures.
type handlerFailed struct{ err error }

func (h handlerFailed) Error() string { return h.err.Error() }
func (h handlerFailed) Unwrap() error { return h.err }

// stored decides what of a handler's outcome the ledger keeps: a result,
// or a business failure (a ToolError that is neither retryable nor about
// the arguments). ok is false for everything else, which must roll back.
func stored(res *mcp.CallToolResult, err error) (data json.RawMessage, ok bool, ferr error) {
	if err != nil {
		var te *mcp.ToolError
		if !errors.As(err, &te) || te.Retryable || te.Code == mcp.FailureInvalidArguments {
			return nil, false, err
		}
		res = te.Result()
	}
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	if res.Content == nil {
		res.Content = []mcp.Content{}
	}
	data, err = json.Marshal(res)
	if err != nil {
		return nil, false, fmt.Errorf("encoding the result to store it: %w", err)
	}
	return data, true, nil
}

// callIdempotent runs a call of a tool with an Idempotency policy.
func (s *Server) callIdempotent(ctx context.Context, rt *registeredTool, call *CallRequest) (mcp.Result, error) {
	idem := rt.policy.Idempotency
	if call.IdempotencyKey == "" {
		return s.callUnkeyed(ctx, rt, call)
	}
	fp, err := ledger.FingerprintArgs(call.Arguments, idem.Fields, mcp.ArgIdempotencyKey)
	if err != nil {
		return nil, &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: err.Error()}
	}
	op := ledger.Op{Tenant: call.Tenant, Tool: call.Name, Key: call.IdempotencyKey, Fingerprint: fp}
	var res ledger.Result
	if idem.External {
		res, err = s.callExternal(ctx, rt, call, op)
	} else {
		res, err = s.opts.Ledger.Do(ctx, op, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
			call.tx = tx
			out, herr := rt.handler(ctx, call)
			call.tx = nil
			data, ok, herr := stored(out, herr)
			if !ok {
				return nil, handlerFailed{herr}
			}
			return data, nil
		})
	}
	if err != nil {
		return nil, ledgerError(err, call.IdempotencyKey)
	}
	return replayable(res)
}

// callExternal runs an External tool in two phases: claim the key, run the
// handler outside any transaction, store its result.
func (s *Server) callExternal(ctx context.Context, rt *registeredTool, call *CallRequest, op ledger.Op) (ledger.Result, error) {
	claim, replayed, err := s.opts.Ledger.Claim(ctx, op)
	if err != nil {
		return ledger.Result{}, err
	}
	if replayed != nil {
		return *replayed, nil
	}
	out, herr := rt.handler(ctx, call)
	data, ok, herr := stored(out, herr)
	if !ok {
		// The handler says the effect did not complete: free the key so a
		// retry runs (the external service dedupes by the same key).
		if rerr := claim.Release(context.WithoutCancel(ctx)); rerr != nil {
			s.log.Warn("releasing an idempotency claim failed; it frees itself when its lease expires",
				"tool", call.Name, "error", rerr)
		}
		return ledger.Result{}, handlerFailed{herr}
	}
	// Store the outcome even if the call was cancelled meanwhile: the
	// effect happened.
	res, err := claim.Complete(context.WithoutCancel(ctx), data)
	if err != nil {
		s.log.Warn("the effect completed but its result could not be stored", "tool", call.Name, "error", err)
		return ledger.Result{}, err
	}
	return res, nil
}

// callUnkeyed runs a call of a KeyOptional tool made without a key: in a
// transaction, so the handler writes the same way, but with nothing to
// stop a retry from running it again — which its result says.
func (s *Server) callUnkeyed(ctx context.Context, rt *registeredTool, call *CallRequest) (mcp.Result, error) {
	var data json.RawMessage
	run := func(tx *store.Tx) error {
		call.tx = tx
		out, herr := rt.handler(ctx, call)
		call.tx = nil
		var ok bool
		if data, ok, herr = stored(out, herr); !ok {
			return handlerFailed{herr}
		}
		return nil
	}
	var err error
	if rt.policy.Idempotency.External {
		err = run(nil)
	} else {
		err = s.opts.Ledger.DB().WriteBatched(ctx, run)
	}
	if err != nil {
		return nil, ledgerError(err, "")
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, err
	}
	res.Meta = maps.Clone(res.Meta)
	if res.Meta == nil {
		res.Meta = mcp.Meta{}
	}
	res.Meta[mcp.MetaRetrySafe] = false
	return &res, nil
}

// replayable rebuilds the stored result — a copy no one else holds — and
// marks whether it was replayed.
func replayable(r ledger.Result) (mcp.Result, error) {
	var res mcp.CallToolResult
	if err := json.Unmarshal(r.Data, &res); err != nil {
		return nil, fmt.Errorf("decoding a stored result: %w", err)
	}
	if res.Meta == nil {
		res.Meta = mcp.Meta{}
	}
	res.Meta[mcp.MetaReplayed] = r.Replayed
	res.Meta[mcp.MetaExecutedAt] = r.ExecutedAt.UTC().Format(time.RFC3339Nano)
	return &res, nil
}

// ledgerError maps what the ledger path failed with onto a tool failure.
func ledgerError(err error, key string) error {
	var h handlerFailed
	if errors.As(err, &h) {
		return h.err
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
	return &mcp.ToolError{
		Code:      mcp.FailureLedger,
		Message:   "the idempotency ledger could not be reached; retrying with the same key is safe",
		Retryable: true,
	}
}
