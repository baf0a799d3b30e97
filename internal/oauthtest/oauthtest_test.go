package oauthtest_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/mcprel/mcprel/internal/oauthtest"
)

func get(t *testing.T, u string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func jwks(t *testing.T, s *oauthtest.Server) jose.JSONWebKeySet {
	t.Helper()
	status, h, b := get(t, s.JWKSURL())
	if status != http.StatusOK || h.Get("Content-Type") != "application/json" {
		t.Fatalf("JWKS: %d %q %s", status, h.Get("Content-Type"), b)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatalf("JWKS does not parse: %v\n%s", err, b)
	}
	return set
}

func kids(set jose.JSONWebKeySet) []string {
	var out []string
	for _, k := range set.Keys {
		out = append(out, k.KeyID)
	}
	return out
}

// verify checks token against the keys of set its kid names, as a strict
// resource server would, and returns its claims.
func verify(token string, set jose.JSONWebKeySet) (map[string]any, error) {
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256, jose.PS256, jose.ES256, jose.EdDSA})
	if err != nil {
		return nil, err
	}
	var lastErr error = jose.ErrJWKSKidNotFound
	for _, k := range set.Key(jws.Signatures[0].Header.KeyID) {
		payload, err := jws.Verify(k)
		if err != nil {
			lastErr = err
			continue
		}
		var claims map[string]any
		return claims, json.Unmarshal(payload, &claims)
	}
	return nil, lastErr
}

// segments decodes a compact JWS's header and payload.
func segments(t *testing.T, token string) (header, payload map[string]any, sig []byte) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("%q has %d segments", token, len(parts))
	}
	for i, dst := range []*map[string]any{&header, &payload} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, dst); err != nil {
			t.Fatal(err)
		}
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	return header, payload, sig
}

func TestMetadataPathsFollowDiscovery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		discovery, issuerPath string
		want                  []string
	}{
		{"", "", []string{"/.well-known/oauth-authorization-server"}},
		{"oauth", "/tenant1", []string{"/.well-known/oauth-authorization-server/tenant1"}},
		{"openid", "", []string{"/.well-known/openid-configuration"}},
		{"openid", "/tenant1", []string{"/tenant1/.well-known/openid-configuration", "/.well-known/openid-configuration/tenant1"}},
		{"both", "/tenant1", []string{"/.well-known/oauth-authorization-server/tenant1",
			"/tenant1/.well-known/openid-configuration", "/.well-known/openid-configuration/tenant1"}},
	} {
		s := oauthtest.New(t, oauthtest.Options{Discovery: tc.discovery, IssuerPath: tc.issuerPath, Scopes: []string{"read", "write"}})
		if s.Issuer() != s.URL+tc.issuerPath {
			t.Errorf("%+v: issuer %q", tc, s.Issuer())
		}
		if got := s.MetadataPaths(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: MetadataPaths %q", tc, got)
		}
		if s.MetadataURL() != s.URL+tc.want[0] {
			t.Errorf("%+v: MetadataURL %q", tc, s.MetadataURL())
		}
		candidates := []string{
			"/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server/tenant1",
			"/tenant1/.well-known/oauth-authorization-server",
			"/.well-known/openid-configuration", "/.well-known/openid-configuration/tenant1",
			"/tenant1/.well-known/openid-configuration",
		}
		for _, p := range candidates {
			status, h, b := get(t, s.URL+p)
			if !slices.Contains(tc.want, p) {
				if status != http.StatusNotFound {
					t.Errorf("%+v: %s answered %d, want 404", tc, p, status)
				}
				continue
			}
			if status != http.StatusOK || h.Get("Content-Type") != "application/json" {
				t.Errorf("%+v: %s answered %d %q", tc, p, status, h.Get("Content-Type"))
				continue
			}
			var md struct {
				Issuer, JWKSURI, IntrospectionEndpoint, TokenEndpoint string
				ResponseTypes, CodeChallengeMethods, Scopes           []string
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(b, &raw); err != nil {
				t.Fatal(err)
			}
			for name, dst := range map[string]any{"issuer": &md.Issuer, "jwks_uri": &md.JWKSURI,
				"introspection_endpoint": &md.IntrospectionEndpoint, "token_endpoint": &md.TokenEndpoint,
				"response_types_supported": &md.ResponseTypes, "code_challenge_methods_supported": &md.CodeChallengeMethods,
				"scopes_supported": &md.Scopes} {
				if err := json.Unmarshal(raw[name], dst); err != nil {
					t.Errorf("%+v: %s: %s: %v", tc, p, name, err)
				}
			}
			if md.Issuer != s.Issuer() || md.JWKSURI != s.JWKSURL() || md.IntrospectionEndpoint != s.IntrospectionURL() ||
				md.TokenEndpoint == "" || !slices.Equal(md.ResponseTypes, []string{"code"}) ||
				!slices.Equal(md.CodeChallengeMethods, []string{"S256"}) || !slices.Equal(md.Scopes, []string{"read", "write"}) {
				t.Errorf("%+v: %s: metadata %+v", tc, p, md)
			}
		}
	}
}

