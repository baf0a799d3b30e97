package server_test

import (
	"context"
	"testing"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// addTool registers a tool whose body is f; it returns an empty text result
// unless the context ended.
func addTool(t *testing.T, srv *server.Server, name string, f func(req *server.CallRequest, wait func())) {
	t.Helper()
	err := srv.AddTool(server.Tool{Name: name}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		f(req, func() { <-ctx.Done() })
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(name + " done")}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
