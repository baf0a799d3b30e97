package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/taskserver"
)

// Transport is how the gateway reaches an upstream.
type Transport string

const (
	// Stdio starts Upstream.Command and speaks over its stdin and stdout.
	Stdio Transport = "stdio"
	// StreamableHTTP is a Streamable HTTP endpoint, in whichever era it
	// speaks (negotiated by package client).
	StreamableHTTP Transport = "http"
	// SSE is the deprecated 2024-11-05 HTTP+SSE transport.
	SSE Transport = "sse"
)

// Upstream is one MCP server behind the gateway.
type Upstream struct {
	// Name names the upstream in logs, metrics and, with several
	// upstreams, its tools' names: 1 to 32 characters from
	// [A-Za-z0-9-]. It may not hold an underscore, which separates it
	// from a tool's name.
	Name string
	// Transport says how to reach it; empty means Stdio when Command is
	// set and StreamableHTTP otherwise.
	Transport Transport
	// Command is a stdio upstream's argv: its path and arguments, run
	// without a shell.
	Command []string
	// Env is added to a stdio upstream's environment (KEY=VALUE): where
	// its credentials go. The rest of its environment is the gateway's
	// own, less mcprel's variables (see Options.HideEnv).
	Env []string
	// URL is an HTTP upstream's endpoint.
	URL string
	// Header is sent with every request to an HTTP upstream: its
	// credentials (Authorization). It never reaches a downstream client,
	// and no downstream request's headers ever reach an upstream.
	Header http.Header
	// Authorizer gives every request to an HTTP upstream its
	// credentials, and is told when the upstream refuses them: the
	// gateway's own OAuth client toward it (package client/oauth), never
	// the downstream caller's token. Exclusive with an Authorization in
	// Header. A refusal that stands fails the calls it meets with
	// upstream_unauthorized, not retryable, naming AuthorizationAction.
	Authorizer client.Authorizer
	// AuthorizationAction is what the operator must do when the upstream
	// refuses the gateway's credentials (e.g. "run `mcprel gateway login
	// NAME`"), told to callers in upstream_unauthorized; "" is advice
	// to renew the credentials the gateway is given for the upstream.
	AuthorizationAction string
	// PerTenant, for a stdio upstream, starts one process of it per
	// tenant (the unnamed tenant "" shares the gateway's own), within
	// Options.MaxSessions: a process is one session, and a server's
	// requests, subscriptions and state then belong to one tenant. A
	// 2025-era HTTP upstream always has a session per tenant.
	PerTenant bool
	// Limits bound the calls forwarded to this upstream, all its tools
	// together: concurrency, queue, rate and bytes, within the server's
	// own limits and each tenant's. Zero fields set no bound of their
	// own.
	Limits server.Limits
	// Capabilities are what the gateway declares to a 2025-era upstream
	// on a connection downstream clients share (its listing connection,
	// a stdio process not run per tenant): of elicitation, sampling and
	// roots, what it may relay. Nil declares all three, elicitation in
	// both its form and URL modes: a client that declared less is refused
	// an upstream's request it cannot answer, as it would be by the
	// upstream itself; give less to have the upstream hide what needs
	// more. A call made on a connection of its own — every 2026-07-28
	// request, a 2025-era session per tenant — declares what the client
	// that made it declared, of the same three, whatever this says.
	Capabilities *mcp.ClientCapabilities
	// KeepNames keeps this upstream's tool and prompt names as it lists
	// them when there are several upstreams, whose names otherwise all
	// become NAME_name: adding an upstream then renames none of this
	// one's. A name of its that begins with an upstream's name and "_"
	// is prefixed after all, so that no two names meet. At most one
	// upstream keeps its names.
	KeepNames bool
}

