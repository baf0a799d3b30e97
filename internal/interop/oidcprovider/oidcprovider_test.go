package oidcprovider_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcprel/mcprel/internal/interop/oidcprovider"
)

// Both grants give RFC 9068 JWT access tokens that a resource server can
// verify with nothing but the issuer: the signature against the JWKS its
// metadata names, iss the issuer, aud exactly the requested resource,
// scope the requested scopes, sub the client (client credentials) or the
// account that logged in (authorization code).
func TestTokensVerifyAgainstTheIssuersJWKS(t *testing.T) {
	for _, alg := range []string{"RS256", "ES256"} {
		t.Run(alg, func(t *testing.T) {
			p := oidcprovider.Start(t, oidcprovider.Options{Alg: alg, TTL: 90 * time.Second})
			keys := jwks(t, p)
			// A path, a port, and localhost as well as 127.0.0.1: the
			// audience is the resource as given, byte for byte.
			for _, resource := range []string{"http://127.0.0.1:8123/mcp", "http://localhost:9/a/b/mcp"} {
				t.Run("client_credentials "+resource, func(t *testing.T) {
					tok := p.ClientCredentialsToken(t, resource, "mcp:tools", "mcp:read")
					c := verify(t, keys, alg, tok)
					c.check(t, p.Issuer, resource, "mcp:tools mcp:read", p.ClientID, p.ClientID, 90)
				})
				t.Run("authorization_code "+resource, func(t *testing.T) {
					tok := p.AuthorizationCodeToken(t, resource, "mcp:tools", "mcp:write")
					c := verify(t, keys, alg, tok)
					c.check(t, p.Issuer, resource, "mcp:tools mcp:write", p.Account, p.NativeClientID, 90)
				})
			}
		})
	}
}

// What the provider refuses, a resource server never sees: a resource
// off the loopback. A scope it does not know it drops instead, so a test
// wanting a token without some scope just leaves it out.
func TestRefusals(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{})
	if _, err := p.ClientCredentials(t.Context(), "https://example.com/mcp", "mcp:tools"); err == nil || !strings.Contains(err.Error(), "invalid_target") {
		t.Errorf("client credentials for a non-loopback resource: %v, want invalid_target", err)
	}
	if _, err := p.AuthorizationCode(t.Context(), "https://example.com/mcp", "mcp:tools"); err == nil || !strings.Contains(err.Error(), "invalid_target") {
		t.Errorf("authorization code for a non-loopback resource: %v, want invalid_target", err)
	}
	if tok, err := p.ClientCredentials(t.Context(), "http://127.0.0.1:1/mcp", "mcp:admin", "mcp:read"); err != nil || tok.Scope != "mcp:read" {
		t.Errorf("client credentials with an unknown scope: %+v, %v; want scope mcp:read", tok, err)
	}
}

// With Format "opaque", tokens are introspected (RFC 7662) instead, with
// the same audience and scope. The subject differs from the JWT's for
// client credentials: introspection has no sub then, only client_id.
func TestOpaqueTokensIntrospect(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{Format: "opaque"})
	const resource = "http://127.0.0.1:8123/mcp"
	for _, tc := range []struct {
		name, token, sub string
	}{
		{"client_credentials", p.ClientCredentialsToken(t, resource, "mcp:read"), ""},
		{"authorization_code", p.AuthorizationCodeToken(t, resource, "mcp:read"), p.Account},
	} {
		if strings.Count(tc.token, ".") == 2 {
			t.Fatalf("%s: token %q looks like a JWT", tc.name, tc.token)
		}
		got, err := p.Introspect(t.Context(), tc.token)
		if err != nil {
			t.Fatal(err)
		}
		sub, _ := got["sub"].(string)
		if got["active"] != true || got["aud"] != resource || got["scope"] != "mcp:read" || sub != tc.sub || got["iss"] != p.Issuer {
			t.Errorf("%s: introspection says %v", tc.name, got)
		}
	}
	if got, err := p.Introspect(t.Context(), "no-such-token"); err != nil || got["active"] != false {
		t.Errorf("introspecting an unknown token: %v, %v", got, err)
	}
}

// Approve works from any authorization URL; an error the server sends
// back to the redirect URI comes back as that redirect, for the caller
// to judge.
func TestApproveReturnsTheRedirect(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{})
	m, err := p.Metadata(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// No PKCE challenge: the provider requires one of a public client.
	back, err := oidcprovider.Approve(t.Context(), m.AuthorizationEndpoint+"?response_type=code&client_id="+p.NativeClientID+
		"&redirect_uri=http%3A%2F%2Flocalhost%3A7%2Fcallback&state=s1&scope=mcp%3Atools")
	if err != nil {
		t.Fatal(err)
	}
	q := back.Query()
	if back.Host != "localhost:7" || q.Get("error") != "invalid_request" || q.Get("state") != "s1" || q.Get("iss") != p.Issuer {
		t.Errorf("redirected to %s", back)
	}
}

type claims struct {
	jwt.Claims
	Scope    string `json:"scope"`
	ClientID string `json:"client_id"`
}

