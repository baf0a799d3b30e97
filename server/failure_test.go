package server_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// Clients validate structuredContent against a tool's outputSchema even
// when isError is set, so a failure must never put its body there. These
// cases cover every way a failed result is made, for a tool that declares
// an output schema.
func TestFailedResultsNeverBreakTheOutputSchema(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	type stock struct {
		SKU       string `json:"sku"`
		Available int    `json:"available"`
	}
	handlers := map[string]func(in struct{ Case string }) (stock, error){
		"tool error": func(struct{ Case string }) (stock, error) {
			return stock{}, &mcp.ToolError{Code: "unknown_sku", Message: "no such SKU"}
		},
		"plain error": func(struct{ Case string }) (stock, error) { return stock{}, context.DeadlineExceeded },
		"panic":       func(struct{ Case string }) (stock, error) { panic("boom") },
	}
	err := server.AddTypedTool(srv, server.Tool{Name: "typed"}, func(ctx context.Context, req *server.CallRequest, in struct {
		Case string `json:"case"`
	}) (stock, error) {
		return handlers[in.Case](struct{ Case string }{in.Case})
	})
	if err != nil {
		t.Fatal(err)
	}
	// A hand-built failure whose structuredContent the schema does not
	// describe loses it; one the schema describes keeps it.
	outSchema := json.RawMessage(`{"type":"object","properties":{"sku":{"type":"string"}},"required":["sku"],"additionalProperties":false}`)
	err = srv.AddTool(server.Tool{Name: "raw", OutputSchema: outSchema}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		var in struct{ Valid bool }
		json.Unmarshal(req.Arguments, &in)
		sc := map[string]any{"code": "oops"}
		if in.Valid {
			sc = map[string]any{"sku": "w1"}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("failed")}, StructuredContent: sc, IsError: true}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// An output schema the validator cannot compile (a remote $ref) is
	// still served, and nothing is known to match it.
	err = srv.AddTool(server.Tool{Name: "remote", OutputSchema: json.RawMessage(`{"$ref":"https://example.com/schemas/stock.json"}`)},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("failed")}, StructuredContent: map[string]any{"sku": "w1"}, IsError: true}, nil
		})
	if err != nil {
		t.Fatalf("a tool with an uncompilable output schema: %v", err)
	}
	c := mcptest.Stdio(t, srv, nil)
	callTool := func(id int64, name string, args map[string]any) mcptest.Frame {
		t.Helper()
		f := c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": name, "arguments": args}))
		if f.Error != nil {
			t.Fatalf("%s: %s", name, f.Raw)
		}
		return f
	}
	id := int64(0)
	for name, want := range map[string]string{"tool error": "unknown_sku", "plain error": mcp.FailureToolError, "panic": mcp.FailureInternal} {
		id++
		if f := mcptest.Failure(t, callTool(id, "typed", map[string]any{"case": name}).Result); f.Code != want {
			t.Errorf("%s: code %q, want %q", name, f.Code, want)
		}
	}
	// Arguments the input schema refuses, with the typed tool's schema.
	if f := mcptest.Failure(t, callTool(10, "typed", map[string]any{"case": 1}).Result); f.Code != mcp.FailureInvalidArguments {
		t.Errorf("invalid arguments: code %q", f.Code)
	}

	var res struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	json.Unmarshal(callTool(11, "raw", map[string]any{"valid": false}).Result, &res)
	if !res.IsError || res.StructuredContent != nil {
		t.Errorf("structuredContent outside the schema: kept %s", res.StructuredContent)
	}
	res.StructuredContent = nil
	json.Unmarshal(callTool(12, "raw", map[string]any{"valid": true}).Result, &res)
	if !res.IsError || string(res.StructuredContent) != `{"sku":"w1"}` {
		t.Errorf("structuredContent the schema describes: got %s, want it kept", res.StructuredContent)
	}
	res.StructuredContent = nil
	json.Unmarshal(callTool(13, "remote", nil).Result, &res)
	if !res.IsError || res.StructuredContent != nil {
		t.Errorf("structuredContent under an uncompilable schema: kept %s", res.StructuredContent)
	}
}