// relayed is what the gateway declares upstream for a downstream client
// that declared caps: what of it the gateway relays — elicitation (in the
// modes the client declared), sampling and roots — and nothing else (no
// tasks, no extension: those are the gateway's own with the upstream).
func relayed(caps mcp.ClientCapabilities) mcp.ClientCapabilities {
	return mcp.ClientCapabilities{Elicitation: caps.Elicitation, Sampling: caps.Sampling, Roots: caps.Roots}
}

// everythingRelayed is what the gateway may relay to some client.
var everythingRelayed = mcp.ClientCapabilities{Elicitation: json.RawMessage(`{"form":{},"url":{}}`),
	Sampling: json.RawMessage(`{}`), Roots: json.RawMessage(`{}`)}

// declared is what the gateway declares to the upstream on a connection
// downstream clients share (Upstream.Capabilities).
func (u *Upstream) declared() mcp.ClientCapabilities {
	if u.Capabilities != nil {
		return relayed(*u.Capabilities)
	}
	return everythingRelayed
}

var upstreamName = regexp.MustCompile(`^[A-Za-z0-9-]{1,32}$`)

func (u *Upstream) check() error {
	if !upstreamName.MatchString(u.Name) {
		return fmt.Errorf("gateway: upstream name %q: use 1 to 32 characters from [A-Za-z0-9-] (no underscore: it separates the upstream's name from its tools')", u.Name)
	}
	if u.Transport == "" {
		u.Transport = StreamableHTTP
		if len(u.Command) > 0 {
			u.Transport = Stdio
		}
	}
	switch u.Transport {
	case Stdio:
		if len(u.Command) == 0 {
			return fmt.Errorf("gateway: upstream %q: a stdio upstream needs a command", u.Name)
		}
		if u.URL != "" || len(u.Header) > 0 || u.Authorizer != nil {
			return fmt.Errorf("gateway: upstream %q: a stdio upstream takes no URL, headers or authorizer (its credentials go in Env)", u.Name)
		}
		if len(u.Command[0]) == 0 {
			return fmt.Errorf("gateway: upstream %q: the command's first word is empty", u.Name)
		}
		// A command that is not there never will be: said now, not
		// retried with backoff while every call waits.
		if _, err := exec.LookPath(u.Command[0]); err != nil {
			return fmt.Errorf("gateway: upstream %q: cannot run %q: %w", u.Name, u.Command[0], errors.Unwrap(err))
		}
	case StreamableHTTP, SSE:
		if len(u.Command) > 0 || len(u.Env) > 0 {
			return fmt.Errorf("gateway: upstream %q: an HTTP upstream takes no command or environment", u.Name)
		}
		if u.PerTenant {
			return fmt.Errorf("gateway: upstream %q: one process per tenant is for stdio upstreams (a 2025-era HTTP upstream has a session per tenant already)", u.Name)
		}
		p, err := url.Parse(u.URL)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("gateway: upstream %q: %q is not an http:// or https:// URL", u.Name, u.URL)
		}
		if p.User != nil {
			return fmt.Errorf("gateway: upstream %q: put credentials in a header from the environment or a file, not in the URL", u.Name)
		}
		if u.Authorizer != nil && u.Header.Get("Authorization") != "" {
			return fmt.Errorf("gateway: upstream %q: give it an Authorization header or an authorizer, not both", u.Name)
		}
	default:
		return fmt.Errorf("gateway: upstream %q: unknown transport %q (stdio, http or sse)", u.Name, u.Transport)
	}
	return nil
}

