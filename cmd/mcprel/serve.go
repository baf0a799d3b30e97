package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
	"github.com/mcprel/mcprel/tracing"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
	"github.com/prometheus/client_golang/prometheus"
)

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func serveCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	useStdio := fs.Bool("stdio", false, "serve over stdin and stdout (the default)")
	httpAddr := fs.String("http", "", "serve Streamable HTTP on this address, e.g. 127.0.0.1:0 (a free port); the endpoint URL is printed on stderr")
	path := fs.String("path", "/mcp", "the HTTP endpoint's path")
	var hosts, origins listFlag
	fs.Var(&hosts, "allowed-host", "a Host header value to accept besides loopback names (repeatable; needed when serving beyond loopback)")
	fs.Var(&origins, "allowed-origin", "an Origin to accept, as scheme://host[:port] (repeatable; default loopback origins)")
	authToken := fs.String("auth-token", "", "require this bearer token on HTTP requests (or set MCPREL_AUTH_TOKEN); its holder is the tenant \"\", a tenant of its own beside those of --token")
	var tokens listFlag
	fs.Var(&tokens, "token", "TENANT=TOKEN: accept this bearer token for that tenant (repeatable); tenants are isolated and limited separately")
	keepAlive := fs.Duration("keepalive", streamhttp.DefaultKeepAlive, "comment line cadence on quiet SSE streams")
	var limits limitFlags
	limits.register(fs)
	grace := fs.Duration("shutdown-grace", 10*time.Second, "on SIGINT/SIGTERM, how long running calls may finish before they are cancelled")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json (log lines go to stderr)")
	var db dbFlags
	db.register(fs)
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics on a listener of their own (e.g. 127.0.0.1:9464)")
	metricsPath := fs.String("metrics-path", "", "with --http: serve Prometheus metrics at this path (e.g. /metrics) on the MCP listener, behind its Host and Origin checks")
	metricsToken := fs.String("metrics-token", "", "require this bearer token to read the metrics (or set MCPREL_METRICS_TOKEN); without it the metrics require the endpoint's own tokens (--auth-token, --token)")
	metricsOpen := fs.Bool("metrics-open", false, "serve the metrics without authentication even when the endpoint requires a token: anyone who can reach the listener reads them")
	metricsTenants := fs.Bool("metrics-tenants", false, "count requests per tenant (the TENANT of each --token) in mcprel_requests_total; only worth it with few tenants")
	lab := fs.Bool("lab", false, "also serve the lab tools that mcprel demo drives to order events with gates (lab_hold, lab_wait, lab_release, lab_tick, lab_flood, lab_task); not for production")
	otlpEndpoint := fs.String("otlp-endpoint", "", "export a trace span per request over OTLP/HTTP to this collector URL (e.g. http://127.0.0.1:4318); the standard OTEL_EXPORTER_OTLP_* variables work too; off when neither is set")
	taskLease := fs.Duration("task-lease", tasks.DefaultLease, "how long a task outlives the process running it before another process (or this one, restarted) takes it over")
	taskWorkers := fs.Int("task-workers", 8, "durable tasks that may run at once, shared fairly between tenants (more wait in a queue of 64)")
	taskMinTTL := fs.Duration("task-min-ttl", tasks.DefaultMinTTL, "the shortest TTL a task gets, whatever its client asks: a task is always readable this long after its creation")
	taskRetain := fs.Duration("task-retain", tasks.DefaultRetain, "how long a finished task is kept at least after it finished, past its TTL if need be, for its client to read the result")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// A client may close our stderr (or stdout) before we are done: some
	// close the stderr pipe as soon as they close our stdin, while we still
	// log the end of each call. By default a Go program writing to a broken
	// pipe on fd 1 or 2 dies of SIGPIPE, mid-work; ignored, the write fails
	// instead, the log line is lost and a broken stdout ends the connection
	// the orderly way.
	signal.Ignore(syscall.SIGPIPE)
	if *useStdio && *httpAddr != "" {
		return usagef("serve: choose one of --stdio and --http")
	}
	if err := limits.check(); err != nil {
		return err
	}
	for _, c := range []struct {
		flag  string
		value time.Duration
	}{{"--keepalive", *keepAlive}, {"--shutdown-grace", *grace}, {"--task-lease", *taskLease}, {"--task-min-ttl", *taskMinTTL}, {"--task-retain", *taskRetain}} {
		if c.value < 0 {
			return usagef("serve: %s must not be negative, not %v", c.flag, c.value)
		}
	}
	if *taskWorkers < 1 {
		return usagef("serve: --task-workers must be at least 1, not %d", *taskWorkers)
	}
	if err := db.check(fs); err != nil {
		return err
	}
	logger, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	var httpOpts *streamhttp.HandlerOptions
	var connLimits *streamhttp.ListenerOptions
	if *httpAddr != "" {
		if httpOpts, err = httpOptions(*httpAddr, *path, hosts, origins, *authToken, tokens); err != nil {
			return err
		}
		httpOpts.KeepAlive = *keepAlive
		connLimits = limits.applyHTTP(httpOpts)
	} else if setFlags(fs)["path"] {
		return usagef("serve: --path applies to --http only")
	}

	opts := &server.Options{Logger: logger}
	limits.apply(opts, len(tokens) > 0)
	if httpOpts != nil {
		opts.Interceptors = append(opts.Interceptors, advertiseKeepAlive(*keepAlive))
	}
	if *metricsPath != "" && (*httpAddr == "" || !strings.HasPrefix(*metricsPath, "/") || *metricsPath == *path) {
		return usagef("serve: --metrics-path needs --http, must start with / and differ from --path")
	}
	*metricsToken = cmp.Or(*metricsToken, os.Getenv("MCPREL_METRICS_TOKEN"))
	metricsAuth, err := metricsCredentials(*metricsToken, *metricsOpen, *metricsTenants, *authToken, tokens, httpOpts)
	if err != nil {
		return err
	}
	var obs *metrics.Observer
	if *metricsAddr != "" || *metricsPath != "" {
		reg := prometheus.NewRegistry()
		if obs, err = metrics.New(reg, &metrics.Options{Tenants: *metricsTenants}); err != nil {
			return err
		}
		sm, err := metrics.NewStore(reg, nil)
		if err != nil {
			return err
		}
		opts.Observers = append(opts.Observers, obs)
		db.ledgerObservers, db.onCommit = append(db.ledgerObservers, sm), sm.Committed
	}
	var tracer *tracing.Observer
	if tracing.Configured(*otlpEndpoint) {
		tp, flush, err := tracing.ExportOTLP(ctx, *otlpEndpoint)
		if err != nil {
			return usagef("serve: --otlp-endpoint: %v", err)
		}
		// Spans still buffered are sent before the process exits.
		defer func() {
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			flush(fctx)
		}()
		tracer = tracing.New(tp, nil)
		opts.Observers = append(opts.Observers, tracer)
		// Each request's log line names its trace and span.
		logger = slog.New(tracing.LogHandler(logger.Handler()))
		opts.Logger = logger
		db.ledgerObservers = append(db.ledgerObservers, tracer)
	}

	l, closeDB, err := db.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	reapCtx, stopReaper := context.WithCancel(context.Background())
	reaped := make(chan struct{})
	go func() { l.RunReaper(reapCtx, time.Minute, 1000); close(reaped) }()
	// Stop the reaper before the database closes under it.
	defer func() { stopReaper(); <-reaped }()
	srv, err := newDemoServer(l, opts)
	if err != nil {
		return err
	}
	var gates *labGates
	if *lab {
		gates = newLabGates()
		if err := addLabTools(srv, gates); err != nil {
			return err
		}
	}
	var announce []string
	if *metricsOpen && (*metricsAddr != "" || *metricsPath != "") {
		// Said after the endpoint's line, which scripts read first.
		announce = append(announce, "metrics: served without authentication (--metrics-open): anyone who can reach their listener reads them")
	}
	if obs != nil {
		obs.Attach(srv)
	}
	if tracer != nil {
		tracer.Attach(srv)
	}
	if *metricsAddr != "" {
		url, stop, err := serveMetrics(*metricsAddr, obs, metricsAuth, logger)
		if err != nil {
			return err
		}
		defer stop()
		announce = append([]string{"metrics: " + url}, announce...)
		if httpOpts == nil {
			for _, line := range announce {
				fmt.Fprintln(stderr, line)
			}
		}
	}
	var taskObservers []tasks.Observer
	if tracer != nil {
		taskObservers = append(taskObservers, tracer)
	}
	ts, err := addTasks(ctx, srv, l, &tasks.Options{Lease: *taskLease, MinTTL: *taskMinTTL, Retain: *taskRetain}, *taskWorkers, obs, taskObservers)
	if err != nil {
		return err
	}
	if gates != nil {
		if err := addLabTaskTool(ts, gates); err != nil {
			return err
		}
	}
	maintCtx, stopMaintaining := context.WithCancel(context.Background())
	maintained := make(chan struct{})
	go func() { ts.Maintain(maintCtx, 0); close(maintained) }()
	// Tasks still running when the server stops are asked to stop at
	// their next checkpoint within the grace and left for the next
	// process to take over; then the maintainer stops, before the
	// database closes under it.
	defer func() {
		gctx, cancel := context.WithTimeout(context.Background(), *grace)
		defer cancel()
		if ts.Shutdown(gctx) != nil {
			logger.Warn("tasks still running after the shutdown grace are left to be taken over when their lease expires", "lease", *taskLease)
		}
		stopMaintaining()
		<-maintained
	}()
	if httpOpts != nil {
		var beside map[string]http.Handler
		if *metricsPath != "" {
			beside = map[string]http.Handler{*metricsPath: obs.Handler()}
		}
		return serveHTTP(ctx, srv, logger, stderr, *httpAddr, *path, *grace, httpOpts, connLimits, announce, beside, metricsAuth)
	}

	conn := stdio.NewConn(srv, stdin, stdout, &stdio.Options{MaxMessageBytes: limits.maxMessage})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; !ok {
			return
		}
		logger.Info("shutting down", "grace", *grace)
		sctx, cancel := context.WithTimeout(context.Background(), *grace)
		defer cancel()
		srv.Shutdown(sctx) // the connection's Serve returns once the server stopped
	}()
	return conn.Serve(ctx)
}

