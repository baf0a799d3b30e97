// Package review is mcprel's reliability reviewer: it reads a Policy that
// describes MCP operations (transport, semantics, deadlines, progress,
// retries, the idempotency store and what lies inside its transaction,
// flow control, reconnects and Tasks) and returns a Report with, for each
// operation, the cancellation wire per transport, the race table, the
// deadline policy, the retry class (SAFE, CONDITIONAL or UNSAFE) and its
// reasons, the idempotency boundary, the flow-control checks, the
// reconnect plan, the durable Task behaviour and the twelve required
// failure fixtures, each mapped to the mcprel tests that run it.
//
// The verdict refuses "production ready" for a fixed set of reasons, each
// with a stable Code: a missing input, retry-on-timeout as the only retry
// rule, a process-local ledger, an effect outside the claimed atomic
// boundary without an outbox or upstream key, records aliasing mutable
// storage, an unspecified queue capacity, no maximum timeout, and progress
// that resets every deadline. A missing input is never guessed.
//
// The package is pure: no network, no server, no files beyond what its
// caller hands it. "mcprel review" (cmd/mcprel) reads policy files, or
// builds one from what a running server advertises (FromTools).
package review
