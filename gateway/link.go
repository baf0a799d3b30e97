package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/time/rate"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/server"
)

// refusedLogEvery is how often, at most, a link logs that its upstream
// refuses the gateway's credentials.
const refusedLogEvery = 30 * time.Second

// link is the gateway's side of one upstream: its connection (or, for a
// 2025-era HTTP upstream, one session per tenant), the supervision that
// keeps it up, its circuit, and the relisting that follows every
// (re)connection and list change.
type link struct {
	g     *Gateway
	up    Upstream
	index int
	log   *slog.Logger

	// refusedLog bounds the warning logged when the upstream refuses the
	// gateway's credentials to one per refusedLogEvery, however many
	// calls are refused; refusedQuiet counts those not logged since.
	refusedLog   rate.Sometimes
	refusedQuiet atomic.Int64

	firstListed chan struct{} // closed after the first successful listing
	listedOnce  sync.Once
	firstTried  chan struct{} // closed once the first connection was listed, or failed
	triedOnce   sync.Once
	refresh     chan struct{} // a list changed upstream: relist (1-buffered, coalescing)
	reconnected chan struct{} // the client connected again: follow it again (1-buffered, coalescing)

	group *server.LimitGroup // the upstream's Limits, shared by its tools

	// ctx is the link's life: it ends with the gateway, or when a Reload
	// that took the upstream out has drained it (errClosing, either way).
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when run has returned
	// cut ends (errClosing) the forwards still in flight when a Reload's
	// drain of the link outlasts its grace (cutOff): Close leaves them to
	// end with their connections, as it always has.
	cut    context.Context
	cutOff context.CancelCauseFunc

	// Guarded by Gateway.mu: what the upstream last listed, of each kind
	// (served again when a Reload renames or re-polices its tools), and
	// whether a Reload took it out (it serves nothing any more).
	listing struct {
		tools     []mcp.Tool
		prompts   []mcp.Prompt
		resources []mcp.Resource
		templates []mcp.ResourceTemplate
	}
	retired bool

	mu      sync.Mutex
	primary *client.Client // nil until the first connection
	live    bool           // the primary connection is up now (the client reconnects it)
	era     mcp.Era
	// tasksExtension: a 2026-07-28 upstream serves the tasks extension,
	// so it may make any call a task of its own when asked.
	tasksExtension bool
	circuit        circuit
	sessions       map[string]*tenantSession // one upstream session (or process) per tenant, where sessions are
	inflight       int                       // calls forwarded now, over every connection
	idle           chan struct{}             // closed when inflight falls to 0 (made by drained)
	// refused is why the upstream refused the gateway's credentials when
	// it was last dialled without success (nil once it connects): what
	// calls are told while it is not connected, for the operator to act.
	refused  *client.AuthorizationError
	restarts int
	late     uint64 // late responses counted by connections already closed
	closed   bool

	closing sync.WaitGroup // connections being closed apart (closeLater)

	// hc carries every HTTP connection to the upstream — the primary's
	// and each tenant's 2025 session — so that their pooled connections
	// are bounded once per upstream, not once per session (nil: stdio, or
	// Options.Client.HTTPClient given). Package client uses it (or the
	// one given) through a copy that follows no redirect, so Upstream.Header
	// and a forwarded call go to Upstream.URL alone.
	hc *http.Client

	// budget is the upstream's retry budget, which every tool's retries
	// spend: retries stay a fraction of the calls.
	budget *retry.Budget
}

