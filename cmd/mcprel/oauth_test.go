package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/oauthtest"
	"github.com/mcprel/mcprel/mcp"
)

// post sends body to endpoint as a 2026-07-28 tools/call (or, with sid,
// on a 2025 session) with token as its bearer, and returns the status,
// the WWW-Authenticate header and the body.
func oauthPost(t *testing.T, endpoint, token, body string, legacy map[string]string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if legacy == nil {
		var m struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		json.Unmarshal([]byte(body), &m)
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", m.Method)
		if m.Params.Name != "" {
			req.Header.Set("Mcp-Name", m.Params.Name)
		}
	}
	for k, v := range legacy {
		req.Header.Set(k, v)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)
}

// The token-audience scenario proposed for the conformance suite
// (conformance#78), against "mcprel serve --http --oauth-issuer", in
// both eras: no token is 401 with the challenge that leads a client to
// the authorization server; a token issued for this resource is served;
// one for another resource or none, an expired one and one signed by a
// key the issuer does not publish are 401 invalid_token.
func TestServeOAuthTokenAudience(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	endpoint, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer(), "--oauth-scopes", "mcp:tools")
	base := strings.TrimSuffix(endpoint, "/mcp")
	metadata := base + "/.well-known/oauth-protected-resource/mcp"
	good := func(sub string) string {
		return as.Token(t, oauthtest.Claims{Subject: sub, Audience: []string{endpoint}, Scope: "mcp:tools"})
	}
	echo := modernCall(1, "echo", `{"text":"hi"}`)

	// The metadata, unauthenticated, at the path-inserted URL and at the
	// root.
	for _, at := range []string{metadata, base + "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(at)
		if err != nil {
			t.Fatal(err)
		}
		var prm map[string]any
		json.NewDecoder(resp.Body).Decode(&prm)
		resp.Body.Close()
		if resp.StatusCode != 200 || prm["resource"] != endpoint || !jsonHas(prm["authorization_servers"], as.Issuer()) ||
			!jsonHas(prm["scopes_supported"], "mcp:tools") || !jsonHas(prm["bearer_methods_supported"], "header") {
			t.Fatalf("GET %s: %d %v", at, resp.StatusCode, prm)
		}
	}

	status, challenge, _ := oauthPost(t, endpoint, "", echo, nil)
	if status != 401 || challenge != `Bearer resource_metadata="`+metadata+`", scope="mcp:tools"` {
		t.Fatalf("without a token: %d %s", status, challenge)
	}
	if status, _, body := oauthPost(t, endpoint, good("alice"), echo, nil); status != 200 || !strings.Contains(body, `"text":"hi"`) {
		t.Fatalf("with a token for this resource: %d %s", status, body)
	}
	for name, tok := range map[string]string{
		"another audience": as.Token(t, oauthtest.Claims{Subject: "alice", Audience: []string{"http://127.0.0.1:1/mcp"}, Scope: "mcp:tools"}),
		"no audience":      as.Token(t, oauthtest.Claims{Subject: "alice", Scope: "mcp:tools"}),
		"expired":          as.Token(t, oauthtest.Claims{Subject: "alice", Audience: []string{endpoint}, Scope: "mcp:tools", Extra: map[string]any{"exp": 1700000000}}),
		"untrusted key":    as.UntrustedToken(t, oauthtest.Claims{Subject: "alice", Audience: []string{endpoint}, Scope: "mcp:tools"}),
	} {
		status, challenge, body := oauthPost(t, endpoint, tok, echo, nil)
		if status != 401 || !strings.Contains(challenge, `error="invalid_token"`) || !strings.Contains(challenge, `resource_metadata="`+metadata+`"`) ||
			!strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s %s", name, status, challenge, body)
		}
	}
	noScope := as.Token(t, oauthtest.Claims{Subject: "alice", Audience: []string{endpoint}, Scope: "mcp:read"})
	if status, challenge, _ := oauthPost(t, endpoint, noScope, echo, nil); status != 403 || !strings.Contains(challenge, `error="insufficient_scope"`) {
		t.Errorf("without the required scope: %d %s", status, challenge)
	}

	// 2025-11-25: a session belongs to the subject that opened it.
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(init))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+good("alice"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get(mcp.HeaderSessionID)
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	legacy := map[string]string{mcp.HeaderSessionID: sid, "Mcp-Protocol-Version": "2025-11-25"}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"legacy"}}}`
	if status, _, body := oauthPost(t, endpoint, good("alice"), call, legacy); status != 200 || !strings.Contains(body, "legacy") {
		t.Fatalf("the owner on its session: %d %s", status, body)
	}
	if status, _, body := oauthPost(t, endpoint, good("bob"), call, legacy); status != 404 {
		t.Fatalf("another subject on alice's session: %d %s, want 404", status, body)
	}
	if status, challenge, _ := oauthPost(t, endpoint, "", call, legacy); status != 401 || !strings.Contains(challenge, "resource_metadata") {
		t.Fatalf("no token on alice's session: %d %s", status, challenge)
	}
}

func jsonHas(v any, want string) bool {
	list, _ := v.([]any)
	for _, x := range list {
		if x == want {
			return true
		}
	}
	return false
}

// The gateway as a resource: a policy's per-tool scopes refuse a call
// 403 insufficient_scope naming every scope it needs, and the
// downstream's token never reaches the upstream, which sees only the
// gateway's own.
func TestGatewayOAuthScopesAndNoPassthrough(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	upURL, _ := startHTTP(t, nil, "--auth-token", "upstream-token")
	// Every bearer token that reaches the upstream is recorded.
	guard := newUpstreamGuard(t)
	guard.setTarget(upURL)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("upstream-token\n"), 0o600)
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte(`operations:
  - name: reserve_inventory
    semantics: {kind: mutation}
    idempotency: {key: required, key_argument: idempotencyKey, external_effect_guard: upstream_key}
    auth: {scopes: ["inventory:write"]}
