package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// LookupTool is the name AddLookup serves lookup_operation under unless
// told another: the read a client reconciles a keyed call with after a
// timeout or a lost answer, rather than repeat it under a new key.
const LookupTool = "lookup_operation"

// Operation is what lookup_operation answers of a keyed call: the
// ledger's record of it, in the caller's tenant. "mcprel serve", "mcprel
// gateway" and "mcprel ledger show" all answer in this one shape; the
// members a server has nothing to say in are left out.
type Operation struct {
	// Found says whether the ledger holds a record of the key.
	Found bool `json:"found"`
	// State is "in_progress", "committed" or "outcome_unknown"
	// (ledger.State).
	State string `json:"state,omitempty"`
	// Result is the stored result of a committed operation — a tool
	// result, with isError set for a failure that was its answer — which
	// a retry with the key is given.
	Result json.RawMessage `json:"result,omitempty"`
	// Reason says why an operation's outcome is unknown.
	Reason string `json:"reason,omitempty"`
	// ExecutedAt is when the result was stored, or the outcome became
	// unknown (RFC 3339).
	ExecutedAt string `json:"executedAt,omitempty"`
	// Executions counts the times the effect was started for the key.
	Executions int `json:"executions,omitempty"`
	// ExpiresAt is when the record may be dropped (RFC 3339); a call with
	// the key after it runs again.
	ExpiresAt string `json:"expiresAt,omitempty"`
	// UpstreamKey is, for a call a gateway forwarded, the idempotency key
	// the upstream was sent (derived from the tenant, the tool and the
	// caller's key: ledger.DerivedKey): what to look for at the upstream
	// when checking what the call did there.
	UpstreamKey string `json:"upstreamKey,omitempty"`
	// Deliveries are, for a tool with an outbox (package delivery), the
	// intents the operation recorded, as they stand: a list of
	// delivery.Status.
	Deliveries json.RawMessage `json:"deliveries,omitempty"`
	// Advice says what a caller may do next.
	Advice string `json:"advice"`
}

// Committed reports whether the operation committed: its result is
// Result, and a retry with the key is given it.
func (o Operation) Committed() bool { return o.State == ledger.Committed.String() }

// LookupOperation reads the record of tenant's call of tool with key from
// l. A key with no record is not an error: the Operation says so (Found
// false). A key the ledger could never hold is ledger.ErrInvalidKey.
func LookupOperation(ctx context.Context, l *ledger.Ledger, tenant, tool, key string) (Operation, error) {
	rec, err := l.Lookup(ctx, tenant, tool, key)
	if errors.Is(err, ledger.ErrNotFound) {
		return Operation{Advice: "no operation with this key was recorded (or its record expired): a call with the key runs it once"}, nil
	}
	if err != nil {
		return Operation{}, err
	}
	return OperationOf(rec), nil
}

// OperationOf is what lookup_operation answers of rec.
func OperationOf(rec ledger.Record) Operation {
	out := Operation{Found: true, State: rec.State.String(), Executions: rec.Executions, ExpiresAt: rec.ExpiresAt.UTC().Format(time.RFC3339)}
	if !rec.ExecutedAt.IsZero() {
		out.ExecutedAt = rec.ExecutedAt.UTC().Format(time.RFC3339Nano)
	}
	switch rec.State {
	case ledger.Committed:
		out.Result = append(json.RawMessage(nil), rec.Result...)
		out.Advice = "the operation committed: this is its result; a retry with the same key returns it without running again"
	case ledger.OutcomeUnknown:
		out.Reason = rec.UnknownReason()
		out.Advice = "the operation may have taken effect and its answer was lost: it is not run again with this key. " +
			"Check what it did, then close the record: mcprel ledger resolve (--result FILE | --failed MESSAGE | --forget)"
	default:
		out.Advice = "the operation is still running: retry with the same key after a moment"
	}
	return out
}

// Lookup is how AddLookup serves lookup_operation. The zero value serves
// it as LookupTool, for any tool name.
type Lookup struct {
	// Name is the tool's name; "" is LookupTool.
	Name string
	// Description is the tool's; "" is one that fits any server.
	Description string
	// Tools lists the keyed tools it looks up, for its input schema to
	// name; nil takes any tool name.
	Tools []string
	// Describe, when set, adds what another part of the server knows of
	// a recorded operation (op.Found) to what the ledger says: its
	// outbox's deliveries, the key an upstream was sent. It is given the
	// caller's tenant, and must read only that tenant's data.
	Describe func(ctx context.Context, tenant, tool, key string, op *Operation) error
}

// lookupArgs are lookup_operation's arguments.
type lookupArgs struct {
	Tool string `json:"tool"`
	Key  string `json:"idempotencyKey"`
}

// AddLookup serves lookup_operation on srv from l: the record of one of
// the caller's keyed calls, as an Operation. It is read-only and safe to
// retry. Keys and records are the caller's tenant's: a lookup never finds
// another tenant's operation.
func AddLookup(srv *server.Server, l *ledger.Ledger, lk Lookup) error {
	name := lk.Name
	if name == "" {
		name = LookupTool
	}
	desc := lk.Description
	if desc == "" {
		desc = "Reconciles a keyed operation after a timeout or a lost response: whether the operation with this " +
			"idempotencyKey committed (and its stored result), is still running, or has an unknown outcome, when, and how " +
			"many times it ran. Read-only; safe to retry. Never repeat an operation under a new key to find out."
	}
	tool := `{"type":"string","minLength":1,"maxLength":128}`
	if lk.Tools != nil {
		names, err := json.Marshal(slices.Clone(lk.Tools))
		if err != nil {
			return err
		}
		tool = `{"type":"string","enum":` + string(names) + `}`
	}
	return server.AddTypedTool(srv, server.Tool{
		Name:        name,
		Description: desc,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"tool":` + tool + `,` +
			`"idempotencyKey":{"type":"string","minLength":1,"maxLength":255,"description":"the key the operation was called with"}},` +
			`"required":["tool","idempotencyKey"],"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), IdempotentHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)},
		Policy:      server.Policy{Timeout: server.TimeoutFast, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, req *server.CallRequest, in lookupArgs) (Operation, error) {
		op, err := LookupOperation(ctx, l, req.Tenant, in.Tool, in.Key)
		if errors.Is(err, ledger.ErrInvalidKey) {
			return Operation{}, &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: err.Error()}
		}
		if err != nil || !op.Found || lk.Describe == nil {
			return op, err
		}
		if err := lk.Describe(ctx, req.Tenant, in.Tool, in.Key, &op); err != nil {
			return Operation{}, err
		}
		return op, nil
	})
}
