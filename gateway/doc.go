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
// kept (a parse error or an invalid request, which speak of the gateway's
// own framing, become an internal error). An upstream's isError results pass through as they
// are. An upstream that cannot be reached gives a retryable failed result
// with code upstream_unavailable and a retryAfterMs; after
// Options.CircuitFailures consecutive connection failures the upstream's
// circuit opens and calls are refused at once until a ping to it succeeds.
// A connection lost while a call was in flight gives outcome_unknown:
// the upstream may have acted, so only a tool that may be sent again — a
// read, or a keyed call whose upstream honours the key — says it may be
// retried. A 503 is read the same way: the upstream probably did not
// act, but a proxy can answer 503 after passing a request on. A stdio upstream that dies, or an HTTP+SSE
// stream that ends, is connected again after a capped, jittered, steady
// backoff that grows while it keeps failing, and everything it lists is
// listed again. An upstream that refuses the gateway's own credentials
// (Upstream.Authorizer) and no better ones can be had gives a failure
// with code upstream_unauthorized, not retryable, naming
// Upstream.AuthorizationAction; so does a call it may serve while it has
// never been listed because it refused the gateway from the start: any
// call with one upstream, a name with its prefix with several.
//
// # Names
//
// With one upstream, names are unchanged. With several, tool and prompt
// names are prefixed with the upstream's name and an underscore
// ("github_create_issue"); an upstream name may not contain an
// underscore, so two prefixed names never collide. One upstream may keep
// its names unprefixed (Upstream.KeepNames), so that adding another
// renames none of its tools; a name of its that begins with an upstream's
// name and an underscore is prefixed all the same. A name the prefix
// pushes past the 128-character rule, or that holds characters a tool
// name may not, is shortened or mended and ends in a hash of the
// original. Resource URIs are never renamed: when two upstreams list the
// same URI (or, by a hash's chance, the same name) the first upstream in
// the order given keeps it, and the other is logged. A tool's schema is
// served as the upstream lists it and never applied here
// (server.Tool.Unchecked): the upstream judges its own arguments.
//
// # Input the upstream asks for
//
// Requests an upstream sends during a call (elicitation, sampling, roots)
// go to the downstream client that made the call, when it declared the
// capability, and its answers back, in every pair of eras:
//
//   - to a 2025 client, as requests on its session (Request.CallClient);
//   - to a 2026-07-28 client from a 2026-07-28 upstream, as the
//     gateway's own input_required result, whose requestState carries the
//     upstream's (signed by the server, bound to the tenant, the tool and
//     the arguments); the client's retry continues the upstream's round
//     (client.CallOptions.Input);
//   - to a 2026-07-28 client from a 2025-era upstream, which asks with a
//     request and waits with the call open: the call is held (see held),
//     the downstream request ends with the gateway's input_required, and
//     the client's retry brings the answers to the waiting upstream. A
//     held call no retry resumes within Options.InputWait is cancelled
//     upstream; Options.MaxHeld and MaxHeldPerTenant bound them.
//
// Transports that say which call a request belongs to (a Streamable HTTP
// request's own stream, a 2026-07-28 round) are followed; where nothing
// says (stdio, HTTP+SSE, a 2025 session's own stream) the request is the
// call's only while it is the one call in flight on that connection, and
// refused otherwise — never shown to a client it may not belong to.
// Upstream.PerTenant gives each tenant a stdio process of its own.
//
// # An upstream's own tasks
//
// A tool the upstream runs as a task of its own (a 2025-era upstream's
// execution.taskSupport; a 2026-07-28 upstream that refuses a plain call
// with -32021 for the tasks extension; or the policy's task) is called
// upstream as a task and followed (client.StartToolTask, FollowTask): the
// downstream gets a task of the gateway's, whose status is the upstream
// task's and whose end is its end. The upstream task's id is kept as the
// gateway task's checkpoint before anything else, so that the gateway
// that takes the task over follows the same upstream task and never calls
// the tool again. tasks/cancel of the gateway's task is passed on as the
// upstream's tasks/cancel, and the task ends as the upstream's does. A
// synchronous downstream call of a task-only tool is followed inline.
//
// # Reloading
//
// Gateway.Reload replaces the upstreams and the policy of a running
// gateway, as a restart with them would, but without ending what did not
// change: `mcprel gateway --config FILE` rereads its file on SIGHUP, and a
// restart would drop every upstream's connection, every process and every
// call in flight to add one upstream or rotate one credential. An
// upstream the same in every field as the running one of its name keeps
// its connection and processes. A new one starts as at Start. One removed
// or changed (a credential in its Env or Header is a change) is drained:
// its tools are unregistered at once, so no new call reaches it and
// clients are told the list changed, while its calls in flight finish
// within Options.ReloadGrace; then it is closed — a call still in flight
// is cancelled upstream and fails with its outcome unknown, since it may
// have acted. A changed one is started anew at once, beside the old one
// while that drains, so that new calls wait for no old one. The policy
// lives in the tools' registrations: each tool is registered again under
// a new one, which the calls that begin after Reload returns run under,
// while a call in flight keeps the one it began with. Going from one upstream to
// several (or back) renames every tool, prefixed or not, as a restart
// would; each is registered again under its new name. Everything is
// checked first, as New checks it: a reload refused changes nothing, and
// the running configuration stays.
//
// The package knows server, client, retry and mcp; it opens no listener
// and parses no flags (package host assembles it, cmd/mcprel parses).
package gateway