func newLink(g *Gateway, u Upstream, index int) (*link, error) {
	l := &link{
		g: g, up: u, index: index,
		log:         g.log.With("upstream", u.Name),
		firstListed: make(chan struct{}),
		firstTried:  make(chan struct{}),
		refresh:     make(chan struct{}, 1),
		reconnected: make(chan struct{}, 1),
		sessions:    map[string]*tenantSession{},
		budget:      new(retry.Budget),
		circuit:     circuit{threshold: g.opts.CircuitFailures, base: g.opts.CircuitCooldown, cap: g.opts.RestartCap},
		refusedLog:  rate.Sometimes{First: 1, Interval: refusedLogEvery},
	}
	l.ctx, l.cancel = context.WithCancelCause(g.ctx)
	l.done = make(chan struct{})
	l.cut, l.cutOff = context.WithCancelCause(context.Background())
	if u.Transport != Stdio && g.opts.Client.HTTPClient == nil {
		l.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
	}
	if u.Limits != (server.Limits{}) {
		var err error
		if l.group, err = server.NewLimitGroup(u.Name, u.Limits); err != nil {
			return nil, fmt.Errorf("gateway: upstream %q: %w", u.Name, err)
		}
	}
	return l, nil
}

// closeClient closes a connection to the upstream, keeping what it
// counted.
func (l *link) closeClient(c *client.Client) error {
	err := c.Close()
	l.mu.Lock()
	l.late += c.Stats().LateResponses
	l.mu.Unlock()
	return err
}

// run connects to the upstream, lists it and serves its list changes and
// probes until ctx ends. It dials until the first connection, after a
// capped, jittered, steady backoff; from then on the connection is the
// client's to keep (client.Supervision): when a stdio upstream dies or
// an HTTP+SSE stream ends, the client connects again — after a backoff
// that grows with consecutive failures, of a connection or of one that
// died before it had lived RestartCap — and the gateway, told by its
// hooks, refuses calls meanwhile and lists again once it is back.
func (l *link) run(ctx context.Context) {
	backoff := l.backoff()
	tried := func() { l.triedOnce.Do(func() { close(l.firstTried) }) }
	defer tried()
	var c *client.Client
	for failures := 0; ; failures++ {
		var err error
		if c, err = l.dial(ctx, "", l.up.declared()); err == nil {
			break
		}
		var refused *client.AuthorizationError
		errors.As(err, &refused)
		l.mu.Lock()
		l.refused = refused
		l.mu.Unlock()
		tried()
		pause := backoff.Delay(failures, 0)
		l.wentDown(EventConnectFailed, failures+1, pause, err)
		if ctx.Err() != nil || !retry.Wait(ctx, pause) {
			return
		}
	}
	l.setPrimary(c)
	l.log.Info("gateway: upstream connected", "era", c.ProtocolVersion(), "transport", string(l.up.Transport))
	sub := l.listen(ctx, c)
	l.relist(ctx, c)
	tried()
	l.serve(ctx, c, &sub)
	if sub != nil {
		sub.Close()
	}
}

// backoff spaces the connections to the upstream.
func (l *link) backoff() retry.Backoff {
	return retry.Backoff{Base: l.g.opts.RestartBase, Cap: l.g.opts.RestartCap, Steady: true}
}

// supervision is how the client keeps the primary connection up: the
// gateway hears of each death and failed try (down) and of each
// reconnection (l.reconnected, which serve acts on).
func (l *link) supervision() *client.Supervision {
	return &client.Supervision{
		Backoff: l.backoff(),
		Healthy: l.g.opts.RestartCap,
		OnDown: func(failures int, next time.Duration, err error) {
			kind := EventConnectFailed
			if err == nil {
				kind = EventDied
				l.mu.Lock()
				l.restarts++
				l.mu.Unlock()
			}
			l.wentDown(kind, failures, next, err)
		},
		OnUp: func(context.Context) {
			select {
			case l.reconnected <- struct{}{}:
			default:
			}
		},
	}
}

// wentDown refuses calls at once until the next try to connect, and says so.
func (l *link) wentDown(kind EventKind, failures int, next time.Duration, err error) {
	l.mu.Lock()
	l.live = false
	l.mu.Unlock()
	l.markDown(next)
	l.g.obs.UpstreamEvent(UpstreamEvent{Upstream: l.up.Name, Kind: kind, Failures: failures, Next: next, Err: err})
	why := "gateway: could not connect to the upstream"
	if kind == EventDied {
		why = "gateway: the upstream's connection ended; connecting again"
	}
	l.log.Warn(why, "err", err, "failures", failures, "next_try", next)
}