// Defaults of Options.
const (
	DefaultCircuitFailures  = 5
	DefaultCircuitCooldown  = 2 * time.Second
	DefaultRestartBase      = 250 * time.Millisecond
	DefaultRestartCap       = 30 * time.Second
	DefaultStartWait        = 30 * time.Second
	DefaultMaxSessions      = 256
	DefaultSessionIdle      = 5 * time.Minute
	DefaultMaxHeld          = 1024
	DefaultMaxHeldPerTenant = 64
	// DefaultMaxHeldBytes and DefaultMaxHeldBytesPerTenant bound the
	// params of the upstreams' questions held calls hold.
	DefaultMaxHeldBytes          = 64 << 20
	DefaultMaxHeldBytesPerTenant = 8 << 20
	DefaultInputWait             = 2 * time.Minute
	// DefaultClockSlack is how much longer the client's clocks run than
	// the server's for the same call: the server's fire first and give the
	// downstream its standard timeout result; the client's are a backstop.
	DefaultClockSlack = time.Second
	// DefaultReloadGrace is how long an upstream a Reload removed or
	// changed has to finish its calls in flight before it is closed.
	DefaultReloadGrace = 30 * time.Second
)

// Options configure a Gateway. The zero value of every field is its
// default.
type Options struct {
	// Upstreams are the servers behind the gateway; at least one.
	Upstreams []Upstream
	// Policy is what the gateway knows of each tool: its clocks and its
	// retry class. A tool it does not name is unsafe, with the server's
	// standard deadlines.
	Policy *Policy
	// Ledger is the durable idempotency ledger conditional tools are
	// forwarded through (see ToolPolicy): a keyed call is claimed before
	// it is forwarded and its answer stored, so a retry is answered from
	// the record; with it, the gateway serves lookup_operation. Nil: no
	// tool may be conditional.
	Ledger *ledger.Ledger
	// Tasks runs the tools the policy makes durable tasks
	// (ToolPolicy.Task), in the store its ledger is in. Nil: no tool may
	// be a task.
	Tasks *taskserver.Server
	// Logger receives the gateway's own lines: upstreams starting,
	// dying, restarting, their stderr, list refreshes. Nil means the
	// server's logger.
	Logger *slog.Logger
	// Observer is told what happens to upstreams and forwarded calls
	// (metrics). Nil tells nobody.
	Observer Observer
	// Interceptors, when set, returns the client interceptors every
	// request to the named upstream passes, per attempt, inside the
	// gateway's retries and circuit: package host sets package tracing's
	// Observer.Client, whose span carries the trace context upstream in
	// _meta, which keeps OpenTelemetry out of this package.
	Interceptors func(upstream string) []client.Interceptor

	// CircuitFailures is how many consecutive failures to reach an
	// upstream open its circuit; CircuitCooldown is how long it stays
	// open before a ping probes it (doubling, up to RestartCap, while the
	// probes fail).
	CircuitFailures int
	CircuitCooldown time.Duration
	// RestartBase and RestartCap bound the capped, jittered, steady
	// backoff between restarts of a stdio upstream that died (or could
	// not start).
	RestartBase, RestartCap time.Duration
	// StartWait is how long Start waits for every upstream's first
	// listing; an upstream that is not up by then is listed when it
	// comes up (clients are told the list changed).
	StartWait time.Duration
	// MaxSessions bounds the upstream sessions a 2025-era HTTP (or SSE)
	// upstream holds for tenants, one each (or the processes of a stdio
	// upstream run per tenant); past it the least recently used idle one
	// is closed, and with none idle the call is refused, retryably.
	// SessionIdle closes one unused that long.
	MaxSessions int
	SessionIdle time.Duration
	// MaxHeld and MaxHeldPerTenant bound the calls held open upstream
	// while their 2026-07-28 clients answer the upstream's questions (a
	// 2025-era upstream asks mid-call; see held); InputWait is how long
	// one waits for the client's retry with the answers before it is
	// cancelled upstream.
	MaxHeld, MaxHeldPerTenant int
	InputWait                 time.Duration
	// MaxHeldBytes and MaxHeldBytesPerTenant bound, in bytes of their
	// params, the upstreams' questions held calls wait on: past either, a
	// question is refused to its upstream at once (overloaded), and the
	// upstream's call goes on without the answer.
	MaxHeldBytes, MaxHeldBytesPerTenant int
	// ClockSlack is how much longer the client's clocks are than the
	// server's (DefaultClockSlack).
	ClockSlack time.Duration
	// ReloadGrace is how long an upstream that Reload removed or changed
	// is given to finish the calls it has in flight (DefaultReloadGrace):
	// no new call reaches it, and once the grace has passed it is closed
	// and a call still in flight is cancelled upstream and fails with its
	// outcome unknown (outcome_unknown: it may have acted).
	ReloadGrace time.Duration
	// RetryBase is the first pause of the gateway's own retries upstream
	// (see ToolPolicy.MaxAttempts); zero means retry.DefaultBase.
	RetryBase time.Duration
	// Client configures the connections to upstreams (message and list
	// bounds, the client's name). Its Header, OnRequest, OnNotification,
	// Stderr, Env, Environ, Restart and Logger are the gateway's own and
	// are ignored.
	Client client.Options
	// HideEnv names variables of the gateway's own environment that no
	// stdio upstream inherits (a variable an HTTP upstream's token is
	// read from), besides every MCPREL_* one, which are mcprel's: its
	// tokens, its database's URL. What an upstream needs of them goes in
	// its Upstream.Env.
	HideEnv []string
}