func (c claims) check(t *testing.T, issuer, resource, scope, sub, clientID string, ttl int64) {
	t.Helper()
	if c.Issuer != issuer {
		t.Errorf("iss %q, want %q", c.Issuer, issuer)
	}
	if !slices.Equal(c.Audience, jwt.Audience{resource}) {
		t.Errorf("aud %q, want exactly [%q]", c.Audience, resource)
	}
	if c.Scope != scope {
		t.Errorf("scope %q, want %q", c.Scope, scope)
	}
	if c.Subject != sub || c.ClientID != clientID {
		t.Errorf("sub %q client_id %q, want %q %q", c.Subject, c.ClientID, sub, clientID)
	}
	if c.Expiry == nil || c.IssuedAt == nil || int64(*c.Expiry)-int64(*c.IssuedAt) != ttl {
		t.Errorf("iat %v exp %v, want %ds apart", c.IssuedAt, c.Expiry, ttl)
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Issuer: issuer, AnyAudience: jwt.Audience{resource}, Time: time.Now()}, 5*time.Second); err != nil {
		t.Error(err)
	}
}

// jwks fetches the key set the issuer's metadata names.
func jwks(t *testing.T, p *oidcprovider.Provider) jose.JSONWebKeySet {
	t.Helper()
	m, err := p.Metadata(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.JWKSURI, p.Issuer+"/") {
		t.Fatalf("jwks_uri %q is not on the issuer %q", m.JWKSURI, p.Issuer)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, m.JWKSURI, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil || len(set.Keys) == 0 {
		t.Fatalf("JWKS %s: %v", body, err)
	}
	for _, k := range set.Keys {
		if !k.IsPublic() {
			t.Fatalf("the JWKS publishes a private key: %s", k.KeyID)
		}
	}
	return set
}

// verify checks tok's signature with the key its kid names, which must
// be of alg, and returns its claims.
func verify(t *testing.T, keys jose.JSONWebKeySet, alg, tok string) claims {
	t.Helper()
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.SignatureAlgorithm(alg)})
	if err != nil {
		t.Fatalf("token %q is not a JWT signed with %s: %v", tok, alg, err)
	}
	h := parsed.Headers[0]
	if h.ExtraHeaders["typ"] != "at+jwt" {
		t.Errorf("typ %v, want at+jwt (RFC 9068)", h.ExtraHeaders["typ"])
	}
	found := keys.Key(h.KeyID)
	if len(found) != 1 {
		t.Fatalf("kid %q names %d keys in the JWKS", h.KeyID, len(found))
	}
	var c claims
	if err := parsed.Claims(found[0].Key, &c); err != nil {
		t.Fatalf("signature does not verify against the JWKS: %v", err)
	}
	// Another key of the set must not verify it.
	for _, k := range keys.Keys {
		if k.KeyID != h.KeyID && k.Algorithm == alg {
			if parsed.Claims(k.Key, &claims{}) == nil {
				t.Errorf("key %s verifies a token signed by %s", k.KeyID, h.KeyID)
			}
		}
	}
	return c
}

// Revoke (RFC 7009) ends an opaque token at once: introspection calls it
// inactive, while a token issued alongside stays active.
func TestRevokedTokensIntrospectInactive(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{Format: "opaque"})
	const resource = "http://127.0.0.1:8123/mcp"
	revoked, kept := p.ClientCredentialsToken(t, resource, "mcp:read"), p.ClientCredentialsToken(t, resource, "mcp:read")
	if err := p.Revoke(t.Context(), revoked); err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]bool{revoked: false, kept: true} {
		if got, err := p.Introspect(t.Context(), tok); err != nil || got["active"] != want {
			t.Errorf("introspecting a token (revoked: %v): %v, %v", !want, got, err)
		}
	}
}

// With Backdate, the backdated client's JWTs carry iat and exp that much
// earlier, signed like any other; the ordinary client's do not move.
func TestBackdatedTokens(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{TTL: 5 * time.Second, Backdate: 120 * time.Second})
	keys := jwks(t, p)
	const resource = "http://127.0.0.1:8123/mcp"
	now := time.Now()
	old := verify(t, keys, "RS256", p.BackdatedToken(t, resource, "mcp:tools"))
	if old.Subject != p.BackdatedClientID || old.Expiry == nil || old.IssuedAt == nil ||
		int64(*old.Expiry)-int64(*old.IssuedAt) != 5 {
		t.Fatalf("backdated token: sub %q iat %v exp %v", old.Subject, old.IssuedAt, old.Expiry)
	}
	if exp := old.Expiry.Time(); exp.After(now.Add(-110*time.Second)) || exp.Before(now.Add(-130*time.Second)) {
		t.Errorf("backdated token expires at %v, want about %v", exp, now.Add(-115*time.Second))
	}
	fresh := verify(t, keys, "RS256", p.ClientCredentialsToken(t, resource, "mcp:tools"))
	fresh.check(t, p.Issuer, resource, "mcp:tools", p.ClientID, p.ClientID, 5)
}
