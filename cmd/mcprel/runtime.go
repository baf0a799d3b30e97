package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/logbuf"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/tracing"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// runtimeFlags are the flags every command that runs a server shares
// ("serve" and "gateway"): the transport, tokens and tenants, limits,
// the database, tasks, metrics, tracing, logs and the shutdown. They
// become host.Options; the commands add what is theirs.
type runtimeFlags struct {
	cmd string // the command's name, in messages

	useStdio            *bool
	httpAddr, path      *string
	hosts, origins      listFlag
	authToken           *string
	tokens              listFlag
	oauth               oauthFlags
	keepAlive           *time.Duration
	limits              limitFlags
	grace               *time.Duration
	logLevel, logFormat *string
	logs                *logbuf.Writer // the log lines' batches to stderr, written by stop (or when start fails)
	db                  dbFlags
	metricsAddr         *string
	metricsPath         *string
	metricsToken        *string
	metricsOpen         *bool
	metricsTenants      *bool
	otlpEndpoint        *string
	taskLease           *time.Duration
	taskWorkers         *int
	taskMinTTL          *time.Duration
	taskRetain          *time.Duration
	maxTasksPerTenant   *int
	maxTasks            *int
	maxRunningPerTenant *int
}

func (f *runtimeFlags) register(fs *flag.FlagSet) {
	f.useStdio = fs.Bool("stdio", false, "serve over stdin and stdout (the default)")
	f.httpAddr = fs.String("http", "", "serve Streamable HTTP on this address, e.g. 127.0.0.1:0 (a free port); the endpoint URL is printed on stderr")
	f.path = fs.String("path", host.DefaultPath, "the HTTP endpoint's path")
	fs.Var(&f.hosts, "allowed-host", "a Host header value to accept besides loopback names (repeatable; needed when serving beyond loopback)")
	fs.Var(&f.origins, "allowed-origin", "an Origin to accept, as scheme://host[:port] (repeatable; default loopback origins)")
	f.authToken = fs.String("auth-token", "", "require this bearer token on HTTP requests (or set MCPREL_AUTH_TOKEN); its holder is the tenant \"\", a tenant of its own beside those of --token")
	fs.Var(&f.tokens, "token", "TENANT=TOKEN: accept this bearer token for that tenant (repeatable); tenants are isolated and limited separately")
	f.oauth.register(fs)
	f.keepAlive = fs.Duration("keepalive", streamhttp.DefaultKeepAlive, "comment line cadence on quiet SSE streams")
	f.limits.register(fs)
	f.grace = fs.Duration("shutdown-grace", 10*time.Second, "on SIGINT/SIGTERM, how long running calls may finish before they are cancelled")
	f.logLevel = fs.String("log-level", "info", "debug, info, warn or error; each call's arguments are on its request line at debug only")
	f.logFormat = fs.String("log-format", "text", "text or json (log lines go to stderr)")
	f.db.register(fs)
	f.metricsAddr = fs.String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics on a listener of their own (e.g. 127.0.0.1:9464)")
	f.metricsPath = fs.String("metrics-path", "", "with --http: serve Prometheus metrics at this path (e.g. /metrics) on the MCP listener, behind its Host and Origin checks")
	f.metricsToken = fs.String("metrics-token", "", "require this bearer token to read the metrics (or set MCPREL_METRICS_TOKEN); without it the metrics require the endpoint's own tokens (--auth-token, --token)")
	f.metricsOpen = fs.Bool("metrics-open", false, "serve the metrics without authentication even when the endpoint requires a token: anyone who can reach the listener reads them")
	f.metricsTenants = fs.Bool("metrics-tenants", false, "count requests per tenant (the TENANT of each --token) in mcprel_requests_total; only worth it with few tenants")
	f.otlpEndpoint = fs.String("otlp-endpoint", "", "export a trace span per request over OTLP/HTTP to this collector URL (e.g. http://127.0.0.1:4318); the standard OTEL_EXPORTER_OTLP_* variables work too; off when neither is set")
	f.taskLease = fs.Duration("task-lease", tasks.DefaultLease, "how long a task outlives the process running it before another process (or this one, restarted) takes it over")
	f.taskWorkers = fs.Int("task-workers", 8, "durable tasks that may run at once, shared fairly between tenants (more wait in a queue of 64)")
	f.taskMinTTL = fs.Duration("task-min-ttl", tasks.DefaultMinTTL, "the shortest TTL a task gets, whatever its client asks: a task is always readable this long after its creation")
	f.taskRetain = fs.Duration("task-retain", tasks.DefaultRetain, "how long a finished task is kept at least after it finished, past its TTL if need be, for its client to read the result")
	f.maxTasksPerTenant = fs.Int("max-tasks-per-tenant", tasks.DefaultMaxTasksPerTenant, "tasks the store keeps at once for one tenant, finished ones included until they are reaped; past it a task is refused as overloaded (give every replica the same)")
	f.maxTasks = fs.Int("max-tasks", tasks.DefaultMaxTasks, "tasks the store keeps at once in all, finished ones included until they are reaped (give every replica the same)")
	f.maxRunningPerTenant = fs.Int("max-running-per-tenant", 0, "tasks of one tenant that may run at once, at most --task-workers: the other workers are a reserve another tenant's task starts on at once (default --task-workers less a quarter, at least one, in reserve)")
}

