// Package conn is the contract between package server and a transport: the
// Session a connection hands its decoded messages to, the Config that says
// what kind of connection it is, and what a transport already knows of a
// request (Prepared). server.Server.NewSession makes a Session; the
// transports (transport/stdio, transport/streamhttp, or one of your own)
// are its only callers, which is why none of this is in a tool author's
// view of package server.
//
// A transport's loop, in short: decode a frame, hand it to Session.Handle
// (or HandleRequest, Reject) with the outbound.Queue its answers go to,
// drain that queue and write what it gives, in order; when the connection
// ends, Close the session and Wait for its handlers.
package conn

import (
	"context"
	"encoding/json"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/outbound"
)

// Config says what kind of connection a Session serves.
type Config struct {
	// Legacy admits the initialize handshake and the 2025 revisions.
	Legacy bool
	// Modern admits stateless 2026-07-28 requests.
	Modern bool
	// TrackIDs rejects a request whose id is already in flight, and lets
	// notifications/cancelled find requests by id. Set it for stdio and
	// legacy HTTP sessions; modern HTTP scopes an id to its own stream.
	TrackIDs bool
	// StreamPerRequest is set when every request has its own response
	// stream (Streamable HTTP). It decides how the server ends a
	// subscriptions/listen it tears down: with a result on that stream, or,
	// on a shared channel such as stdio, with notifications/cancelled.
	StreamPerRequest bool
	// Name tells this session's requests apart from another session's in
	// the request log and in server.RequestRecord.Session, where JSON-RPC
	// ids repeat: a legacy HTTP session's tag, say. Empty for stdio and the
	// stateless era. It must not be a secret.
	Name string
	// Transport names the transport, for observers: "stdio" or "http".
	Transport string
	// QueueCapacity is the number of messages each of the session's
	// outbound streams holds, as its transport sized their queues:
	// tools/list advertises it (mcp.MetaQueueCapacity), so that what a
	// tool says of its flow control is true on this transport. Zero means
	// the server's Options.QueueCapacity, the size of Session.NewQueue.
	QueueCapacity int
}

// Stdio returns the configuration of a stdio connection: both eras, ids
// tracked, one shared channel. (A function, so that no caller can change it
// for every other.)
func Stdio() Config {
	return Config{Legacy: true, Modern: true, TrackIDs: true, Transport: "stdio"}
}

