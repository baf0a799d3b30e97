package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

func serveCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	useStdio := fs.Bool("stdio", false, "serve over stdin and stdout (the default)")
	maxConcurrent := fs.Int("max-concurrent", server.DefaultMaxConcurrentCalls, "tool calls that may run at once")
	maxQueued := fs.Int("max-queued", server.DefaultMaxQueuedCalls, "calls that may wait for a slot before new ones are refused as overloaded")
	maxMessage := fs.Int("max-message-bytes", jsonrpc.DefaultMaxMessageBytes, "largest inbound message accepted")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "on SIGINT/SIGTERM, how long running calls may finish before they are cancelled")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json (log lines go to stderr)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	_ = useStdio // stdio is the only transport so far, and the default
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
		queued = 1 // zero means "default" to server.Options; the flag means "none"
	}
	srv, err := server.New(mcp.Implementation{Name: "mcprel", Version: version}, &server.Options{
		Instructions:       "mcprel demo server. echo returns its text; slow_count counts with progress and stops when cancelled.",
		MaxConcurrentCalls: *maxConcurrent,
		MaxQueuedCalls:     queued,
		Logger:             logger,
	})
	if err != nil {
		return err
	}
	if err := addDemoTools(srv); err != nil {
		return err
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
