// Package client is the client half of mcprel: it connects to any MCP
// server over stdio or Streamable HTTP, in whichever protocol era the
// server speaks, and makes calls that end exactly once and never leave
// the server guessing. DialSSE reaches the servers that still speak only
// the 2024-11-05 HTTP+SSE transport.
//
// Connecting tries the 2026-07-28 era first (server/discover) and falls
// back to the 2025-11-25 handshake (initialize) on any answer that is not a
// modern one — an error of any code, an HTTP status, silence — and keeps
// the era it found for the connection; not on a refusal signing in
// (Options.Authorizer) failed to mend, which initialize would meet too.
// A server that refuses the version (UnsupportedProtocolVersion) is asked
// once more in the newest version it lists that the client speaks; one
// that lists none is a *VersionError.
// Every 2026-07-28 request carries the version, the client's capabilities
// and its info in _meta, and over HTTP the version in MCP-Protocol-Version.
//
// Every call runs under two real clocks: an idle deadline that only
// increasing progress resets, and a maximum deadline that fires whatever
// the progress. When either fires, when the caller's context ends, or when
// the process is interrupted, the client sends the signal the transport
// and era define — notifications/cancelled on stdio, on 2025 HTTP and on
// HTTP+SSE, closing the request's stream on 2026 HTTP (never a
// cancellation POST in that era) — stops waiting, and ignores (and
// counts) a response that arrives later for that id.
//
// The package knows jsonrpc and mcp, never the server.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// Defaults for Options and CallOptions fields left at zero.
const (
	DefaultIdle         = 30 * time.Second
	DefaultMax          = 60 * time.Second
	DefaultProbeTimeout = 5 * time.Second
	DefaultStopGrace    = 2 * time.Second
	DefaultMaxListPages = 100
	DefaultMaxListBytes = 16 << 20
	// DefaultMaxServerRequests and DefaultMaxServerRequestBytes bound the
	// server's requests answered at once on one connection (see
	// Options.MaxServerRequests).
	DefaultMaxServerRequests     = 16
	DefaultMaxServerRequestBytes = 1 << 20
)

