package streamhttp

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/jsonrpc"
)

// Defaults for HandlerOptions fields left at zero.
const (
	DefaultMaxBodyBytes       = jsonrpc.DefaultMaxMessageBytes
	DefaultKeepAlive          = 15 * time.Second
	DefaultWriteTimeout       = 30 * time.Second
	DefaultSessionIdleTimeout = 30 * time.Minute
	DefaultMaxSessions        = 1024
	DefaultStreamCapacity     = 256
	// DefaultBodyTimeout and DefaultMinBodyRate bound how long a request
	// body may take to arrive: 10 s plus a second for every 32 KiB.
	DefaultBodyTimeout = 10 * time.Second
	DefaultMinBodyRate = 32 << 10
)

// HandlerOptions configure a Handler. The zero value is valid and safe:
// loopback hosts and origins only, 4 MiB bodies, no authentication.
type HandlerOptions struct {
	// AllowedHosts lists the Host header values accepted, as host names
	// or IP addresses; a port in the header is ignored. Empty means the
	// loopback names only: localhost, 127.0.0.1 and ::1. This is the
	// DNS-rebinding protection: add the names clients really use when
	// serving beyond loopback, or "*" to accept any Host (behind a proxy
	// that checks it).
	AllowedHosts []string
	// AllowedOrigins lists the Origin values accepted when a request
	// carries one, as scheme://host[:port]; a listed origin without a port
	// matches every port. Empty means loopback origins only. "*" accepts
	// any origin. Requests without an Origin (non-browser clients) are not
	// affected.
	AllowedOrigins []string
	// AuthToken, if set, must be presented as "Authorization: Bearer
	// <token>" on every request; others get 401. Its requests belong to
	// the tenant "": a tenant of its own beside those of Tokens, not an
	// operator over them.
	AuthToken string
	// Tokens maps bearer tokens to tenants: a request presenting one of
	// them is served for that tenant (server.Request.Tenant, and the
	// per-tenant limits of server.Options.Tenant), and a legacy session
	// belongs to the tenant that opened it. When Tokens or AuthToken is
	// set, requests without a valid token get 401. Both are compared
	// by auth.StaticTokens.
	Tokens map[string]string
	// Authenticator, when set, authenticates every request instead of
	// AuthToken and Tokens (which must then be empty): a request it
	// refuses gets 401, and the tenant of the auth.Principal it returns
	// owns the request. A request whose context already carries a
	// Principal (an outer auth.Require authenticated it) is not
	// authenticated again: the handler serves it for that Principal's
	// tenant.
	Authenticator auth.Authenticator
	// Permit, when set, is asked before each request a client sends is
	// served whether its caller (auth.FromContext(r.Context())) may send
	// it: method is the JSON-RPC method, params its params. An error
	// refuses the request, answered as auth.Answer does: an *auth.Error's
	// status and challenge (403 insufficient_scope for a scope the caller
	// lacks), else 401. Notifications and responses are not asked about.
	Permit func(r *http.Request, method string, params json.RawMessage) error
	// MaxBodyBytes caps a request body; larger ones get 413. Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// BodyTimeout and MinBodyRate bound how long a body may take: after
	// BodyTimeout, its bytes must keep arriving at MinBodyRate bytes a
	// second on average, or the request gets 408 and its connection is
	// closed. A client that declares a large body and then sends nothing
	// (or a byte now and then) cannot hold a connection. Zero means
	// DefaultBodyTimeout and DefaultMinBodyRate.
	BodyTimeout time.Duration
	MinBodyRate int64
	// MaxReadingBytes bounds the bytes of request bodies being read and
	// decoded at once, across the server; MaxReadingBytesPerTenant those
	// of one tenant, when Tokens name tenants. A body reserves its bytes as they arrive; one that
	// does not fit gets 503 (the server's bound) or 429 (its tenant's)
	// with Retry-After, unread. (Once the server has the request, its
	// bytes count against server.Options.MaxInflightBytes instead.) Zero
	// means eight bodies of MaxBodyBytes, and a quarter of that (at least
	// one body) per tenant.
	MaxReadingBytes          int64
	MaxReadingBytesPerTenant int64
	// KeepAlive is how often a quiet SSE stream gets a comment line, so
	// that proxies do not cut it. Keepalives never count as progress. Zero
	// means DefaultKeepAlive.
	KeepAlive time.Duration
	// WriteTimeout bounds each write on a stream: a client that stops
	// reading cannot hold a handler past it. It replaces
	// http.Server.WriteTimeout for MCP responses, which would otherwise
	// kill long streams. Zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// SessionIdleTimeout ends a legacy session unused for that long. Zero
	// means DefaultSessionIdleTimeout.
	SessionIdleTimeout time.Duration
	// MaxSessions caps open legacy sessions; initialize past it gets 503
	// with the retryable overload error. Zero means DefaultMaxSessions.
	MaxSessions int
	// MaxSessionsPerTenant caps the legacy sessions of one tenant (see
	// Tokens), so that one client cannot take them all. When a tenant at
	// its cap initializes, its longest-idle session with nothing in flight
	// is ended to make room (its client gets 404 and initializes again, as
	// the protocol provides); if none is idle, initialize gets 429 with
	// the retryable overload error. Zero means a quarter of MaxSessions.
	MaxSessionsPerTenant int
	// StreamCapacity is the number of messages one response stream may
	// buffer for a slow reader (see outbound.Queue), and what tools/list
	// over this handler advertises (mcp.MetaQueueCapacity). Zero means
	// DefaultStreamCapacity.
	StreamCapacity int
	// Resume configures 2025-era stream resumption: event ids, and the
	// bounded log a GET with Last-Event-ID replays. The zero value turns it
	// on with its defaults.
	Resume ResumeOptions
}