`), 0o600)
	gw, _, _ := startEndpoint(t, nil, "gateway", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer(), "--oauth-scopes", "mcp:tools",
		"--upstream", "demo="+guard.public, "--upstream-token-file", "demo="+tokenFile, "--policy", policy,
		"--db", filepath.Join(dir, "gw.db"))
	tok := func(scope string) string {
		return as.Token(t, oauthtest.Claims{Subject: "alice", Audience: []string{gw}, Scope: scope})
	}
	reader := tok("mcp:tools")
	c, err := client.DialHTTP(t.Context(), gw, &client.Options{Header: map[string][]string{"Authorization": {"Bearer " + reader}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if res, err := c.CallTool(t.Context(), "echo", map[string]any{"text": "hi"}, nil); err != nil || res.IsError {
		t.Fatalf("echo with mcp:tools: %v %+v", err, res)
	}
	reserve := modernCall(2, "reserve_inventory", `{"sku":"s","quantity":1,"idempotencyKey":"k-1"}`)
	status, challenge, body := oauthPost(t, gw, reader, reserve, nil)
	if status != 403 || !strings.Contains(challenge, `error="insufficient_scope"`) || !strings.Contains(challenge, `scope="mcp:tools inventory:write"`) {
		t.Fatalf("reserve_inventory without inventory:write: %d %s %s", status, challenge, body)
	}
	writer := tok("mcp:tools inventory:write")
	if status, _, body := oauthPost(t, gw, writer, reserve, nil); status != 200 || strings.Contains(body, "insufficient") {
		t.Fatalf("reserve_inventory with inventory:write: %d %s", status, body)
	}
	guard.mu.Lock()
	defer guard.mu.Unlock()
	if len(guard.seen) == 0 {
		t.Fatal("nothing reached the upstream")
	}
	for _, tok := range guard.seen {
		if tok != "upstream-token" {
			t.Fatalf("the upstream saw the bearer token %q; want only the gateway's own", tok)
		}
	}
}

// OAuth flags are checked before anything starts, each mistake named.
func TestOAuthUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--oauth-issuer", "https://as.example.com"}, "--oauth-issuer needs --http"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--public-url", "https://mcp.example.com/mcp"}, "need --oauth-issuer"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--oauth-issuer", "https://as.example.com", "--auth-token", "x"}, "not both"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--oauth-issuer", "http://as.example.com"}, "must use https"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--oauth-issuer", "https://as.example.com", "--public-url", "https://mcp.example.com/mcp#x"}, "no query or fragment"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--oauth-issuer", "https://as.example.com", "--oauth-scopes", `a"b`}, "not a scope token"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--oauth-issuer", "https://as.example.com", "--oauth-introspection", "https://as.example.com/introspect"}, "needs this server's client id"},
		{[]string{"gateway", "--http", "127.0.0.1:0", "--upstream", "a=cat", "--oauth-issuer", "https://as.example.com", "--oauth-tenant-claim", ""}, "--oauth-tenant-claim must name a claim"},
	} {
		cmd := exec.Command(binary, tc.args...)
		cmd.Dir = t.TempDir()
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(string(out), tc.want) {
			t.Errorf("mcprel %s: exit %d, %s; want %d and %q", strings.Join(tc.args, " "), code, out, exitUsage, tc.want)
		}
	}
}

// Behind a proxy: the public URL, not the listen address, is the
// resource. Its metadata is served at the path-inserted URL of the
// public path and of the endpoint's own, a token for the public URL is
// accepted and one for the listen address refused; the metrics, on the
// endpoint's listener and on their own, take the same tokens.
func TestServeOAuthBehindAProxy(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	const public = "https://mcp.example.com/team/mcp"
	endpoint, _, rest := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer(), "--public-url", public,
		"--metrics-path", "/metrics", "--metrics", "127.0.0.1:0")
	metricsURL := ""
	for l := range rest {
		if u, ok := strings.CutPrefix(l, "metrics: "); ok {
			metricsURL = u
			break
		}
	}
	base := strings.TrimSuffix(endpoint, "/mcp")
	for _, path := range []string{"/.well-known/oauth-protected-resource/team/mcp", "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var prm map[string]any
		json.NewDecoder(resp.Body).Decode(&prm)
		resp.Body.Close()
		if prm["resource"] != public {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, prm)
		}
	}
	echo := modernCall(1, "echo", `{"text":"hi"}`)
	forPublic := as.Token(t, oauthtest.Claims{Subject: "alice", Audience: []string{public}})
	if status, _, body := oauthPost(t, endpoint, forPublic, echo, nil); status != 200 {
		t.Fatalf("a token for the public URL: %d %s", status, body)
	}
	forListener := as.Token(t, oauthtest.Claims{Subject: "alice", Audience: []string{endpoint}})
	if status, challenge, _ := oauthPost(t, endpoint, forListener, echo, nil); status != 401 ||
		!strings.Contains(challenge, `resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/team/mcp"`) {
		t.Fatalf("a token for the listen address: %d %s", status, challenge)
	}
	if metricsURL == "" {
		t.Fatal("the metrics listener's URL was not printed")
	}
	for _, m := range []string{base + "/metrics", metricsURL} {
		if code := scrape(t, m, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d", m, code)
		}
		if code := scrape(t, m, forPublic); code != http.StatusOK {
			t.Errorf("%s with the token: %d", m, code)
		}
	}
}
