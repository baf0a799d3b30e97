package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// target is an mcprel server reached one way.
type target struct {
	name string
	dial func(t *testing.T, srv *server.Server, era mcp.Era) *client.Client
}

var targets = []target{
	{"stdio", func(t *testing.T, srv *server.Server, era mcp.Era) *client.Client {
		toServer, fromClient := ioPipe()
		toClient, fromServer := ioPipe()
		conn := stdio.NewConn(srv, toServer, fromServer, nil)
		done := make(chan struct{})
		go func() { conn.Serve(context.Background()); fromServer.Close(); close(done) }()
		c, err := client.Connect(context.Background(), toClient, fromClient, &client.Options{Era: era})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); <-done })
		return c
	}},
	{"http", func(t *testing.T, srv *server.Server, era mcp.Era) *client.Client {
		h, err := streamhttp.NewHandler(srv, nil)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(h)
		t.Cleanup(hs.Close)
		c, err := client.DialHTTP(context.Background(), hs.URL, &client.Options{Era: era})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}},
}

// Against mcprel over both transports in both eras: the negotiated era,
// a call with progress, and a cancellation that reaches the handler as
// the transport and era define it — a notification on stdio and 2025 HTTP,
// the stream's close on 2026 HTTP.
func TestAgainstMcprel(t *testing.T) {
	for _, tg := range targets {
		for _, era := range []mcp.Era{0, mcp.Legacy} {
			t.Run(tg.name+"-"+era.String(), func(t *testing.T) {
				srv := mcptest.NewServer(t, nil)
				gate := mcptest.NewGate(t, srv, "gate")
				err := srv.AddTool(server.Tool{Name: "count"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
					for i := 1; i <= 3; i++ {
						req.ReportProgress(float64(i), 3, "")
					}
					return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("counted")}}, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				c := tg.dial(t, srv, era)
				want := mcp.Modern
				if era == mcp.Legacy {
					want = mcp.Legacy
				}
				if c.Era() != want {
					t.Fatalf("era %v, want %v", c.Era(), want)
				}
				var seen []float64
				res, err := c.CallTool(context.Background(), "count", nil, &client.CallOptions{OnProgress: func(p client.Progress) { seen = append(seen, p.Progress) }})
				if err != nil || res.IsError || len(res.Content) != 1 {
					t.Fatalf("count: %+v, %v", res, err)
				}
				if len(seen) == 0 || seen[len(seen)-1] != 3 {
					t.Fatalf("progress seen %v", seen)
				}
				ctx, cancel := context.WithCancel(context.Background())
				errs := make(chan error, 1)
				go func() { _, err := c.CallTool(ctx, "gate", nil, nil); errs <- err }()
				gate.WaitEntered(t)
				cancel()
				cause := gate.WaitExited(t)
				wantCause := server.ErrPeerCancelled
				if tg.name == "http" && want == mcp.Modern {
					wantCause = server.ErrDisconnected
				}
				if !errors.Is(cause, wantCause) {
					t.Fatalf("the handler saw %v, want %v", cause, wantCause)
				}
				if err := <-errs; !errors.As(err, new(*client.CancelledError)) {
					t.Fatalf("the cancelled call returned %v", err)
				}
				gate.Release()
				if _, err := c.CallTool(context.Background(), "count", nil, nil); err != nil {
					t.Fatalf("after the cancel: %v", err)
				}
			})
		}
	}
}

// A server that answers with an HTTP error page, not JSON-RPC, is a
// StatusError the caller can read, not a hang.
func TestHTTPStatusError(t *testing.T) {
	hs := httptest.NewServer(nil) // every path 404s
	defer hs.Close()
	_, err := client.DialHTTP(context.Background(), hs.URL+"/mcp", &client.Options{ProbeTimeout: time.Second})
	var se *client.StatusError
	if !errors.As(err, &se) || se.Status != 404 || !strings.Contains(err.Error(), "404") {
		t.Fatalf("dial = %v", err)
	}
}
