package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/auth/oauth"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
	"go.opentelemetry.io/otel/trace"
)

// DefaultPath is the HTTP endpoint's path when Options.Path is empty.
const DefaultPath = "/mcp"

// Options configure a Runtime: everything "mcprel serve" has a flag for,
// grouped by the package it configures. The zero value of every nested
// struct is that package's default; only Implementation.Name and DB are
// required. New copies the options, so the caller may reuse them.
type Options struct {
	// Implementation names the server in initialize and server/discover
	// results. Name is required.
	Implementation mcp.Implementation
	// Server configures the request lifecycle: limits (server-wide and
	// per tenant), deadlines, instructions, the logger (nil means
	// slog.Default()), interceptors and observers. The runtime appends
	// its own observers (metrics, tracing) after those given, and over
	// HTTP an interceptor that advertises the SSE keepalive cadence in
	// every tool's _meta (mcp.MetaKeepAliveMs).
	Server server.Options

	// DB is the database: the path of a SQLite file (created if missing)
	// or a postgres:// URL that replicas share. Required: the runtime
	// never chooses a file for its caller.
	DB string
	// Store tunes opening it (SQLite durability, pool size). The runtime
	// chains its commit metrics after OnCommit.
	Store store.Options
	// Ledger configures the idempotency ledger (retention, lease). The
	// runtime appends its observers (metrics, tracing) to Observers. Its
	// reaper removes expired records once a minute while Run serves.
	Ledger ledger.Options
	// Tasks configure the durable task store: lease, TTLs, Retain,
	// MaxTasksPerTenant and MaxTasks.
	Tasks tasks.Options
	// Runner bounds the task runner: Workers, Queued, PerTenant and
	// MaxRunningPerTenant. Its Logger defaults to the server's; the
	// runtime chains its metrics after OnEvent and appends its tracing
	// observer to Observers.
	Runner tasks.RunnerOptions

	// Outbox configures the transactional outbox (package outbox), which
	// the runtime opens in its store when Dispatcher.Receivers names a
	// receiver: its bounds on pending intents and its retention.
	Outbox outbox.Options
	// Dispatcher delivers the outbox's intents while Run serves: its
	// Receivers, by target name, its workers, lease and backoff. Its
	// Logger defaults to the server's. Without receivers there is no
	// outbox.
	Dispatcher outbox.DispatcherOptions

	// Gateway, when set, puts the upstream MCP servers it names behind
	// this runtime (package gateway): their tools, resources and prompts
	// are served as the runtime's own, and forwarded. Run connects them
	// before serving; the shutdown closes them after the transport. The
	// runtime sets its logger, its ledger (for the policy's conditional
	// tools) unless one is given, and its metrics and tracing when those
	// are on.
	Gateway *gateway.Options

	// Addr, when set, serves Streamable HTTP on this address, HOST:PORT
	// (port 0 picks a free one; see Runtime.Endpoint). Empty serves
	// stdio.
	Addr string
	// Path is the HTTP endpoint's path; empty means DefaultPath. Set only
	// with Addr.
	Path string
	// HTTP configures the HTTP endpoint: allowed hosts and origins,
	// AuthToken and Tokens (bearer token → tenant) or an Authenticator,
	// body, session and stream limits, keepalive. When AllowedHosts names
	// hosts, the loopback names stay allowed beside them. The Host and
	// Origin checks and the authenticator guard every handler on the
	// endpoint's listener (the endpoint, Metrics.Path, Handlers), and the
	// authenticator the metrics listener too, unless MetricsOptions say
	// otherwise. Over stdio, they authenticate nothing but the metrics.
	HTTP streamhttp.HandlerOptions
	// OAuth, when set, makes the HTTP endpoint an OAuth 2.1 protected
	// resource (package auth/oauth): it serves the Protected Resource
	// Metadata, unauthenticated, at its well-known paths, and every
	// listener takes its access tokens as HTTP.Authenticator, the
	// tenant of a request being the token's OAuth.TenantClaim. An empty
	// OAuth.Resource means the endpoint's URL (Runtime.Endpoint): set it
	// to the URL clients use when a proxy stands in front. Not with
	// HTTP.Authenticator, AuthToken or Tokens; set only with Addr.
	OAuth *oauth.Config
	// ToolScopes names, with OAuth, the scopes a tools/call of a tool
	// needs beyond OAuth.Scopes: a call whose token lacks one is refused
	// 403 insufficient_scope, naming every scope the call needs.
	ToolScopes map[string][]string
	// Handlers are further handlers served on the endpoint's listener at
	// their paths (patterns of http.ServeMux), behind the same Host and
	// Origin checks and authenticator as the endpoint: a handler reads
	// who called with auth.FromContext. Set only with Addr; no path may
	// be Path or Metrics.Path.
	Handlers map[string]http.Handler
	// Listener caps the HTTP connections open at once, in all and per
	// remote address.
	Listener streamhttp.ListenerOptions
	// Stdio configures the stdio connection; Stdin and Stdout are its
	// streams, nil meaning os.Stdin and os.Stdout.
	Stdio  stdio.Options
	Stdin  io.Reader
	Stdout io.Writer

	// Metrics serves Prometheus metrics when it names a listener or a
	// path, and beside them the operator's status page (package status):
	// at /status and /status.json on the metrics' own listener, and
	// beside Metrics.Path at "status" in its directory (/metrics →
	// /status), behind the metrics' authentication and checks.
	Metrics MetricsOptions
	// Replica names this process on the status page, so that behind a
	// load balancer one knows which replica answered; empty means the
	// host's name and the process id (HOST:PID).
	Replica string

	// TracerProvider, when set, gets a span per request, per run of a
	// task and per ledger transaction (package tracing), and each
	// request's log line names its trace and span. Nil means no tracing.
	TracerProvider trace.TracerProvider
	// FlushTraces, when set, sends the spans still buffered: the last
	// step of the shutdown, bounded by five seconds (the shutdown
	// function tracing.ExportOTLP returns). The runtime owns it once New
	// is called: it is called even when New fails.
	FlushTraces func(context.Context) error

	// ShutdownGrace is, when Run's context ends, how long calls in flight
	// may finish before they are cancelled, and then how long running
	// tasks have to reach a checkpoint before they are left to be taken
	// over. Zero means no wait: calls are cancelled at once. Negative is
	// an error.
	ShutdownGrace time.Duration
}

