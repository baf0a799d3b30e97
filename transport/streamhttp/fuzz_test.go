package streamhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// fuzzHeaders are the header sets a fuzz input picks from.
var fuzzHeaders = []map[string]string{
	{},
	mcptest.ModernHeaders(mcp.MethodToolsCall, "echo"),
	mcptest.ModernHeaders(mcp.MethodToolsList, ""),
	{"Mcp-Session-Id": "no-such-session", "Mcp-Protocol-Version": mcp.Version20251125},
	{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "=?base64?ZWNobw==?=", "Mcp-Param-Text": "x"},
	{"Content-Type": "text/plain"},
	{"Accept": "application/json"},
	{"Origin": "http://evil.example"},
}

// FuzzHandler posts arbitrary bodies with one of several header sets:
// whatever they are, the answer has a status from the documented set and a
// body that is JSON (or events of JSON), and a valid request after it is
// served.
func FuzzHandler(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, `{"jsonrpc":"2.0","id":"a\ud800","method":"x"}`, `{`, ``,
	} {
		for i := range fuzzHeaders {
			f.Add([]byte(s), uint8(i))
		}
	}
	srv := mcptest.NewServer(f, nil)
	if err := server.AddTypedTool(srv, server.Tool{Name: "echo"}, func(_ context.Context, _ *server.CallRequest, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	}); err != nil {
		f.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, &streamhttp.HandlerOptions{MaxBodyBytes: 64 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { h.Shutdown(context.Background()) })
	serve := func(body []byte, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	valid, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": mcp.MethodToolsCall,
		"params": mcptest.ModernParams(map[string]any{"name": "echo", "arguments": map[string]any{"text": "still here"}})})

	f.Fuzz(func(t *testing.T, body []byte, pick uint8) {
		w := serve(body, fuzzHeaders[int(pick)%len(fuzzHeaders)])
		switch w.Code {
		case 200, 202, 400, 401, 403, 404, 405, 406, 408, 409, 413, 415, 429, 500, 503:
		default:
			t.Fatalf("status %d is not one the handler documents", w.Code)
		}
		out := w.Body.Bytes()
		switch ct := w.Header().Get("Content-Type"); {
		case len(out) == 0:
		case ct == "application/json":
			if !json.Valid(out) {
				t.Fatalf("a JSON answer that is not JSON: %q", out)
			}
		case ct == "text/event-stream":
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && !json.Valid([]byte(data)) {
					t.Fatalf("an event that is not JSON: %q", data)
				}
			}
		default:
			t.Fatalf("an answer of type %q: %q", ct, out)
		}
		if w := serve(valid, mcptest.ModernHeaders(mcp.MethodToolsCall, "echo")); w.Code != 200 || !strings.Contains(w.Body.String(), "still here") {
			t.Fatalf("a valid request after the input got %d %s", w.Code, w.Body.Bytes())
		}
	})
}
