// Package probe runs the reliability fixtures live against any MCP
// server — one it starts over stdio, or a Streamable HTTP endpoint — in
// every protocol era the server speaks, and reports each fixture as
// passed, failed (with the frames that prove it) or not applicable (with
// why).
//
// The fixtures are the reliability reviewer's checklist (the races a
// production server must have one outcome for: a cancellation before and
// after completion, a deadline, a duplicate mutation with and without a
// key, two connections racing one key, a slow consumer, a reconnect, a
// task cancelled) and the transport's rules (SSE headers, keepalives,
// Origin and Host checks, bounded bodies, unguessable sessions). package
// review judges a policy someone wrote down; this package checks what a
// running server does.
//
// Only what the operator allows is called. Nothing in a tool's listing
// says whether calling it charges a card: without a policy the probe
// sends protocol methods only (server/discover or initialize, ping,
// lists, malformed and unknown cancellations, headers). A policy in the
// review vocabulary names, under each operation's probe section, the
// tools it may call and with which arguments (review.Probe), and the rest
// of the operation's policy — its kind, whether it emits progress, its
// idempotency key, its task support — says which fixtures apply.
//
// The package speaks the wire itself: it imports jsonrpc and mcp, builds
// every frame by hand and reads every frame back, never through package
// server or client, so that it checks mcprel's server and mcprel's
// client's assumptions independently of both.
package probe
