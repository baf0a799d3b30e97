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
// Security is on by default: the Host header must name a loopback host
// (DNS-rebinding protection) and a present Origin must be a loopback origin
// unless allow-lists say otherwise; bodies are capped; a bearer token can be
// required.
package streamhttp
