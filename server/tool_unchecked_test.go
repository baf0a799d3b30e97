package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// An Unchecked tool's arguments reach its handler as sent, whatever its
// schema says, and a schema the server's validator cannot compile is
// served as given; a checked tool with the same schema refuses the same
// call, and the same schema at registration.
func TestUncheckedToolLeavesArgumentsToItsHandler(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	schema := json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`)
	var got json.RawMessage
	h := func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		got = call.Arguments
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ran")}}, nil
	}
	if err := srv.AddTool(server.Tool{Name: "passed", InputSchema: schema, Unchecked: true}, h); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddTool(server.Tool{Name: "checked", InputSchema: schema}, h); err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	f := c.Call(1, "tools/call", mcptest.ModernParams(map[string]any{"name": "passed", "arguments": map[string]any{"other": 1}}))
	if f.Error != nil || !strings.Contains(string(f.Result), "ran") || string(got) != `{"other":1}` {
		t.Fatalf("the unchecked call: %s, handler got %s", f.Raw, got)
	}
	got = nil
	f = c.Call(2, "tools/call", mcptest.ModernParams(map[string]any{"name": "checked", "arguments": map[string]any{"other": 1}}))
	if !strings.Contains(string(f.Result), "invalid_arguments") || got != nil {
		t.Fatalf("the checked call was not refused before its handler: %s, handler got %s", f.Raw, got)
	}
	// A remote $ref this server never fetches: refused when checked,
	// served as given when not.
	remote := json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"https://example.com/x.json"}}}`)
	if err := srv.AddTool(server.Tool{Name: "remote", InputSchema: remote}, h); err == nil {
		t.Fatal("a checked tool with a remote $ref was registered")
	}
	if err := srv.AddTool(server.Tool{Name: "remote", InputSchema: remote, Unchecked: true}, h); err != nil {
		t.Fatalf("an unchecked tool with a remote $ref: %v", err)
	}
	if err := srv.AddTool(server.Tool{Name: "notobject", InputSchema: json.RawMessage(`{"type":"string"}`), Unchecked: true}, h); err == nil {
		t.Fatal("an unchecked tool whose schema's root is not an object was registered")
	}
}
