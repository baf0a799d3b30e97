package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// LookupTool is the name of the tool the gateway serves beside the
// upstreams' when it keeps a ledger: the record of one keyed call. An
// upstream's tool of the same name is not served.
const LookupTool = "lookup_operation"

// Operation is what lookup_operation answers: the ledger's record of a
// keyed call, in the caller's tenant.
type Operation struct {
	Found bool `json:"found"`
	// State is "in_progress", "committed" or "outcome_unknown".
	State string `json:"state,omitempty"`
	// Result is the upstream's answer, as stored (committed).
	Result json.RawMessage `json:"result,omitempty"`
	// Reason says why the outcome is unknown.
	Reason string `json:"reason,omitempty"`
	// At is when the answer was stored, or the outcome became unknown.
	At         string `json:"at,omitempty"`
	Executions int    `json:"executions,omitempty"`
	ExpiresAt  string `json:"expiresAt,omitempty"`
	// UpstreamKey is the idempotency key the upstream was sent for the
	// call (derived from the tenant, the tool and the caller's key: see
	// ledger.DerivedKey): what to look for at the upstream, or pass its
	// read, when checking what the call did there.
	UpstreamKey string `json:"upstreamKey,omitempty"`
	Advice      string `json:"advice"`
}

type lookupArgs struct {
	Tool string `json:"tool"`
	Key  string `json:"idempotencyKey"`
}

// addLookup serves lookup_operation from l.
func (g *Gateway) addLookup(l *ledger.Ledger) error {
	return server.AddTypedTool(g.srv, server.Tool{
		Name: LookupTool,
		Description: "The gateway's record of a keyed call of a tool it forwards: whether it was answered (and the stored answer), " +
			"is still running, or has an unknown outcome (it may have taken effect upstream and its answer was lost). " +
			"Read-only; safe to retry. Never repeat an operation under a new key to find out.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"tool":{"type":"string","minLength":1,"maxLength":128,"description":"the tool as this gateway lists it"},` +
			`"idempotencyKey":{"type":"string","minLength":1,"maxLength":255}},"required":["tool","idempotencyKey"],"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: ptrTo(true)},
		Policy:      server.Policy{Timeout: server.TimeoutFast, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, req *server.CallRequest, in lookupArgs) (Operation, error) {
		rec, err := l.Lookup(ctx, req.Tenant, in.Tool, in.Key)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			return Operation{Advice: "no call with this key was forwarded (or its record expired): a call with it is forwarded once"}, nil
		case errors.Is(err, ledger.ErrInvalidKey):
			return Operation{}, &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: err.Error()}
		case err != nil:
			return Operation{}, err
		}
		op := describe(rec)
		op.UpstreamKey = g.upstreamKeyOf(req.Tenant, in.Tool, in.Key)
		return op, nil
	})
}

func describe(rec ledger.Record) Operation {
	out := Operation{Found: true, State: rec.State.String(), Executions: rec.Executions, ExpiresAt: rec.ExpiresAt.UTC().Format(time.RFC3339)}
	if !rec.ExecutedAt.IsZero() {
		out.At = rec.ExecutedAt.UTC().Format(time.RFC3339Nano)
	}
	switch rec.State {
	case ledger.Committed:
		out.Result = rec.Result
		out.Advice = "the upstream answered, and this is its answer: a retry with the same key returns it without forwarding again"
	case ledger.OutcomeUnknown:
		var why struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(rec.Result, &why)
		out.Reason = why.Reason
		out.Advice = "the call may have taken effect upstream and its answer was lost: it is not forwarded again with this key. " +
			"Check the upstream's state; an operator closes the record with \"mcprel ledger resolve\""
	default:
		out.Advice = "the call is being forwarded now: retry with the same key after a moment"
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }
