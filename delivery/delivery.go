// Package delivery is the policy that gives a keyed tool a transactional
// outbox (package outbox). A payment, a deployment, an e-mail is a call
// to someone else, which no database transaction can hold; an intent to
// make it can. The tool's handler records the intent with Send, in the
// transaction that claims the call's idempotency key, so that it commits
// with the ledger's record or not at all, and a replay of the key records
// none; the outbox's dispatcher delivers it once that commits, with a key
// derived from the operation, again and again if it must, until the
// receiver acknowledges it or refuses it for good. A receiver that
// honours keys applies it once: the effect is inside the operation's
// atomic boundary after all.
//
// The policy goes before idempotency.Keyed, which it wraps:
//
//	srv.AddTool(t, h, delivery.Outbox(d, p), idempotency.Keyed(l, kp))
//
// so that it acts once Keyed's transaction has committed: it wakes the
// dispatcher, waits for the receiver's answer when the policy asks it to
// (within the call's deadline), and adds what became of each intent to
// the result's _meta (mcp.MetaDelivery) — for a retry of the key too,
// which is shown the same operation as it is now. The tool's _meta says
// its effect is an outbox's (mcp.MetaEffect), for a reviewer to read.
package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
)

// Policy is a tool's use of the outbox.
type Policy struct {
	// Wait is how long a call that recorded intents waits (within its
	// deadline) for the receivers' answers, which its result then shows;
	// zero returns once the intents are committed, pending. Either way
	// the operation's id (which the tool's own result gives) and
	// lookup_operation tell how the delivery went.
	Wait time.Duration
}

// outboxMark is the mark Outbox gives a tool (server.Tool.Mark).
type outboxMark struct{}

// Outbox is the policy that gives a keyed tool's handler the outbox d
// delivers from (see the package doc).
func Outbox(d *outbox.Dispatcher, p Policy) server.ToolInterceptor {
	return func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		if d == nil {
			return nil, fmt.Errorf("delivery: tool %q has no outbox dispatcher", t.Name)
		}
		if _, twice := server.Marked[outboxMark](t); twice {
			return nil, fmt.Errorf("delivery: tool %q: delivery.Outbox is given twice", t.Name)
		}
		kp, keyed := idempotency.PolicyOf(t)
		if !keyed {
			return nil, fmt.Errorf("delivery: tool %q: give delivery.Outbox before idempotency.Keyed: an intent is recorded in the transaction that claims the call's key", t.Name)
		}
		if kp.External {
			return nil, fmt.Errorf("delivery: tool %q: an External keyed tool has no transaction to record an intent in", t.Name)
		}
		t.Mark(outboxMark{})
		t.Meta[mcp.MetaEffect] = mcp.EffectOutbox
		return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
			sc := &scope{d: d}
			call.Attach(scopeKey{}, sc)
			res, err := next(ctx, call)
			c, ok := res.(*mcp.CallToolResult)
			if err != nil || !ok || c == nil {
				return res, err
			}
			ops := sc.ops
			if len(ops) > 0 {
				d.Notify() // committed: deliver now
			} else if c.Meta[mcp.MetaReplayed] == true && idempotency.Key(call) != "" {
				if ops, err = d.Outbox().Lookup(ctx, call.Tenant, call.Name, idempotency.Key(call)); err != nil {
					ops = nil // the replay stands; its delivery is lookup_operation's to show
				}
			}
			if len(ops) == 0 {
				return res, nil
			}
			if p.Wait > 0 {
				wctx, cancel := context.WithTimeout(ctx, p.Wait)
				for i, op := range ops {
					if op.State == outbox.Pending {
						if now, err := d.Wait(wctx, call.Tenant, op.ID); err == nil {
							ops[i] = now
						}
					}
				}
				cancel()
			}
			meta := make(mcp.Meta, len(c.Meta)+1)
			maps.Copy(meta, c.Meta)
			meta[mcp.MetaDelivery] = Describe(ops)
			out := *c
			out.Meta = meta
			return &out, nil
		}, nil
	}
}

// scope is what the policy gives one call: the dispatcher whose outbox
// Send writes to, and the intents this call recorded.
type scope struct {
	d   *outbox.Dispatcher
	ops []outbox.Operation
}

type scopeKey struct{}