// setFlags returns the names of the flags the command line set.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// httpOptions checks the HTTP flags and turns them into handler options.
func httpOptions(addr, path string, hosts, origins []string, authToken string, tokens []string) (*streamhttp.HandlerOptions, error) {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return nil, usagef("serve: --http wants HOST:PORT, such as 127.0.0.1:8080 (port 0 picks a free one), not %q", addr)
	}
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " {}?#") {
		return nil, usagef("serve: --path must be a URL path starting with \"/\", such as /mcp, not %q", path)
	}
	for _, o := range origins {
		if u, err := url.Parse(o); o != "*" && (err != nil || u.Scheme == "" || u.Host == "") {
			return nil, usagef("serve: --allowed-origin wants scheme://host[:port], such as https://app.example.com, not %q", o)
		}
	}
	token := cmp.Or(authToken, os.Getenv("MCPREL_AUTH_TOKEN"))
	tenants := map[string]string{}
	for _, t := range tokens {
		name, tok, ok := strings.Cut(t, "=")
		if !ok || name == "" || tok == "" {
			return nil, usagef("serve: --token wants TENANT=TOKEN, not %q", t)
		}
		if prev, dup := tenants[tok]; dup || tok == token {
			return nil, usagef("serve: the token of tenant %q is given twice (also for %q)", name, cmp.Or(prev, "--auth-token"))
		}
		tenants[tok] = name
	}
	return &streamhttp.HandlerOptions{
		AllowedHosts:   hosts,
		AllowedOrigins: origins,
		AuthToken:      token,
		Tokens:         tenants,
	}, nil
}

