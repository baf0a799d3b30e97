package host

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/auth/oauth"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/status"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
	"github.com/mcprel/mcprel/tracing"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
	"github.com/prometheus/client_golang/prometheus"
)

// The steps of the shutdown, in their order (see the package doc).
const (
	stepDrain          = "drain"
	stepCloseTransport = "close-transport"
	stepUpstreams      = "upstreams"
	stepTasks          = "tasks"
	stepOutbox         = "outbox"
	stepMetrics        = "metrics"
	stepReaper         = "reaper"
	stepStore          = "store"
	stepTraces         = "traces"
)

// flushTimeout bounds the last steps that talk to the network after the
// grace: closing idle HTTP connections and sending buffered spans.
const flushTimeout = 5 * time.Second

// Runtime is an assembled mcprel server: New builds it, the caller
// registers its tools on Server (and Tasks), and Run serves until its
// context ends, then stops in the documented order.
type Runtime struct {
	opts   Options
	logger *slog.Logger

	db      *store.DB
	ledger  *ledger.Ledger
	srv     *server.Server
	tasks   *taskserver.Server
	metrics *metrics.Observer
	// storeMetrics holds the gauge of unknown outcomes; nil without
	// metrics.
	storeMetrics *metrics.StoreMetrics
	gateway      *gateway.Gateway
	// dispatcher delivers the outbox's intents; nil without receivers.
	dispatcher *outbox.Dispatcher
	// taskStore and outbox (nil without receivers) are counted on the
	// status page.
	taskStore *tasks.Store
	outbox    *outbox.Outbox

	// started is when New began; status is the operator's status page,
	// served beside the metrics (nil without them); upstreamWatch keeps
	// the upstreams' recent latency and last error for it (nil without a
	// gateway).
	started       time.Time
	status        *status.Page
	upstreamWatch *upstreamWatch
	// replica names this process on the status page; board is where it
	// writes its upstreams for the other replicas' pages to list, and
	// reads theirs (nil without the status page).
	replica string
	board   *replicaBoard

	// HTTP: the handler and the bound listener, and the endpoint's URL.
	handler  *streamhttp.Handler
	ln       net.Listener
	endpoint string
	// oauth is the resource server of Options.OAuth; nil without it.
	oauth *oauth.ResourceServer
	// The metrics' own listener, when Metrics.Addr is set.
	metricsLn  net.Listener
	metricsURL string

	ran      atomic.Bool
	stopOnce sync.Once
	// stepHook, when set (by tests), is told of each shutdown step
	// before it runs.
	stepHook func(step string)
}

