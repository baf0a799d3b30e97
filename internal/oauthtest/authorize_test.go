package oauthtest_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/oauthtest"
)

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func postForm(t *testing.T, u string, f url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(u, f)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// authorize runs an authorization request and returns the redirect's
// query.
func authorize(t *testing.T, s *oauthtest.Server, q url.Values) url.Values {
	t.Helper()
	resp, err := noRedirects.Get(s.URL + oauthtest.PathAuthorize + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize: %d, want 302", resp.StatusCode)
	}
	u, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

func TestCodeFlowWithRegistrationRefreshAndRotation(t *testing.T) {
	s := oauthtest.New(t, oauthtest.Options{AuthorizationResponseIss: true})
	const redirect = "http://127.0.0.1:9/cb"
	body, _ := json.Marshal(map[string]any{"redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none"})
	resp, err := http.Post(s.URL+oauthtest.PathRegister, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var reg map[string]any
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	id, _ := reg["client_id"].(string)
	if resp.StatusCode != http.StatusCreated || id == "" || reg["client_secret"] != nil {
		t.Fatalf("register: %d %v", resp.StatusCode, reg)
	}

	verifier := "a-verifier-long-enough-to-be-a-real-one-0123456789"
	sum := sha256.Sum256([]byte(verifier))
	q := authorize(t, s, url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {redirect},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {"st"}, "resource": {"https://mcp.example/mcp"}, "scope": {"a b"}})
	if q.Get("state") != "st" || q.Get("iss") != s.Issuer() || q.Get("code") == "" {
		t.Fatalf("redirect query %v", q)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "client_id": {id}, "code": {q.Get("code")},
		"redirect_uri": {redirect}, "resource": {"https://mcp.example/mcp"}}
	bad := url.Values{}
	for k, v := range form {
		bad[k] = v
	}
	bad.Set("code_verifier", "wrong")
	if status, out := postForm(t, s.URL+oauthtest.PathToken, bad); status != 400 || out["error"] != "invalid_grant" {
		t.Fatalf("wrong verifier: %d %v", status, out)
	}
	// The failed attempt spent the code, as a real server may.
	q = authorize(t, s, url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {redirect},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {"st"}, "resource": {"https://mcp.example/mcp"}, "scope": {"a b"}})
	form.Set("code", q.Get("code"))
	form.Set("code_verifier", verifier)
	status, tok := postForm(t, s.URL+oauthtest.PathToken, form)
	if status != 200 || tok["scope"] != "a b" {
		t.Fatalf("token: %d %v", status, tok)
	}
	_, claims, _ := segments(t, tok["access_token"].(string))
	if claims["aud"] != "https://mcp.example/mcp" || claims["scope"] != "a b" {
		t.Fatalf("claims %v", claims)
	}
	rt := tok["refresh_token"].(string)
	refresh := url.Values{"grant_type": {"refresh_token"}, "client_id": {id}, "refresh_token": {rt}}
	status, tok2 := postForm(t, s.URL+oauthtest.PathToken, refresh)
	if status != 200 || tok2["refresh_token"] == rt {
		t.Fatalf("refresh: %d %v", status, tok2)
	}
	if status, out := postForm(t, s.URL+oauthtest.PathToken, refresh); status != 400 || out["error"] != "invalid_grant" {
		t.Fatalf("spent refresh token: %d %v", status, out)
	}
}

func TestAuthorizeRefusals(t *testing.T) {
	s := oauthtest.New(t, oauthtest.Options{DenyAuthorization: true, WrongIss: "https://evil.example"})
	s.RegisterClient(oauthtest.Client{ID: "c", RedirectURIs: []string{"http://127.0.0.1:9/cb"}})
	base := url.Values{"response_type": {"code"}, "client_id": {"c"}, "redirect_uri": {"http://127.0.0.1:9/cb"},
		"code_challenge": {"x"}, "code_challenge_method": {"S256"}, "state": {"s"}, "resource": {"https://r/mcp"}}
	q := authorize(t, s, base)
	if q.Get("error") != "access_denied" || q.Get("iss") != "https://evil.example" || q.Get("code") != "" {
		t.Fatalf("denied: %v", q)
	}
	plain := url.Values{}
	for k, v := range base {
		plain[k] = v
	}
	plain.Set("code_challenge_method", "plain")
	if q := authorize(t, s, plain); q.Get("error") != "invalid_request" {
		t.Fatalf("plain PKCE: %v", q)
	}
	base.Set("redirect_uri", "http://127.0.0.1:9/other")
	resp, err := noRedirects.Get(s.URL + oauthtest.PathAuthorize + "?" + base.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unregistered redirect_uri: %d, want 400 and no redirect", resp.StatusCode)
	}
}

func TestClientCredentials(t *testing.T) {
	s := oauthtest.New(t, oauthtest.Options{NoRegistration: true, NoCodeChallengeMethods: true})
	s.RegisterClient(oauthtest.Client{ID: "m2m", Secret: "s3cret", AuthMethod: "client_secret_post"})
	status, md := func() (int, map[string]any) {
		code, _, b := get(t, s.MetadataURL())
		var m map[string]any
		json.Unmarshal(b, &m)
		return code, m
	}()
	if status != 200 || md["registration_endpoint"] != nil || md["code_challenge_methods_supported"] != nil {
		t.Fatalf("metadata: %v", md)
	}
	f := url.Values{"grant_type": {"client_credentials"}, "client_id": {"m2m"}, "client_secret": {"s3cret"}, "resource": {"https://r/"}, "scope": {"x"}}
	status, tok := postForm(t, s.URL+oauthtest.PathToken, f)
	if status != 200 || tok["refresh_token"] != nil {
		t.Fatalf("client_credentials: %d %v", status, tok)
	}
	f.Set("client_secret", "wrong")
	if status, out := postForm(t, s.URL+oauthtest.PathToken, f); status != 401 || out["error"] != "invalid_client" {
		t.Fatalf("wrong secret: %d %v", status, out)
	}
	if got := s.TokenRequests(); len(got) != 2 || got[0].BasicAuth != "" || !strings.Contains(got[0].Form.Get("scope"), "x") {
		t.Fatalf("TokenRequests: %+v", got)
	}
}