// serve waits on the connection until ctx ends: it relists on a list
// change, follows the upstream again once the client reconnected (a new
// process or stream: what changed meanwhile was never announced), probes
// an open circuit, closes idle tenant sessions.
func (l *link) serve(ctx context.Context, c *client.Client, sub **client.Subscription) {
	tick := time.NewTicker(l.tickEvery())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.reconnected:
			l.setPrimary(c) // the circuit starts over
			l.g.obs.UpstreamEvent(UpstreamEvent{Upstream: l.up.Name, Kind: EventReconnected})
			l.log.Info("gateway: upstream connected again", "era", c.ProtocolVersion(), "transport", string(l.up.Transport))
			if *sub != nil {
				(*sub).Close()
			}
			*sub = l.listen(ctx, c)
			l.relist(ctx, c)
		case <-l.refresh:
			l.relist(ctx, c)
		case <-tick.C:
			l.closeIdleSessions(time.Now())
			if l.probeDue(time.Now()) {
				l.probe(ctx, c)
			}
		}
	}
}

func (l *link) tickEvery() time.Duration {
	return min(l.g.opts.CircuitCooldown, l.g.opts.SessionIdle/2, time.Second)
}

// probe pings an upstream whose circuit is open; success closes it and
// relists (what changed while it was unreachable was not announced).
func (l *link) probe(ctx context.Context, c *client.Client) {
	pctx, cancel := context.WithTimeout(ctx, l.g.opts.CircuitCooldown+l.g.opts.ClockSlack)
	defer cancel()
	// The circuit interceptor records what the ping found: an answer of
	// any kind, even an error, proves the upstream reachable.
	if _, err := c.Request(pctx, mcp.MethodPing, "", nil, nil); !isDown(err) {
		l.relist(ctx, c)
	}
}

// listen follows a 2026-07-28 upstream's list changes: that era sends
// them only on a subscriptions/listen stream (a 2025 upstream sends them
// on its session, to onNotification). The client keeps the stream open
// and refetches after each reconnection, which here is a relisting. An
// upstream that refuses the subscription is listed after each
// reconnection only.
func (l *link) listen(ctx context.Context, c *client.Client) *client.Subscription {
	if c.Era() != mcp.Modern {
		return nil
	}
	caps := c.ServerCapabilities()
	filter := mcp.SubscriptionFilter{
		ToolsListChanged:     caps.Tools != nil,
		PromptsListChanged:   caps.Prompts != nil,
		ResourcesListChanged: caps.Resources != nil,
	}
	lctx, cancel := context.WithTimeout(ctx, l.g.opts.StartWait)
	defer cancel()
	sub, err := c.Listen(lctx, client.ListenOptions{
		Filter:         filter,
		OnNotification: l.onNotification,
		Refetch:        func(context.Context) { l.onNotification(mcp.NotificationToolsListChanged, nil) },
	})
	if err != nil {
		l.log.Info("gateway: the upstream's list changes cannot be followed; it is relisted after each reconnection", "err", err)
		return nil
	}
	return sub
}