// upstreamEnviron is the environment a stdio upstream starts from: the
// gateway's own, less mcprel's variables and those Options.HideEnv names.
func (o *Options) upstreamEnviron() []string {
	env := os.Environ()
	return slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return strings.HasPrefix(k, "MCPREL_") || slices.Contains(o.HideEnv, k)
	})
}

func (o *Options) withDefaults() {
	setDefault(&o.CircuitFailures, DefaultCircuitFailures)
	setDefault(&o.CircuitCooldown, DefaultCircuitCooldown)
	setDefault(&o.RestartBase, DefaultRestartBase)
	setDefault(&o.RestartCap, DefaultRestartCap)
	setDefault(&o.StartWait, DefaultStartWait)
	setDefault(&o.MaxSessions, DefaultMaxSessions)
	setDefault(&o.SessionIdle, DefaultSessionIdle)
	setDefault(&o.MaxHeld, DefaultMaxHeld)
	setDefault(&o.MaxHeldPerTenant, DefaultMaxHeldPerTenant)
	setDefault(&o.InputWait, DefaultInputWait)
	setDefault(&o.MaxHeldBytes, DefaultMaxHeldBytes)
	setDefault(&o.MaxHeldBytesPerTenant, DefaultMaxHeldBytesPerTenant)
	setDefault(&o.ClockSlack, DefaultClockSlack)
	setDefault(&o.ReloadGrace, DefaultReloadGrace)
	if o.Policy == nil {
		o.Policy = &Policy{}
	}
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Gateway forwards a server's tools, resources and prompts to upstreams.
type Gateway struct {
	srv  *server.Server
	opts Options // its Upstreams and Policy are those New was given: see top and policy
	log  *slog.Logger
	obs  Observer

	// top is the upstreams served now, and policy what the gateway knows
	// of their tools: each replaced whole by Reload, read without a lock
	// (a call reads the policy once, when its tool is registered).
	top    atomic.Pointer[topology]
	policy atomic.Pointer[Policy]

	// reloadMu serializes Start, Reload and Close's start: what links
	// run, and whether the gateway still takes a reload.
	reloadMu sync.Mutex
	started  bool
	closed   bool
	// startedCh is closed once Start has launched the upstreams.
	startedCh chan struct{}

	mu      sync.Mutex
	catalog catalog // what is registered on the server, by whom

	heldMu        sync.Mutex
	held          map[string]*held // calls waiting for their clients' answers, by id
	heldPerTenant map[string]int
	heldBytes     int            // the params of the questions held calls hold
	heldBytesOf   map[string]int // the same, by tenant
	heldCalls     sync.WaitGroup // their upstream calls' goroutines

	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
}

// errClosing ends what the gateway still forwards when it closes.
var errClosing = errors.New("gateway: closing")

// New checks the options and builds a gateway in front of srv. Nothing
// is started or registered until Start.
func New(srv *server.Server, opts *Options) (*Gateway, error) {
	if srv == nil {
		return nil, errors.New("gateway: no server")
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	for _, v := range []int64{int64(o.CircuitFailures), int64(o.CircuitCooldown), int64(o.RestartBase), int64(o.RestartCap),
		int64(o.StartWait), int64(o.MaxSessions), int64(o.SessionIdle), int64(o.ClockSlack),
		int64(o.MaxHeld), int64(o.MaxHeldPerTenant), int64(o.InputWait), int64(o.RetryBase),
		int64(o.MaxHeldBytes), int64(o.MaxHeldBytesPerTenant), int64(o.ReloadGrace)} {
		if v < 0 {
			return nil, errors.New("gateway: negative options are errors, not \"unlimited\"")
		}
	}
	if o.Client.Info.Name == "" {
		// The upstream is told who calls it: the gateway, as its own
		// server names itself to its clients.
		o.Client.Info = srv.Info()
	}
	o.withDefaults()
	if err := o.Policy.check(o.Ledger != nil, o.Tasks != nil); err != nil {
		return nil, err
	}
	g := &Gateway{srv: srv, opts: o, log: o.Logger, obs: o.Observer, startedCh: make(chan struct{}),
		held: map[string]*held{}, heldPerTenant: map[string]int{}, heldBytesOf: map[string]int{}}
	// Until Start, nothing runs: a context that never ends.
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	if g.log == nil {
		g.log = srv.Logger()
	}
	if g.obs == nil {
		g.obs = nopObserver{}
	}
	g.catalog = newCatalog()
	ups, err := CheckUpstreams(o.Upstreams)
	if err != nil {
		return nil, err
	}
	g.opts.Upstreams = ups
	top := &topology{prefix: len(ups) > 1}
	for i, u := range ups {
		l, err := newLink(g, u, i)
		if err != nil {
			return nil, err
		}
		top.links = append(top.links, l)
	}
	g.top.Store(top)
	g.policy.Store(o.Policy)
	if o.Ledger != nil {
		if err := g.addLookup(o.Ledger); err != nil {
			return nil, fmt.Errorf("gateway: serving %s: %w", idempotency.LookupTool, err)
		}
	}
	return g, nil
}

// CheckUpstreams checks a list of upstreams as New would, and returns a
// copy with each Transport filled in: a command line reports a mistake
// before anything starts.
func CheckUpstreams(ups []Upstream) ([]Upstream, error) {
	if len(ups) == 0 {
		return nil, errors.New("gateway: no upstream: name at least one")
	}
	out := append([]Upstream(nil), ups...)
	seen := map[string]bool{}
	keeper := ""
	for i := range out {
		u := &out[i]
		if err := u.check(); err != nil {
			return nil, err
		}
		if seen[u.Name] {
			return nil, fmt.Errorf("gateway: two upstreams are named %q", u.Name)
		}
		seen[u.Name] = true
		if u.KeepNames && keeper != "" {
			return nil, fmt.Errorf("gateway: upstreams %q and %q both keep their names: only one upstream may keep its names, or two could list the same one", keeper, u.Name)
		}
		if u.KeepNames {
			keeper = u.Name
		}
	}
	return out, nil
}

// Start connects to every upstream in the background and registers what
// each lists, waiting at most Options.StartWait (or until ctx ends) for
// all of them to be listed once. An upstream that is down stays
// supervised: it is listed whenever it comes up. Start returns an error
// only when ctx ends first.
func (g *Gateway) Start(ctx context.Context) error {
	g.reloadMu.Lock()
	links := g.top.Load().links
	closed := g.closed
	if !g.started && !closed {
		g.started = true
		for _, l := range links {
			g.launch(l)
		}
		close(g.startedCh)
	}
	g.reloadMu.Unlock()
	if closed {
		return nil // nothing to start: Close came first
	}
	g.srv.SetToolNotFound(g.toolNotFound)
	wait := time.NewTimer(g.opts.StartWait)
	defer wait.Stop()
	for _, l := range links {
		select {
		case <-l.firstTried:
			switch {
			case l.listed():
			case l.refusal() != nil:
				g.log.Warn("gateway: an upstream refused the gateway's credentials at start; serving without it, trying again with backoff (calls of its tools are told upstream_unauthorized) until the operator acts",
					"upstream", l.up.Name, "action", l.action())
			default:
				g.log.Warn("gateway: an upstream could not be reached at start; serving without it until it comes up (calls of its tools are told upstream_unavailable)",
					"upstream", l.up.Name)
			}
		case <-wait.C:
			g.log.Warn("gateway: an upstream was not listed in time; serving without it until it comes up",
				"upstream", l.up.Name, "waited", g.opts.StartWait)
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// toolNotFound answers a call of a tool the gateway does not serve: when
// it may be the tool of an upstream that has not been listed — the only
// upstream, the one its name's prefix names, or, for a name with no
// upstream's prefix, the upstream that keeps its names — the caller is
// told that upstream is unavailable and when to come back, at once, or,
// when it refused the gateway's credentials, that it is unauthorized and
// what the operator must do; otherwise the tool is unknown (nil).
func (g *Gateway) toolNotFound(name string) *jsonrpc.Error {
	l := g.unlistedOwner(name)
	if l == nil {
		return nil
	}
	err := l.unavailable(l.down())
	if refused := l.refusal(); refused != nil {
		err = l.unauthorized(refused)
	}
	var e *jsonrpc.Error
	errors.As(asRPC(err), &e)
	return e
}

// unlistedOwner is the upstream whose tool name may be, when it has not
// been listed yet; nil when none may serve it, or the one that may was
// listed (and so the tool is unknown).
func (g *Gateway) unlistedOwner(name string) *link {
	top := g.top.Load()
	for _, l := range top.links {
		mine := !top.prefix || strings.HasPrefix(name, l.up.Name+"_") ||
			(l.up.KeepNames && !top.prefixedLike(name)) // its names go unprefixed
		if !mine {
			continue
		}
		if l.listed() {
			return nil
		}
		return l
	}
	return nil
}

// Close stops supervising and closes every upstream connection (a stdio
// upstream gets its stdin closed, then SIGTERM, then SIGKILL), those a
// Reload is draining included. Calls still forwarded fail; close the
// server first so that none are.
func (g *Gateway) Close() error {
	g.cancel(errClosing) // held calls end, cancelled upstream; a Reload waiting returns
	g.reloadMu.Lock()
	g.closed = true // no Reload starts a link from now on
	g.reloadMu.Unlock()
	g.wg.Wait() // supervision, and drains, which close the links they drained
	g.heldCalls.Wait()
	var errs []error
	for _, l := range g.top.Load().links {
		errs = append(errs, l.close())
	}
	return errors.Join(errs...)
}

// Policy is the policy the gateway serves new calls under: Options.Policy,
// or the last Reload's.
func (g *Gateway) Policy() *Policy { return g.policy.Load() }

// Started is closed once Start has launched the upstreams: from then on
// the gateway takes a Reload (one before is refused). A configuration
// reread while the runtime starts waits for it.
func (g *Gateway) Started() <-chan struct{} { return g.startedCh }

// Upstreams reports each upstream's state, in the order given (by New, or
// by the last Reload); one a Reload is draining is no longer among them.
func (g *Gateway) Upstreams() []UpstreamState {
	links := g.top.Load().links
	out := make([]UpstreamState, 0, len(links))
	for _, l := range links {
		out = append(out, l.state())
	}
	return out
}
