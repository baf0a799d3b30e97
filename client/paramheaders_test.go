package client_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// routeSchema annotates three arguments of every kind a header may mirror
// and leaves two (a number, a string) unannotated.
const routeSchema = `{"type":"object","properties":{
	"region":{"type":"string","x-mcp-header":"Region"},
	"priority":{"type":"integer","x-mcp-header":"Priority"},
	"verbose":{"type":"boolean","x-mcp-header":"Verbose"},
	"ratio":{"type":"number"},
	"query":{"type":"string"}}}`

// paramRecorder keeps the Mcp-Param-* headers of each tools/call that
// reaches the handler it wraps.
type paramRecorder struct {
	mu    sync.Mutex
	calls []http.Header
}

func (p *paramRecorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && peekMethod(r) == mcp.MethodToolsCall {
			got := http.Header{}
			for k, v := range r.Header {
				if strings.HasPrefix(k, mcp.HeaderParamPrefix) {
					got[k] = v
				}
			}
			p.mu.Lock()
			p.calls = append(p.calls, got)
			p.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// peekMethod reads a POST's method, leaving its body for the handler.
func peekMethod(r *http.Request) string {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var m struct {
		Method string `json:"method"`
	}
	json.Unmarshal(body, &m)
	return m.Method
}

func (p *paramRecorder) last(t *testing.T) http.Header {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) == 0 {
		t.Fatal("no tools/call reached the server")
	}
	return p.calls[len(p.calls)-1]
}

// routeServer is an mcprel server over HTTP whose tool "route" declares
// routeSchema, and which checks the Mcp-Param-* headers of every call to
// it against the arguments (refusing a mismatch).
func routeServer(t *testing.T) (*paramRecorder, string) {
	srv := mcptest.NewServer(t, nil)
	err := srv.AddTool(server.Tool{Name: "route", InputSchema: json.RawMessage(routeSchema)},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("routed")}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &paramRecorder{}
	hs := httptest.NewServer(rec.wrap(h))
	t.Cleanup(hs.Close)
	return rec, hs.URL
}

func dialHTTP(t *testing.T, url string, era mcp.Era) *client.Client {
	c, err := client.DialHTTP(context.Background(), url, &client.Options{Era: era})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Over 2026-07-28 HTTP, exactly the arguments the tool's schema marks
// with x-mcp-header are mirrored into Mcp-Param-* headers, each encoded as
// the specification says (plain when safe header text, base64 otherwise),
// and an argument that is null or absent has no header. The mcprel server
// checks every header against the body, so each call that succeeds was
// also read back correctly.
func TestParamHeadersMirrored(t *testing.T) {
	b64 := func(s string) string { return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?=" }
	cases := []struct {
		name string
		args string
		want map[string]string // header (after Mcp-Param-) → raw value; absent ones must be absent
	}{
		{"plain", `{"region":"us-west1","priority":42,"verbose":false,"ratio":3.5,"query":"SELECT 1"}`,
			map[string]string{"Region": "us-west1", "Priority": "42", "Verbose": "false"}},
		{"internal space stays plain", `{"region":"us west 1","verbose":true}`,
			map[string]string{"Region": "us west 1", "Verbose": "true"}},
		{"empty string", `{"region":""}`, map[string]string{"Region": ""}},
		{"non-ASCII", `{"region":"Hello, 世界"}`, map[string]string{"Region": b64("Hello, 世界")}},
		{"leading space", `{"region":" us-west1"}`, map[string]string{"Region": b64(" us-west1")}},
		{"trailing space", `{"region":"us-west1 "}`, map[string]string{"Region": b64("us-west1 ")}},
		{"newline", `{"region":"line1\nline2"}`, map[string]string{"Region": b64("line1\nline2")}},
		{"carriage return", `{"region":"line1\r\nline2"}`, map[string]string{"Region": b64("line1\r\nline2")}},
		{"tab", `{"region":"\tindented"}`, map[string]string{"Region": b64("\tindented")}},
		{"looks encoded", `{"region":"=?base64?QQ==?="}`, map[string]string{"Region": b64("=?base64?QQ==?=")}},
		{"nulls omitted", `{"region":null,"priority":7,"verbose":null}`, map[string]string{"Priority": "7"}},
		{"absent omitted", `{"query":"x"}`, map[string]string{}},
	}
	rec, url := routeServer(t)
	c := dialHTTP(t, url, 0)
	if c.Era() != mcp.Modern {
		t.Fatalf("era %v, want modern", c.Era())
	}
	if _, err := c.ListTools(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.CallTool(context.Background(), "route", json.RawMessage(tc.args), nil)
			if err != nil {
				t.Fatal(err)
			}
			// A null argument fails the tool's schema (after the transport
			// accepted the headers: a mismatch is a protocol error).
			if res.IsError && !strings.Contains(tc.args, "null") {
				t.Fatalf("the server refused the call: %+v", res)
			}
			got := rec.last(t)
			for name, v := range tc.want {
				if vals := got.Values(mcp.HeaderParamPrefix + name); len(vals) != 1 || vals[0] != v {
					t.Errorf("%s%s = %q, want %q", mcp.HeaderParamPrefix, name, vals, v)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("headers %v, want only %v", got, tc.want)
			}
		})
	}
}

// A call to a tool the client has not listed yet goes without headers;
// when the server refuses it for a missing one, the client lists the tools
// and sends it once more, with them. A call in the 2025 era carries none
// (the headers are a 2026-07-28 feature).
func TestParamHeadersBeforeListingAndByEra(t *testing.T) {
	rec, url := routeServer(t)
	c := dialHTTP(t, url, 0)
	res, err := c.CallTool(context.Background(), "route", map[string]any{"region": "eu", "priority": 1}, nil)
	if err != nil || res.IsError {
		t.Fatalf("call before listing: %v %+v", err, res)
	}
	rec.mu.Lock()
	calls := rec.calls
	rec.mu.Unlock()
	if len(calls) != 2 || len(calls[0]) != 0 {
		t.Fatalf("calls reached the server with %v; want one without headers, then one with", calls)
	}
	if got := calls[1]; got.Get("Mcp-Param-Region") != "eu" || got.Get("Mcp-Param-Priority") != "1" || len(got) != 2 {
		t.Fatalf("headers %v, want Region and Priority", got)
	}

	legacy := dialHTTP(t, url, mcp.Legacy)
	if _, err := legacy.ListTools(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := legacy.CallTool(context.Background(), "route", map[string]any{"region": "eu"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(t); len(got) != 0 {
		t.Fatalf("2025-era call carried %v", got)
	}
}

// A tool whose x-mcp-header annotations break the rules is left out of
// the client's listing, the valid ones are kept, and a call to the
// excluded one is refused before it leaves.
func TestInvalidHeaderToolsExcluded(t *testing.T) {
	invalid := map[string]string{
		"empty":     `{"type":"object","properties":{"v":{"type":"string","x-mcp-header":""}}}`,
		"object":    `{"type":"object","properties":{"v":{"type":"object","x-mcp-header":"V"}}}`,
		"number":    `{"type":"object","properties":{"v":{"type":"number","x-mcp-header":"V"}}}`,
		"duplicate": `{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"MyField"},"b":{"type":"string","x-mcp-header":"myfield"}}}`,
		"space":     `{"type":"object","properties":{"v":{"type":"string","x-mcp-header":"My Region"}}}`,
		"colon":     `{"type":"object","properties":{"v":{"type":"string","x-mcp-header":"Region:Primary"}}}`,
		"nonascii":  `{"type":"object","properties":{"v":{"type":"string","x-mcp-header":"Région"}}}`,
	}
	var tools []string
	tools = append(tools, `{"name":"valid","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}}`)
	for name, schema := range invalid {
		tools = append(tools, fmt.Sprintf(`{"name":%q,"inputSchema":%s}`, name, schema))
	}
	var mu sync.Mutex
	var called []string
	c := dialHTTP(t, modernToolServer(t, tools, func(name string, _ json.RawMessage) {
		mu.Lock()
		called = append(called, name)
		mu.Unlock()
	}), mcp.Modern)
	listed, err := c.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Name != "valid" {
		t.Fatalf("listed %v, want only the valid tool", listed)
	}
	if _, err := c.CallTool(context.Background(), "valid", map[string]any{"region": "eu"}, nil); err != nil {
		t.Fatal(err)
	}
	for name := range invalid {
		_, err := c.CallTool(context.Background(), name, map[string]any{"v": "x"}, nil)
		var ex *client.ExcludedToolError
		if !errors.As(err, &ex) || ex.Tool != name {
			t.Errorf("call to %s: %v, want an ExcludedToolError", name, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(called) != 1 || called[0] != "valid" {
		t.Fatalf("the server saw calls to %v, want only valid", called)
	}
}

// modernToolServer is a scripted 2026-07-28 HTTP server that lists tools
// (JSON objects, as given) and tells onCall each tools/call's name and
// arguments; it returns its URL.
func modernToolServer(t *testing.T, tools []string, onCall func(name string, args json.RawMessage)) string {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "application/json")
		var result string
		switch m.Method {
		case mcp.MethodDiscover:
			result = `{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}`
		case mcp.MethodToolsList:
			result = `{"resultType":"complete","tools":[` + strings.Join(tools, ",") + `]}`
		case mcp.MethodToolsCall:
			onCall(m.Params.Name, m.Params.Arguments)
			result = `{"resultType":"complete","content":[{"type":"text","text":"ok"}]}`
		default:
			w.WriteHeader(http.StatusAccepted)
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, result)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// A tool's inputSchema reaches the caller byte for byte as the server
// sent it — 2020-12 keywords, $defs, $anchor, composition and conditionals
// included — and goes back the same way as an argument; a $ref naming a
// network URI is never fetched (SEP-2106).
func TestSchemaPassesThroughUntouched(t *testing.T) {
	var fetched sync.Mutex
	fetches := 0
	canary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Lock()
		fetches++
		fetched.Unlock()
		w.Write([]byte(`{"type":"object"}`))
	}))
	t.Cleanup(canary.Close)
	schema := `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"$defs":{"address":{"$anchor":"addr","type":"object","properties":{"zip":{"type":"string"}}}},` +
		`"properties":{"home":{"$ref":"#/$defs/address"},"profile":{"$ref":"` + canary.URL + `/profile.json"},"zip":{"type":"string","x-mcp-header":"Zip"}},` +
		`"allOf":[{"anyOf":[{"required":["home"]},{"required":["profile"]}]}],` +
		`"if":{"required":["home"]},"then":{"required":["zip"]},"else":{},"additionalProperties":false}`
	var echoed json.RawMessage
	url := modernToolServer(t, []string{`{"name":"rich","inputSchema":` + schema + `}`, `{"name":"echo","inputSchema":{"type":"object"}}`},
		func(name string, args json.RawMessage) {
			if name == "echo" {
				echoed = args
			}
		})
	c := dialHTTP(t, url, mcp.Modern)
	tools, err := c.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 2 || string(tools[0].InputSchema) != schema {
		t.Fatalf("listed schema:\n%s\nwant:\n%s", tools[0].InputSchema, schema)
	}
	if _, err := c.CallTool(context.Background(), "echo", map[string]any{"schema": tools[0].InputSchema}, nil); err != nil {
		t.Fatal(err)
	}
	if want := `{"schema":` + schema + `}`; string(echoed) != want {
		t.Fatalf("echoed:\n%s\nwant:\n%s", echoed, want)
	}
	fetched.Lock()
	defer fetched.Unlock()
	if fetches != 0 {
		t.Fatalf("the network $ref was fetched %d times", fetches)
	}
}