// Options configure a Client. The zero value is valid.
type Options struct {
	// Info is how the client names itself; zero means "mcprel-client".
	Info mcp.Implementation
	// Capabilities are what the client declares: at initialize, or in
	// every request's _meta.
	Capabilities mcp.ClientCapabilities
	// Era, when set, skips negotiation: mcp.Modern or mcp.Legacy only.
	Era mcp.Era
	// ProbeTimeout bounds the wait for an answer to the modern probe
	// (server/discover) before the client tries initialize instead; zero
	// means DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// MaxMessageBytes bounds one inbound message; zero means
	// jsonrpc.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// MaxListPages and MaxListBytes bound one listing (ListTools): the
	// pages followed and the bytes of their results in total; zero
	// means DefaultMaxListPages and DefaultMaxListBytes.
	MaxListPages int
	MaxListBytes int64
	// HTTPClient makes the HTTP requests; nil means a client of its own.
	// The connection uses a shallow copy of it whose CheckRedirect
	// refuses every redirect (HTTPClient itself is not changed): the
	// client never follows one, so that Header and a request's body go
	// only to the URL given; a redirect is a *RedirectError.
	HTTPClient *http.Client
	// Header is added to every HTTP request (an Authorization header).
	Header http.Header
	// Authorizer, when set, gives every HTTP request its credentials and
	// is told of a 401 or 403 answer, after which the request is sent
	// again once if it got new ones (client/oauth's Client signs in by
	// OAuth 2.1). A refusal that stands is an *AuthorizationError.
	Authorizer Authorizer
	// Stderr receives a stdio server's stderr; nil discards it.
	Stderr io.Writer
	// Env is added to a stdio server's environment (KEY=VALUE), after
	// the client's own: where a server's credentials go, never in its
	// argv, which any user of the machine can read.
	Env []string
	// Environ, when not nil, is the environment a stdio server starts
	// from in place of the client's own (Env is added to it): a client
	// whose own environment holds secrets the server must not see (a
	// gateway's tokens) passes what is left of it.
	Environ []string
	// OnNotification receives the notifications the server sends that
	// belong to no call and no subscription: a 2025 server's list
	// changes and resource updates, log messages, on stdio, on the 2025
	// session's stream and on HTTP+SSE (a 2026-07-28 server sends list
	// changes on a subscription instead; see Listen). It runs on the
	// transport's reader and must not block.
	OnNotification func(method string, params json.RawMessage)
	// StopGrace is how long Close waits for a stdio server to exit after
	// its stdin closes, and again after SIGTERM, before SIGKILL; zero
	// means DefaultStopGrace.
	StopGrace time.Duration
	// Logger receives what the client notices on the side: late
	// responses, dropped progress, server requests it cannot serve.
	Logger *slog.Logger
	// OnRefetch is called when a result carries the server's refetch
	// flag (_meta "dev.mcprel/refetch"): progress or notifications were
	// dropped on the way, so state the caller follows should be read
	// again. Open subscriptions refetch too (ListenOptions.Refetch).
	OnRefetch func()
	// Interceptors wrap every request the client sends for its caller
	// (see Interceptor), the first outermost: retries (Retrying), a
	// circuit breaker, spans, metrics.
	Interceptors []Interceptor
	// Supervise, for DialStdio and DialSSE, keeps the connection up
	// without waiting for a call (see Supervision); Restart is then
	// ignored.
	Supervise *Supervision
	// Restart, for DialStdio: when the server process dies, the next call
	// starts it again (and negotiates again) instead of failing with
	// ErrConnectionLost. Calls in flight when it died still fail with
	// ErrConnectionLost: whether to make them again is the retry rules'
	// decision (package retry), never the transport's. DialSSE always
	// behaves so when its stream ends, and needs no option for it.
	Restart bool
	// OnRequest answers the requests a server sends the client on stdio,
	// in the 2025 era over HTTP and over HTTP+SSE: elicitation/create,
	// sampling, roots (declare the matching Capabilities). ping is
	// answered without it; with none, the others get method-not-found.
	// It also answers the input a 2026-07-28 server asks for in an
	// input_required result (the same methods and params), so one
	// handler serves both eras; with none, such a call fails with an
	// *InputError.
	OnRequest RequestHandler
	// MaxServerRequests bounds the server's requests (elicitation,
	// sampling, roots, ping) the client answers at once on one
	// connection, and MaxServerRequestBytes their params in memory
	// meanwhile (one request is always admitted when none is in hand);
	// zero means DefaultMaxServerRequests and
	// DefaultMaxServerRequestBytes. Past them a request is refused over
	// stdio and dropped over HTTP (refusing would cost a POST too), and
	// counted. A handler whose answers wait on someone — a gateway holds
	// an upstream's question until its own client's retry brings the
	// answer — needs them as large as what it holds.
	MaxServerRequests     int
	MaxServerRequestBytes int
	// MaxInputRounds bounds the input_required results one call answers
	// before it fails with an *InputRoundsError; zero means
	// DefaultMaxInputRounds.
	MaxInputRounds int
}

// RequestHandler answers one request from the server: its result, or an
// error (a *jsonrpc.Error goes on the wire as it is).
type RequestHandler func(ctx context.Context, method string, params json.RawMessage) (any, error)

// serveRequest answers a server's request m, encoded as the response to
// send.
func serveRequest(ctx context.Context, h RequestHandler, m jsonrpc.Message) []byte {
	if m.Method == mcp.MethodPing {
		return jsonrpc.AppendResult(nil, m.ID, json.RawMessage(`{}`))
	}
	if h == nil {
		return jsonrpc.AppendError(nil, m.ID, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "this client does not serve %s", m.Method))
	}
	res, err := h(ctx, m.Method, m.Params)
	if err != nil {
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) {
			rpcErr = jsonrpc.NewError(jsonrpc.CodeInternalError, "%v", err)
		}
		return jsonrpc.AppendError(nil, m.ID, rpcErr)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return jsonrpc.AppendError(nil, m.ID, jsonrpc.NewError(jsonrpc.CodeInternalError, "the answer could not be encoded: %v", err))
	}
	return jsonrpc.AppendResult(nil, m.ID, b)
}