// options checks the parsed flags and turns them into host.Options.
func (f *runtimeFlags) options(ctx context.Context, fs *flag.FlagSet, stdin io.Reader, stdout, stderr io.Writer) (*host.Options, error) {
	// A client may close our stderr (or stdout) before we are done: some
	// close the stderr pipe as soon as they close our stdin, while we still
	// log the end of each call. By default a Go program writing to a broken
	// pipe on fd 1 or 2 dies of SIGPIPE, mid-work; ignored, the write fails
	// instead, the log line is lost and a broken stdout ends the connection
	// the orderly way.
	signal.Ignore(syscall.SIGPIPE)
	if *f.useStdio && *f.httpAddr != "" {
		return nil, usagef("%s: choose one of --stdio and --http", f.cmd)
	}
	if err := f.limits.check(f.cmd); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		flag  string
		value time.Duration
	}{{"--keepalive", *f.keepAlive}, {"--shutdown-grace", *f.grace}, {"--task-lease", *f.taskLease}, {"--task-min-ttl", *f.taskMinTTL}, {"--task-retain", *f.taskRetain}} {
		if c.value < 0 {
			return nil, usagef("%s: %s must not be negative, not %v", f.cmd, c.flag, c.value)
		}
	}
	if *f.taskWorkers < 1 {
		return nil, usagef("%s: --task-workers must be at least 1, not %d", f.cmd, *f.taskWorkers)
	}
	for _, c := range []struct {
		flag  string
		value int
	}{{"--max-tasks-per-tenant", *f.maxTasksPerTenant}, {"--max-tasks", *f.maxTasks}} {
		if c.value < 1 {
			return nil, usagef("%s: %s must be at least 1, not %d", f.cmd, c.flag, c.value)
		}
	}
	if *f.maxRunningPerTenant < 0 || *f.maxRunningPerTenant > *f.taskWorkers {
		return nil, usagef("%s: --max-running-per-tenant must be between 1 and --task-workers (%d), not %d", f.cmd, *f.taskWorkers, *f.maxRunningPerTenant)
	}
	if err := f.db.check(fs); err != nil {
		return nil, err
	}
	f.logs = logbuf.New(stderr, nil)
	logger, err := newLogger(f.logs, *f.logLevel, *f.logFormat)
	if err != nil {
		return nil, err
	}
	opts := &host.Options{
		Implementation: mcp.Implementation{Name: "mcprel", Version: version},
		Server:         server.Options{Logger: logger},
		DB:             f.db.dsn,
		Store:          store.Options{Synchronous: f.db.synchronous},
		Ledger:         ledger.Options{Retention: f.db.retention, Lease: f.db.lease},
		Tasks: tasks.Options{Lease: *f.taskLease, MinTTL: *f.taskMinTTL, Retain: *f.taskRetain,
			MaxTasksPerTenant: *f.maxTasksPerTenant, MaxTasks: *f.maxTasks},
		Runner:        tasks.RunnerOptions{Workers: *f.taskWorkers, MaxRunningPerTenant: *f.maxRunningPerTenant},
		Stdio:         stdio.Options{MaxMessageBytes: f.limits.maxMessage},
		Stdin:         stdin,
		Stdout:        stdout,
		ShutdownGrace: *f.grace,
	}
	oauthCfg, err := f.oauth.config(f.cmd, fs, *f.httpAddr, *f.authToken, f.tokens)
	if err != nil {
		return nil, err
	}
	// Tokens of several tenants, or OAuth's subjects: per-tenant limits.
	f.limits.apply(&opts.Server, len(f.tokens) > 0 || oauthCfg != nil)
	if *f.httpAddr != "" {
		httpOpts, err := httpOptions(f.cmd, *f.httpAddr, *f.path, f.hosts, f.origins, *f.authToken, f.tokens)
		if err != nil {
			return nil, err
		}
		httpOpts.KeepAlive = *f.keepAlive
		opts.Listener = *f.limits.applyHTTP(httpOpts)
		opts.Addr, opts.Path, opts.HTTP = *f.httpAddr, *f.path, *httpOpts
		opts.OAuth = oauthCfg
	} else if setFlags(fs)["path"] {
		return nil, usagef("%s: --path applies to --http only", f.cmd)
	} else {
		// Over stdio the tokens authenticate nothing but the metrics.
		opts.HTTP.AuthToken, opts.HTTP.Tokens = stdioTokens(*f.authToken, f.tokens)
	}
	if *f.metricsPath != "" && (*f.httpAddr == "" || !strings.HasPrefix(*f.metricsPath, "/") || *f.metricsPath == *f.path) {
		return nil, usagef("%s: --metrics-path needs --http, must start with / and differ from --path", f.cmd)
	}
	if *f.metricsAddr != "" {
		if err := checkListenAddr(f.cmd, "--metrics", *f.metricsAddr); err != nil {
			return nil, err
		}
	}
	*f.metricsToken = cmp.Or(*f.metricsToken, os.Getenv("MCPREL_METRICS_TOKEN"))
	if err := checkMetricsFlags(*f.metricsToken, *f.metricsOpen, *f.metricsTenants, f.tokens); err != nil {
		return nil, err
	}
	if oauthCfg != nil && *f.metricsTenants && *f.metricsToken == "" {
		return nil, usagef("%s: --metrics-tenants names every tenant in the metrics, which each tenant's token could then read: set --metrics-token", f.cmd)
	}
	opts.Metrics = host.MetricsOptions{Addr: *f.metricsAddr, Path: *f.metricsPath, Token: *f.metricsToken, Open: *f.metricsOpen, Tenants: *f.metricsTenants}
	if tracing.Configured(*f.otlpEndpoint) {
		tp, flush, err := tracing.ExportOTLP(ctx, *f.otlpEndpoint)
		if err != nil {
			return nil, usagef("%s: --otlp-endpoint: %v", f.cmd, err)
		}
		// Spans still buffered are sent before the process exits: the
		// runtime's last step.
		opts.TracerProvider, opts.FlushTraces = tp, flush
	}
	return opts, nil
}