// MetricsOptions say where the Prometheus metrics are served and who may
// read them. With neither Addr nor Path there are no metrics.
type MetricsOptions struct {
	// Addr, when set, serves the metrics at http://Addr/metrics on a
	// listener of their own: the only way over stdio.
	Addr string
	// Path, when set, serves them at this path on the MCP endpoint's
	// listener, behind its Host and Origin checks. It needs Options.Addr,
	// must start with "/" and must differ from Options.Path.
	Path string
	// Token, when set, is the bearer token a scrape must carry. Without
	// it a scrape needs one of the endpoint's own tokens
	// (HTTP.AuthToken, HTTP.Tokens), so that the metrics are never easier
	// to read than the tools; with none, the metrics are open.
	Token string
	// Open serves them without authentication even when the endpoint
	// requires a token: anyone who can reach the listener reads them.
	// Not with Token.
	Open bool
	// Tenants counts requests per tenant in mcprel_requests_total. Every
	// tenant's token could then read the names of the others, so with
	// HTTP.Tokens, an HTTP.Authenticator or OAuth (whose tenants are the
	// tokens' subjects) it needs Token.
	Tenants bool
}

// enabled reports whether metrics are served at all.
func (m *MetricsOptions) enabled() bool { return m.Addr != "" || m.Path != "" }

// ListenError is a listener New could not open: an address taken, or one
// the process may not bind. Option names the field that gave the address
// ("Addr" or "Metrics.Addr"), so that a command can name its own flag.
type ListenError struct {
	Option string
	Err    error
}

func (e *ListenError) Error() string { return "host: Options." + e.Option + ": " + e.Err.Error() }
func (e *ListenError) Unwrap() error { return e.Err }

// check validates the options New cannot leave to the packages they
// configure, naming each field.
// maxReplicaName bounds Options.Replica.
const maxReplicaName = 256