// Client is one connection to an MCP server.
type Client struct {
	tmu    sync.Mutex // guards t
	t      transport
	rmu    sync.Mutex // one restart at a time
	subsMu sync.Mutex
	subs   map[*Subscription]bool                   // open subscriptions, told of refetch flags
	redial func(context.Context) (transport, error) // nil: no restarts
	// restartOnCall: a call that finds the connection dead restarts it
	// (Options.Restart, DialSSE); a supervised one fails at once instead,
	// never sent (the supervisor restarts it, after its pause).
	restartOnCall   bool
	stopSupervising context.CancelFunc // nil: not supervised
	opts            Options
	intercepted     CallFunc // Options.Interceptors around exchange; nil when there are none
	log             *slog.Logger
	era             mcp.Era
	version         string
	server          *mcp.Implementation
	caps            mcp.ServerCapabilities
	nextID          atomic.Int64
	tools           toolHeaders // x-mcp-header annotations of the last listing
	stats           *counters

	capsJSON, infoJSON json.RawMessage // Options.Capabilities and Info, encoded once
	// taskCapsJSON is capsJSON with the tasks extension declared: what a
	// 2026-07-28 request that asks for a task (CallToolTask) carries.
	taskCapsJSON json.RawMessage
	fixed        atomic.Pointer[fixedMetas] // the negotiated protocol version, encoded
	declares     declaredCache              // CallOptions.Capabilities, encoded
	closeMu      sync.Once
	closed       error
}

// Stats counts what the client dropped or ignored.
type Stats struct {
	// LateResponses are responses that arrived for a call the client had
	// already given up on (cancelled, timed out): ignored.
	LateResponses uint64
	// ProgressRefused are progress reports whose value did not increase:
	// dropped before the caller's callback, and no reset of the idle
	// clock.
	ProgressRefused uint64
	// ProgressDropped are progress reports dropped because the caller's
	// callback was slower than the server.
	ProgressDropped uint64
	// Cancellations are calls the client cancelled, for any reason.
	Cancellations uint64
	// Resumptions are 2025 streams picked up again with Last-Event-ID
	// after they ended before their response.
	Resumptions uint64
	// Restarts are stdio servers started again after they died.
	Restarts uint64
	// Refetches are results that carried the server's refetch flag.
	Refetches uint64
	// ServerRequestsRefused are requests from the server the client
	// refused (CodeOverloaded) because it was already answering as many
	// as it answers at once.
	ServerRequestsRefused uint64
	// ServerRequestsDropped are requests from the server left without
	// an answer: past that bound over HTTP (where refusing costs a
	// connection too), or because the server was not reading the
	// client's answers.
	ServerRequestsDropped uint64
	// Reconnects are connections established again after one was lost,
	// each counted once it works: a subscription's listen stream
	// acknowledged again, a 2025 session renewed after the server forgot
	// it, a restarted stdio server that negotiated again (also counted in
	// Restarts, which counts the attempt), a new HTTP+SSE stream and
	// session after the last one ended.
	Reconnects uint64
}

type counters struct {
	late, refused, dropped, cancelled, resumed, restarts, refetches, reconnects atomic.Uint64
	serverRefused, serverDropped                                                atomic.Uint64
	cancels                                                                     cancelWrites // queued cancellations, for WaitCancellations
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{LateResponses: c.stats.late.Load(), ProgressRefused: c.stats.refused.Load(),
		ProgressDropped: c.stats.dropped.Load(), Cancellations: c.stats.cancelled.Load(), Resumptions: c.stats.resumed.Load(),
		Restarts: c.stats.restarts.Load(), Refetches: c.stats.refetches.Load(), Reconnects: c.stats.reconnects.Load(),
		ServerRequestsRefused: c.stats.serverRefused.Load(), ServerRequestsDropped: c.stats.serverDropped.Load()}
}

// Era is the protocol era negotiated for the connection.
func (c *Client) Era() mcp.Era { return c.era }

