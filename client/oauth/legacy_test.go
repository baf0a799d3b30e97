package oauth_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

// legacyServer is an MCP server of the 2025-03-26 revision: no Protected
// Resource Metadata, its origin its own authorization server. Every path
// but /mcp goes to as, whose endpoints are at the defaults (/authorize,
// /token, /register).
type legacyServer struct {
	srv *httptest.Server
	as  *oauthtest.Server

	mu        sync.Mutex
	proxy     http.Handler
	challenge string
}

// newLegacyServer starts one whose metadata names as issuer its origin
// followed by issuerPath, unless o.MetadataIssuer names another.
func newLegacyServer(t *testing.T, o oauthtest.Options, issuerPath string) *legacyServer {
	l := &legacyServer{}
	l.srv = httptest.NewServer(http.HandlerFunc(l.serve))
	t.Cleanup(l.srv.Close)
	if o.MetadataIssuer == "" {
		o.MetadataIssuer = l.srv.URL + issuerPath
	}
	as := oauthtest.New(t, o)
	target, _ := url.Parse(as.URL)
	l.mu.Lock()
	l.as, l.proxy, l.challenge = as, httputil.NewSingleHostReverseProxy(target), `Bearer realm="mcp"`
	l.mu.Unlock()
	return l
}

func (l *legacyServer) setChallenge(c string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.challenge = c
}

func (l *legacyServer) serve(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	as, proxy, challenge := l.as, l.proxy, l.challenge
	l.mu.Unlock()
	if r.URL.Path != "/mcp" {
		proxy.ServeHTTP(w, r)
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !slices.Contains(as.Issued(), tok) {
		w.Header().Set("WWW-Authenticate", challenge)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	w.Write([]byte("ok"))
}

func (l *legacyServer) URL() string { return l.srv.URL + "/mcp" }

// legacyCall is call against a legacyServer.
func legacyCall(t *testing.T, c *oauth.Client, l *legacyServer) (int, error) {
	t.Helper()
	send := func() (*http.Request, *http.Response) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, l.URL(), nil)
		if err := c.Authorize(req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return req, resp
	}
	req, resp := send()
	if resp.StatusCode == http.StatusUnauthorized {
		retry, err := c.Refused(t.Context(), req, resp)
		if !retry {
			return resp.StatusCode, err
		}
		_, resp = send()
	}
	return resp.StatusCode, nil
}

// A server without Protected Resource Metadata is one of MCP 2025-03-26:
// its origin is the authorization server, with RFC 8414 metadata there or
// else the default endpoints.
func TestLegacyServerWithoutResourceMetadata(t *testing.T) {
	for _, tc := range []struct {
		name       string
		metadata   bool
		issuerPath string // the metadata's issuer after the origin
	}{
		{"metadata at the server's origin", true, ""},
		// The revision named no issuer: the metadata's own, on the
		// server's origin, is the one.
		{"metadata with an issuer under the origin", true, "/oauth"},
		{"default endpoints", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLegacyServer(t, oauthtest.Options{}, tc.issuerPath)
			if !tc.metadata {
				l.as.SetDown("/.well-known/oauth-authorization-server", http.StatusNotFound)
			}
			c, err := oauth.New(l.URL(), oauth.Options{RedirectURL: redirectURL, Authorize: browser})
			if err != nil {
				t.Fatal(err)
			}
			if status, err := legacyCall(t, c, l); status != http.StatusOK || err != nil {
				t.Fatalf("call: %d %v", status, err)
			}
			if len(l.as.Registrations()) != 1 {
				t.Errorf("%d registrations, want 1", len(l.as.Registrations()))
			}
			auths := l.as.AuthorizationRequests()
			if len(auths) != 1 || auths[0].Get("resource") != l.URL() || auths[0].Get("code_challenge_method") != "S256" {
				t.Fatalf("authorization requests %v", auths)
			}
			st, err := c.State(t.Context())
			if err != nil || st.Issuer != l.srv.URL+tc.issuerPath || st.Resource != l.URL() {
				t.Fatalf("state %+v, %v", st, err)
			}
			// With metadata, its token endpoint is used (the fake's own
			// URL); without, the default one at the server's origin.
			want := l.srv.URL + oauthtest.PathToken
			if tc.metadata {
				want = l.as.URL + oauthtest.PathToken
			}
			if st.TokenEndpoint != want {
				t.Errorf("token endpoint %s, want %s", st.TokenEndpoint, want)
			}
		})
	}
}

// The fallback is for servers that have no metadata, not for ones whose
// metadata fails: a challenge naming resource metadata that is not there,
// or origin metadata naming another issuer, ends the sign-in.
func TestLegacyFallbackIsNarrow(t *testing.T) {
	t.Run("named metadata missing", func(t *testing.T) {
		l := newLegacyServer(t, oauthtest.Options{}, "")
		l.setChallenge(`Bearer resource_metadata="` + l.srv.URL + `/.well-known/oauth-protected-resource/mcp"`)
		c, _ := oauth.New(l.URL(), oauth.Options{RedirectURL: redirectURL, Authorize: browser})
		status, err := legacyCall(t, c, l)
		if status != http.StatusUnauthorized {
			t.Fatalf("status %d", status)
		}
		refused(t, err, oauth.StepMetadata, l.as)
		if n := len(l.as.AuthorizationRequests()); n != 0 {
			t.Errorf("%d authorization requests, want none", n)
		}
	})
	t.Run("origin metadata of another issuer", func(t *testing.T) {
		l := newLegacyServer(t, oauthtest.Options{MetadataIssuer: "https://as.example.com/oauth"}, "")
		c, _ := oauth.New(l.URL(), oauth.Options{RedirectURL: redirectURL, Authorize: browser})
		status, err := legacyCall(t, c, l)
		if status != http.StatusUnauthorized {
			t.Fatalf("status %d", status)
		}
		refused(t, err, oauth.StepIssuer, l.as)
		if n := len(l.as.AuthorizationRequests()); n != 0 {
			t.Errorf("%d authorization requests, want none", n)
		}
	})
	t.Run("origin metadata failing", func(t *testing.T) {
		l := newLegacyServer(t, oauthtest.Options{}, "")
		l.as.SetDown("/.well-known/oauth-authorization-server", http.StatusInternalServerError)
		c, _ := oauth.New(l.URL(), oauth.Options{RedirectURL: redirectURL, Authorize: browser})
		_, err := legacyCall(t, c, l)
		refused(t, err, oauth.StepMetadata, l.as)
		if l.as.Hits(oauthtest.PathAuthorize) != 0 || l.as.Hits(oauthtest.PathRegister) != 0 {
			t.Error("the default endpoints were used though the metadata failed")
		}
	})
}
