package mcp

// RetryClass is what a client may do with a tool call whose outcome it
// does not know — its response was lost, or a deadline fired — in the
// terms of the retry matrix mcprel follows. It is one type for the server
// that declares a tool's class, the client's planner that acts on it, the
// reviewer that judges it and the gateway that forwards by it. The
// classes are ordered from least to most retryable, so the smaller of two
// is the more careful one.
type RetryClass uint8

const (
	// RetryUnsafe, the zero value: the call has effects and nothing
	// deduplicates them. It is never retried automatically once it may
	// have reached the server; reconcile (look the operation up) first.
	RetryUnsafe RetryClass = iota
	// RetryConditional: the call is made at most once per idempotency
	// key (or, like a versioned write, refuses to apply twice). Retry
	// only with the same key and byte-identical arguments; the server
	// then replays the committed result or runs the operation once.
	RetryConditional
	// RetrySafe: the call has no effects by contract (a read, a
	// computation). It may be made again with a new JSON-RPC id.
	RetrySafe
)

// String returns "unsafe", "conditional" or "safe", the names an mcprel
// server advertises in a tool's _meta (MetaRetryClass).
func (c RetryClass) String() string {
	switch c {
	case RetrySafe:
		return RetryClassSafe
	case RetryConditional:
		return RetryClassConditional
	}
	return RetryClassUnsafe
}

// ParseRetryClass reads a class name as String writes it. It reports
// false for anything else, which a caller must not read as any class.
func ParseRetryClass(s string) (RetryClass, bool) {
	switch s {
	case RetryClassSafe:
		return RetrySafe, true
	case RetryClassConditional:
		return RetryConditional, true
	case RetryClassUnsafe:
		return RetryUnsafe, true
	}
	return RetryUnsafe, false
}