// dial connects to the upstream, for tenant (a 2025-era HTTP session of
// its own) or for the gateway ("": the primary connection, which lists),
// declaring caps.
func (l *link) dial(ctx context.Context, tenant string, caps mcp.ClientCapabilities) (*client.Client, error) {
	o := l.g.opts.Client
	o.Interceptors = l.interceptors()
	o.Logger = l.log
	o.Restart = false
	o.Supervise = nil
	if tenant == "" {
		o.Supervise = l.supervision()
	}
	o.Stderr = nil
	o.Env, o.Environ = nil, nil
	o.Header = nil
	o.Authorizer = nil // an HTTP upstream's own, set below
	if l.hc != nil {
		o.HTTPClient = l.hc
	}
	// The gateway relays elicitation, sampling and roots to the
	// downstream client that made the call, when that client declared
	// them (a request it did not is refused). A request outside any call
	// the gateway can attribute (roots asked at start-up, say) names no
	// downstream client and is refused.
	o.Capabilities = caps
	o.OnRequest = l.unattributed
	// The questions held calls wait on are the server's requests being
	// answered: the gateway's bounds on those decide, not the client's.
	o.MaxServerRequests = l.g.opts.MaxHeld*maxQuestions + client.DefaultMaxServerRequests
	o.MaxServerRequestBytes = l.g.opts.MaxHeldBytes + client.DefaultMaxServerRequestBytes
	if tenant == "" {
		o.OnNotification = l.onNotification
	} else {
		o.OnNotification = nil
	}
	dctx, cancel := context.WithTimeout(ctx, l.g.opts.StartWait)
	defer cancel()
	switch l.up.Transport {
	case Stdio:
		o.Environ, o.Env = l.g.opts.upstreamEnviron(), l.up.Env
		log := l.log
		if tenant != "" {
			log = log.With("tenant", tenant)
		}
		o.Stderr = &stderrLog{log: log}
		return client.DialStdio(dctx, l.up.Command, &o)
	case SSE:
		o.Header = l.up.Header.Clone()
		o.Authorizer = l.up.Authorizer
		return client.DialSSE(dctx, l.up.URL, &o)
	default:
		o.Header = l.up.Header.Clone()
		o.Authorizer = l.up.Authorizer
		if o.Header == nil {
			o.Header = http.Header{}
		}
		return client.DialHTTP(dctx, l.up.URL, &o)
	}
}

// unattributed answers a request the upstream sent that belongs to no
// call the gateway can name (stdio carries no association, and requests
// arrive outside any call): it is refused, never shown to an arbitrary
// downstream client — except roots/list while no call is in flight,
// answered with no roots.
func (l *link) unattributed(ctx context.Context, method string, _ json.RawMessage) (any, error) {
	l.mu.Lock()
	idle := l.inflight == 0
	l.mu.Unlock()
	if method == mcp.MethodListRoots && idle {
		// Asked at start-up by many servers, which report a refusal as a
		// failure at every start: the gateway has no roots of its own and
		// no call is in flight to ask for, so the quiet answer is none.
		// (With calls in flight it may be asking for one: refused.)
		l.log.Debug("gateway: answered the upstream's roots/list outside any call: no roots")
		return json.RawMessage(`{"roots":[]}`), nil
	}
	l.log.Debug("gateway: refused a request the upstream sent outside a call it can attribute", "method", method)
	return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound,
		"the gateway relays %s only during a call it can attribute to one downstream client", method)
}

// onNotification runs on the client's reader: it must not block.
func (l *link) onNotification(method string, params json.RawMessage) {
	switch method {
	case mcp.NotificationToolsListChanged, mcp.NotificationPromptsChanged, mcp.NotificationResourcesChanged:
		select {
		case l.refresh <- struct{}{}:
		default: // a relisting is already due
		}
	case mcp.NotificationResourceUpdated:
		var p mcp.ResourceUpdatedParams
		if json.Unmarshal(params, &p) == nil && l.g.ownsResource(l, p.URI) {
			l.g.srv.NotifyResourceUpdated(p.URI)
		}
	case mcp.NotificationMessage:
		l.log.Debug("gateway: the upstream logged", "message", string(clip(params, 512)))
	}
}

func (l *link) setPrimary(c *client.Client) {
	l.mu.Lock()
	l.primary, l.live = c, c != nil
	if c != nil {
		l.refused = nil
		l.era = c.Era()
		l.tasksExtension = c.ServerCapabilities().Extensions[mcp.ExtensionTasks] != nil
		l.circuit.reset()
	}
	l.mu.Unlock()
	if c != nil {
		l.circuitChanged()
	}
}

