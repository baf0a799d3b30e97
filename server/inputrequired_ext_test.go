package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// TestInputRequiredRoundTrip: a tool asks for input (2026-07-28), the
// client retries with the answer and the signed state, and the tool sees
// both; a tampered state is refused before the tool runs.
func TestInputRequiredRoundTrip(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	var runs int
	srv.AddTool(server.Tool{Name: "ask"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		runs++
		if raw, ok := req.InputResponses["name"]; ok && string(req.RequestState) == "step-1" {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("got " + string(raw))}}, nil
		}
		return nil, &server.InputRequired{
			Requests: map[string]mcp.InputRequest{"name": server.ElicitRequest(mcp.ElicitParams{Message: "name?"})},
			State:    []byte("step-1"),
		}
	})
	c := mcptest.Stdio(t, srv, nil)
	f := c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "ask"}))
	var ir mcp.InputRequiredResult
	if err := json.Unmarshal(f.Result, &ir); err != nil || ir.ResultType != mcp.ResultInputRequired || ir.InputRequests["name"].Method != mcp.MethodElicit || ir.RequestState == "" {
		t.Fatalf("first round = %s", f.Raw)
	}
	if strings.Contains(ir.RequestState, "step-1") {
		t.Fatalf("state %q carries the payload in the clear", ir.RequestState)
	}
	retry := func(id int64, state string) mcptest.Frame {
		return c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{
			"name": "ask", "requestState": state,
			"inputResponses": map[string]any{"name": map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}},
		}))
	}
	if f := retry(2, ir.RequestState); !strings.Contains(string(f.Result), `got {\"action\":\"accept\"`) {
		t.Fatalf("retry = %s", f.Raw)
	}
	before := runs
	if f := retry(3, ir.RequestState+"x"); f.Error == nil || f.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("tampered retry = %s", f.Raw)
	}
	if runs != before {
		t.Fatal("the tool ran with a tampered state")
	}
	// In the legacy era there is no input_required: it is an internal error.
	l := mcptest.Stdio(t, srv, nil)
	l.Initialize(mcp.Version20251125)
	if f := l.Call(1, mcp.MethodToolsCall, map[string]any{"name": "ask"}); f.Error == nil || f.Error.Code != jsonrpc.CodeInternalError {
		t.Fatalf("legacy input_required = %s", f.Raw)
	}
}

// TestRequireCapability: a handler that needs an undeclared capability
// fails with -32021 naming it.
func TestRequireCapability(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	srv.AddTool(server.Tool{Name: "needs"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return nil, req.Require("sampling", "elicitation")
	})
	c := mcptest.Stdio(t, srv, nil)
	params := mcptest.ModernParams(map[string]any{"name": "needs"})
	params["_meta"].(map[string]any)[mcp.MetaClientCapabilities] = map[string]any{"elicitation": map[string]any{}}
	f := c.Call(1, mcp.MethodToolsCall, params)
	var data mcp.MissingCapabilityData
	if f.Error == nil || f.Error.Code != mcp.CodeMissingClientCapability || json.Unmarshal(f.Error.Data, &data) != nil ||
		data.RequiredCapabilities["sampling"] == nil || data.RequiredCapabilities["elicitation"] != nil {
		t.Fatalf("got %s, want -32021 naming only sampling", f.Raw)
	}
}

// A requestState is bound to the tenant it was issued to and to the
// arguments of the call that asked for input: presented by another tenant,
// or with other arguments, it is refused before the tool runs.
func TestRequestStateBoundToTenantAndArguments(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	var runs atomic.Int64
	srv.AddTool(server.Tool{Name: "transfer"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		if req.RequestState != nil {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done for " + req.Tenant)}}, nil
		}
		return nil, &server.InputRequired{
			Requests: map[string]mcp.InputRequest{"ok": server.ElicitRequest(mcp.ElicitParams{Message: "confirm?"})},
			State:    []byte("confirmed-amount"),
		}
	})
	c := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	call := func(token string, id int64, args map[string]any, state string) mcptest.Frame {
		t.Helper()
		params := map[string]any{"name": "transfer", "arguments": args}
		if state != "" {
			params["requestState"] = state
			params["inputResponses"] = map[string]any{"ok": map[string]any{"action": "accept"}}
		}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": mcp.MethodToolsCall, "params": mcptest.ModernParams(params)})
		hdr := mcptest.ModernHeaders(mcp.MethodToolsCall, "transfer")
		hdr["Authorization"] = "Bearer " + token
		return mcptest.ReadJSON(t, c.Do(context.Background(), http.MethodPost, body, hdr))
	}
	args := map[string]any{"to": "carol", "cents": 500}
	var ir mcp.InputRequiredResult
	if f := call("tok-a", 1, args, ""); json.Unmarshal(f.Result, &ir) != nil || ir.RequestState == "" {
		t.Fatalf("first round = %s", f.Raw)
	}
	before := runs.Load()
	for _, tc := range []struct {
		name  string
		token string
		args  map[string]any
	}{
		{"another tenant", "tok-b", args},
		{"other arguments", "tok-a", map[string]any{"to": "mallory", "cents": 500}},
		{"a changed amount", "tok-a", map[string]any{"to": "carol", "cents": 50000}},
	} {
		if f := call(tc.token, 2, tc.args, ir.RequestState); f.Error == nil || f.Error.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("%s: %s, want -32602", tc.name, f.Raw)
		}
	}
	if runs.Load() != before {
		t.Fatalf("the tool ran %d times with a misused state", runs.Load()-before)
	}
	// The same tenant with the same arguments, in another member order.
	reordered := map[string]any{"cents": 500, "to": "carol"}
	if f := call("tok-a", 3, reordered, ir.RequestState); !strings.Contains(string(f.Result), "done for alice") {
		t.Fatalf("the rightful retry = %s", f.Raw)
	}
}

// The -32021 message names the missing capabilities in one order: the same
// call gets the same message every time.
func TestRequireMessageIsStable(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	srv.AddTool(server.Tool{Name: "needs"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return nil, req.Require("sampling", "elicitation", "roots", "io.example/ext")
	})
	c := mcptest.Stdio(t, srv, nil)
	messages := map[string]bool{}
	for id := int64(1); id <= 50; id++ {
		f := c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "needs"}))
		if f.Error == nil {
			t.Fatalf("got %s, want -32021", f.Raw)
		}
		messages[f.Error.Message] = true
	}
	if len(messages) != 1 {
		t.Fatalf("50 identical calls gave %d messages: %v", len(messages), messages)
	}
	// An extension is required under requiredCapabilities.extensions, as
	// the client declares it, not beside the core capabilities.
	f := c.Call(51, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "needs"}))
	var data mcp.MissingCapabilityData
	if err := json.Unmarshal(f.Error.Data, &data); err != nil {
		t.Fatal(err)
	}
	if _, ok := data.RequiredCapabilities["extensions"]["io.example/ext"]; !ok || data.RequiredCapabilities["io.example/ext"] != nil {
		t.Fatalf("data = %s, want the extension under requiredCapabilities.extensions", f.Error.Data)
	}
	if !strings.HasSuffix(f.Error.Message, "elicitation, roots, sampling, io.example/ext") {
		t.Fatalf("message = %q", f.Error.Message)
	}
}
