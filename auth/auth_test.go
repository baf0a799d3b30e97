package auth_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/auth"
)

// StaticTokens maps each token to its tenant, the shared token to "",
// matches the scheme without regard to case, and never matches an empty
// token or another scheme.
func TestStaticTokens(t *testing.T) {
	a := auth.StaticTokens("shared", map[string]string{"tok-a": "alice", "": "nobody"})
	for _, tc := range []struct {
		header string
		ok     bool
		tenant string
	}{
		{"Bearer tok-a", true, "alice"},
		{"bearer tok-a", true, "alice"},
		{"Bearer shared", true, ""},
		{"Bearer tok-b", false, ""},
		{"Bearer ", false, ""},
		{"Basic tok-a", false, ""},
		{"", false, ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		p, err := a.Authenticate(r)
		if (err == nil) != tc.ok || p.Tenant != tc.tenant {
			t.Errorf("Authorization %q: %+v, %v; want ok=%v tenant %q", tc.header, p, err, tc.ok, tc.tenant)
		}
	}
}

// Require serves next with the Principal in the context, and refuses
// with 401, the challenge and ErrNoCredentials' text, through the Refuse
// given, without calling next.
func TestRequire(t *testing.T) {
	var got auth.Principal
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := auth.FromContext(r.Context())
		if !ok {
			t.Error("no principal in the context")
		}
		got = p
	})
	a := auth.AuthenticatorFunc(func(r *http.Request) (auth.Principal, error) {
		if r.Header.Get("X-Who") == "" {
			return auth.Principal{}, auth.ErrNoCredentials
		}
		return auth.Principal{Tenant: r.Header.Get("X-Who"), Scopes: []string{"read"}}, nil
	})
	h := auth.Require(next, a, nil)

	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	r.Header.Set("X-Who", "zed")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || got.Tenant != "zed" || len(got.Scopes) != 1 {
		t.Fatalf("authenticated: %d %+v", w.Code, got)
	}

	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
	if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") != auth.Challenge ||
		strings.TrimSpace(w.Body.String()) != "a valid bearer token is required" {
		t.Fatalf("refused: %d %q %q", w.Code, w.Header().Get("WWW-Authenticate"), w.Body.String())
	}
}

// Hosts allows loopback by default, the names given otherwise, and
// refuses a foreign Host or Origin with 403 naming it.
func TestHosts(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, tc := range []struct {
		hosts        auth.Hosts
		host, origin string
		want         int
		body         string
	}{
		{auth.Hosts{}, "127.0.0.1:8080", "", http.StatusOK, ""},
		{auth.Hosts{}, "[::1]:8080", "http://localhost:3000", http.StatusOK, ""},
		{auth.Hosts{}, "evil.example", "", http.StatusForbidden, `host "evil.example" is not allowed`},
		{auth.Hosts{}, "localhost", "https://evil.example", http.StatusForbidden, `origin "https://evil.example" is not allowed`},
		{auth.Hosts{Allowed: []string{"mcp.example"}, Origins: []string{"https://app.example"}}, "mcp.example:443", "https://app.example:8443", http.StatusOK, ""},
		{auth.Hosts{Allowed: []string{"*"}, Origins: []string{"*"}}, "anything", "https://anything", http.StatusOK, ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
		r.Host = tc.host
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		w := httptest.NewRecorder()
		tc.hosts.Wrap(ok, nil).ServeHTTP(w, r)
		if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("%+v, Host %q, Origin %q: %d %q, want %d %q", tc.hosts, tc.host, tc.origin, w.Code, w.Body.String(), tc.want, tc.body)
		}
	}
}
