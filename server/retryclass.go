package server

import (
	"cmp"
	"maps"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/outbound"
)

// RetryClass is what a client may do when a call of a tool fails without
// an answer it can trust — its response was lost, or it timed out — in the
// terms of the retry matrix mcprel follows. The server uses it to say
// whether a timeout is retryable, and advertises it in each tool's _meta
// (mcp.MetaRetryClass), which a client may act on when it trusts the
// server. Tool annotations such as readOnlyHint are never used for this:
// they are hints from the tool's author to a model, not a contract.
type RetryClass uint8

const (
	// RetryUnsafe, the zero value: the call has effects and no
	// deduplication. Never retried automatically; reconcile first (look
	// the operation up) before calling again.
	RetryUnsafe RetryClass = iota
	// RetrySafe: the call has no effects (a read, a computation): it may be
	// made again with a new JSON-RPC id.
	RetrySafe
	// RetryConditional: the call is made at most once per idempotency key
	// (or, like a versioned write, refuses to apply twice): it may be
	// retried with the same key and the same arguments, never otherwise.
	RetryConditional
)

// String returns "unsafe", "safe" or "conditional", as advertised.
func (c RetryClass) String() string {
	switch c {
	case RetrySafe:
		return mcp.RetryClassSafe
	case RetryConditional:
		return mcp.RetryClassConditional
	}
	return mcp.RetryClassUnsafe
}

// rank orders the classes from least to most safe to retry.
func (c RetryClass) rank() int {
	switch c {
	case RetrySafe:
		return 2
	case RetryConditional:
		return 1
	}
	return 0
}

// retryableAfterTimeout says whether a call of this class that timed out
// may be made again: a safe one, or a conditional one (its effect rolled
// back unless it committed, and then its key or version refuses to apply
// it twice). A Check narrows a call that lacks what makes it conditional
// (NarrowRetry).
func (c RetryClass) retryableAfterTimeout() bool { return c != RetryUnsafe }

// policyMeta is a tool's _meta as tools/list shows it: the tool's own,
// with the reliability policy the server applies added (mcp.MetaRetryClass
// and the rest), for clients and reviewers to plan by.
func (s *Server) policyMeta(own mcp.Meta, p Policy) mcp.Meta {
	meta := make(mcp.Meta, len(own)+6)
	maps.Copy(meta, own)
	d := s.deadlines(p)
	meta[mcp.MetaRetryClass] = p.Retry.String()
	meta[mcp.MetaTimeoutClass] = p.Timeout.String()
	meta[mcp.MetaIdleTimeoutMs] = d.Idle.Milliseconds()
	meta[mcp.MetaMaxTimeoutMs] = d.Max.Milliseconds()
	// The flow control every call of the tool gets, for reviewers: the
	// same for every tool, advertised with each so that tools/list alone
	// says it.
	meta[mcp.MetaProgressIntervalMs] = s.opts.ProgressInterval.Milliseconds()
	meta[mcp.MetaQueueCapacity] = cmp.Or(s.opts.QueueCapacity, outbound.DefaultCapacity)
	return meta
}

// toolsFor is the tool list a session's tools/list shows: the server's,
// with the queue capacity of the session's streams (conn.Config) in
// place of the server's when its transport sized them otherwise (an HTTP
// handler's StreamCapacity). The cached list is shared and never changed:
// a session that differs gets copies of the tools' _meta.
func (s *Server) toolsFor(era mcp.Era, capacity int) []mcp.Tool {
	list := s.listTools(era)
	if capacity <= 0 || capacity == s.opts.QueueCapacity {
		return list
	}
	out := make([]mcp.Tool, len(list))
	for i, t := range list {
		meta := make(mcp.Meta, len(t.Meta))
		maps.Copy(meta, t.Meta)
		meta[mcp.MetaQueueCapacity] = capacity
		t.Meta = meta
		out[i] = t
	}
	return out
}
