// Package streamhttp serves MCP over Streamable HTTP: one endpoint that
// speaks both protocol eras.
//
// A request whose body declares the 2026-07-28 protocol in _meta is served
// statelessly: POST only, the MCP-Protocol-Version, Mcp-Method and Mcp-Name
// headers must mirror the body, and closing the request's response stream
// cancels the request. An initialize request opens a legacy session
// (2025-11-25, 2025-06-18, 2025-03-26) identified by a random Mcp-Session-Id:
// later POSTs carry it, GET opens the session's stream for server-initiated
// messages, DELETE ends it, and a dropped stream is not a cancellation —
// the client cancels with a POSTed notifications/cancelled.
//
// Each request gets one JSON body or an SSE stream, chosen up front: SSE
// when the request can send something before its result (progress, logs,
// legacy server-to-client requests, a subscription), JSON otherwise. SSE
// responses are proxy-safe: Cache-Control: no-cache, no-transform and
// X-Accel-Buffering: no, headers flushed when the stream starts, keepalive
// comments on quiet streams, and per-write deadlines so a stream outlives
// http.Server.WriteTimeout while a stuck reader still cannot pin it.
//
// # Resuming 2025-era streams
//
// In a legacy session, the events of a POST's SSE stream and of the GET
// stream carry ids of the form "<stream>-<n>": a random key naming the
// stream (unique in the session) and the event's number on it. A
// 2025-11-25 stream opens with a priming event (id "<stream>-0", no data);
// the first event a connection carries also has "retry: 1000" (see
// ResumeOptions.Retry). What a stream carries is kept in a bounded log, and
// when its connection drops before the response the call goes on, its
// messages going into the log. A GET with the session's Mcp-Session-Id and
// Last-Event-ID then resumes that stream: the kept events numbered after
// the id, then live ones while the call runs, then the response, which ends
// the resumed stream as it would have ended the original. A resume takes a
// stream over from any older connection still writing it.
//
//	POST /mcp (Mcp-Session-Id: S)
//	{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"p"}}}
//
//	id: 9f1c2a7be04d5a31-0
//	retry: 1000
//	data:
//
//	event: message
//	id: 9f1c2a7be04d5a31-1
//	data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}
//
//	(the connection drops; the call goes on, its progress 2 goes into the log)
//
//	GET /mcp (Mcp-Session-Id: S, Last-Event-ID: 9f1c2a7be04d5a31-1)
//
//	event: message
//	id: 9f1c2a7be04d5a31-2
//	retry: 1000
//	data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":2}}
//
//	event: message
//	id: 9f1c2a7be04d5a31-3
//	data: {"jsonrpc":"2.0","id":1,"result":{"content":[…]}}
//
// The log follows the outbound queue's rules and bounds (ResumeOptions
// gives the defaults): newer progress replaces older, notifications are shed before a
// response ever is, a response that cannot be kept is replaced by an error
// saying so and logged, a resumed response is flagged for refetch when
// something after the client's cursor was shed, and a log no connection
// reads is dropped after its TTL or with its session. A Last-Event-ID this
// session cannot resume (unknown, another session's, expired, or a stream
// that has ended) gets 400 with a JSON-RPC error — not 404, which would tell
// the client its session is gone. A response sent as one JSON body, and
// anything in the 2026-07-28 era (which has no event ids and no
// Last-Event-ID: a broken stream loses the request and the client re-issues
// it), cannot be resumed.
//
// Security is on by default: the Host header must name a loopback host
// (DNS-rebinding protection) and a present Origin must be a loopback origin
// unless allow-lists say otherwise; bodies are capped; a bearer token can be
// required. These checks are package auth's middleware (auth.Hosts,
// auth.Require with auth.StaticTokens or HandlerOptions.Authenticator)
// wrapped around the endpoint; a request that arrives already carrying an
// auth.Principal, because the handler is mounted under an outer
// auth.Require, is served for that Principal's tenant and not
// authenticated again.
package streamhttp
