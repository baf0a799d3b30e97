package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/tracing"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// serveCmd is "mcprel serve": it turns its flags into host.Options,
// registers the demo tools on the runtime host.New assembles, and runs it.
// The assembly itself (store, ledger, tasks, observers, transport, the
// shutdown order) lives in package host.
func serveCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	useStdio := fs.Bool("stdio", false, "serve over stdin and stdout (the default)")
	httpAddr := fs.String("http", "", "serve Streamable HTTP on this address, e.g. 127.0.0.1:0 (a free port); the endpoint URL is printed on stderr")
	path := fs.String("path", host.DefaultPath, "the HTTP endpoint's path")
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
	maxTasksPerTenant := fs.Int("max-tasks-per-tenant", tasks.DefaultMaxTasksPerTenant, "tasks the store keeps at once for one tenant, finished ones included until they are reaped; past it a task is refused as overloaded (give every replica the same)")
	maxTasks := fs.Int("max-tasks", tasks.DefaultMaxTasks, "tasks the store keeps at once in all, finished ones included until they are reaped (give every replica the same)")
	maxRunningPerTenant := fs.Int("max-running-per-tenant", 0, "tasks of one tenant that may run at once, at most --task-workers: the other workers are a reserve another tenant's task starts on at once (default --task-workers less a quarter, at least one, in reserve)")
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
	for _, c := range []struct {
		flag  string
		value int
	}{{"--max-tasks-per-tenant", *maxTasksPerTenant}, {"--max-tasks", *maxTasks}} {
		if c.value < 1 {
			return usagef("serve: %s must be at least 1, not %d", c.flag, c.value)
		}
	}
	if *maxRunningPerTenant < 0 || *maxRunningPerTenant > *taskWorkers {
		return usagef("serve: --max-running-per-tenant must be between 1 and --task-workers (%d), not %d", *taskWorkers, *maxRunningPerTenant)
	}
	if err := db.check(fs); err != nil {
		return err
	}
	logger, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	opts := &host.Options{
		Implementation: mcp.Implementation{Name: "mcprel", Version: version},
		Server:         server.Options{Logger: logger, Instructions: demoInstructions},
		DB:             db.dsn,
		Store:          store.Options{Synchronous: db.synchronous},
		Ledger:         ledger.Options{Retention: db.retention},
		Tasks: tasks.Options{Lease: *taskLease, MinTTL: *taskMinTTL, Retain: *taskRetain,
			MaxTasksPerTenant: *maxTasksPerTenant, MaxTasks: *maxTasks},
		Runner:        tasks.RunnerOptions{Workers: *taskWorkers, MaxRunningPerTenant: *maxRunningPerTenant},
		Stdio:         stdio.Options{MaxMessageBytes: limits.maxMessage},
		Stdin:         stdin,
		Stdout:        stdout,
		ShutdownGrace: *grace,
	}
	limits.apply(&opts.Server, len(tokens) > 0)
	if *httpAddr != "" {
		httpOpts, err := httpOptions(*httpAddr, *path, hosts, origins, *authToken, tokens)
		if err != nil {
			return err
		}
		httpOpts.KeepAlive = *keepAlive
		opts.Listener = *limits.applyHTTP(httpOpts)
		opts.Addr, opts.Path, opts.HTTP = *httpAddr, *path, *httpOpts
	} else if setFlags(fs)["path"] {
		return usagef("serve: --path applies to --http only")
	} else {
		// Over stdio the tokens authenticate nothing but the metrics.
		opts.HTTP.AuthToken, opts.HTTP.Tokens = stdioTokens(*authToken, tokens)
	}
	if *metricsPath != "" && (*httpAddr == "" || !strings.HasPrefix(*metricsPath, "/") || *metricsPath == *path) {
		return usagef("serve: --metrics-path needs --http, must start with / and differ from --path")
	}
	*metricsToken = cmp.Or(*metricsToken, os.Getenv("MCPREL_METRICS_TOKEN"))
	if err := checkMetricsFlags(*metricsToken, *metricsOpen, *metricsTenants, tokens); err != nil {
		return err
	}
	opts.Metrics = host.MetricsOptions{Addr: *metricsAddr, Path: *metricsPath, Token: *metricsToken, Open: *metricsOpen, Tenants: *metricsTenants}
	if tracing.Configured(*otlpEndpoint) {
		tp, flush, err := tracing.ExportOTLP(ctx, *otlpEndpoint)
		if err != nil {
			return usagef("serve: --otlp-endpoint: %v", err)
		}
		// Spans still buffered are sent before the process exits: the
		// runtime's last step.
		opts.TracerProvider, opts.FlushTraces = tp, flush
	}

	// Signals are caught before the endpoint is announced: a client may
	// call, and then stop the server, as soon as it reads the URL, and a
	// SIGTERM must then shut it down gracefully, not kill it.
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	rt, err := host.New(ctx, opts)
	var le *host.ListenError
	switch {
	case errors.As(err, &le) && le.Option == "Metrics.Addr":
		return fmt.Errorf("serve: --metrics: %w", le.Err)
	case errors.As(err, &le):
		return le.Err // as the listener said it, naming the address
	case err != nil:
		return err
	}
	defer rt.Close()
	// The endpoint on a line of its own, first: scripts read it. Then the
	// metrics' URL and what is worth knowing about them.
	if url := rt.Endpoint(); url != "" {
		fmt.Fprintln(stderr, url)
	}
	if url := rt.MetricsURL(); url != "" {
		fmt.Fprintln(stderr, "metrics: "+url)
	}
	if *metricsOpen && (*metricsAddr != "" || *metricsPath != "") {
		fmt.Fprintln(stderr, "metrics: served without authentication (--metrics-open): anyone who can reach their listener reads them")
	}

	srv := rt.Server()
	if err := addServeTools(srv, rt.Ledger()); err != nil {
		return err
	}
	var gates *labGates
	if *lab {
		gates = newLabGates()
		if err := addLabTools(srv, gates); err != nil {
			return err
		}
	}
	if err := addReportTool(rt.Server(), rt.Tasks()); err != nil {
		return err
	}
	if gates != nil {
		if err := addLabTaskTool(rt.Tasks(), gates); err != nil {
			return err
		}
	}
	return rt.Run(ctx)
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