// addTasks serves durable tasks from the ledger's database on srv, with
// the demo's long job, generate_report.
// With obs, the runner's task events become metrics; observers follow
// each run (tracing).
func addTasks(ctx context.Context, srv *server.Server, l *ledger.Ledger, opts *tasks.Options, workers int, obs *metrics.Observer, observers []tasks.Observer) (*taskserver.Server, error) {
	st, err := tasks.Open(ctx, l.DB(), opts)
	if err != nil {
		return nil, err
	}
	runner := tasks.RunnerOptions{Workers: workers, Logger: srv.Logger(), Observers: observers}
	if obs != nil {
		runner.OnEvent = func(e tasks.Event) {
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
	ts, err := taskserver.New(srv, st, &taskserver.Options{Runner: runner})
	if err != nil {
		return nil, err
	}
	return ts, addReportTool(srv, ts)
}

// newDemoServer returns the server "mcprel serve" runs: the demo tools,
// with l as the ledger, and opts for everything else.
func newDemoServer(l *ledger.Ledger, opts *server.Options) (*server.Server, error) {
	o := *opts
	o.Instructions = "mcprel demo server. echo returns its text; slow_count counts with progress and stops when cancelled. " +
		"charge_account and reserve_inventory change state: give each operation an idempotencyKey and reuse it on retries; " +
		"get_inventory and lookup_operation are the reads to reconcile with after a timeout. " +
		"generate_report is a long job: clients that support tasks get a durable task to poll."
	srv, err := server.New(mcp.Implementation{Name: "mcprel", Version: version}, &o)
	if err != nil {
		return nil, err
	}
	if err := addDemoTools(srv); err != nil {
		return nil, err
	}
	if err := addLedgerTools(srv, l); err != nil {
		return nil, err
	}
	return srv, nil
}

// serveHTTP serves srv at addr until SIGINT or SIGTERM, then shuts down
// gracefully: no new requests, running calls finish within grace, the rest
// are cancelled.
// announce lists lines to print right after the endpoint's (the metrics
// URL): the endpoint stays the first line, which scripts read. beside are
// handlers served on other paths of the same listener (metrics), behind
// the endpoint's Host and Origin checks and, when there are any, one of
// tokens.
func serveHTTP(ctx context.Context, srv *server.Server, logger *slog.Logger, stderr io.Writer, addr, path string, grace time.Duration, opts *streamhttp.HandlerOptions, conns *streamhttp.ListenerOptions, announce []string, beside map[string]http.Handler, tokens []string) error {
	if len(opts.AllowedHosts) > 0 {
		// The loopback names stay allowed beside the ones given.
		opts.AllowedHosts = append(opts.AllowedHosts, "localhost", "127.0.0.1", "::1")
	}
	h, err := streamhttp.NewHandler(srv, opts)
	if err != nil {
		return err
	}
	// Signals are caught before the endpoint is announced: a client may
	// call, and then stop the server, as soon as it reads the URL, and a
	// SIGTERM must then shut it down gracefully, not kill it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	tcpLn, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// Connections are capped below the open-file limit: past the cap a
	// new one gets 503 at once, instead of the process failing to accept
	// anyone when descriptors run out.
	ln := streamhttp.LimitListener(tcpLn, conns)
	tcp, _ := ln.Addr().(*net.TCPAddr)
	// The endpoint on a line of its own, first, once it accepts
	// connections: a URL that works, with a loopback host for an
	// unspecified address.
	fmt.Fprintln(stderr, endpointURL(tcp, ln.Addr().String(), path))
	for _, line := range announce {
		fmt.Fprintln(stderr, line)
	}
	beyondLoopback := tcp != nil && !tcp.IP.IsLoopback()
	if beyondLoopback && opts.AuthToken == "" && len(opts.Tokens) == 0 {
		logger.Warn("serving beyond loopback without --auth-token: anyone who can reach this address can call the tools", "addr", ln.Addr().String())
	}
	if beyondLoopback {
		hosts, origins := "localhost, 127.0.0.1, ::1", "http(s)://localhost, 127.0.0.1 or [::1], any port"
		if len(opts.AllowedHosts) > 0 {
			hosts = strings.Join(opts.AllowedHosts, ", ")
		}
		if len(opts.AllowedOrigins) > 0 {
			origins = strings.Join(opts.AllowedOrigins, ", ")
		}
		logger.Warn("the Host header must name an allowed host, or the request is refused with 403; add the names clients use with --allowed-host (and browser origins with --allowed-origin)",
			"allowed_hosts", hosts, "allowed_origins", origins)
	}
	mux := http.NewServeMux()
	mux.Handle(path, h)
	for p, handler := range beside {
		mux.Handle(p, h.Guard(handler, tokens...))
	}
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-sigs:
	case <-ctx.Done():
	}
	logger.Info("shutting down", "grace", grace)
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	srv.Shutdown(gctx)
	h.Shutdown(gctx) // the handler's own sessions and streams, now idle
	// Every stream has ended; close the listener and idle connections.
	sctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// endpointURL is the URL clients reach the endpoint at. An unspecified
// address (0.0.0.0, which Go listens on as the dual-stack [::]) accepts
// connections on every interface but is no host to connect to, and a Host
// header naming it would be refused: loopback stands in.
func endpointURL(tcp *net.TCPAddr, addr, path string) string {
	if tcp == nil {
		return "http://" + addr + path
	}
	ip := tcp.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port)) + path
}

