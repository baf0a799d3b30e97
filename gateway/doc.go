// Package gateway puts any MCP server — a TypeScript or Python package run
// over stdio, a remote Streamable HTTP endpoint of either era, or one that
// still speaks the 2024-11-05 HTTP+SSE transport — behind mcprel's request
// lifecycle, unmodified.
//
// The gateway is package server in front, package client behind, and a
// forwarder between them. The forwarder is an ordinary tool (or resource,
// or prompt) handler registered on the server for every tool an upstream
// lists, so everything owed downstream is the server's job already: two
// deadline clocks, progress that only increases and is rate-limited,
// cancellation, bounded outboxes, per-tenant admission, one terminal
// state. Everything owed the upstream is package client's job already:
// the upstream's era, its own JSON-RPC ids, its cancellation wire
// (notifications/cancelled on stdio and 2025 HTTP, closing the stream on
// 2026 HTTP), late responses ignored and counted. If the forwarder had to
// re-implement either half, a seam would be missing in server or client.
//
// # The path of one call
//
// A downstream tools/call is admitted by the server and runs the
// forwarder under the tool's clocks (Policy). The forwarder picks the
// upstream's connection — one per tenant for a 2025-era HTTP upstream,
// whose sessions carry server-initiated requests, so that one tenant never
// sees another's — and calls the upstream's tool under the client's own
// clocks, set a little longer than the server's so that the server's
// clock, which gives the downstream its standard timeout result, fires
// first. Increasing upstream progress is reported on the call, which is
// what resets the server's idle clock; the maximum never moves. When the
// downstream cancels, or a clock fires, the call's context ends and the
// client cancels the upstream's request by its own id.
//
// # Failures
//
// Upstream JSON-RPC errors stay JSON-RPC errors downstream, their codes
// kept (a parse error, which speaks of the gateway's own framing, becomes
// an internal error). An upstream's isError results pass through as they
// are. An upstream that cannot be reached gives a retryable failed result
// with code upstream_unavailable and a retryAfterMs; after
// Options.CircuitFailures consecutive connection failures the upstream's
// circuit opens and calls are refused at once until a ping to it succeeds.
// A connection lost while a call was in flight gives outcome_unknown:
// the upstream may have acted, so only a tool the policy calls read-only
// says it may be retried.
//
// # Names
//
// With one upstream, names are unchanged. With several, tool and prompt
// names are prefixed with the upstream's name and an underscore
// ("github_create_issue"); an upstream name may not contain an
// underscore, so two prefixed names never collide. A name that would pass
// the 128-character rule, or that holds characters a tool name may not,
// is shortened or mended and ends in a hash of the original. Resource
// URIs are never renamed: when two upstreams list the same URI the first
// upstream (in the order given) keeps it and the other is logged.
//
// # Input the upstream asks for
//
// Requests an upstream sends during a call (elicitation, sampling, roots)
// go to the downstream client that made the call: in the 2025 era as
// requests on its session, in the 2026-07-28 era as the gateway's own
// input_required result, whose requestState carries the upstream's (signed
// by the server, bound to the tenant, the tool and the arguments). A
// 2025-era upstream that asks a 2026-07-28 downstream mid-call is
// answered with an error: that would need the upstream call kept open
// across downstream requests, which the gateway does not do. A stdio
// upstream's request is relayed only while a single call is in flight on
// it (stdio carries no association); otherwise it is refused.
//
// The package knows server, client, retry and mcp; it opens no listener
// and parses no flags (package host assembles it, cmd/mcprel parses).
package gateway