// demoInstructions are the instructions "mcprel serve" gives the model.
const demoInstructions = "mcprel demo server. echo returns its text; slow_count counts with progress and stops when cancelled. " +
	"charge_account and reserve_inventory change state: give each operation an idempotencyKey and reuse it on retries; " +
	"get_inventory and lookup_operation are the reads to reconcile with after a timeout. " +
	"generate_report is a long job: clients that support tasks get a durable task to poll."

// newDemoServer returns a server with the tools "mcprel serve" registers
// on srv itself (the demo's and the ledger's), with l as the ledger, and
// opts for everything else.
func newDemoServer(l *ledger.Ledger, opts *server.Options) (*server.Server, error) {
	o := *opts
	o.Instructions = demoInstructions
	srv, err := server.New(mcp.Implementation{Name: "mcprel", Version: version}, &o)
	if err != nil {
		return nil, err
	}
	if err := addServeTools(srv, l); err != nil {
		return nil, err
	}
	return srv, nil
}

// addServeTools registers the demo tools and the ledger's on srv.
func addServeTools(srv *server.Server, l *ledger.Ledger) error {
	if err := addDemoTools(srv); err != nil {
		return err
	}
	return addLedgerTools(srv, l)
}

// checkMetricsFlags refuses the metrics flags that cannot go together:
// a metrics token and open metrics; metrics labelled by tenant that every
// tenant's token could read.
func checkMetricsFlags(metricsToken string, open, tenantLabels bool, tokens []string) error {
	switch {
	case metricsToken != "" && open:
		return usagef("serve: choose one of --metrics-token and --metrics-open")
	case metricsToken == "" && tenantLabels && len(tokens) > 0:
		return usagef("serve: --metrics-tenants names every tenant in the metrics, which each tenant's token could then read: set --metrics-token")
	}
	return nil
}

// stdioTokens are the tokens of --auth-token (or MCPREL_AUTH_TOKEN) and
// --token over stdio, where they authenticate nothing but the metrics:
// what the operator meant to require. A --token without TENANT= is
// skipped, as is a token given twice.
func stdioTokens(authToken string, tokens []string) (string, map[string]string) {
	auth := cmp.Or(authToken, os.Getenv("MCPREL_AUTH_TOKEN"))
	tenants := map[string]string{}
	for _, t := range tokens {
		if name, tok, ok := strings.Cut(t, "="); ok && tok != "" && tok != auth {
			if _, dup := tenants[tok]; !dup {
				tenants[tok] = name
			}
		}
	}
	return auth, tenants
}