// Session is one client's view of the server: the legacy handshake state if
// there is one, the requests in flight, and open subscriptions. A stdio
// connection is one session; so is a legacy Streamable HTTP session, and
// every stateless 2026-07-28 request on one HTTP handler shares one.
//
// A transport decodes each inbound frame and passes it to Handle with the
// outbound.Queue its responses go to, then drains that queue. Its methods
// are safe for concurrent use.
type Session interface {
	// Handle processes one decoded inbound message. Responses and
	// notifications for a request go to out.
	//
	// For a request, ctx bounds its life: when ctx ends the request is
	// cancelled with context.Cause(ctx) as its cause. Pass the
	// connection's context on stdio and for legacy HTTP sessions, where a
	// dropped stream is not a cancellation, and the request's own context
	// for modern HTTP, where it is.
	//
	// Handle may block before dispatching a request while out is full of
	// responses the client has not read: that is the backpressure that
	// keeps a client from making the server buffer without bound.
	Handle(ctx context.Context, m jsonrpc.Message, out *outbound.Queue)
	// HandleRequest is Handle for a request, with what the transport
	// already knows of it. Like Handle's, m is a message as jsonrpc.Decode
	// returns it: its params valid JSON, which the server reads without
	// checking again.
	HandleRequest(ctx context.Context, m jsonrpc.Message, p Prepared, out *outbound.Queue)
	// Reject answers a frame that failed to decode. A frame that looked
	// like a notification is never answered (notifications get no
	// response, even broken ones); anything else gets err, with its id
	// when one was read.
	Reject(ctx context.Context, m jsonrpc.Message, err *jsonrpc.Error, out *outbound.Queue)
	// SetNotifyQueue sets where notifications not tied to a request go,
	// such as a legacy tools/list_changed: the shared stdout of a stdio
	// connection, or the GET stream of a legacy HTTP session. Nil drops
	// them.
	SetNotifyQueue(out *outbound.Queue)
	// NewQueue returns an outbound queue sized by the server's
	// Options.QueueCapacity, for a stream that has no capacity of its
	// own.
	NewQueue() *outbound.Queue

	// Streams reports whether a request can send messages before its
	// result, so that a transport with per-request streams (Streamable
	// HTTP) knows, before dispatching it, whether to open an event stream
	// or answer with one JSON body. It can when it is a subscription, or
	// a call (tool, resource read, prompt, completion, routed method)
	// that asked for progress, asked for log messages (the request's
	// logLevel in the modern era; logging/setLevel in the legacy one),
	// or — in the legacy era — may be asked for input by its tool,
	// because the client declared sampling, elicitation or roots.
	Streams(method string, meta *mcp.RequestMeta) bool
	// NameMember returns the params member that a 2026-07-28 request's
	// Mcp-Name header must mirror for method, "" when it has none: "name"
	// for tools/call and prompts/get, "uri" for resources/read, and what a
	// route declares. Transports call it to check the header against the
	// body.
	NameMember(method string) string
	// HeaderParams returns the header-mirrored arguments of a tool, or
	// nil.
	HeaderParams(tool string) []HeaderParam
	// Version returns the negotiated legacy protocol version, or ""
	// before initialize.
	Version() string

	// Idle reports whether nothing is in flight in the session: no
	// request waiting, running or streaming. An idle legacy HTTP session
	// can be ended without cutting anything short.
	Idle() bool
	// Wait blocks until nothing is in flight in the session — no request
	// waiting for admission, running or streaming, and no handler still
	// running — or ctx ends.
	Wait(ctx context.Context) error
	// Shutdown ends the session gracefully: new requests are refused as
	// unavailable, subscriptions are ended by the server, and calls in
	// flight (running or waiting for admission) may finish until ctx
	// ends; whatever is still in flight then is cancelled with
	// server.ErrShutdown. It returns ctx's error if calls had to be
	// cancelled. server.Server.Shutdown does this for every session at
	// once.
	Shutdown(ctx context.Context) error
	// Close ends the session: every request still in flight or queued is
	// cancelled with cause (server.ErrConnectionClosed if nil) and later
	// requests are ignored. It does not wait for handlers to return; Wait
	// does.
	Close(cause error)
}

// Prepared is what a transport already knows of a request it hands to
// Session.HandleRequest.
type Prepared struct {
	// Meta and RawMeta are the request's params._meta as
	// mcp.ParseRequestMeta read it (without error), so that the server
	// does not parse it again. A nil Meta has the server parse it. Meta
	// may be shared by requests whose _meta were the same bytes
	// (mcp.MetaCache): it is read, never written.
	Meta    *mcp.RequestMeta
	RawMeta json.RawMessage
	// RunHere runs a call admitted at once on the calling goroutine, to
	// its end, before HandleRequest returns, instead of on a handler
	// goroutine. It is for a transport that serves each request on a
	// goroutine of its own and writes nothing before the request's final
	// frame (a Streamable HTTP request answered with one JSON body): the
	// call is not handed to another goroutine and its answer handed back.
	// Cancellation and deadlines work as ever; they come from other
	// goroutines.
	RunHere bool
	// Begin, when set with RunHere, is called on the calling goroutine
	// just before an admitted call's handler runs there (and never for a
	// request that does not run a handler here): a transport that must
	// go on reading meanwhile arms a handoff to another goroutine here.
	Begin func()
	// SessionCtx says that ctx ends only with the session: whenever it
	// ends, the transport closes the session (Session.Close, which cancels
	// every request in flight with the same cause), as a stdio connection
	// does. The server then does not watch ctx for each request, which
	// costs a registration with ctx for every call. A request whose
	// context a tool's Check replaced with one that ends on its own is
	// watched as ever.
	SessionCtx bool
}

// HeaderParam is a tool argument mirrored into an HTTP header on the
// Streamable HTTP transport (2026-07-28); package mcp defines it, so that
// the client mirrors exactly what the server checks.
type HeaderParam = mcp.HeaderParam
