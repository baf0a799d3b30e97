package streamhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// headerAuth is an Authenticator of the tests' own: the tenant is the
// X-Test-Tenant header, and a request without one is refused.
var headerAuth = auth.AuthenticatorFunc(func(r *http.Request) (auth.Principal, error) {
	t := r.Header.Get("X-Test-Tenant")
	if t == "" {
		return auth.Principal{}, errors.New("no X-Test-Tenant")
	}
	return auth.Principal{Tenant: t, Scopes: []string{"tools"}}, nil
})

// whoami registers a tool that answers with the tenant the server saw.
func whoami(t *testing.T, srv *server.Server) {
	t.Helper()
	err := server.AddTypedTool(srv, server.Tool{Name: "whoami"}, func(ctx context.Context, req *server.CallRequest, _ struct{}) (string, error) {
		return "tenant=" + req.Tenant, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// outer serves h behind next-to-nothing but an outer auth.Require with
// a, as a program would mount the endpoint under its own middleware.
func outer(t *testing.T, h *streamhttp.Handler, a auth.Authenticator) *mcptest.HTTPClient {
	t.Helper()
	ts := httptest.NewServer(auth.Require(h, a, streamhttp.Refuse))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), mcptest.Timeout)
		defer cancel()
		h.Shutdown(ctx)
		ts.Close()
	})
	c := &mcptest.HTTPClient{URL: ts.URL, Handler: h, Client: ts.Client()}
	c.SetT(t)
	return c
}

// The tenant an outer Authenticator decides reaches the tool as
// server.Request.Tenant in both eras, and the endpoint's own tokens do
// not overwrite it: the request below carries tok-a, which the handler
// alone would serve for alice.
func TestOuterAuthenticatorTenantReachesTheTool(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	whoami(t, srv)
	h, err := streamhttp.NewHandler(srv, &streamhttp.HandlerOptions{Tokens: twoTenants})
	if err != nil {
		t.Fatal(err)
	}
	c := outer(t, h, headerAuth).As("tok-a")
	hdr := map[string]string{"X-Test-Tenant": "zed"}

	// 2026-07-28: one request, authorized on its own.
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcp.MethodToolsCall, "params": mcptest.ModernParams(map[string]any{"name": "whoami", "arguments": map[string]any{}})})
	for k, v := range mcptest.ModernHeaders(mcp.MethodToolsCall, "whoami") {
		hdr[k] = v
	}
	f := mcptest.ReadJSON(t, c.Do(context.Background(), http.MethodPost, body, hdr))
	if f.Error != nil || !strings.Contains(string(f.Result), "tenant=zed") {
		t.Fatalf("a modern call under the outer authenticator: %s, want tenant=zed", f.Raw)
	}

	// A request the outer authenticator refuses gets the endpoint's 401.
	resp := c.Do(context.Background(), http.MethodPost, body, mcptest.ModernHeaders(mcp.MethodToolsCall, "whoami"))
	f = mcptest.ReadJSON(t, resp)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != auth.Challenge ||
		f.Error == nil || f.Error.Message != "a valid bearer token is required" {
		t.Fatalf("without the outer credentials: %d %q %s, want 401 with the challenge and a JSON-RPC error", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), f.Raw)
	}
}

// Without an outer Authenticator the handler's tokens decide, as before:
// the same call with tok-a is alice's.
func TestHandlerTokensDecideAlone(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	whoami(t, srv)
	c := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{Tokens: twoTenants}).As("tok-a")
	c.Initialize(nil)
	f := mcptest.ReadJSON(t, c.Legacy(context.Background(), 2, mcp.MethodToolsCall, map[string]any{"name": "whoami", "arguments": map[string]any{}}))
	if f.Error != nil || !strings.Contains(string(f.Result), "tenant=alice") {
		t.Fatalf("a legacy call with tok-a: %s, want tenant=alice", f.Raw)
	}
}

// A 2025 session stays bound to the tenant that opened it, whoever
// authenticates: with the handler's own tokens and with an outer
// Authenticator, another tenant's credentials on the session's id find
// no session (404), and the owner's still do.
func TestSessionRefusesAnotherTenant(t *testing.T) {
	for _, tc := range []struct {
		name         string
		serve        func(t *testing.T, srv *server.Server) *mcptest.HTTPClient
		owner, other func(c *mcptest.HTTPClient) (*mcptest.HTTPClient, map[string]string)
	}{
		{
			name: "tokens",
			serve: func(t *testing.T, srv *server.Server) *mcptest.HTTPClient {
				return mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{Tokens: twoTenants})
			},
			owner: func(c *mcptest.HTTPClient) (*mcptest.HTTPClient, map[string]string) { return c.As("tok-a"), nil },
			other: func(c *mcptest.HTTPClient) (*mcptest.HTTPClient, map[string]string) { return c.As("tok-b"), nil },
		},
		{
			name: "outer authenticator",
			serve: func(t *testing.T, srv *server.Server) *mcptest.HTTPClient {
				h, err := streamhttp.NewHandler(srv, &streamhttp.HandlerOptions{Authenticator: headerAuth})
				if err != nil {
					t.Fatal(err)
				}
				return outer(t, h, headerAuth)
			},
			owner: func(c *mcptest.HTTPClient) (*mcptest.HTTPClient, map[string]string) {
				return c.As(""), map[string]string{"X-Test-Tenant": "alice"}
			},
			other: func(c *mcptest.HTTPClient) (*mcptest.HTTPClient, map[string]string) {
				return c.As(""), map[string]string{"X-Test-Tenant": "bob"}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			whoami(t, srv)
			base := tc.serve(t, srv)
			call := func(c *mcptest.HTTPClient, extra map[string]string, sid string) *http.Response {
				hdr := c.LegacyHeaders()
				hdr[mcp.HeaderSessionID] = sid
				for k, v := range extra {
					hdr[k] = v
				}
				body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`
				return c.Do(context.Background(), http.MethodPost, []byte(body), hdr)
			}
			owner, oh := tc.owner(base)
			resp := owner.Do(context.Background(), http.MethodPost, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`), oh)
			sid := resp.Header.Get(mcp.HeaderSessionID)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || sid == "" {
				t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
			}
			owner.SessionID = sid
			other, xh := tc.other(base)
			other.SessionID = sid
			resp = call(other, xh, sid)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("another tenant on the session: %d, want 404", resp.StatusCode)
			}
			if f := mcptest.ReadJSON(t, call(owner, oh, sid)); f.Error != nil || !strings.Contains(string(f.Result), "tenant=alice") {
				t.Fatalf("the owner on its session: %s, want tenant=alice", f.Raw)
			}
		})
	}
}