// Send records, in the keyed call's transaction (idempotency.Tx), an
// intent to deliver request — encoded as JSON — to target, one of the
// dispatcher's receivers, and returns the operation's id for the tool's
// result. It commits with the call's key or not at all; a second Send to
// the same target in one call returns the same operation. Its refusals
// are tool failures to return as they are: the outbox full, or an earlier
// operation with the key still delivering (both retryable: nothing was
// recorded).
func Send(ctx context.Context, call *server.CallRequest, target string, request any) (string, error) {
	sc, _ := call.Attached(scopeKey{}).(*scope)
	if sc == nil {
		return "", errors.New("delivery: the tool has no outbox (give it delivery.Outbox)")
	}
	for _, op := range sc.ops {
		if op.Target == target {
			return op.ID, nil
		}
	}
	if !sc.d.Has(target) {
		return "", fmt.Errorf("delivery: no receiver named %q", target)
	}
	body, err := json.Marshal(request)
	if err != nil {
		return "", fmt.Errorf("delivery: encoding the request: %w", err)
	}
	op, err := sc.d.Outbox().Put(ctx, idempotency.Tx(call), outbox.Intent{Tenant: call.Tenant, Tool: call.Name,
		Key: idempotency.Key(call), Target: target, Request: body})
	var full *outbox.FullError
	var pending *outbox.PendingError
	switch {
	case errors.As(err, &full):
		return "", &mcp.ToolError{Code: mcp.FailureOverloaded, Retryable: true, RetryAfter: time.Second,
			Message: "the outbox holds as many undelivered intents as it may (" + full.Error() + "); nothing was recorded: retry later with the same key"}
	case errors.As(err, &pending):
		return "", &mcp.ToolError{Code: mcp.FailureInProgress, Retryable: true, RetryAfter: time.Second,
			Message: "an earlier operation with this key is still being delivered (" + pending.ID + "); retry once it is"}
	case err != nil:
		return "", err
	}
	sc.ops = append(sc.ops, op)
	return op.ID, nil
}

// Status is what a result's _meta and lookup_operation say of an
// intent.
type Status struct {
	Operation   string          `json:"operation"`
	Target      string          `json:"target"`
	State       string          `json:"state"`
	Attempts    int             `json:"attempts"`
	NextAttempt string          `json:"nextAttemptAt,omitempty"`
	EndedAt     string          `json:"endedAt,omitempty"`
	Answer      json.RawMessage `json:"answer,omitempty"`
}

// Describe is ops as results and lookups show them.
func Describe(ops []outbox.Operation) []Status {
	out := make([]Status, 0, len(ops))
	for _, op := range ops {
		s := Status{Operation: op.ID, Target: op.Target, State: op.State.String(), Attempts: op.Attempts, Answer: op.Answer}
		if op.State == outbox.Pending {
			s.NextAttempt = op.NextAttempt.UTC().Format(time.RFC3339Nano)
		} else {
			s.EndedAt = op.EndedAt.UTC().Format(time.RFC3339Nano)
		}
		out = append(out, s)
	}
	return out
}

// Deliveries is, for idempotency.Lookup's Describe, what ob's deliveries
// add to a committed operation that lookup_operation (or "mcprel ledger
// show") describes: the intents it recorded, as they stand (Describe),
// and what became of each in its advice. Only the tenant's intents are
// read.
func Deliveries(ob *outbox.Outbox) func(ctx context.Context, tenant, tool, key string, op *idempotency.Operation) error {
	return func(ctx context.Context, tenant, tool, key string, op *idempotency.Operation) error {
		if !op.Committed() {
			return nil
		}
		ops, err := ob.Lookup(ctx, tenant, tool, key)
		if err != nil || len(ops) == 0 {
			return err
		}
		if op.Deliveries, err = json.Marshal(Describe(ops)); err != nil {
			return err
		}
		for _, o := range ops {
			switch o.State {
			case outbox.Pending:
				op.Advice += fmt.Sprintf("; its delivery to %s is pending (%d attempts so far, the next at %s): it is delivered, with the same key, until %s takes or refuses it — do not retry under a new key",
					o.Target, o.Attempts, o.NextAttempt.UTC().Format(time.RFC3339), o.Target)
			case outbox.Delivered:
				op.Advice += fmt.Sprintf("; %s took its delivery (its answer is here)", o.Target)
			case outbox.Failed:
				op.Advice += fmt.Sprintf("; its delivery failed — %s refused it for good, or could not be reached for too long (its answer says which) — and is not retried, nor is it by a retry with this key: check %s, then act under a new key if need be", o.Target, o.Target)
			}
		}
		return nil
	}
}
