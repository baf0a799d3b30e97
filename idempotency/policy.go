package idempotency

import (
	"fmt"

	"github.com/mcprel/mcprel/mcp"
)

// KeyMode says whether a tool's calls carry an idempotency key.
type KeyMode uint8

const (
	// KeyRequired: a call without a key is refused with
	// "idempotency_key_required" before anything runs. It is the zero
	// value: a tool registered through this package changes state, and a
	// call that cannot be deduplicated is the exception a tool must opt
	// into.
	KeyRequired KeyMode = iota
	// KeyOptional: a call with a key runs at most once per key; a call
	// without one runs every time, and its result says it is not safe to
	// retry (mcp.MetaRetrySafe false).
	KeyOptional
)

// String returns "required" or "optional", as tools/list advertises it
// (mcp.MetaKeyMode).
func (m KeyMode) String() string {
	if m == KeyOptional {
		return "optional"
	}
	return "required"
}

// Policy is a mutating tool's contract with the ledger: a call carrying an
// idempotency key runs its effect at most once per key, whatever the
// retries, races, lost responses, restarts and replicas. The key is the
// argument "idempotencyKey" (mcp.ArgIdempotencyKey) or, for tools whose
// arguments cannot hold it, params._meta["dev.mcprel/idempotencyKey"]; it
// is scoped to the request's tenant and the tool.
//
// In the default mode the handler writes its business rows through
// Call.Tx, the transaction that also claims the key and stores the
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
type Policy struct {
	// Key says whether a call must carry a key. The zero value is
	// KeyRequired.
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
	// arriving meanwhile gets "in_progress" with retryAfterMs, which
	// follows the running call: as long as it has run so far, at least
	// 100 ms, never past the tool's maximum deadline for it nor past its
	// lease (see ledger.InProgressError). This is only
	// safe if the external service accepts Call.Key as its own idempotency
	// key (or the handler writes an outbox row instead): a claim whose
	// process dies is taken over when its lease expires, and the effect
	// runs again. The claim's lease is renewed while the handler runs,
	// so the tool's deadlines need not fit in it; a process that dies
	// stops renewing, and its claim expires within a lease.
	External bool
	// AtMostOnce is for an External effect whose receiver does not honour
	// the key (an MCP server without idempotency, behind mcprel gateway):
	// the key is claimed at most once (ledger.ClaimOnce) and never run
	// again. A call that ends without an answer to store — the handler
	// failed, was cancelled or ran out of time after it may have reached
	// the receiver — leaves the key's outcome unknown, and so does a
	// claim whose process died; every retry with that key is then told
	// "outcome_unknown", not run, until an operator resolves it. Only a
	// failure the handler marks NotRun (the request provably never left)
	// frees the key.
	AtMostOnce bool
	// KeyArgument names the argument that carries the key; "" means
	// "idempotencyKey" (mcp.ArgIdempotencyKey). The key may always come
	// in params._meta["dev.mcprel/idempotencyKey"] instead.
	KeyArgument string
	// ReconcileWith names the read (a tool) that finds out what an
	// operation whose outcome is unknown did, for the advice a retry is
	// given (optional).
	ReconcileWith string
	// Preconditions lists failure codes (mcp.ToolError.Code) that report a
	// precondition the call found unmet rather than a decision it made:
	// the SKU does not exist yet, the account is not open. Nothing was
	// decided, so such a failure is not stored: it rolls back, and a retry
	// with the same key runs again once the precondition may hold. A
	// failure that is the operation's own answer (insufficient stock, a
	// declined card) is not listed, and is replayed to every retry.
	Preconditions []string
}

// check refuses a policy that cannot be served.
func (p Policy) check(tool string) error {
	if p.Key > KeyOptional {
		return fmt.Errorf("idempotency: tool %q: unknown key mode %d", tool, p.Key)
	}
	if p.AtMostOnce && !p.External {
		return fmt.Errorf("idempotency: tool %q: AtMostOnce is a kind of External effect; set External too", tool)
	}
	return nil
}

// keyArgument is the argument that carries the key.
func (p Policy) keyArgument() string {
	if p.KeyArgument != "" {
		return p.KeyArgument
	}
	return mcp.ArgIdempotencyKey
}