// ProtocolVersion is the protocol version negotiated for the connection.
func (c *Client) ProtocolVersion() string { return c.version }

// ServerInfo is the server's self-description, when it gave one.
func (c *Client) ServerInfo() *mcp.Implementation { return c.server }

// Done returns a channel that is closed when the connection in use now
// ends: a stdio server's process exits, an HTTP+SSE stream (and its
// session) ends, or Close is called. A client that opens a new one
// itself (Options.Restart, DialSSE) returns the new connection's channel
// afterwards. Over Streamable HTTP, which holds no standing connection,
// only Close closes it.
func (c *Client) Done() <-chan struct{} { return c.transport().done() }

// ServerCapabilities are what the server advertised.
func (c *Client) ServerCapabilities() mcp.ServerCapabilities { return c.caps }

func (o *Options) fill() {
	if o.Info.Name == "" {
		o.Info = mcp.Implementation{Name: "mcprel-client", Version: "0"}
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = jsonrpc.DefaultMaxMessageBytes
	}
	if o.MaxServerRequests == 0 {
		o.MaxServerRequests = DefaultMaxServerRequests
	}
	if o.MaxServerRequestBytes == 0 {
		o.MaxServerRequestBytes = DefaultMaxServerRequestBytes
	}
	if o.MaxListPages == 0 {
		o.MaxListPages = DefaultMaxListPages
	}
	if o.MaxListBytes == 0 {
		o.MaxListBytes = DefaultMaxListBytes
	}
	if o.StopGrace == 0 {
		o.StopGrace = DefaultStopGrace
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// newClient negotiates the era over t and returns the connected client.
func newClient(ctx context.Context, t transport, o Options, stats *counters) (*Client, error) {
	c := &Client{t: t, opts: o, log: o.Logger, stats: stats}
	if len(o.Interceptors) > 0 {
		c.intercepted = chain(o.Interceptors, func(ctx context.Context, r *Request) (json.RawMessage, error) {
			return c.exchange(ctx, r.Method, r.Name, r.Params, r.Options)
		})
	}
	var err error
	// Encoded once for every 2026-07-28 request's _meta, and checked
	// here: a capability that is not JSON fails the connection, not
	// each request.
	if c.capsJSON, err = json.Marshal(o.Capabilities); err != nil {
		t.close(o.StopGrace)
		return nil, fmt.Errorf("client: Options.Capabilities: %w", err)
	}
	taskCaps := o.Capabilities
	if taskCaps.Extensions[mcp.ExtensionTasks] == nil {
		taskCaps.Extensions = maps.Clone(taskCaps.Extensions)
		if taskCaps.Extensions == nil {
			taskCaps.Extensions = map[string]json.RawMessage{}
		}
		taskCaps.Extensions[mcp.ExtensionTasks] = json.RawMessage(`{}`)
	}
	if c.taskCapsJSON, err = json.Marshal(taskCaps); err != nil {
		t.close(o.StopGrace)
		return nil, fmt.Errorf("client: Options.Capabilities: %w", err)
	}
	if c.infoJSON, err = json.Marshal(o.Info); err != nil {
		t.close(o.StopGrace)
		return nil, fmt.Errorf("client: Options.Info: %w", err)
	}
	switch o.Era {
	case mcp.Modern:
		err = c.discover(ctx)
	case mcp.Legacy:
		err = c.initialize(ctx)
	case 0:
		var ve *VersionError
		var re *RedirectError
		// A redirect would be the answer to initialize too (one URL), and
		// so would a refusal that signing in failed to mend: trying again
		// would only sign in again.
		if err = c.discover(ctx); err != nil && !isConnectError(err) && !errors.As(err, &ve) && !errors.As(err, &re) && !signInFailed(err) {
			c.log.Debug("the server did not answer as a 2026-07-28 server; trying initialize", "err", err)
			err = c.initialize(ctx)
		}
	default:
		err = fmt.Errorf("client: unknown era %d", o.Era)
	}
	if err != nil {
		t.close(o.StopGrace)
		return nil, err
	}
	return c, nil
}

// signInFailed reports whether err is a refusal the Authorizer tried and
// failed to mend.
func signInFailed(err error) bool {
	var ae *AuthorizationError
	return errors.As(err, &ae) && ae.Err != nil
}

// VersionError ends a connection to a server that speaks none of the
// protocol versions this client does: it refused the client's choice
// (CodeUnsupportedVersion) and listed the versions it serves, none of them
// one the client speaks in the era asked for — or it refused again the
// version it had listed. Asking again, or in the other era, would not help.
type VersionError struct {
	Requested string   // the version the server refused last
	Supported []string // the versions the server listed
}

func (e *VersionError) Error() string {
	if slices.Contains(e.Supported, e.Requested) {
		return fmt.Sprintf("client: the server refused protocol version %s, which it lists as supported %q", e.Requested, e.Supported)
	}
	return fmt.Sprintf("client: the server refused protocol version %s and lists %q, none of which this client speaks", e.Requested, e.Supported)
}

// discover probes for the modern era with server/discover, in the newest
// version the client speaks. A server that refuses that version
// (CodeUnsupportedVersion, SEP-2575) is asked once more in the newest
// modern version it lists and the client speaks; one that lists only
// handshake versions is an error that lets newClient try initialize, and
// one that lists nothing the client speaks is a *VersionError. Anything
// but a modern answer that names the version asked is an error.
func (c *Client) discover(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ProbeTimeout)
	defer cancel()
	version := mcp.Version20260728
	raw, err := c.discoverAs(ctx, version)
	if listed, refused := refusedVersions(err); refused {
		next := c.chooseVersion(listed)
		switch {
		case mcp.IsModernVersion(next):
			c.log.Debug("the server refused the protocol version; asking again in one it lists", "refused", version, "version", next)
			version = next
			raw, err = c.discoverAs(ctx, version)
			if again, refused := refusedVersions(err); refused {
				return &VersionError{Requested: version, Supported: again}
			}
		case next != "":
			// Only handshake versions in common: newClient tries initialize.
			return fmt.Errorf("client: server/discover: the server refused %s and speaks only %q of this client's versions through initialize", version, listed)
		default:
			return &VersionError{Requested: version, Supported: listed}
		}
	}
	if err != nil {
		return err
	}
	var res mcp.DiscoverResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("client: server/discover answered %s", clip(raw))
	}
	if !slices.Contains(res.SupportedVersions, version) {
		return fmt.Errorf("client: server/discover lists %v, not %s", res.SupportedVersions, version)
	}
	c.era, c.version, c.caps = mcp.Modern, version, res.Capabilities
	if info, ok := res.Meta[mcp.MetaServerInfo]; ok {
		b, _ := json.Marshal(info)
		var impl mcp.Implementation
		if json.Unmarshal(b, &impl) == nil {
			c.server = &impl
		}
	}
	return nil
}

