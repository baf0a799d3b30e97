package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
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
	authToken := fs.String("auth-token", "", "require this bearer token on HTTP requests (or set MCPREL_AUTH_TOKEN)")
	var tokens listFlag
	fs.Var(&tokens, "token", "TENANT=TOKEN: accept this bearer token for that tenant (repeatable); tenants are isolated and limited separately")
	keepAlive := fs.Duration("keepalive", streamhttp.DefaultKeepAlive, "comment line cadence on quiet SSE streams")
	maxConcurrent := fs.Int("max-concurrent", server.DefaultMaxConcurrentCalls, "tool calls that may run at once")
	maxQueued := fs.Int("max-queued", server.DefaultMaxQueuedCalls, "calls that may wait for a slot before new ones are refused as overloaded (at least 1: 0 is taken as 1)")
	maxMessage := fs.Int("max-message-bytes", jsonrpc.DefaultMaxMessageBytes, "largest inbound message accepted")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "on SIGINT/SIGTERM, how long running calls may finish before they are cancelled")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json (log lines go to stderr)")
	var db dbFlags
	db.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if *useStdio && *httpAddr != "" {
		fmt.Fprintln(stderr, "serve: choose one of --stdio and --http")
		return errUsage
	}
	if *maxConcurrent <= 0 || *maxQueued < 0 || *maxMessage <= 0 {
		fmt.Fprintln(stderr, "serve: --max-concurrent and --max-message-bytes must be positive, --max-queued not negative")
		return errUsage
	}
	logger, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return errUsage
	}
	queued := *maxQueued
	if queued == 0 {
		queued = 1 // zero means "the default" to server.Options, which has no "none"
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
	srv, err := newDemoServer(l, &server.Options{
		MaxConcurrentCalls: *maxConcurrent,
		MaxQueuedCalls:     queued,
		Logger:             logger,
	})
	if err != nil {
		return err
	}

	if *httpAddr != "" {
		token := *authToken
		if token == "" {
			token = os.Getenv("MCPREL_AUTH_TOKEN")
		}
		tenants := map[string]string{}
		for _, t := range tokens {
			name, tok, ok := strings.Cut(t, "=")
			if !ok || name == "" || tok == "" {
				fmt.Fprintf(stderr, "serve: --token wants TENANT=TOKEN, not %q\n", t)
				return errUsage
			}
			tenants[tok] = name
		}
		return serveHTTP(ctx, srv, logger, stderr, *httpAddr, *path, *grace, &streamhttp.HandlerOptions{
			AllowedHosts:   hosts,
			AllowedOrigins: origins,
			AuthToken:      token,
			Tokens:         tenants,
			MaxBodyBytes:   int64(*maxMessage),
			KeepAlive:      *keepAlive,
		})
	}

	conn := stdio.NewConn(srv, stdin, stdout, &stdio.Options{MaxMessageBytes: *maxMessage})
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
		conn.Shutdown(sctx)
	}()
	return conn.Serve(ctx)
}

// newDemoServer returns the server "mcprel serve" runs: the demo tools,
// with l as the ledger, and opts for everything else.
func newDemoServer(l *ledger.Ledger, opts *server.Options) (*server.Server, error) {
	o := *opts
	o.Ledger = l
	o.Instructions = "mcprel demo server. echo returns its text; slow_count counts with progress and stops when cancelled. " +
		"charge_account and reserve_inventory change state: give each operation an idempotencyKey and reuse it on retries; " +
		"get_inventory and lookup_operation are the reads to reconcile with after a timeout."
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
func serveHTTP(ctx context.Context, srv *server.Server, logger *slog.Logger, stderr io.Writer, addr, path string, grace time.Duration, opts *streamhttp.HandlerOptions) error {
	if len(opts.AllowedHosts) > 0 {
		// The loopback names stay allowed beside the ones given.
		opts.AllowedHosts = append(opts.AllowedHosts, "localhost", "127.0.0.1", "::1")
	}
	h, err := streamhttp.NewHandler(srv, opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && opts.AuthToken == "" && len(opts.Tokens) == 0 {
		logger.Warn("serving beyond loopback without --auth-token: anyone who can reach this address can call the tools", "addr", ln.Addr().String())
	}
	mux := http.NewServeMux()
	mux.Handle(path, h)
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	// The endpoint on a line of its own, once it accepts connections.
	fmt.Fprintf(stderr, "http://%s%s\n", ln.Addr(), path)

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case err := <-served:
		return err
	case <-sigs:
	case <-ctx.Done():
	}
	logger.Info("shutting down", "grace", grace)
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	h.Shutdown(gctx)
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
