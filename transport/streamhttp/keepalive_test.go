package streamhttp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// TestQuietStreamKeepsAliveAndOutlivesWriteTimeout: a call that runs for
// 8.5 (fake) seconds without progress gets a keepalive comment every
// second on its SSE stream, never a progress notification, and its result
// arrives although http.Server.WriteTimeout is three seconds.
func TestQuietStreamKeepsAliveAndOutlivesWriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := mcptest.NewRecorder()
		srv := mcptest.NewServer(t, rec.Hook(nil))
		srv.AddTool(server.Tool{Name: "quiet"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			select {
			case <-time.After(8500 * time.Millisecond):
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("finally")}}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		h, err := streamhttp.NewHandler(srv, &streamhttp.HandlerOptions{KeepAlive: time.Second, WriteTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ln := mcptest.NewPipeNetwork()
		hs := &http.Server{Handler: h, WriteTimeout: 3 * time.Second}
		go hs.Serve(ln)
		client := &http.Client{Transport: &http.Transport{DialContext: ln.DialContext}}
		t.Cleanup(func() { // inside the bubble: every goroutine must end
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			h.Shutdown(ctx)
			hs.Close()
			ln.Close()
			client.CloseIdleConnections()
		})
		c := &mcptest.HTTPClient{URL: "http://127.0.0.1/mcp", Client: client, Handler: h}
		c.SetT(t)

		start := time.Now()
		stream := mcptest.ReadSSE(t, c.Modern(context.Background(), 1, mcp.MethodToolsCall,
			map[string]any{"name": "quiet", "_meta": map[string]any{"progressToken": "q"}}))
		f := stream.Next()
		if !f.IsResponseTo(jsonrpcID(1)) || f.Error != nil {
			t.Fatalf("got %s, want the result", f.Raw)
		}
		if elapsed := time.Since(start); elapsed != 8500*time.Millisecond {
			t.Fatalf("result after %v of fake time, want 8.5s", elapsed)
		}
		if n := len(stream.Keepalives); n != 8 {
			t.Fatalf("%d keepalive comments over 8.5 quiet seconds, want 8 (one a second)", n)
		}
		if evs := rec.Events(); len(evs) != 8 || evs[7] != (server.Event{Kind: server.EventKeepalive, Transport: "http"}) {
			t.Fatalf("events = %+v, want the 8 keepalives", evs)
		}
		stream.Close()
	})
}

// TestKeepalivesDoNotResetIdle: keepalive comments are transport traffic,
// not progress: a call that reports nothing times out on its idle deadline
// although its stream carried a keepalive every second.
func TestKeepalivesDoNotResetIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcptest.NewServer(t, nil)
		srv.AddTool(server.Tool{Name: "silent", Policy: server.Policy{IdleTimeout: 3500 * time.Millisecond, MaxTimeout: time.Minute}},
			func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})
		c := mcptest.PipeHTTP(t, srv, &streamhttp.HandlerOptions{KeepAlive: time.Second})
		start := time.Now()
		stream := mcptest.ReadSSE(t, c.Modern(context.Background(), 1, mcp.MethodToolsCall,
			map[string]any{"name": "silent", "_meta": map[string]any{"progressToken": "s"}}))
		f := stream.Next()
		if time.Since(start) != 3500*time.Millisecond || !strings.Contains(string(f.Result), `"deadline":"idle"`) {
			t.Fatalf("at %v got %s, want the idle timeout at 3.5s", time.Since(start), f.Raw)
		}
		if n := len(stream.Keepalives); n != 3 {
			t.Fatalf("%d keepalives before the timeout, want 3", n)
		}
		stream.Close()
	})
}