// New binds the listeners, opens the store, the ledger and the task
// store, and builds the server with its observers and the task server on
// it. Nothing is served until Run. On error, whatever was opened is
// closed; an address that cannot be bound fails New before the store is
// opened, so that it creates nothing.
// ctx bounds the opening only.
func New(ctx context.Context, opts *Options) (_ *Runtime, err error) {
	rt := &Runtime{started: time.Now()}
	if opts != nil {
		rt.opts = *opts
	}
	o := &rt.opts
	if o.Addr != "" && o.Path == "" {
		o.Path = DefaultPath
	}
	// From here on the runtime owns what it opened (and FlushTraces):
	// a failure releases it in the shutdown's order.
	defer func() {
		if err != nil {
			rt.stop(nil)
		}
	}()
	if err := o.check(); err != nil {
		return nil, err
	}
	// Copies of every slice the runtime appends to, so that the caller's
	// options are never written through.
	o.Server.Interceptors = slices.Clone(o.Server.Interceptors)
	o.Server.Observers = slices.Clone(o.Server.Observers)
	o.Ledger.Observers = slices.Clone(o.Ledger.Observers)
	o.Runner.Observers = slices.Clone(o.Runner.Observers)
	if len(o.HTTP.AllowedHosts) > 0 {
		// The loopback names stay allowed beside the ones given.
		o.HTTP.AllowedHosts = append(slices.Clone(o.HTTP.AllowedHosts), "localhost", "127.0.0.1", "::1")
	}

	rt.logger = cmp.Or(o.Server.Logger, slog.Default())
	if o.Addr != "" {
		o.Server.Interceptors = append(o.Server.Interceptors, advertiseKeepAlive(cmp.Or(o.HTTP.KeepAlive, streamhttp.DefaultKeepAlive)))
	}
	var gwMetrics *metrics.GatewayMetrics
	if o.Metrics.enabled() {
		reg := prometheus.NewRegistry()
		if rt.metrics, err = metrics.New(reg, &metrics.Options{Tenants: o.Metrics.Tenants}); err != nil {
			return nil, err
		}
		if o.Gateway != nil {
			if gwMetrics, err = metrics.NewGateway(reg, "", rt.upstreamStats); err != nil {
				return nil, err
			}
		}
		sm, err := metrics.NewStore(reg, nil)
		if err != nil {
			return nil, err
		}
		rt.storeMetrics = sm
		o.Server.Observers = append(o.Server.Observers, rt.metrics)
		o.Ledger.Observers = append(o.Ledger.Observers, sm)
		o.Store.OnCommit = chainCommit(o.Store.OnCommit, sm.Committed)
		o.Runner.OnEvent = chainEvent(o.Runner.OnEvent, taskMetrics(rt.metrics))
	}
	var tracer *tracing.Observer
	if o.TracerProvider != nil {
		tracer = tracing.New(o.TracerProvider, nil)
		o.Server.Observers = append(o.Server.Observers, tracer)
		o.Ledger.Observers = append(o.Ledger.Observers, tracer)
		o.Runner.Observers = append(o.Runner.Observers, tracer)
		// Each request's log line names its trace and span.
		rt.logger = slog.New(tracing.LogHandler(rt.logger.Handler()))
	}
	o.Server.Logger = rt.logger

	// The listeners first: an address that cannot be bound (taken, not
	// local) fails the start before anything is created — a SQLite file
	// included, which a user who mistyped a port would find left behind.
	if o.Metrics.Addr != "" {
		if rt.metricsLn, err = net.Listen("tcp", o.Metrics.Addr); err != nil {
			return nil, &ListenError{Option: "Metrics.Addr", Err: err}
		}
		rt.metricsURL = "http://" + rt.metricsLn.Addr().String() + "/metrics"
	}
	if o.Addr != "" {
		if rt.ln, err = net.Listen("tcp", o.Addr); err != nil {
			return nil, &ListenError{Option: "Addr", Err: err}
		}
	}
	if rt.db, err = store.Open(ctx, o.DB, &o.Store); err != nil {
		return nil, err
	}
	if rt.ledger, err = ledger.Open(ctx, rt.db, &o.Ledger); err != nil {
		return nil, err
	}
	st, err := tasks.Open(ctx, rt.db, &o.Tasks)
	if err != nil {
		return nil, err
	}
	rt.taskStore = st
	if rt.srv, err = server.New(o.Implementation, &o.Server); err != nil {
		return nil, err
	}
	if rt.metrics != nil {
		rt.metrics.Attach(rt.srv)
	}
	if tracer != nil {
		tracer.Attach(rt.srv)
	}
	if rt.tasks, err = taskserver.New(rt.srv, st, &taskserver.Options{Runner: o.Runner}); err != nil {
		return nil, err
	}
	if len(o.Dispatcher.Receivers) > 0 {
		ob, err := outbox.Open(ctx, rt.db, &o.Outbox)
		if err != nil {
			return nil, err
		}
		rt.outbox = ob
		do := o.Dispatcher
		do.Logger = cmp.Or(do.Logger, rt.logger)
		if rt.dispatcher, err = outbox.NewDispatcher(ob, &do); err != nil {
			return nil, err
		}
	}
	if o.Gateway != nil {
		gw := *o.Gateway
		gw.Logger = cmp.Or(gw.Logger, rt.logger)
		gw.Ledger = cmp.Or(gw.Ledger, rt.ledger)
		gw.Tasks = cmp.Or(gw.Tasks, rt.tasks)
		if gwMetrics != nil {
			gw.Observer = observeBoth(gw.Observer, gatewayMetrics{gwMetrics})
		}
		if o.Metrics.enabled() {
			rt.upstreamWatch = newUpstreamWatch(gw.Upstreams)
			gw.Observer = observeBoth(gw.Observer, rt.upstreamWatch)
		}
		if tracer != nil {
			gw.Interceptors = func(upstream string) []client.Interceptor { return []client.Interceptor{tracer.Client(upstream)} }
		}
		if rt.gateway, err = gateway.New(rt.srv, &gw); err != nil {
			return nil, err
		}
	}
	if o.Metrics.enabled() {
		rt.replica = cmp.Or(o.Replica, replicaName())
		if err := rt.db.Migrate(ctx, "status", replicaMigrations); err != nil {
			return nil, err
		}
		rt.board = &replicaBoard{db: rt.db, name: rt.replica, now: time.Now, logger: rt.logger}
		if rt.gateway != nil {
			rt.board.upstreams = replicaUpstreams(rt.gateway)
		}
		rt.status = rt.newStatusPage()
	}
	if o.Addr != "" {
		// Connections are capped below the open-file limit: past the cap
		// a new one gets 503 at once, instead of the process failing to
		// accept anyone when descriptors run out.
		rt.ln = streamhttp.LimitListener(rt.ln, &o.Listener)
		tcp, _ := rt.ln.Addr().(*net.TCPAddr)
		rt.endpoint = endpointURL(tcp, rt.ln.Addr().String(), o.Path)
		if o.OAuth != nil {
			if err := rt.protect(ctx); err != nil {
				return nil, err
			}
		}
		if rt.handler, err = streamhttp.NewHandler(rt.srv, &o.HTTP); err != nil {
			return nil, err
		}
	}
	return rt, nil
}

