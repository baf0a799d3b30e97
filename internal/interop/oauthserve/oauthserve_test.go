package oauthserve_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/interop/oidcprovider"
)

// With --oauth-introspection, `mcprel serve --http` checks oidc-provider's
// opaque tokens at its introspection endpoint (RFC 7662), authenticating
// as the resource server's client with the secret from
// MCPREL_OAUTH_INTROSPECTION_SECRET. oidc-provider's introspection of a
// client credentials token has no sub (RFC 7662 makes it optional): its
// tenant is then its client_id, by default. A token issued for this endpoint is
// served, by client credentials or authorization code; one issued for
// another resource is 401 invalid_token; and one revoked at the
// provider's revocation endpoint (RFC 7009) is 401 invalid_token too.
// The revoked token is never shown to mcprel before its revocation, so
// no cached answer (mcprel keeps one up to a minute) can hide it.
func TestServeIntrospectsOpaqueTokens(t *testing.T) {
	as := oidcprovider.Start(t, oidcprovider.Options{Format: "opaque"})
	m, err := as.Metadata(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	endpoint := listen(t, []string{"MCPREL_OAUTH_INTROSPECTION_SECRET=" + as.RSClientSecret},
		"serve", "--http", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "ledger.db"),
		"--oauth-issuer", as.Issuer, "--oauth-scopes", "mcp:tools",
		"--oauth-introspection", m.IntrospectionEndpoint, "--oauth-introspection-client-id", as.RSClientID)

	good := as.ClientCredentialsToken(t, endpoint, "mcp:tools")
	if strings.Count(good, ".") == 2 {
		t.Fatalf("token %q looks like a JWT: the provider must issue opaque tokens here", good)
	}
	if got := served(t, "a client credentials token for this endpoint", call(t, endpoint, good, "echo", `{"text":"hi"}`)); !strings.Contains(got, "hi") {
		t.Errorf("echo answered %q", got)
	}
	// Again, from the cache or not: still served.
	served(t, "the same token again", call(t, endpoint, good, "echo", `{"text":"again"}`))
	served(t, "an authorization code token for this endpoint",
		call(t, endpoint, as.AuthorizationCodeToken(t, endpoint, "mcp:tools"), "echo", `{"text":"code"}`))

	other := as.ClientCredentialsToken(t, "http://127.0.0.1:1/mcp", "mcp:tools")
	refused(t, "a token for another resource", endpoint, call(t, endpoint, other, "echo", `{"text":"x"}`),
		401, "invalid_token", "not issued for this resource")

	revoked := as.ClientCredentialsToken(t, endpoint, "mcp:tools")
	if err := as.Revoke(t.Context(), revoked); err != nil {
		t.Fatal(err)
	}
	// The revocation endpoint answers 200 even when it revoked nothing:
	// the provider's own introspection says whether it did.
	if got, err := as.Introspect(t.Context(), revoked); err != nil || got["active"] != false {
		t.Fatalf("after revocation the provider introspects the token as %v, %v", got, err)
	}
	refused(t, "a revoked token", endpoint, call(t, endpoint, revoked, "echo", `{"text":"x"}`),
		401, "invalid_token", "not active")
	// Revoking one token leaves the others alone.
	served(t, "the first token after another was revoked", call(t, endpoint, good, "echo", `{"text":"still"}`))
}

// An expired token is 401 invalid_token, its description saying so.
// mcprel allows 30 s of clock skew past exp, longer than a test should
// wait, and oidc-provider refuses a TTL of zero or less; so the expired
// token comes from the provider's backdated client (its JWT customizer
// moves iat and exp two minutes back), signed by the same key as the
// fresh one, which is served.
func TestServeRefusesAnExpiredToken(t *testing.T) {
	as := oidcprovider.Start(t, oidcprovider.Options{TTL: 5 * time.Second, Backdate: 2 * time.Minute})
	endpoint := listen(t, nil, "serve", "--http", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "ledger.db"),
		"--oauth-issuer", as.Issuer, "--oauth-scopes", "mcp:tools")
	served(t, "a token that lives five seconds", call(t, endpoint, as.ClientCredentialsToken(t, endpoint, "mcp:tools"), "echo", `{"text":"hi"}`))
	expired := as.BackdatedToken(t, endpoint, "mcp:tools")
	refused(t, "a token that expired 115 s ago", endpoint, call(t, endpoint, expired, "echo", `{"text":"hi"}`),
		401, "invalid_token", "expired")
}

// A gateway whose policy asks mcp:write of one upstream tool refuses a
// token holding only mcp:tools (what every request needs) 403
// insufficient_scope, its challenge naming every scope the call needs;
// the tools the policy says nothing of are served with it, and a token
// with both scopes is served the guarded tool.
func TestGatewayPolicyScopes(t *testing.T) {
	as := oidcprovider.Start(t, oidcprovider.Options{})
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`operations:
  - name: charge_account
    semantics: {kind: mutation}
    idempotency: {key: required, key_argument: idempotencyKey, external_effect_guard: upstream_key}
    auth: {scopes: ["mcp:write"]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := listen(t, nil, "gateway", "--http", "127.0.0.1:0", "--db", filepath.Join(dir, "gateway.db"),
		"--upstream", "demo="+mcprel(t)+" serve --stdio --db "+filepath.Join(dir, "upstream.db"),
		"--policy", policy, "--oauth-issuer", as.Issuer, "--oauth-scopes", "mcp:tools")
	const charge = `{"account":"acct","cents":100,"idempotencyKey":"k-1"}`

	for grant, tools := range map[string]string{
		"client credentials": as.ClientCredentialsToken(t, gw, "mcp:tools"),
		"authorization code": as.AuthorizationCodeToken(t, gw, "mcp:tools"),
	} {
		served(t, grant+": echo with mcp:tools", call(t, gw, tools, "echo", `{"text":"hi"}`))
		refused(t, grant+": charge_account with mcp:tools only", gw, call(t, gw, tools, "charge_account", charge),
			403, "insufficient_scope", "mcp:write", `scope="mcp:tools mcp:write"`)
	}
	writer := as.ClientCredentialsToken(t, gw, "mcp:tools", "mcp:write")
	served(t, "charge_account with mcp:tools mcp:write", call(t, gw, writer, "charge_account", charge))
}