func TestMetadataIssuerCanLie(t *testing.T) {
	t.Parallel()
	s := oauthtest.New(t, oauthtest.Options{MetadataIssuer: "https://evil.example"})
	_, _, b := get(t, s.MetadataURL())
	var md struct{ Issuer string }
	json.Unmarshal(b, &md)
	if md.Issuer != "https://evil.example" {
		t.Errorf("metadata issuer %q", md.Issuer)
	}
	// The tokens keep the real issuer: only the document lies.
	_, payload, _ := segments(t, s.Token(t, oauthtest.Claims{}))
	if payload["iss"] != s.Issuer() {
		t.Errorf("token iss %v", payload["iss"])
	}
	if _, _, b := get(t, s.URL+"/.well-known/oauth-authorization-server"); !strings.Contains(string(b), "jwks_uri") {
		t.Errorf("metadata %s", b)
	}
}

func TestTokenVerifiesWithTheJWKS(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"", "RS256", "PS256", "ES256", "EdDSA"} {
		s := oauthtest.New(t, oauthtest.Options{Algorithm: alg, IssuerPath: "/t"})
		set := jwks(t, s)
		if len(set.Keys) != 1 || set.Keys[0].KeyID != s.Kid() || !set.Keys[0].IsPublic() || set.Keys[0].Use != "sig" {
			t.Fatalf("%s: JWKS %+v", alg, set.Keys)
		}
		if want := cmpOr(alg, "RS256"); set.Keys[0].Algorithm != want {
			t.Errorf("%s: JWK alg %q", alg, set.Keys[0].Algorithm)
		}
		exp := time.Now().Add(10 * time.Minute).Truncate(time.Second)
		nbf := time.Now().Add(-time.Minute).Truncate(time.Second)
		tok := s.Token(t, oauthtest.Claims{Subject: "alice", Audience: []string{"https://rs.example"}, Scope: "read write",
			Scp: []string{"read"}, ClientID: "cli", NotBefore: nbf, Expiry: exp, Extra: map[string]any{"tenant": "t1"}})
		header, _, _ := segments(t, tok)
		if header["typ"] != "at+jwt" || header["kid"] != s.Kid() || header["alg"] != cmpOr(alg, "RS256") {
			t.Errorf("%s: header %v", alg, header)
		}
		claims, err := verify(tok, set)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		want := map[string]any{"iss": s.Issuer(), "sub": "alice", "aud": "https://rs.example", "scope": "read write",
			"client_id": "cli", "exp": float64(exp.Unix()), "nbf": float64(nbf.Unix()), "tenant": "t1"}
		for k, v := range want {
			if claims[k] != v {
				t.Errorf("%s: claim %s = %v, want %v", alg, k, claims[k], v)
			}
		}
		if scp, _ := claims["scp"].([]any); len(scp) != 1 || scp[0] != "read" {
			t.Errorf("%s: scp %v", alg, claims["scp"])
		}
		if _, ok := claims["iat"].(float64); !ok {
			t.Errorf("%s: iat %v", alg, claims["iat"])
		}
		if jti, _ := claims["jti"].(string); jti == "" {
			t.Errorf("%s: no jti", alg)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestClaimsDefaultsAndRemoval(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	s := oauthtest.New(t, oauthtest.Options{Algorithm: "ES256", Now: func() time.Time { return now }})
	_, p, _ := segments(t, s.Token(t, oauthtest.Claims{Audience: []string{"a", "b"}}))
	if p["iat"] != float64(now.Unix()) || p["exp"] != float64(now.Add(time.Hour).Unix()) {
		t.Errorf("iat %v exp %v", p["iat"], p["exp"])
	}
	if aud, _ := p["aud"].([]any); len(aud) != 2 {
		t.Errorf("aud %v", p["aud"])
	}
	for _, absent := range []string{"sub", "scope", "scp", "client_id", "nbf"} {
		if _, ok := p[absent]; ok {
			t.Errorf("%s present: %v", absent, p[absent])
		}
	}
	_, p, _ = segments(t, s.Token(t, oauthtest.Claims{Issuer: "https://other", Extra: map[string]any{"exp": nil, "jti": nil}}))
	if _, ok := p["exp"]; ok || p["iss"] != "https://other" {
		t.Errorf("payload %v", p)
	}
	if _, ok := p["jti"]; ok {
		t.Errorf("jti %v", p["jti"])
	}
}

func TestSignForcesAlgAndKidUnlessGiven(t *testing.T) {
	t.Parallel()
	s := oauthtest.New(t, oauthtest.Options{Algorithm: "EdDSA"})
	set := jwks(t, s)
	tok := s.Sign(t, map[string]any{"typ": "JWT"}, map[string]any{"sub": 42})
	h, p, _ := segments(t, tok)
	if h["alg"] != "EdDSA" || h["kid"] != s.Kid() || h["typ"] != "JWT" || p["sub"] != float64(42) {
		t.Errorf("header %v payload %v", h, p)
	}
	if _, err := verify(tok, set); err != nil {
		t.Error(err)
	}
	h, _, sig := segments(t, s.Sign(t, map[string]any{"alg": "RS256", "kid": nil}, map[string]any{}))
	if h["alg"] != "RS256" || len(sig) != 64 {
		t.Errorf("header %v, signature of %d bytes", h, len(sig))
	}
	if _, ok := h["kid"]; ok {
		t.Errorf("kid %v", h["kid"])
	}
}

func TestAlgNoneIsUnsigned(t *testing.T) {
	t.Parallel()
	s := oauthtest.New(t, oauthtest.Options{})
	tok := s.AlgNone(t, oauthtest.Claims{Subject: "alice"})
	if !strings.HasSuffix(tok, ".") {
		t.Errorf("%q has a signature", tok)
	}
	h, p, _ := segments(t, tok)
	if h["alg"] != "none" || p["sub"] != "alice" || p["iss"] != s.Issuer() {
		t.Errorf("header %v payload %v", h, p)
	}
	if _, err := verify(tok, jwks(t, s)); err == nil {
		t.Error("an alg none token verified")
	}
}

func TestHS256WithPublicKey(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		s := oauthtest.New(t, oauthtest.Options{Algorithm: alg})
		set := jwks(t, s)
		_, _, raw := get(t, s.JWKSURL())
		var published struct{ Keys []json.RawMessage }
		json.Unmarshal(raw, &published)
		for _, form := range []oauthtest.KeyForm{oauthtest.FormJWK, oauthtest.FormPEM, oauthtest.FormDER} {
			secret := s.PublicKeyBytes(t, form)
			switch form {
			case oauthtest.FormJWK:
				if string(secret) != string(published.Keys[0]) {
					t.Errorf("%s: JWK form %s is not the published %s", alg, secret, published.Keys[0])
				}
			case oauthtest.FormPEM:
				block, rest := pem.Decode(secret)
				if block == nil || block.Type != "PUBLIC KEY" || len(rest) != 0 || !strings.HasSuffix(string(secret), "\n") {
					t.Errorf("%s: PEM form %q", alg, secret)
				}
			case oauthtest.FormDER:
				if _, err := x509.ParsePKIXPublicKey(secret); err != nil {
					t.Errorf("%s: DER form: %v", alg, err)
				}
			}
			tok := s.HS256WithPublicKey(t, oauthtest.Claims{Subject: "mallory"}, form)
			h, p, sig := segments(t, tok)
			if h["alg"] != "HS256" || h["kid"] != s.Kid() || p["sub"] != "mallory" {
				t.Errorf("%s/%d: header %v payload %v", alg, form, h, p)
			}
			mac := hmac.New(sha256.New, secret)
			mac.Write([]byte(tok[:strings.LastIndex(tok, ".")]))
			if !hmac.Equal(mac.Sum(nil), sig) {
				t.Errorf("%s/%d: not an HMAC over the key bytes", alg, form)
			}
			if _, err := verify(tok, set); err == nil {
				t.Errorf("%s/%d: a strict verifier accepted it", alg, form)
			}
		}
	}
}

func TestUntrustedTokens(t *testing.T) {
	t.Parallel()
	s := oauthtest.New(t, oauthtest.Options{})
	set := jwks(t, s)
	tok := s.UntrustedToken(t, oauthtest.Claims{Subject: "mallory"})
	if h, _, _ := segments(t, tok); h["kid"] != s.Kid() || h["alg"] != "RS256" {
		t.Errorf("header %v", h)
	}
	if _, err := verify(tok, set); err == nil {
		t.Error("an untrusted token verified")
	}
	tok = s.UntrustedTokenUnknownKid(t, oauthtest.Claims{})
	h, _, _ := segments(t, tok)
	if kid, _ := h["kid"].(string); kid == "" || slices.Contains(kids(set), kid) {
		t.Errorf("kid %v among %q", h["kid"], kids(set))
	}
	if _, err := verify(tok, set); err == nil {
		t.Error("an unknown kid verified")
	}
	if got := kids(jwks(t, s)); !slices.Equal(got, kids(set)) {
		t.Errorf("the untrusted key got published: %q", got)
	}
}

// TestServersDoNotShareKeys guards the key pool: a token from one live
// server must not verify against another's keys, whatever the kid.
func TestServersDoNotShareKeys(t *testing.T) {
	t.Parallel()
	a := oauthtest.New(t, oauthtest.Options{})
	b := oauthtest.New(t, oauthtest.Options{})
	setB := jwks(t, b)
	jws, err := jose.ParseSignedCompact(a.Token(t, oauthtest.Claims{}), []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jws.Verify(setB.Keys[0]); err == nil || a.Kid() == b.Kid() {
		t.Errorf("servers share a key (kids %s, %s)", a.Kid(), b.Kid())
	}
}

func TestRotateAndRetire(t *testing.T) {
	t.Parallel()
	s := oauthtest.New(t, oauthtest.Options{Algorithm: "PS256"})
	old := s.Kid()
	oldTok := s.Token(t, oauthtest.Claims{})
	kid := s.Rotate(t)
	if kid == old || s.Kid() != kid {
		t.Fatalf("Rotate gave %q, Kid %q, old %q", kid, s.Kid(), old)
	}
	set := jwks(t, s)
	if got := kids(set); !slices.Equal(got, []string{old, kid}) {
		t.Fatalf("JWKS kids %q", got)
	}
	newTok := s.Token(t, oauthtest.Claims{})
	if h, _, _ := segments(t, newTok); h["kid"] != kid {
		t.Errorf("new token's kid %v", h["kid"])
	}
	for _, tok := range []string{oldTok, newTok} {
		if _, err := verify(tok, set); err != nil {
			t.Error(err)
		}
	}
	s.Retire(old)
	set = jwks(t, s)
	if got := kids(set); !slices.Equal(got, []string{kid}) {
		t.Fatalf("after Retire, JWKS kids %q", got)
	}
	if _, err := verify(oldTok, set); err == nil {
		t.Error("a token of a retired key verified")
	}
	s.Retire(kid)
	if got := jwks(t, s); len(got.Keys) != 0 {
		t.Errorf("after retiring all, JWKS %q", kids(got))
	}
	if h, _, _ := segments(t, s.Token(t, oauthtest.Claims{})); h["kid"] != kid {
		t.Errorf("a retired current key stopped signing: %v", h["kid"])
	}
}

func TestDuplicateKid(t *testing.T) {
	t.Parallel()
	s := oauthtest.New(t, oauthtest.Options{})
	tok := s.Token(t, oauthtest.Claims{})
	s.DuplicateKid(true)
	set := jwks(t, s)
	if got := kids(set); !slices.Equal(got, []string{s.Kid(), s.Kid()}) {
		t.Fatalf("JWKS kids %q", got)
	}
	jws, err := jose.ParseSignedCompact(tok, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jws.Verify(set.Keys[0]); err != nil {
		t.Errorf("the first key under the kid is not the real one: %v", err)
	}
	if _, err := jws.Verify(set.Keys[1]); err == nil {
		t.Error("the duplicate is the same key")
	}
	kid := s.Rotate(t)
	if got := kids(jwks(t, s)); len(got) != 3 || got[2] != kid {
		t.Errorf("after Rotate, the duplicate does not follow the current kid: %q", got)
	}
	s.DuplicateKid(false)
	if got := kids(jwks(t, s)); len(got) != 2 {
		t.Errorf("DuplicateKid(false) left %q", got)
	}
}

func TestSetDownSetDelayHits(t *testing.T) {
	t.Parallel()
	s := oauthtest.New(t, oauthtest.Options{IssuerPath: "/tenant1"})
	md := s.MetadataPaths()[0]
	s.SetDown(oauthtest.PathJWKS, http.StatusServiceUnavailable)
	s.SetDown(md, http.StatusOK)
	if status, _, _ := get(t, s.JWKSURL()); status != http.StatusServiceUnavailable {
		t.Errorf("JWKS down answered %d", status)
	}
	status, _, b := get(t, s.MetadataURL())
	if status != http.StatusOK || json.Valid(b) {
		t.Errorf("metadata down with 200 answered %d %s", status, b)
	}
	s.SetDown(oauthtest.PathJWKS, 0)
	s.SetDown(md, 0)
	jwks(t, s)
	if status, _, _ := get(t, s.MetadataURL()); status != http.StatusOK {
		t.Errorf("restored metadata answered %d", status)
	}
	if s.Hits(oauthtest.PathJWKS) != 2 || s.Hits(md) != 2 || s.Hits("/nowhere") != 0 {
		t.Errorf("hits: jwks %d, metadata %d", s.Hits(oauthtest.PathJWKS), s.Hits(md))
	}
	get(t, s.URL+"/nowhere")
	if s.Hits("/nowhere") != 1 {
		t.Errorf("an unserved path was not counted")
	}

	s.SetDelay(oauthtest.PathJWKS, 200*time.Millisecond)
	start := time.Now()
	jwks(t, s)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("delayed JWKS answered in %v", d)
	}
	s.SetDelay(oauthtest.PathJWKS, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.JWKSURL(), nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Error("an hour's delay answered")
	}
	s.SetDelay(oauthtest.PathJWKS, 0)
	start = time.Now()
	jwks(t, s)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("undelayed JWKS took %v", d)
	}
}

// TestDelayEndsWithTheTest checks that a request left hanging on a delay
// does not keep the test's cleanup waiting.
func TestDelayEndsWithTheTest(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	t.Run("inner", func(t *testing.T) {
		s := oauthtest.New(t, oauthtest.Options{})
		s.SetDelay(oauthtest.PathJWKS, time.Hour)
		go func() {
			defer close(done)
			if resp, err := http.Get(s.JWKSURL()); err == nil {
				resp.Body.Close()
			}
		}()
		for s.Hits(oauthtest.PathJWKS) == 0 {
			time.Sleep(time.Millisecond)
		}
	})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the delayed request outlived the server")
	}
}