// Server is the MCP server: register tools, resources and prompts on it
// before Run.
func (rt *Runtime) Server() *server.Server { return rt.srv }

// Ledger is the idempotency ledger in the runtime's store, for tools that
// commit their effects with their records (idempotency.Keyed); it shares
// the tasks' store, so a keyed task's creation commits with its key.
func (rt *Runtime) Ledger() *ledger.Ledger { return rt.ledger }

// Tasks is the task server: give it to taskserver.AsTask for the tools
// that may run as durable tasks, before Run.
func (rt *Runtime) Tasks() *taskserver.Server { return rt.tasks }

// Dispatcher is the outbox's dispatcher — give it to delivery.Outbox for
// the keyed tools whose effects are its receivers' — or nil when
// Options.Dispatcher names no receiver.
func (rt *Runtime) Dispatcher() *outbox.Dispatcher { return rt.dispatcher }

// Gateway is the gateway Options.Gateway put in front of the server, or
// nil: what a configuration reread while the runtime runs is given to
// (gateway.Gateway.Reload), its upstreams and policy replaced in place.
func (rt *Runtime) Gateway() *gateway.Gateway { return rt.gateway }

// ReloadGateway applies ups and policy to the runtime's gateway
// (gateway.Gateway.Reload), and has the status page follow: it watches
// the upstreams added and takes their secrets out of what it shows.
func (rt *Runtime) ReloadGateway(ctx context.Context, ups []gateway.Upstream, policy *gateway.Policy) (gateway.Changes, error) {
	if rt.gateway == nil {
		return gateway.Changes{}, errors.New("host: the runtime has no gateway to reload")
	}
	changes, err := rt.gateway.Reload(ctx, ups, policy)
	if err == nil && rt.upstreamWatch != nil {
		rt.upstreamWatch.reloaded(ups)
	}
	return changes, err
}

// Logger is the logger the server writes its request lines to (with trace
// ids when tracing is on).
func (rt *Runtime) Logger() *slog.Logger { return rt.logger }

// Endpoint is the URL clients reach the HTTP endpoint at, with a loopback
// host when Addr is unspecified (0.0.0.0); "" over stdio. It is known, and
// connections are queued, from New on; requests are served from Run on.
func (rt *Runtime) Endpoint() string { return rt.endpoint }

// MetricsURL is the URL of the metrics on their own listener
// (Metrics.Addr); "" without one.
func (rt *Runtime) MetricsURL() string { return rt.metricsURL }

// StatusURL is the URL of the status page on the metrics' own listener
// (Metrics.Addr); "" without one. Its JSON is at the same URL plus
// ".json". Beside Metrics.Path, the page is at "status" in the same
// directory (/metrics → /status).
func (rt *Runtime) StatusURL() string {
	if rt.metricsURL == "" {
		return ""
	}
	return strings.TrimSuffix(rt.metricsURL, "/metrics") + "/status"
}

