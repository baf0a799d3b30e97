package goservers

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
)

func build(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), dir)
	if out, err := exec.Command("go", "build", "-o", bin, "./"+dir).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, out)
	}
	return bin
}

// startHTTP runs a peer serving HTTP and returns its URL; its stderr goes
// to log.
func startHTTP(t *testing.T, log *mcptest.Lines, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = log
	return mcptest.StartURL(t, cmd)
}

// peer is one way of reaching one peer server.
type peer struct {
	name string
	era  mcp.Era // what the client should negotiate
	dial func(t *testing.T, log *mcptest.Lines) (*client.Client, error)
	// cancelSeen: whether the peer's handler observes a cancellation on
	// this transport and era.
	cancelSeen bool
}

func TestClientAgainstGoPeers(t *testing.T) {
	gosdk, mcpgo := build(t, "gosdk-server"), build(t, "mcpgo-server")
	stdio := func(bin string, era mcp.Era) func(*testing.T, *mcptest.Lines) (*client.Client, error) {
		return func(t *testing.T, log *mcptest.Lines) (*client.Client, error) {
			return client.DialStdio(context.Background(), []string{bin}, &client.Options{Stderr: log, Era: era})
		}
	}
	http := func(bin string, era mcp.Era, args ...string) func(*testing.T, *mcptest.Lines) (*client.Client, error) {
		return func(t *testing.T, log *mcptest.Lines) (*client.Client, error) {
			return client.DialHTTP(context.Background(), startHTTP(t, log, bin, args...), &client.Options{Era: era})
		}
	}
	peers := []peer{
		{"go-sdk/stdio", mcp.Modern, stdio(gosdk, 0), true},
		{"go-sdk/stdio/2025", mcp.Legacy, stdio(gosdk, mcp.Legacy), true},
		{"go-sdk/http/2025", mcp.Legacy, http(gosdk, 0, "-http", "127.0.0.1:0"), true},
		// go-sdk v1.8.0's stateless handler does not end a tool handler
		// when its request's stream closes: the client closes it (the
		// 2026 signal), the peer goes on.
		{"go-sdk/http/2026", mcp.Modern, http(gosdk, 0, "-http", "127.0.0.1:0", "-stateless"), false},
		{"mcp-go/stdio", mcp.Modern, stdio(mcpgo, 0), true},
		{"mcp-go/stdio/2025", mcp.Legacy, stdio(mcpgo, mcp.Legacy), true},
		// mcp-go serves 2026-07-28 to whoever asks, sessions or not: the
		// 2025 era is chosen by the client here.
		{"mcp-go/http/2025", mcp.Legacy, http(mcpgo, mcp.Legacy, "-http", "127.0.0.1:0", "-stateful"), true},
		{"mcp-go/http/2026", mcp.Modern, http(mcpgo, 0, "-http", "127.0.0.1:0"), true},
	}
	for _, p := range peers {
		t.Run(p.name, func(t *testing.T) {
			log := mcptest.NewLines()
			c, err := p.dial(t, log)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if c.Era() != p.era {
				t.Fatalf("negotiated %v, want %v", c.Era(), p.era)
			}
			tools, err := c.ListTools(ctx)
			if err != nil || len(tools) != 3 {
				t.Fatalf("tools/list: %d tools, %v", len(tools), err)
			}
			res, err := c.CallTool(ctx, "echo", map[string]any{"text": "hello"}, nil)
			if err != nil || res.IsError || len(res.Content) != 1 {
				t.Fatalf("echo: %+v, %v", res, err)
			}
			var seen []float64
			res, err = c.CallTool(ctx, "progress", map[string]any{"steps": 3, "intervalMs": 20},
				&client.CallOptions{OnProgress: func(p client.Progress) { seen = append(seen, p.Progress) }})
			if err != nil || res.IsError {
				t.Fatalf("progress: %+v, %v", res, err)
			}
			// mcp-go sends notifications asynchronously: its last report
			// may follow the response, which ends the call first.
			if len(seen) < 2 || seen[0] != 1 {
				t.Fatalf("progress seen: %v", seen)
			}

			// Cancellation: the caller gives up, the peer is told.
			cctx, cancel := context.WithCancel(ctx)
			errs := make(chan error, 1)
			go func() { _, err := c.CallTool(cctx, "wait", nil, nil); errs <- err }()
			if !log.Await("handler-started wait") {
				t.Fatal("the wait handler never started")
			}
			cancel()
			if err := <-errs; !errors.As(err, new(*client.CancelledError)) {
				t.Fatalf("the cancelled call returned %v", err)
			}
			if p.cancelSeen && !log.Await("handler-cancelled wait") {
				t.Fatal("the peer's handler did not observe the cancellation")
			}

			// Both clocks.
			_, err = c.CallTool(ctx, "progress", map[string]any{"steps": 5, "intervalMs": 2000}, &client.CallOptions{Idle: 200 * time.Millisecond, Max: time.Minute})
			var de *client.DeadlineError
			if !errors.As(err, &de) || de.Clock != client.IdleClock {
				t.Fatalf("idle deadline: %v", err)
			}
			_, err = c.CallTool(ctx, "progress", map[string]any{"steps": 1000, "intervalMs": 20}, &client.CallOptions{Idle: 5 * time.Second, Max: 300 * time.Millisecond})
			if !errors.As(err, &de) || de.Clock != client.MaxClock {
				t.Fatalf("max deadline: %v", err)
			}
			// The connection still serves.
			if _, err := c.CallTool(ctx, "echo", map[string]any{"text": "still here"}, nil); err != nil {
				t.Fatalf("after the deadlines: %v", err)
			}
		})
	}
}
