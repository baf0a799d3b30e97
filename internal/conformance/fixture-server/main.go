// Command fixture-server serves the conformance fixtures over Streamable
// HTTP on a loopback port and prints its endpoint URL on stdout, for
// `make conformance`.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/mcprel/mcprel/internal/conformance/fixture"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fixture-server:", err)
		os.Exit(1)
	}
}

func run() error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.New(mcp.Implementation{Name: "mcprel-conformance-fixture", Version: "1.0.0"}, &server.Options{Logger: logger})
	if err != nil {
		return err
	}
	if err := fixture.Register(srv); err != nil {
		return err
	}
	// Durable tasks live in a SQLite file of this run's own.
	dir, err := os.MkdirTemp("", "mcprel-conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(context.Background(), filepath.Join(dir, "tasks.db"), nil)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := tasks.Open(context.Background(), db, nil)
	if err != nil {
		return err
	}
	ts, err := taskserver.New(srv, st, nil)
	if err != nil {
		return err
	}
	maintCtx, stopMaintaining := context.WithCancel(context.Background())
	defer stopMaintaining()
	go ts.Maintain(maintCtx, 0)
	if err := fixture.RegisterTasks(srv, ts); err != nil {
		return err
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		return err
	}
	addr := "127.0.0.1:0"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	hs := &http.Server{Handler: mux}
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		<-sigs
		h.Shutdown(context.Background())
		hs.Close()
	}()
	if err := hs.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