// Run starts the background work (the ledger's reaper, the task
// maintainer, the metrics listener), serves until ctx ends or the
// transport ends (stdin closed, the HTTP server failed), and stops in the
// documented order. It returns nil after a graceful shutdown, and the
// transport's error otherwise. Run may be called once, and not after
// Close.
func (rt *Runtime) Run(ctx context.Context) error {
	if !rt.ran.CompareAndSwap(false, true) {
		return errors.New("host: Run called twice, or after Close")
	}
	reapCtx, stopReaper := context.WithCancel(context.Background())
	reaped := make(chan struct{})
	go func() {
		// The gauge of unknown outcomes is counted beside the reaper,
		// and stops with it, before the store closes.
		counted := make(chan struct{})
		if rt.storeMetrics != nil {
			go func() { rt.countUnknown(reapCtx); close(counted) }()
		} else {
			close(counted)
		}
		rt.ledger.RunReaper(reapCtx, time.Minute, 1000)
		<-counted
		close(reaped)
	}()
	maintCtx, stopMaintaining := context.WithCancel(context.Background())
	maintained := make(chan struct{})
	go func() { rt.tasks.Maintain(maintCtx, 0); close(maintained) }()
	dispatchCtx, stopDispatching := context.WithCancel(context.Background())
	dispatched := make(chan struct{})
	if rt.dispatcher != nil {
		go func() { rt.dispatcher.Run(dispatchCtx); close(dispatched) }()
	} else {
		close(dispatched)
	}
	var metricsServer *http.Server
	if rt.metricsLn != nil {
		metricsServer = rt.serveMetrics()
	}
	if rt.gateway != nil {
		// The upstreams are listed before the first client can ask for
		// the tools: over stdio it asks at once.
		if err := rt.gateway.Start(ctx); err != nil {
			rt.stop(&background{stopReaper: stopReaper, reaped: reaped, stopMaintaining: stopMaintaining, maintained: maintained,
				stopDispatching: stopDispatching, dispatched: dispatched, metrics: metricsServer})
			return err
		}
	}
	// This replica's upstreams are written for the other replicas' status
	// pages once they are started, so that the first row says how they
	// came up.
	var stopBoard context.CancelFunc
	boarded := make(chan struct{})
	if rt.board != nil {
		var boardCtx context.Context
		boardCtx, stopBoard = context.WithCancel(context.Background())
		go func() { rt.board.run(boardCtx); close(boarded) }()
	} else {
		close(boarded)
	}

	var err error
	if rt.handler != nil {
		err = rt.serveHTTP(ctx)
	} else {
		err = rt.serveStdio(ctx)
	}
	rt.stop(&background{stopReaper: stopReaper, reaped: reaped, stopMaintaining: stopMaintaining, maintained: maintained,
		stopDispatching: stopDispatching, dispatched: dispatched, metrics: metricsServer, stopBoard: stopBoard, boarded: boarded})
	return err
}

// Close releases a runtime whose Run is never called (say, a tool failed
// to register): it closes the listeners and the store and flushes the
// traces. After Run it does nothing.
func (rt *Runtime) Close() error {
	if rt.ran.CompareAndSwap(false, true) {
		rt.stop(nil)
	}
	return nil
}

// background is what Run started and stop ends.
type background struct {
	stopReaper      context.CancelFunc
	reaped          chan struct{}
	stopMaintaining context.CancelFunc
	maintained      chan struct{}
	stopDispatching context.CancelFunc
	dispatched      chan struct{}
	metrics         *http.Server
	// stopBoard is nil when this replica's upstreams were never written.
	stopBoard context.CancelFunc
	boarded   chan struct{}
}

// stop runs the shutdown's steps from "tasks" on (the transport's steps
// come first, in serveHTTP and serveStdio), once. bg is nil when Run never
// started: only what New opened is released.
func (rt *Runtime) stop(bg *background) {
	rt.stopOnce.Do(func() {
		if bg == nil {
			// Never served: the server and the handler end at once, and
			// the listener New bound closes.
			done, cancel := context.WithCancel(context.Background())
			cancel()
			if rt.srv != nil {
				rt.srv.Shutdown(done)
			}
			if rt.handler != nil {
				rt.handler.Shutdown(done)
			}
			if rt.ln != nil {
				rt.ln.Close()
			}
		}
		rt.step(stepUpstreams)
		if bg != nil && bg.stopBoard != nil {
			// It stops serving: the other replicas' pages stop listing
			// it (and its upstreams, which close next) at once, not a
			// minute later.
			bg.stopBoard()
			<-bg.boarded
			rt.board.remove()
		}
		if rt.gateway != nil {
			// After the transport: calls still forwarded have drained
			// or been cancelled (and their upstreams told).
			rt.gateway.Close()
		}
		rt.step(stepTasks)
		if bg != nil {
			// Tasks still running are asked to stop at their next
			// checkpoint within the grace and left for the next process
			// to take over; then the maintainer stops, before the
			// database closes under it.
			gctx, cancel := context.WithTimeout(context.Background(), rt.opts.ShutdownGrace)
			if rt.tasks.Shutdown(gctx) != nil {
				rt.logger.Warn("tasks still running after the shutdown grace are left to be taken over when their lease expires",
					"lease", cmp.Or(rt.opts.Tasks.Lease, tasks.DefaultLease))
			}
			cancel()
			bg.stopMaintaining()
			<-bg.maintained
		}
		rt.step(stepOutbox)
		if bg != nil {
			// After the calls and the tasks, which record intents; the
			// deliveries in flight are recorded before the store closes.
			bg.stopDispatching()
			<-bg.dispatched
		}
		rt.step(stepMetrics)
		switch {
		case bg != nil && bg.metrics != nil:
			bg.metrics.Close()
		case rt.metricsLn != nil:
			rt.metricsLn.Close()
		}
		rt.step(stepReaper)
		if bg != nil {
			// The reaper stops before the database closes under it.
			bg.stopReaper()
			<-bg.reaped
		}
		rt.step(stepStore)
		if rt.db != nil {
			rt.db.Close()
		}
		rt.step(stepTraces)
		if rt.opts.FlushTraces != nil {
			fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
			rt.opts.FlushTraces(fctx)
			cancel()
		}
	})
}

