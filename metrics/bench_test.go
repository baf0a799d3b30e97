package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/server"
)

// The observer's cost per request: what every call pays with metrics on.
func BenchmarkObserveRequest(b *testing.B) {
	obs, err := metrics.New(nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	srv := mcptest.NewServer(b, &server.Options{Observers: []server.Observer{obs}})
	srv.AddTool(server.Tool{Name: "echo"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	obs.Attach(srv)
	ctx := context.Background()
	info := server.RequestInfo{ID: jsonrpc.IntID(1), Method: mcp.MethodToolsCall, Transport: "stdio", Start: time.Now()}
	rec := server.RequestRecord{ID: info.ID, Method: info.Method, Tool: "echo", Era: mcp.Modern, Transport: "stdio",
		Outcome: server.Completed, Duration: 30 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		obs.RequestEnded(obs.RequestStarted(ctx, info), rec)
	}
}