func (o *Options) check() error {
	if o.Implementation.Name == "" {
		return errors.New("host: Options.Implementation.Name is required")
	}
	if o.DB == "" {
		return errors.New("host: Options.DB is required: the path of a SQLite file or a postgres:// URL")
	}
	if err := store.CheckDSN(o.DB); err != nil {
		return fmt.Errorf("host: Options.DB: %w", err)
	}
	if o.ShutdownGrace < 0 {
		return fmt.Errorf("host: Options.ShutdownGrace must not be negative, not %v", o.ShutdownGrace)
	}
	if len(o.Replica) > maxReplicaName || !utf8.ValidString(o.Replica) || strings.ContainsFunc(o.Replica, unicode.IsControl) {
		return fmt.Errorf("host: Options.Replica must be at most %d bytes of printable UTF-8: every replica's status page reads it", maxReplicaName)
	}
	if o.Addr == "" {
		if o.Path != "" {
			return errors.New("host: Options.Path applies to HTTP only (Options.Addr)")
		}
		if o.Metrics.Path != "" {
			return errors.New("host: Options.Metrics.Path needs HTTP (Options.Addr)")
		}
	} else {
		if _, port, err := net.SplitHostPort(o.Addr); err != nil || port == "" {
			return fmt.Errorf("host: Options.Addr wants HOST:PORT, such as 127.0.0.1:8080 (port 0 picks a free one), not %q", o.Addr)
		}
		if !strings.HasPrefix(o.Path, "/") || strings.ContainsAny(o.Path, " {}?#") {
			return fmt.Errorf("host: Options.Path must be a URL path starting with \"/\", such as /mcp, not %q", o.Path)
		}
		for _, origin := range o.HTTP.AllowedOrigins {
			if u, err := url.Parse(origin); origin != "*" && (err != nil || u.Scheme == "" || u.Host == "") {
				return fmt.Errorf("host: Options.HTTP.AllowedOrigins wants scheme://host[:port], such as https://app.example.com, not %q", origin)
			}
		}
	}
	for token, tenant := range o.HTTP.Tokens {
		if token == "" {
			return fmt.Errorf("host: Options.HTTP.Tokens: tenant %q has an empty token", tenant)
		}
		if token == o.HTTP.AuthToken {
			return fmt.Errorf("host: Options.HTTP.Tokens: the token of tenant %q is also Options.HTTP.AuthToken", tenant)
		}
	}
	for path := range o.Handlers {
		switch {
		case o.Addr == "":
			return errors.New("host: Options.Handlers need HTTP (Options.Addr)")
		case path == o.Path || path == o.Metrics.Path:
			return fmt.Errorf("host: Options.Handlers: %q is already the endpoint's or the metrics' path", path)
		case o.Metrics.Path != "" && (path == statusPath(o.Metrics.Path) || path == statusPath(o.Metrics.Path)+".json"):
			return fmt.Errorf("host: Options.Handlers: %q is the status page's path beside the metrics (Options.Metrics.Path %q)", path, o.Metrics.Path)
		case o.Handlers[path] == nil:
			return fmt.Errorf("host: Options.Handlers: %q has no handler", path)
		}
	}
	if o.OAuth != nil {
		switch {
		case o.Addr == "":
			return errors.New("host: Options.OAuth needs HTTP (Options.Addr): over stdio, credentials come from the environment")
		case o.HTTP.Authenticator != nil || o.HTTP.AuthToken != "" || len(o.HTTP.Tokens) > 0:
			return errors.New("host: Options.OAuth authenticates the endpoint: set no HTTP.Authenticator, AuthToken or Tokens beside it")
		}
	} else if len(o.ToolScopes) > 0 {
		return errors.New("host: Options.ToolScopes need Options.OAuth: only OAuth access tokens carry scopes")
	}
	if o.HTTP.Authenticator != nil && (o.HTTP.AuthToken != "" || len(o.HTTP.Tokens) > 0) {
		return errors.New("host: Options.HTTP.Authenticator replaces AuthToken and Tokens: set one or the other")
	}
	m := o.Metrics
	if m.Path != "" && (!strings.HasPrefix(m.Path, "/") || m.Path == o.Path) {
		return fmt.Errorf("host: Options.Metrics.Path must start with / and differ from Options.Path, not %q", m.Path)
	}
	if m.Path != "" {
		// The status page is served beside the metrics: its paths must
		// be free on the endpoint's listener.
		sp := statusPath(m.Path)
		for _, taken := range []string{m.Path, o.Path} {
			if taken == sp || taken == sp+".json" {
				return fmt.Errorf("host: Options.Metrics.Path %q puts the status page at %s and %s.json, which %q already is: choose another metrics path, such as /metrics",
					m.Path, sp, sp, taken)
			}
		}
	}
	switch {
	case m.Token != "" && m.Open:
		return errors.New("host: Options.Metrics: choose one of Token and Open")
	case m.Token == "" && m.Tenants && (len(o.HTTP.Tokens) > 0 || o.HTTP.Authenticator != nil || o.OAuth != nil):
		return errors.New("host: Options.Metrics.Tenants names every tenant in the metrics, which each tenant's token could then read: set Options.Metrics.Token")
	}
	return nil
}

// authenticator returns what authenticates the endpoint's listener:
// HTTP.Authenticator, or the static tokens; nil when it requires no
// authentication.
func (o *Options) authenticator() auth.Authenticator {
	switch {
	case o.HTTP.Authenticator != nil:
		return o.HTTP.Authenticator
	case o.HTTP.AuthToken != "" || len(o.HTTP.Tokens) > 0:
		return auth.StaticTokens(o.HTTP.AuthToken, o.HTTP.Tokens)
	}
	return nil
}

// metricsAuthenticator returns what a metrics scrape must pass, on
// either listener: the metrics token when one is set; otherwise the
// endpoint's own authenticator, so that the metrics are never easier to
// read than the tools; nil when the endpoint has none, or when the caller
// chose Open. Over stdio it authenticates nothing else, but it is still
// what the caller meant to require.
func (o *Options) metricsAuthenticator() auth.Authenticator {
	switch {
	case o.Metrics.Token != "":
		return auth.StaticTokens(o.Metrics.Token, nil)
	case o.Metrics.Open:
		return nil
	}
	return o.authenticator()
}
