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

// A challenge's values hold only what RFC 6750 §3 allows in them
// (%x20-21 / %x23-5B / %x5D-7E: no quote, no backslash), so that a
// client reading each value up to the next quote reads all of it, and
// nothing a description says can end the header or add a parameter.
func TestChallengeValues(t *testing.T) {
	e := &auth.Error{Code: "insufficient_scope", Scopes: []string{"mcp:tools"},
		Description:      "the access token lacks the scope \"mcp:tools\", error=\"x\\\" \r\nX-Injected: 1 é",
		ResourceMetadata: "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"}
	ch := e.Challenge()
	want := `Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", scope="mcp:tools", error="insufficient_scope", error_description="`
	if !strings.HasPrefix(ch, want) {
		t.Fatalf("challenge %s", ch)
	}
	desc := strings.TrimPrefix(ch, want)
	if !strings.HasSuffix(desc, `"`) {
		t.Fatalf("error_description does not end the challenge: %s", ch)
	}
	desc = strings.TrimSuffix(desc, `"`)
	for _, c := range desc {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			t.Fatalf("error_description holds %q: %s", c, ch)
		}
	}
	if !strings.Contains(desc, "lacks the scope 'mcp:tools'") {
		t.Fatalf("error_description %q lost its words", desc)
	}
}