// discoverAs sends server/discover in version: its MCP-Protocol-Version
// header and _meta say it, as on every modern request. Only the opening
// of a connection calls it, before any call can read the era.
func (c *Client) discoverAs(ctx context.Context, version string) (json.RawMessage, error) {
	c.era, c.version = mcp.Modern, version
	defer func() { c.era, c.version = 0, "" }()
	return c.roundTrip(ctx, mcp.MethodDiscover, "", nil, &CallOptions{Max: c.opts.ProbeTimeout, Idle: c.opts.ProbeTimeout, quiet: true})
}

// refusedVersions reports whether err is the server's refusal of the
// request's protocol version, and the versions the refusal lists (none
// when its data is missing or malformed).
func refusedVersions(err error) ([]string, bool) {
	var re *jsonrpc.Error
	if !errors.As(err, &re) || re.Code != mcp.CodeUnsupportedVersion {
		return nil, false
	}
	var d mcp.UnsupportedVersionData
	if len(re.Data) > 0 && json.Unmarshal(re.Data, &d) != nil {
		return nil, true
	}
	return d.Supported, true
}

// chooseVersion is the newest of listed the client speaks, in the era
// Options.Era allows (any when it is zero); "" when there is none.
func (c *Client) chooseVersion(listed []string) string {
	for _, v := range mcp.SupportedVersions() { // newest first
		if c.opts.Era == mcp.Modern && !mcp.IsModernVersion(v) {
			continue
		}
		if slices.Contains(listed, v) {
			return v
		}
	}
	return ""
}

