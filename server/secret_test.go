package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// The request log line summarises a call's arguments, never writing the
// ones the tool's policy marks secret, and says where the call came from
// and what interceptors did.
func TestLogLineKeepsSecrets(t *testing.T) {
	var logs mcptest.LogBuffer
	// The line is written as the request ends, after its response is
	// sent: the recorder says when it has been.
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{Logger: logs.Logger()}))
	err := srv.AddTool(server.Tool{Name: "login", Policy: server.Policy{Secret: []string{"password"}}},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			req.Annotate("audit", "checked")
			return &mcp.CallToolResult{}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	c.Call(1, mcp.MethodToolsCall, mcptest.Params(mcp.Modern, map[string]any{"name": "login",
		"arguments": map[string]any{"user": "alice", "password": "hunter2-is-not-a-password", "note": strings.Repeat("x", 100)}}))
	rec.WaitRequest(t, jsonrpc.IntID(1))
	var line map[string]any
	for _, r := range logs.Records(t) {
		if r["msg"] == "request" && r["tool"] == "login" {
			line = r
		}
	}
	if line == nil {
		t.Fatalf("no request line for login:\n%s", logs.String())
	}
	args, _ := line["args"].(string)
	if strings.Contains(logs.String(), "hunter2") || !strings.Contains(args, "password=[secret]") || !strings.Contains(args, `user="alice"`) {
		t.Fatalf("args %q (log %s): want the password as [secret], alice in the clear", args, logs.String())
	}
	if strings.Contains(args, strings.Repeat("x", 40)) {
		t.Fatalf("args %q: a long value was not cut", args)
	}
	if line["era"] != "modern" || line["transport"] != "stdio" {
		t.Errorf("the line says era %v, transport %v: want modern over stdio", line["era"], line["transport"])
	}
	if line["audit"] != "checked" {
		t.Fatalf("the line lacks the interceptor's annotation: %v", line)
	}
}