// start assembles the runtime and announces where it serves. The context
// it returns ends on SIGINT or SIGTERM: signals are caught before the
// endpoint is announced, since a client may call, and then stop the
// server, as soon as it reads the URL, and a SIGTERM must then shut it
// down gracefully, not kill it. The caller runs stop when done.
func (f *runtimeFlags) start(ctx context.Context, opts *host.Options, stderr io.Writer) (*host.Runtime, context.Context, func(), error) {
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	rt, err := host.New(ctx, opts)
	var le *host.ListenError
	switch {
	case errors.As(err, &le) && le.Option == "Metrics.Addr":
		err = fmt.Errorf("%s: --metrics: %w", f.cmd, le.Err)
	case errors.As(err, &le):
		err = le.Err // as the listener said it, naming the address
	}
	if err != nil {
		stopSignals()
		f.logs.Close()
		return nil, nil, nil, err
	}
	// The endpoint on a line of its own, first: scripts read it. Then the
	// metrics' URL and what is worth knowing about them.
	if url := rt.Endpoint(); url != "" {
		fmt.Fprintln(stderr, url)
	}
	if url := rt.MetricsURL(); url != "" {
		fmt.Fprintln(stderr, "metrics: "+url)
		fmt.Fprintln(stderr, "status: "+rt.StatusURL())
	}
	if *f.metricsOpen && (*f.metricsAddr != "" || *f.metricsPath != "") {
		fmt.Fprintln(stderr, "metrics: served without authentication (--metrics-open): anyone who can reach their listener reads them")
	}
	// The log's last lines, shutdown's included, are written before the
	// command returns, and so before anything it prints on its way out.
	return rt, ctx, func() { rt.Close(); stopSignals(); f.logs.Close() }, nil
}