// serveMetrics serves the observer's metrics at /metrics on addr, on a
// listener of its own (a stdio server has no other), and returns their
// URL. With tokens, a scrape must carry one of them. Beyond loopback it
// warns when there are none: anyone who can reach it reads them.
func serveMetrics(addr string, obs *metrics.Observer, tokens []string, logger *slog.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("serve: --metrics: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && len(tokens) == 0 {
		logger.Warn("serving metrics beyond loopback without a token: anyone who can reach this address can read them", "addr", ln.Addr().String())
	}
	mux := http.NewServeMux()
	var handler http.Handler = obs.Handler()
	if len(tokens) > 0 {
		handler = streamhttp.RequireBearer(handler, tokens...)
	}
	mux.Handle("/metrics", handler)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return fmt.Sprintf("http://%s/metrics", ln.Addr()), func() { hs.Close() }, nil
}

// metricsCredentials returns the bearer tokens a metrics scrape needs, on
// either listener: the metrics token when one is set; otherwise the
// endpoint's own credentials, so that the metrics are never easier to
// read than the tools; none when the endpoint has none, or when the
// operator chose --metrics-open. Metrics labelled by tenant are readable
// by every tenant's token unless they have a token of their own, so that
// combination is refused.
func metricsCredentials(metricsToken string, open, tenantLabels bool, authToken string, tokens []string, httpOpts *streamhttp.HandlerOptions) ([]string, error) {
	switch {
	case metricsToken != "" && open:
		return nil, usagef("serve: choose one of --metrics-token and --metrics-open")
	case metricsToken != "":
		return []string{metricsToken}, nil
	case tenantLabels && len(tokens) > 0:
		return nil, usagef("serve: --metrics-tenants names every tenant in the metrics, which each tenant's token could then read: set --metrics-token")
	case open:
		return nil, nil
	}
	if httpOpts != nil {
		return httpOpts.Credentials(), nil
	}
	// Over stdio the tokens authenticate nothing else, but they are still
	// what the operator meant to require.
	var creds []string
	if t := cmp.Or(authToken, os.Getenv("MCPREL_AUTH_TOKEN")); t != "" {
		creds = append(creds, t)
	}
	for _, t := range tokens {
		if _, tok, ok := strings.Cut(t, "="); ok && tok != "" {
			creds = append(creds, tok)
		}
	}
	return creds, nil
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