// markDown refuses calls at once until the next connection attempt.
func (l *link) markDown(next time.Duration) {
	l.mu.Lock()
	l.circuit.down(time.Now().Add(next))
	l.mu.Unlock()
	l.circuitChanged()
}

func (l *link) probeDue(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.circuit.probeDue(now)
}

func (l *link) circuitChanged() {
	l.mu.Lock()
	st := l.circuit.state()
	l.mu.Unlock()
	l.g.obs.UpstreamEvent(UpstreamEvent{Upstream: l.up.Name, Kind: EventCircuit, Circuit: st})
}

// errUnavailable is an upstream that cannot take a call now.
type errUnavailable struct {
	after time.Duration
	why   string
}

func (e *errUnavailable) Error() string { return e.why }

// listed reports whether the upstream's tools were ever listed (and so
// are served, as last listed, while it is down).
func (l *link) listed() bool {
	select {
	case <-l.firstListed:
		return true
	default:
		return false
	}
}

// down is the failure of a call to the upstream while it has never been
// listed: it is not connected, or could not be, and comes back after the
// next try.
func (l *link) down() *errUnavailable {
	l.mu.Lock()
	wait, _ := l.circuit.refuses(time.Now())
	l.mu.Unlock()
	return &errUnavailable{after: max(wait, l.g.opts.RestartBase),
		why: fmt.Sprintf("upstream %q is unavailable: it is not connected (its tools are not listed yet)", l.up.Name)}
}

// refusal is why the upstream refused the gateway's credentials when it
// was last dialled without success; nil once it connects, or when it
// failed for another reason.
func (l *link) refusal() *client.AuthorizationError {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

// acquire returns the connection a call of tenant's goes over, counting it
// in flight until release. A 2026-07-28 upstream, and a stdio one, is one
// connection for everyone; a 2025-era HTTP upstream has a session per
// tenant, dialled on first use.
func (l *link) acquire(ctx context.Context, tenant string, caps mcp.ClientCapabilities) (*client.Client, func(), error) {
	now := time.Now()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, &errUnavailable{after: time.Second, why: "the gateway is closing"}
	}
	if wait, open := l.circuit.refuses(now); open {
		l.mu.Unlock()
		return nil, nil, &errUnavailable{after: wait, why: fmt.Sprintf("upstream %q is unavailable (its circuit is open)", l.up.Name)}
	}
	c := l.primary
	if c == nil && l.refused != nil {
		refused := l.refused
		l.mu.Unlock()
		return nil, nil, refused
	}
	if c == nil {
		l.mu.Unlock()
		return nil, nil, &errUnavailable{after: l.g.opts.RestartBase, why: fmt.Sprintf("upstream %q is not connected yet", l.up.Name)}
	}
	perTenant := tenant != "" && ((l.era == mcp.Legacy && l.up.Transport != Stdio) || l.up.PerTenant)
	l.inflight++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		l.inflight--
		if l.inflight == 0 && l.idle != nil {
			close(l.idle)
			l.idle = nil
		}
		l.mu.Unlock()
	}
	if !perTenant {
		return c, release, nil
	}
	tc, done, err := l.session(ctx, tenant, caps)
	if err != nil {
		release()
		return nil, nil, err
	}
	return tc, func() { done(); release() }, nil
}

// record counts a forwarded call's outcome against the circuit: only a
// failure to reach the upstream counts, never an answer of any kind.
func (l *link) record(err error) {
	unreachable := err != nil && isDown(err)
	l.mu.Lock()
	changed := l.circuit.record(!unreachable, time.Now())
	l.mu.Unlock()
	if changed {
		l.circuitChanged()
	}
}

