package streamhttp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// TestTenants: bearer tokens name tenants; a handler sees its request's
// tenant; a per-tenant rate limit refuses one tenant with 429 and
// Retry-After while another is served; a legacy session is invisible to
// other tenants.
func TestTenants(t *testing.T) {
	srv := mcptest.NewServer(t, &server.Options{Tenant: server.TenantLimits{Rate: 0.001, Burst: 2}})
	srv.AddTool(server.Tool{Name: "whoami"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("tenant=" + req.Tenant)}}, nil
	})
	c := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "acme", "tok-b": "globex"}})
	as := func(token string) map[string]string { return map[string]string{"Authorization": "Bearer " + token} }
	callAs := func(token string, id int, tool string) *http.Response {
		return c.Do(context.Background(), http.MethodPost, modernBody(id, mcp.MethodToolsCall, map[string]any{"name": tool}),
			merge(mcptest.ModernHeaders(mcp.MethodToolsCall, tool), as(token)))
	}

	if f := mcptest.ReadJSON(t, callAs("tok-b", 1, "whoami")); !strings.Contains(string(f.Result), "tenant=globex") {
		t.Fatalf("whoami as globex = %s", f.Raw)
	}
	for id := 2; id <= 3; id++ { // acme's burst
		if f := mcptest.ReadJSON(t, callAs("tok-a", id, "whoami")); !strings.Contains(string(f.Result), "tenant=acme") {
			t.Fatalf("acme's call %d = %s", id, f.Raw)
		}
	}
	refused := callAs("tok-a", 5, "whoami")
	f := mcptest.ReadJSON(t, refused)
	if refused.StatusCode != http.StatusTooManyRequests || refused.Header.Get("Retry-After") == "" || f.Error == nil || f.Error.Code != mcp.CodeRateLimited {
		t.Fatalf("acme's second call: %d Retry-After=%q %s", refused.StatusCode, refused.Header.Get("Retry-After"), f.Raw)
	}
	if f := mcptest.ReadJSON(t, callAs("tok-b", 4, "whoami")); f.Error != nil {
		t.Fatalf("globex, with a token left: %s", f.Raw)
	}

	// acme's legacy session does not exist for globex.
	c.Client.Transport = &authTransport{base: c.Client.Transport, token: "tok-a"}
	c.Initialize(nil)
	resp := c.Do(context.Background(), http.MethodPost, []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`), merge(c.LegacyHeaders(), as("tok-b")))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("globex using acme's session: %d, want 404", resp.StatusCode)
	}
}

// authTransport adds a bearer token to every request that has none.
type authTransport struct {
	base  http.RoundTripper
	token string
}

func (a *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+a.token)
	}
	return a.base.RoundTrip(r)
}
