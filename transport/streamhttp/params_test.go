package streamhttp_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// TestParamHeaders: an argument annotated x-mcp-header must be mirrored in
// Mcp-Param-{Name}, plain or base64, and match the body.
func TestParamHeaders(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	err := srv.AddTool(server.Tool{Name: "route", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"}},"required":["region"]}`)},
		func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.HTTP(t, srv, nil)
	call := func(args map[string]any, params map[string]string) int {
		body := modernBody(1, mcp.MethodToolsCall, map[string]any{"name": "route", "arguments": args})
		resp := c.Do(context.Background(), "POST", body, merge(mcptest.ModernHeaders(mcp.MethodToolsCall, "route"), params))
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name   string
		args   map[string]any
		params map[string]string
		want   int
	}{
		{"plain", map[string]any{"region": "eu-west1"}, map[string]string{"Mcp-Param-Region": "eu-west1"}, 200},
		{"base64", map[string]any{"region": "Hello"}, map[string]string{"Mcp-Param-Region": "=?base64?SGVsbG8=?=", "Mcp-Param-N": ""}, 200},
		{"integer", map[string]any{"region": "x", "n": 42}, map[string]string{"Mcp-Param-Region": "x", "Mcp-Param-N": "42"}, 200},
		{"absent argument needs no header", map[string]any{"region": "x"}, map[string]string{"Mcp-Param-Region": "x"}, 200},
		{"missing header", map[string]any{"region": "x"}, nil, 400},
		{"mismatch", map[string]any{"region": "x"}, map[string]string{"Mcp-Param-Region": "y"}, 400},
		{"bad base64 padding", map[string]any{"region": "Hello"}, map[string]string{"Mcp-Param-Region": "=?base64?SGVsbG8?="}, 400},
		{"integer mismatch", map[string]any{"region": "x", "n": 42}, map[string]string{"Mcp-Param-Region": "x", "Mcp-Param-N": "43"}, 400},
	} {
		if got := call(tc.args, tc.params); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestInvalidHeaderAnnotationsAreRefused: a tool whose x-mcp-header breaks
// the rules is not registered.
func TestInvalidHeaderAnnotationsAreRefused(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	for _, schema := range []string{
		`{"type":"object","properties":{"a":{"type":"number","x-mcp-header":"A"}}}`,
		`{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A B"}}}`,
		`{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}}`,
		`{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}}`,
		`{"type":"object","anyOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}`,
	} {
		if err := srv.AddTool(server.Tool{Name: "bad", InputSchema: json.RawMessage(schema)}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }); err == nil {
			t.Errorf("accepted %s", schema)
		}
	}
}