// step tells the test hook that a shutdown step begins.
func (rt *Runtime) step(name string) {
	if rt.stepHook != nil {
		rt.stepHook(name)
	}
}

// serveStdio serves the stdio connection until it ends or ctx ends; then
// the server drains within the grace and the connection ends with it.
func (rt *Runtime) serveStdio(ctx context.Context) error {
	in, out := rt.opts.Stdin, rt.opts.Stdout
	if in == nil {
		in = os.Stdin
	}
	if out == nil {
		out = os.Stdout
	}
	conn := stdio.NewConn(rt.srv, in, out, &rt.opts.Stdio)
	served := make(chan error, 1)
	// ctx's end asks for a graceful shutdown (below), not the abrupt end
	// of the connection that Serve gives a cancelled context.
	go func() { served <- conn.Serve(context.WithoutCancel(ctx)) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	rt.logger.Info("shutting down", "grace", rt.opts.ShutdownGrace)
	rt.step(stepDrain)
	gctx, cancel := context.WithTimeout(context.Background(), rt.opts.ShutdownGrace)
	defer cancel()
	rt.srv.Shutdown(gctx)
	rt.step(stepCloseTransport)
	return <-served // the connection's Serve returns once the server stopped
}

// chainCommit returns a commit hook that calls f, then g; either may be
// nil.
func chainCommit(f, g func(int, time.Duration)) func(int, time.Duration) {
	if f == nil {
		return g
	}
	return func(ops int, d time.Duration) { f(ops, d); g(ops, d) }
}

// chainEvent returns a task event hook that calls f, then g; either may be
// nil.
func chainEvent(f, g func(tasks.Event)) func(tasks.Event) {
	if f == nil {
		return g
	}
	return func(e tasks.Event) { f(e); g(e) }
}

// taskMetrics turns the runner's task events into metrics.
func taskMetrics(obs *metrics.Observer) func(tasks.Event) {
	return func(e tasks.Event) {
		switch e.Kind {
		case tasks.TaskStarted:
			obs.TaskStarted(e.Tool)
		case tasks.TaskLeft:
			obs.TaskLeft(e.Tool)
		case tasks.TaskEnded:
			obs.TaskEnded(e.Tool, e.Status.String(), e.Duration)
			if e.CancelObserved {
				obs.TaskCancelObserved(e.Tool, e.CancelDelay)
			}
		case tasks.TaskTakenOver:
			obs.TaskTakenOver(e.Tool, e.Status != tasks.Failed)
		case tasks.TaskExpired:
			obs.TaskExpired(e.Tool, e.Status.String())
		}
	}
}

// advertiseKeepAlive puts the SSE keepalive cadence in every tool's _meta
// (mcp.MetaKeepAliveMs), for a reviewer reading tools/list: the one
// setting of the stream a client cannot see in a quiet moment.
func advertiseKeepAlive(every time.Duration) server.ToolInterceptor {
	return func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		if t.Meta == nil {
			t.Meta = mcp.Meta{}
		}
		t.Meta[mcp.MetaKeepAliveMs] = every.Milliseconds()
		return next, nil
	}
}

// unknownRefresh is how often the gauge of unknown outcomes is counted
// again; tests shorten it.
var unknownRefresh = 30 * time.Second

// countUnknown sets the gauge of the ledger's unresolved unknown outcomes
// (mcprel_ledger_unknown_outcomes) now and every unknownRefresh until ctx
// ends. The count reads the index of unknown outcomes only; a failed count
// leaves the gauge as it was.
func (rt *Runtime) countUnknown(ctx context.Context) {
	t := time.NewTicker(unknownRefresh)
	defer t.Stop()
	for {
		if counts, err := rt.ledger.UnknownByTool(ctx); err == nil {
			rt.storeMetrics.SetUnknownOutcomes(counts)
		} else if ctx.Err() == nil {
			rt.logger.Warn("counting the ledger's unknown outcomes failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
