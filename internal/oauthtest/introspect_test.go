package oauthtest_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/oauthtest"
)

func introspect(t *testing.T, s *oauthtest.Server, form url.Values, user, pass string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.IntrospectionURL(), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("introspection answered %d, not JSON: %v", resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	return resp.StatusCode, out
}

func TestIntrospection(t *testing.T) {
	t.Parallel()
	s := oauthtest.New(t, oauthtest.Options{Algorithm: "ES256"})
	c := oauthtest.Claims{Subject: "alice", Audience: []string{"rs"}, Scp: []string{"read", "write"}, ClientID: "cli",
		NotBefore: time.Now().Add(-time.Minute)}
	active := func(tok string) map[string]any {
		t.Helper()
		status, out := introspect(t, s, url.Values{"token": {tok}, "token_type_hint": {"access_token"}}, "", "")
		if status != http.StatusOK {
			t.Fatalf("introspection answered %d %v", status, out)
		}
		if out["active"] != true {
			if len(out) != 1 || out["active"] != false {
				t.Errorf("an inactive answer says more: %v", out)
			}
			return nil
		}
		return out
	}

	jwt := s.Token(t, c)
	opaque := s.Opaque(t, c)
	if strings.Count(opaque, ".") != 0 || len(opaque) < 32 {
		t.Errorf("opaque token %q", opaque)
	}
	for _, tok := range []string{jwt, opaque} {
		out := active(tok)
		if out == nil {
			t.Fatalf("%q inactive", tok)
		}
		for k, v := range map[string]any{"iss": s.Issuer(), "sub": "alice", "aud": "rs", "scope": "read write",
			"client_id": "cli", "token_type": "Bearer"} {
			if out[k] != v {
				t.Errorf("%s = %v, want %v", k, out[k], v)
			}
		}
		for _, k := range []string{"exp", "iat", "nbf"} {
			if _, ok := out[k].(float64); !ok {
				t.Errorf("%s = %v", k, out[k])
			}
		}
	}

	old := s.Token(t, c)
	s.Rotate(t)
	s.Retire(kidOf(t, old))
	if active(old) == nil {
		t.Error("a token of a retired key of this server is inactive")
	}

	s.Revoke(jwt)
	s.Revoke(opaque)
	inactive := map[string]string{
		"revoked JWT":    jwt,
		"revoked opaque": opaque,
		"expired":        s.Token(t, oauthtest.Claims{Expiry: time.Now().Add(-time.Second)}),
		"not yet valid":  s.Token(t, oauthtest.Claims{NotBefore: time.Now().Add(time.Hour)}),
		"expired opaque": s.Opaque(t, oauthtest.Claims{Expiry: time.Now().Add(-time.Second)}),
		"bad exp":        s.Token(t, oauthtest.Claims{Extra: map[string]any{"exp": "tomorrow"}}),
		"alg none":       s.AlgNone(t, c),
		"HS256":          s.HS256WithPublicKey(t, c, oauthtest.FormJWK),
		"untrusted":      s.UntrustedToken(t, c),
		"unknown kid":    s.UntrustedTokenUnknownKid(t, c),
		"garbage":        "not.a.token",
		"unknown opaque": "0123456789abcdef",
	}
	for name, tok := range inactive {
		if out := active(tok); out != nil {
			t.Errorf("%s: active: %v", name, out)
		}
	}
	if active(s.Token(t, oauthtest.Claims{Extra: map[string]any{"exp": nil}})) == nil {
		t.Error("a token without exp is inactive")
	}
	if active(s.Sign(t, map[string]any{"kid": nil}, map[string]any{"sub": "x"})) == nil {
		t.Error("a token without kid is inactive")
	}

	if status, out := introspect(t, s, url.Values{}, "", ""); status != http.StatusBadRequest || out["error"] != "invalid_request" {
		t.Errorf("no token: %d %v", status, out)
	}
	if status, _, _ := get(t, s.IntrospectionURL()); status != http.StatusMethodNotAllowed {
		t.Errorf("GET answered %d", status)
	}
}

func kidOf(t *testing.T, tok string) string {
	h, _, _ := segments(t, tok)
	return h["kid"].(string)
}

func TestIntrospectionFollowsTheServersClock(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s := oauthtest.New(t, oauthtest.Options{Now: func() time.Time { return now.Add(2 * time.Hour) }})
	tok := s.Token(t, oauthtest.Claims{Expiry: now.Add(time.Hour)})
	if _, out := introspect(t, s, url.Values{"token": {tok}}, "", ""); out["active"] != false {
		t.Errorf("a token expired by the server's clock is active: %v", out)
	}
}

func TestIntrospectionClientAuthentication(t *testing.T) {
	t.Parallel()
	s := oauthtest.New(t, oauthtest.Options{IntrospectionClientID: "rs", IntrospectionClientSecret: "s3cret:+/"})
	tok := url.Values{"token": {s.Token(t, oauthtest.Claims{})}}
	for _, tc := range []struct {
		user, pass string
		want       int
	}{
		{"", "", http.StatusUnauthorized},
		{"rs", "wrong", http.StatusUnauthorized},
		{"other", "s3cret:+/", http.StatusUnauthorized},
		{"rs", "s3cret:+/", http.StatusOK},
		{"rs", url.QueryEscape("s3cret:+/"), http.StatusOK},
	} {
		status, out := introspect(t, s, tok, tc.user, tc.pass)
		if status != tc.want {
			t.Errorf("%q:%q: %d %v", tc.user, tc.pass, status, out)
		}
		if status == http.StatusOK && out["active"] != true {
			t.Errorf("%q:%q: %v", tc.user, tc.pass, out)
		}
		if status == http.StatusUnauthorized && out["error"] != "invalid_client" {
			t.Errorf("%q:%q: %v", tc.user, tc.pass, out)
		}
	}
	var md struct {
		Methods []string `json:"introspection_endpoint_auth_methods_supported"`
	}
	_, _, b := get(t, s.MetadataURL())
	json.Unmarshal(b, &md)
	if !slices.Equal(md.Methods, []string{"client_secret_basic"}) {
		t.Errorf("metadata auth methods %q", md.Methods)
	}
}
