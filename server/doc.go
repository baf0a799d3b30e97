// Package server is the MCP request lifecycle and nothing else: it
// dispatches each request, gives it exactly one terminal state (a result,
// an error, a cancellation or a timeout, whichever is recorded first),
// runs it under two deadline clocks, keeps its progress increasing and
// rate-limited, bounds what waits to be written, and admits calls against
// limits per server, per tool and per tenant. It serves both protocol eras
// — the 2025 revisions behind initialize, and the stateless 2026-07-28 one
// — to any transport.
//
// It knows no database, metrics or tracing library. Durable and
// operational concerns plug in through three seams:
//
//   - policies (ToolInterceptor, Tool.Check) wrap a tool's handler at
//     registration and stack: package idempotency puts the ledger in
//     front of a tool this way (idempotency.Keyed), package taskserver
//     runs it as a durable task (taskserver.AsTask). ToolInterceptor's
//     doc shows how to write one;
//   - routes and declarations (AddRoute, Declare) add methods and
//     capabilities from outside, such as the tasks extension;
//   - observers (Observer) are told when every request starts and ends,
//     with its record: metrics, traces and logs attach here.
//
// The files, by what they hold:
//
// For tool authors: server.go (Options, New, the Server), tool.go (Tool,
// Policy, AddTool, AddTypedTool), request.go (what a handler sees of its
// request), resources.go, prompts.go and completion.go, inputrequired.go
// (asking the client for input in the 2026-07-28 era), clientcall.go
// (calling the client in the 2025 era), deadline.go and retryclass.go (a
// tool's clocks and retry class), errors.go (causes and the errors on the
// wire), shutdown.go.
//
// The seams: interceptor.go (policies, the marks they leave on a tool for
// each other, and what a call carries for them: Attach, Detached), route.go, observer.go and record.go (what an
// observer is told).
//
// The lifecycle inside: dispatch.go (a decoded request on its way to its
// method), inflight.go (a request from its arrival to its one terminal
// state), run.go (running a call's handler), workers.go, admission.go,
// subscription.go (subscriptions/listen).
//
// For transports: session.go (the session behind Server.NewSession: a
// connection's view of the server, fed one decoded message at a time),
// headerparams.go (tool arguments mirrored in HTTP headers). What a
// transport sees of them is in packages of their own, out of a tool
// author's way: server/conn (Session, Config, Prepared, HeaderParam: the
// contract a transport feeds) and server/outbound (Queue and Frame: what
// waits to be written, bounded, filled by the lifecycle and drained by the
// transport). Packages transport/stdio and transport/streamhttp are the
// transports.
package server
