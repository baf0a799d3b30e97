package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// lookupResult is what the routed example method answers.
type lookupResult struct {
	mcp.ResultBase
	Ticket string `json:"ticket"`
	Era    string `json:"era"`
	Tenant string `json:"tenant"`
}

// routedServer is a server with methods and capabilities added from
// outside, as a package above server (tasks) adds its own.
func routedServer(t *testing.T) *server.Server {
	t.Helper()
	srv := mcptest.NewServer(t, nil)
	lookup := func(ctx context.Context, req *server.RouteRequest) (mcp.Result, error) {
		var p struct{ Ticket string }
		if err := json.Unmarshal(req.Params, &p); err != nil || p.Ticket == "" || p.Ticket == "-" {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.ticket must name a ticket")
		}
		if p.Ticket == "broken" {
			return nil, errors.New("the ticket store is broken")
		}
		req.ReportProgress(1, 2, "looking")
		return &lookupResult{Ticket: p.Ticket, Era: req.Era.String(), Tenant: req.Tenant}, nil
	}
	for _, rt := range []server.Route{
		{Method: "example/lookup", Legacy: true, Modern: true, NameMember: "ticket", Handler: lookup},
		{Method: "example/modern-only", Modern: true, Handler: lookup},
	} {
		if err := srv.AddRoute(rt); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Declare(server.Declaration{Legacy: true, Capabilities: map[string]any{"example": map[string]any{"lookup": map[string]any{}}}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Declare(server.Declaration{Modern: true, Extensions: map[string]map[string]any{"dev.example/lookup": {}}}); err != nil {
		t.Fatal(err)
	}
	return srv
}

// A method added through the route seam is served in both eras over
// stdio, with the era rules it declared; the capabilities declared from
// outside appear in initialize (legacy) and server/discover (modern), each
// only in its own era.
func TestRouteOverStdio(t *testing.T) {
	srv := routedServer(t)
	c := mcptest.Stdio(t, srv, nil)
	init := c.Initialize(mcp.Version20251125)
	var ir struct{ Capabilities map[string]json.RawMessage }
	json.Unmarshal(init.Result, &ir)
	if ir.Capabilities["example"] == nil || ir.Capabilities["tools"] == nil || ir.Capabilities["extensions"] != nil {
		t.Errorf("initialize capabilities: %s", init.Result)
	}

	f := c.Call(1, "example/lookup", map[string]any{"ticket": "t-1"})
	if !strings.Contains(string(f.Result), `"ticket":"t-1"`) || !strings.Contains(string(f.Result), `"era":"legacy"`) {
		t.Errorf("legacy lookup: %s", f.Raw)
	}
	f = c.Call(2, "example/lookup", mcptest.ModernParams(map[string]any{"ticket": "t-2"}))
	if !strings.Contains(string(f.Result), `"era":"modern"`) || !strings.Contains(string(f.Result), `"resultType":"complete"`) {
		t.Errorf("modern lookup: %s", f.Raw)
	}
	if f := c.Call(3, "example/modern-only", map[string]any{"ticket": "t"}); f.Error == nil || f.Error.Code != jsonrpc.CodeMethodNotFound {
		t.Errorf("a modern-only method in the legacy era: %s", f.Raw)
	}
	if f := c.Call(4, "example/lookup", mcptest.ModernParams(map[string]any{})); f.Error == nil || f.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("a lookup without a ticket: %s", f.Raw)
	}
	f = c.Call(5, "example/lookup", mcptest.ModernParams(map[string]any{"ticket": "broken"}))
	if f.Error == nil || f.Error.Code != jsonrpc.CodeInternalError {
		t.Errorf("a failing lookup: %s", f.Raw)
	}

	d := c.Call(6, mcp.MethodDiscover, mcptest.ModernParams(nil))
	var dr struct {
		Capabilities struct {
			Extensions map[string]json.RawMessage
			Example    json.RawMessage
		}
	}
	json.Unmarshal(d.Result, &dr)
	if dr.Capabilities.Extensions["dev.example/lookup"] == nil || dr.Capabilities.Example != nil {
		t.Errorf("discover capabilities: %s", d.Result)
	}
}

// Over Streamable HTTP the routed method is served in both eras, with the
// 2026-07-28 routing headers checked against its declared name member,
// errors mapped onto statuses, and progress streamed when asked for.
func TestRouteOverHTTP(t *testing.T) {
	srv := routedServer(t)
	h := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok": "alice"}}).As("tok")
	ctx := context.Background()
	post := func(id int64, method, name string, params map[string]any) *http.Response {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": mcptest.ModernParams(params)})
		return h.Do(ctx, http.MethodPost, body, mcptest.ModernHeaders(method, name))
	}
	for _, tc := range []struct {
		name   string
		resp   *http.Response
		status int
		code   int64
		want   string
	}{
		{"matching Mcp-Name", post(1, "example/lookup", "t-1", map[string]any{"ticket": "t-1"}), 200, 0, `"tenant":"alice"`},
		{"missing Mcp-Name", post(2, "example/lookup", "", map[string]any{"ticket": "t-1"}), 400, mcp.CodeHeaderMismatch, ""},
		{"another Mcp-Name", post(3, "example/lookup", "t-9", map[string]any{"ticket": "t-1"}), 400, mcp.CodeHeaderMismatch, ""},
		{"invalid params", post(4, "example/lookup", "-", map[string]any{"ticket": "-"}), 400, jsonrpc.CodeInvalidParams, ""},
		{"handler failure", post(5, "example/lookup", "broken", map[string]any{"ticket": "broken"}), 500, jsonrpc.CodeInternalError, ""},
		{"no name member", post(6, "example/modern-only", "", map[string]any{"ticket": "t-6"}), 200, 0, `"ticket":"t-6"`},
		{"unknown method", post(7, "example/nothing", "", nil), 404, jsonrpc.CodeMethodNotFound, ""},
	} {
		f := mcptest.ReadJSON(t, tc.resp)
		switch {
		case tc.resp.StatusCode != tc.status:
			t.Errorf("%s: status %d, want %d: %s", tc.name, tc.resp.StatusCode, tc.status, f.Raw)
		case tc.code != 0 && (f.Error == nil || f.Error.Code != tc.code):
			t.Errorf("%s: %s, want code %d", tc.name, f.Raw, tc.code)
		case tc.want != "" && !strings.Contains(f.Raw, tc.want):
			t.Errorf("%s: %s, want %s", tc.name, f.Raw, tc.want)
		}
	}

	// Progress asked for: an event stream with the progress, then the result.
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 8, "method": "example/lookup",
		"params": mcptest.ModernParams(map[string]any{"ticket": "t-8", "_meta": map[string]any{"progressToken": "p"}})})
	sse := mcptest.ReadSSE(t, h.Do(ctx, http.MethodPost, body, mcptest.ModernHeaders("example/lookup", "t-8")))
	frames := sse.Rest()
	if len(frames) != 2 || frames[0].Method != mcp.NotificationProgress || !strings.Contains(frames[1].Raw, `"ticket":"t-8"`) {
		t.Errorf("with progress: %s", mcptest.Raws(frames))
	}

	// The legacy era, in a session.
	h.Initialize(nil)
	f := mcptest.ReadJSON(t, h.Legacy(ctx, 9, "example/lookup", map[string]any{"ticket": "t-9"}))
	if !strings.Contains(f.Raw, `"era":"legacy"`) || !strings.Contains(f.Raw, `"tenant":"alice"`) {
		t.Errorf("legacy HTTP lookup: %s", f.Raw)
	}
	f = mcptest.ReadJSON(t, h.Legacy(ctx, 10, "example/modern-only", map[string]any{"ticket": "t"}))
	if f.Error == nil || f.Error.Code != jsonrpc.CodeMethodNotFound {
		t.Errorf("a modern-only method in a legacy HTTP session: %s", f.Raw)
	}
}

// The seam refuses what would take over the server's own methods and
// capabilities, or could never be served.
func TestRouteRefusals(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	h := func(context.Context, *server.RouteRequest) (mcp.Result, error) { return &mcp.EmptyResult{}, nil }
	for _, rt := range []server.Route{
		{Method: mcp.MethodToolsCall, Legacy: true, Modern: true, Handler: h},
		{Method: "example/x", Handler: h},
		{Method: "example/x", Modern: true},
		{Method: "notifications/example", Modern: true, Handler: h},
		{Method: "", Modern: true, Handler: h},
		{Method: "example/x", Modern: true, Handler: h, Deadlines: server.Deadlines{Idle: -1}},
	} {
		if err := srv.AddRoute(rt); err == nil {
			t.Errorf("AddRoute(%+v) was accepted", rt)
		}
	}
	for _, d := range []server.Declaration{
		{Modern: true, Capabilities: map[string]any{"tools": map[string]any{}}},
		{Capabilities: map[string]any{"example": true}},
	} {
		if err := srv.Declare(d); err == nil {
			t.Errorf("Declare(%+v) was accepted", d)
		}
	}
}
