package streamhttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

func modernBody(id int, method string, params map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": mcptest.ModernParams(params)})
	return b
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestBadHTTPInputs sends each malformed request with its exact expected
// status and JSON-RPC error code, then proves the server still serves.
func TestBadHTTPInputs(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	srv.AddTool(server.Tool{Name: "echo"}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ok")}}, nil
	})
	c := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{MaxBodyBytes: 2048})
	c.Initialize(nil)
	legacy := c.LegacyHeaders()
	list := modernBody(7, mcp.MethodToolsList, nil)
	listHdr := mcptest.ModernHeaders(mcp.MethodToolsList, "")
	call := modernBody(8, mcp.MethodToolsCall, map[string]any{"name": "echo"})
	callHdr := mcptest.ModernHeaders(mcp.MethodToolsCall, "echo")

	tests := []struct {
		name   string
		method string
		body   []byte
		hdr    map[string]string
		status int
		code   int64 // 0: no JSON-RPC error body expected
		id     *int64
	}{
		{"Accept without text/event-stream", "POST", list, merge(listHdr, map[string]string{"Accept": "application/json"}), 406, jsonrpc.CodeInvalidRequest, nil},
		{"no Accept", "POST", list, merge(listHdr, map[string]string{"Accept": ""}), 406, jsonrpc.CodeInvalidRequest, nil},
		{"wrong Content-Type", "POST", list, merge(listHdr, map[string]string{"Content-Type": "text/plain"}), 415, jsonrpc.CodeInvalidRequest, nil},
		{"foreign Origin", "POST", list, merge(listHdr, map[string]string{"Origin": "https://evil.example"}), 403, jsonrpc.CodeInvalidRequest, nil},
		{"foreign Host", "POST", list, merge(listHdr, map[string]string{"Host": "evil.example"}), 403, jsonrpc.CodeInvalidRequest, nil},
		{"oversize body", "POST", modernBody(9, mcp.MethodToolsCall, map[string]any{"name": "echo", "arguments": map[string]any{"x": strings.Repeat("y", 4096)}}), callHdr, 413, jsonrpc.CodeInvalidRequest, nil},
		{"invalid JSON", "POST", []byte(`{"jsonrpc":"2.0","id":1,`), listHdr, 400, jsonrpc.CodeParseError, nil},
		{"batch", "POST", []byte(`[` + string(list) + `]`), listHdr, 400, jsonrpc.CodeInvalidRequest, nil},
		{"legacy request without a session id", "POST", []byte(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`), map[string]string{"Mcp-Protocol-Version": mcp.Version20251125}, 400, jsonrpc.CodeInvalidRequest, ptr(3)},
		{"unknown session id", "POST", []byte(`{"jsonrpc":"2.0","id":4,"method":"tools/list"}`), merge(legacy, map[string]string{"Mcp-Session-Id": "no-such-session"}), 404, jsonrpc.CodeInvalidRequest, ptr(4)},
		{"unsupported legacy version header", "POST", []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`), merge(legacy, map[string]string{"Mcp-Protocol-Version": "2024-01-01"}), 400, jsonrpc.CodeInvalidRequest, ptr(5)},
		{"Mcp-Method mismatch", "POST", list, merge(listHdr, map[string]string{"Mcp-Method": "tools/call"}), 400, mcp.CodeHeaderMismatch, ptr(7)},
		{"Mcp-Method missing", "POST", list, merge(listHdr, map[string]string{"Mcp-Method": ""}), 400, mcp.CodeHeaderMismatch, ptr(7)},
		{"Mcp-Name mismatch", "POST", call, merge(callHdr, map[string]string{"Mcp-Name": "other"}), 400, mcp.CodeHeaderMismatch, ptr(8)},
		{"Mcp-Name missing", "POST", call, merge(callHdr, map[string]string{"Mcp-Name": ""}), 400, mcp.CodeHeaderMismatch, ptr(8)},
		{"MCP-Protocol-Version missing", "POST", list, merge(listHdr, map[string]string{"Mcp-Protocol-Version": ""}), 400, mcp.CodeHeaderMismatch, ptr(7)},
		{"MCP-Protocol-Version differs from _meta", "POST", list, merge(listHdr, map[string]string{"Mcp-Protocol-Version": "2026-01-01"}), 400, mcp.CodeHeaderMismatch, ptr(7)},
		{"unsupported version", "POST", []byte(`{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}`), merge(listHdr, map[string]string{"Mcp-Protocol-Version": "1900-01-01"}), 400, mcp.CodeUnsupportedVersion, ptr(6)},
		{"missing _meta", "POST", []byte(`{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{}}`), listHdr, 400, jsonrpc.CodeInvalidParams, ptr(10)},
		{"unknown method", "POST", modernBody(11, "tools/frobnicate", nil), mcptest.ModernHeaders("tools/frobnicate", ""), 404, jsonrpc.CodeMethodNotFound, ptr(11)},
		{"removed method", "POST", modernBody(12, "ping", nil), mcptest.ModernHeaders("ping", ""), 404, jsonrpc.CodeMethodNotFound, ptr(12)},
		{"unknown tool", "POST", modernBody(13, mcp.MethodToolsCall, map[string]any{"name": "nope"}), mcptest.ModernHeaders(mcp.MethodToolsCall, "nope"), 400, jsonrpc.CodeInvalidParams, ptr(13)},
		{"GET without a session (modern)", "GET", nil, map[string]string{"Accept": "text/event-stream"}, 405, jsonrpc.CodeInvalidRequest, nil},
		{"DELETE without a session", "DELETE", nil, nil, 405, jsonrpc.CodeInvalidRequest, nil},
		{"PUT", "PUT", list, listHdr, 405, jsonrpc.CodeInvalidRequest, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, c.URL, strings.NewReader(string(tt.body)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tt.hdr {
				if k == "Host" {
					req.Host = v
				} else if v == "" {
					req.Header.Del(k)
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := c.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			f := mcptest.ReadJSON(t, resp)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, f.Raw)
			}
			if tt.code != 0 && (f.Error == nil || f.Error.Code != tt.code) {
				t.Fatalf("body %s, want error code %d", f.Raw, tt.code)
			}
			switch {
			case tt.id == nil && f.ID != nil:
				t.Fatalf("error carries an id: %s", f.Raw)
			case tt.id != nil && (f.ID == nil || *f.ID != jsonrpc.IntID(*tt.id)):
				t.Fatalf("error id %v, want %d: %s", f.ID, *tt.id, f.Raw)
			}
			// Still serving, in both eras.
			if f := mcptest.ReadJSON(t, c.Modern(context.Background(), 100, mcp.MethodToolsCall, map[string]any{"name": "echo"})); f.Error != nil {
				t.Fatalf("modern call after a bad input: %s", f.Raw)
			}
			if f := mcptest.ReadJSON(t, c.Legacy(context.Background(), 101, mcp.MethodToolsList, nil)); f.Error != nil {
				t.Fatalf("legacy call after a bad input: %s", f.Raw)
			}
		})
	}
}