// initialize runs the 2025 handshake.
func (c *Client) initialize(ctx context.Context) error {
	c.era, c.version = mcp.Legacy, ""
	raw, err := c.roundTrip(ctx, mcp.MethodInitialize, "", mcp.InitializeParams{
		ProtocolVersion: mcp.LatestLegacyVersion, Capabilities: c.opts.Capabilities, ClientInfo: c.opts.Info,
	}, &CallOptions{Max: c.opts.ProbeTimeout * 2, Idle: c.opts.ProbeTimeout * 2, quiet: true})
	if err != nil {
		return &prefixed{"initialize", err}
	}
	var res mcp.InitializeResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("client: initialize answered %s", clip(raw))
	}
	if !c.speaks(res.ProtocolVersion) {
		return fmt.Errorf("client: the server chose protocol version %q, which this client does not speak", res.ProtocolVersion)
	}
	c.version, c.caps, c.server = res.ProtocolVersion, res.Capabilities, &res.ServerInfo
	t := c.transport()
	t.initialized(res.ProtocolVersion)
	if err := c.notifyInitialized(ctx, t); err != nil {
		return err
	}
	t.ready(ctx, c.opts.ProbeTimeout)
	return nil
}

// speaks reports whether the client accepts version, the server's answer
// to initialize: a handshake version mcprel serves, and 2024-11-05 from a
// server on the HTTP+SSE transport, which that revision defined.
func (c *Client) speaks(version string) bool {
	if _, sse := c.transport().(*sseTransport); sse && version == mcp.Version20241105 {
		return true
	}
	return mcp.IsLegacyVersion(version)
}

// notifyInitialized sends notifications/initialized under the probe's
// timeout: a server that does not read it (or holds its POST open) does
// not hold the connection's opening for ever.
func (c *Client) notifyInitialized(ctx context.Context, t transport) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ProbeTimeout)
	defer cancel()
	return t.notify(ctx, mcp.NotificationInitialized, nil, c.era)
}