func (o *HandlerOptions) normalize() error {
	if o.MaxBodyBytes < 0 || o.KeepAlive < 0 || o.WriteTimeout < 0 || o.SessionIdleTimeout < 0 || o.MaxSessions < 0 || o.MaxSessionsPerTenant < 0 || o.StreamCapacity < 0 ||
		o.BodyTimeout < 0 || o.MinBodyRate < 0 || o.MaxReadingBytes < 0 || o.MaxReadingBytesPerTenant < 0 {
		return errors.New("streamhttp: HandlerOptions values must not be negative")
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	o.MaxReadingBytes = cmp.Or(o.MaxReadingBytes, 8*o.MaxBodyBytes)
	o.MaxReadingBytesPerTenant = cmp.Or(o.MaxReadingBytesPerTenant, max(o.MaxBodyBytes, o.MaxReadingBytes/4))
	o.BodyTimeout = cmp.Or(o.BodyTimeout, DefaultBodyTimeout)
	o.MinBodyRate = cmp.Or(o.MinBodyRate, DefaultMinBodyRate)
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.SessionIdleTimeout == 0 {
		o.SessionIdleTimeout = DefaultSessionIdleTimeout
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxSessionsPerTenant <= 0 {
		o.MaxSessionsPerTenant = max(1, o.MaxSessions/4)
	}
	if o.StreamCapacity == 0 {
		o.StreamCapacity = DefaultStreamCapacity
	}
	if err := o.Resume.normalize(); err != nil {
		return err
	}
	if o.Authenticator != nil && (o.AuthToken != "" || len(o.Tokens) > 0) {
		return errors.New("streamhttp: Authenticator replaces AuthToken and Tokens: set one or the other")
	}
	for _, origin := range o.AllowedOrigins {
		if origin == "*" {
			continue
		}
		if u, err := url.Parse(origin); err != nil || u.Scheme == "" || u.Host == "" {
			return errors.New("streamhttp: AllowedOrigins entries must look like scheme://host[:port], not " + origin)
		}
	}
	return nil
}

// hosts is the Host and Origin allow-list as package auth checks it.
func (o *HandlerOptions) hosts() auth.Hosts {
	return auth.Hosts{Allowed: o.AllowedHosts, Origins: o.AllowedOrigins}
}

// authenticator returns what authenticates the endpoint's requests: the
// Authenticator given, or the static tokens; nil when it requires no
// authentication.
func (o *HandlerOptions) authenticator() auth.Authenticator {
	switch {
	case o.Authenticator != nil:
		return o.Authenticator
	case o.AuthToken != "" || len(o.Tokens) > 0:
		return auth.StaticTokens(o.AuthToken, o.Tokens)
	}
	return nil
}

// tenants reports whether requests may belong to several tenants, whose
// shares of the budgets are then bounded one by one.
func (o *HandlerOptions) tenants() bool { return len(o.Tokens) > 0 || o.Authenticator != nil }