func ptr(n int64) *int64 { return &n }

// TestBearerToken: with a token configured, requests without it get 401
// and a WWW-Authenticate challenge; with it they are served.
func TestBearerToken(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	c := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{AuthToken: "s3cret"})
	for _, auth := range []string{"", "Bearer wrong", "Basic s3cret"} {
		resp := c.Do(context.Background(), http.MethodPost, modernBody(1, mcp.MethodToolsList, nil), merge(mcptest.ModernHeaders(mcp.MethodToolsList, ""), map[string]string{"Authorization": auth}))
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("Authorization %q: %d", auth, resp.StatusCode)
		}
	}
	resp := c.Do(context.Background(), http.MethodPost, modernBody(1, mcp.MethodToolsList, nil), merge(mcptest.ModernHeaders(mcp.MethodToolsList, ""), map[string]string{"Authorization": "Bearer s3cret"}))
	if f := mcptest.ReadJSON(t, resp); resp.StatusCode != 200 || f.Error != nil {
		t.Fatalf("with the token: %d %s", resp.StatusCode, f.Raw)
	}
}

// TestAllowLists: configured hosts and origins are accepted; others still
// are not.
func TestAllowLists(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	c := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{AllowedHosts: []string{"127.0.0.1", "mcp.example.com"}, AllowedOrigins: []string{"https://app.example.com"}})
	for _, tc := range []struct {
		host, origin string
		want         int
	}{
		{"mcp.example.com", "", 200},
		{"mcp.example.com:8443", "https://app.example.com", 200},
		{"mcp.example.com", "https://app.example.com:444", 200},
		{"mcp.example.com", "http://app.example.com", 403},
		{"other.example.com", "", 403},
		{"mcp.example.com", "http://localhost:3000", 403},
	} {
		req := mustRequest(t, context.Background(), c.URL, modernBody(1, mcp.MethodToolsList, nil), mcptest.ModernHeaders(mcp.MethodToolsList, ""))
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := c.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Host %s Origin %q: %d, want %d", tc.host, tc.origin, resp.StatusCode, tc.want)
		}
	}
}