// Close ends the connection: a stdio server's stdin is closed, then it is
// sent SIGTERM, then SIGKILL, StopGrace apart; a 2025 HTTP session is
// deleted.
func (c *Client) Close() error {
	c.closeMu.Do(func() {
		if c.stopSupervising != nil {
			c.stopSupervising() // before the lock: a restart under way ends
		}
		c.rmu.Lock() // no restart after this
		c.redial = nil
		c.rmu.Unlock()
		c.closed = c.transport().close(c.opts.StopGrace)
	})
	return c.closed
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// ErrConnectionLost is the error of a call whose connection (a stdio
// server's pipes, an HTTP response stream) ended before its response.
// Whether the server acted on the call is unknown.
var ErrConnectionLost = errors.New("client: the connection ended before the response")

// NotSentError is a request that never left because its connection had
// ended before it was written, and was not (or could not be) started
// again: the server cannot have acted on it. errors.Is finds
// ErrConnectionLost in it.
type NotSentError struct{ Err error }

func (e *NotSentError) Error() string { return "client: not sent: " + bare(e.Err) }
func (e *NotSentError) Unwrap() error { return e.Err }

// ConnectError is a request that never left the client: no connection to
// the server could be opened (refused, no such host, unreachable). Unlike
// ErrConnectionLost, the server cannot have acted on it, so it may be sent
// again whatever the tool's retry class; errors.As finds the network
// error in Err.
type ConnectError struct {
	URL string
	Err error
}

func (e *ConnectError) Error() string {
	reason := e.Err.Error()
	var op *net.OpError
	switch {
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		reason = "connection refused"
	case errors.As(e.Err, &op) && op.Err != nil:
		reason = op.Err.Error()
	}
	return "client: could not connect to " + e.URL + ": " + reason
}

func (e *ConnectError) Unwrap() error { return e.Err }

// isConnectError reports whether err is a connection that could not be
// opened: no point asking the same address again in another era.
func isConnectError(err error) bool {
	var ce *ConnectError
	return errors.As(err, &ce)
}

// prefixed is err in context ("client: initialize: …"), naming the
// package once however many of its errors are wrapped inside.
type prefixed struct {
	context string
	err     error
}

func (e *prefixed) Error() string { return "client: " + e.context + ": " + bare(e.err) }
func (e *prefixed) Unwrap() error { return e.err }

// bare is err's text without this package's "client: " prefix, for a
// message that already carries it.
func bare(err error) string { return strings.TrimPrefix(err.Error(), "client: ") }

// transport returns the connection's current transport.
func (c *Client) transport() transport {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	return c.t
}

// restartingKey marks the context of a handshake (a restart's, a
// session's renewal): its value is the transport being negotiated, which
// its requests go over, and which no other request uses until it is done.
type restartingKey struct{}

// restart replaces a dead transport with a new one (a new process, a new
// HTTP+SSE stream) and negotiates the era again, once for all the callers
// that found it dead.
func (c *Client) restart(ctx context.Context, dead transport) (transport, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if cur := c.transport(); cur != dead {
		return cur, nil // someone else restarted it
	}
	if c.redial == nil {
		return nil, ErrConnectionLost
	}
	_, stream := dead.(*sseTransport)
	nt, err := c.redial(ctx)
	if err != nil {
		if stream {
			return nil, fmt.Errorf("%w: opening a new event stream: %s", ErrConnectionLost, bare(err))
		}
		return nil, fmt.Errorf("%w: restarting the server: %s", ErrConnectionLost, bare(err))
	}
	if !stream {
		c.stats.restarts.Add(1)
	}
	// The new connection is negotiated before any call may use it: a
	// call meanwhile still finds the dead one (and is never sent, or
	// waits for this restart), never a server that has not finished its
	// handshake.
	if err := c.handshake(ctx, nt); err != nil {
		go nt.close(c.opts.StopGrace)
		return nil, fmt.Errorf("%w: the new connection: %s", ErrConnectionLost, bare(err))
	}
	c.tmu.Lock()
	c.t = nt
	c.tmu.Unlock()
	go dead.close(c.opts.StopGrace)
	if stream {
		c.log.Warn("the server's event stream ended; opened a new one, a new session")
	} else {
		c.log.Warn("the server process died; started it again")
	}
	c.stats.reconnects.Add(1)
	return nt, nil
}

// handshake opens a new connection (a restarted process, a new 2025
// session) in the era already negotiated, without touching what the
// client learned: calls keep reading it meanwhile.
func (c *Client) handshake(ctx context.Context, t transport) error {
	ctx = context.WithValue(ctx, restartingKey{}, t) // it does not restart again
	if c.era == mcp.Modern {
		raw, err := c.roundTrip(ctx, mcp.MethodDiscover, "", nil, &CallOptions{Max: c.opts.ProbeTimeout, quiet: true})
		if err != nil {
			return err
		}
		var res mcp.DiscoverResult
		if json.Unmarshal(raw, &res) != nil || !slices.Contains(res.SupportedVersions, c.version) {
			return fmt.Errorf("client: the server no longer speaks %s", c.version)
		}
		return nil
	}
	raw, err := c.roundTrip(ctx, mcp.MethodInitialize, "", mcp.InitializeParams{
		ProtocolVersion: c.version, Capabilities: c.opts.Capabilities, ClientInfo: c.opts.Info,
	}, &CallOptions{Max: c.opts.ProbeTimeout * 2, quiet: true})
	if err != nil {
		return err
	}
	var res mcp.InitializeResult
	if json.Unmarshal(raw, &res) != nil || res.ProtocolVersion != c.version {
		return fmt.Errorf("client: the server now chose protocol version %q, not %q", res.ProtocolVersion, c.version)
	}
	t.initialized(res.ProtocolVersion)
	if err := c.notifyInitialized(ctx, t); err != nil {
		return err
	}
	t.ready(ctx, c.opts.ProbeTimeout)
	return nil
}
