package server_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// Progress the rate limit thins out is counted on the request's record,
// and progress a tool reports after its request ended is refused and
// reported to observers: the two ways reports are lost that the client
// never sees.
func TestProgressLostToTheRateLimitAndAfterTheEnd(t *testing.T) {
	rec := mcptest.NewRecorder()
	// An interval no test outlives: the first report goes out, every later
	// one is held, each replacing the one before.
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{ProgressInterval: time.Hour}))
	held := make(chan *server.CallRequest, 1)
	srv.AddTool(server.Tool{Name: "chatty"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		for n := 1; n <= 100; n++ {
			req.ReportProgress(float64(n), 100, "")
		}
		held <- req
		return &mcp.CallToolResult{}, nil
	})
	c := mcptest.Stdio(t, srv, nil)
	c.Request(1, mcp.MethodToolsCall, mcptest.Params(mcp.Modern, map[string]any{"name": "chatty",
		"_meta": map[string]any{"progressToken": "p"}}))
	if resp, _ := c.Await(1); resp.Error != nil {
		t.Fatalf("chatty: %s", resp.Raw)
	}
	r := rec.WaitRequest(t, jsonrpc.IntID(1))
	// Sent: the first report, and the last with the response; the 98
	// between were each replaced while held.
	if r.ProgressRateLimited != 98 || r.ProgressRefused != 0 {
		t.Fatalf("rate limited %d, refused %d; want 98 and 0", r.ProgressRateLimited, r.ProgressRefused)
	}
	req := <-held
	if err := req.ReportProgress(101, 100, ""); !errors.Is(err, server.ErrRequestDone) {
		t.Fatalf("a report after the end: %v, want ErrRequestDone", err)
	}
	if !slices.ContainsFunc(rec.Events(), func(e server.Event) bool {
		return e.Kind == server.EventProgressAfterEnd && e.Transport == "stdio"
	}) {
		t.Fatalf("no EventProgressAfterEnd among %v", rec.Events())
	}
}
