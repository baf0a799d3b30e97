// Package retry decides whether and when a client makes an MCP tool call
// again after an attempt failed. It does no I/O and needs no client: a
// caller describes the call and the failure, and gets back a decision — a
// pause and how to resend, or an error that says why not.
//
// # Classes
//
// What may be retried is decided by the client's own policy Table, per tool
// name with a default, never by the server. Each tool has a Class:
//
//   - Safe: side-effect free by contract. Once the failure is understood it
//     may be made again with a new JSON-RPC id.
//   - Conditional: the call carries a durable idempotency key. It may be
//     made again only with the same key and byte-identical arguments, so
//     that the server's ledger replays it or runs it once.
//   - Unsafe (the zero value): nothing deduplicates it. It is never retried
//     automatically once it may have reached the server; the caller gets a
//     *ReconcileError that names the lookup to run first.
//
// A tool's annotations (readOnlyHint, idempotentHint) and the class an
// mcprel server advertises in the tool's _meta (mcp.MetaRetryClass) are a
// peer's claims. The table uses them only when it says to trust that
// server (Table.TrustServer), and even then they may narrow a tool the
// table lists, never widen it.
//
// The JSON-RPC id correlates messages; it is never an idempotency key. A
// new id makes a Conditional call safe to resend only because the key
// stays the same.
//
// # Failures
//
// A Failure says what happened to one attempt. Classify and FromResult
// read the server's answers (JSON-RPC errors and failed tool results with
// their structured body); the client sets the kinds only it can know —
// NotSent, Lost, IdleTimeout and MaxTimeout. A request that provably never
// left the client (NotSent) may be resent whatever its class.
//
// # When
//
// Backoff is capped exponential backoff with full jitter (250 ms doubling
// to 8 s by default), which also honours a server's retryAfterMs or HTTP
// Retry-After (ParseRetryAfter), capped. Its Jitter is random by default
// and reproducible when seeded (SeededJitter). No pause ends after the
// call's deadline: DelayWithin says "give up" instead.
//
// # How much
//
// A Planner, one per target server, caps each call's attempts (3 by
// default) and shares a retry Budget among all calls to that target, so
// that against a server that always fails retries add about 10 % load
// rather than multiplying it.
package retry