func (l *link) state() UpstreamState {
	l.mu.Lock()
	defer l.mu.Unlock()
	late := l.late
	if l.primary != nil {
		late += l.primary.Stats().LateResponses
	}
	for _, s := range l.sessions {
		if s.c != nil {
			late += s.c.Stats().LateResponses
		}
	}
	return UpstreamState{
		Name: l.up.Name, Transport: l.up.Transport, Connected: l.primary != nil && l.live,
		Era: l.era, Circuit: l.circuit.state(), InFlight: l.inflight,
		Restarts: l.restarts, Sessions: len(l.sessions), LateResponses: late,
	}
}

func (l *link) close() error {
	l.mu.Lock()
	l.closed = true
	c := l.primary
	l.primary = nil
	sessions := l.sessions
	l.sessions = map[string]*tenantSession{}
	l.mu.Unlock()
	// All at once: each may take a grace period or two to stop.
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	closeOne := func(c *client.Client) {
		wg.Go(func() {
			err := l.closeClient(c)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	for _, s := range sessions {
		if s.c != nil {
			closeOne(s.c)
		}
	}
	if c != nil {
		closeOne(c)
	}
	wg.Wait()
	l.closing.Wait()
	if l.hc != nil {
		l.hc.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// isDown reports whether err counts against the upstream's circuit, by
// its verdict: the request could not be sent (no connection), the
// gateway refused it itself, or an HTTP answer says the upstream is
// unavailable or rate limited, or an intermediary in front of it that it
// failed or did not answer (502, 504), whether or not the request got
// through. An answer of any other kind proves it reachable.
func isDown(err error) bool {
	if err == nil {
		return false
	}
	if errors.As(err, new(*errUnavailable)) {
		return true
	}
	v := client.VerdictOf(nil, err)
	switch {
	case v.Kind == retry.NotSent, v.Kind == retry.Unavailable:
		return true
	}
	return v.Status == http.StatusTooManyRequests || v.Status == http.StatusBadGateway || v.Status == http.StatusGatewayTimeout
}

func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// interceptors are what every request to the upstream passes, the first
// outermost: the forward's retries (withRetries), then the circuit, which
// counts each attempt, then the host's own (Options.Client.Interceptors,
// Options.Interceptors: spans, metrics), per attempt.
func (l *link) interceptors() []client.Interceptor {
	retries := client.Retrying(func(ctx context.Context, _ *client.Request) *client.Plan {
		if p, ok := ctx.Value(retriesKey{}).(*retries); ok {
			return &p.plan
		}
		return nil
	}, func(ctx context.Context, _ retry.Decision) {
		if p, ok := ctx.Value(retriesKey{}).(*retries); ok {
			p.rec.Retries++
		}
	})
	circuit := func(next client.CallFunc) client.CallFunc {
		return func(ctx context.Context, req *client.Request) (json.RawMessage, error) {
			raw, err := next(ctx, req)
			l.record(err)
			return raw, err
		}
	}
	all := append([]client.Interceptor{retries, circuit}, l.g.opts.Client.Interceptors...)
	if l.g.opts.Interceptors != nil {
		all = append(all, l.g.opts.Interceptors(l.up.Name)...)
	}
	return all
}

// retriesKey carries, in a forward's context, how its tools/call is made
// again upstream: by the tool's planner, each retry counted in its record.
type retriesKey struct{}

type retries struct {
	plan client.Plan
	rec  *ForwardRecord
}

// withRetries is ctx with the call retried upstream by planner: never
// past ctx's deadline, after a capped, jittered pause that honours the
// upstream's Retry-After or retryAfterMs, within the upstream's budget,
// each attempt a new request with the same arguments and so the same key
// (keyed: the call carries one, by the ledger's reading).
func withRetries(ctx context.Context, planner *retry.Planner, keyed bool, rec *ForwardRecord) context.Context {
	return context.WithValue(ctx, retriesKey{}, &retries{plan: client.Plan{Planner: planner, Keyed: keyed}, rec: rec})
}
