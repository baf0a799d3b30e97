package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/auth"
	authoauth "github.com/mcprel/mcprel/auth/oauth"
	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/oauthtest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// protected serves an echo server behind mcprel's OAuth resource server
// trusting as, and returns its endpoint URL.
func protected(t *testing.T, as *oauthtest.Server, scopes ...string) string {
	t.Helper()
	srv := mcptest.NewServer(t, nil)
	mcptest.AddEcho(t, srv)
	mux := http.NewServeMux()
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	endpoint := hs.URL + "/mcp"
	rs, err := authoauth.New(t.Context(), authoauth.Config{Issuers: []string{as.Issuer()}, Resource: endpoint, Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, &streamhttp.HandlerOptions{Authenticator: rs})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/mcp", auth.Require(h, rs, streamhttp.Refuse))
	for _, p := range rs.MetadataPaths("/mcp") {
		mux.Handle(p, rs.MetadataHandler())
	}
	return endpoint
}

// headless is the interactive step of a test: the authorization server
// approves at once, so its redirect is the answer.
func headless(ctx context.Context, authorizationURL string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, authorizationURL, nil)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return resp.Header.Get("Location"), nil
}

// With an Authorizer, a client that holds no token is refused 401, signs
// in (discovery, registration, authorization code with PKCE) and is
// served: in both eras, over one connection, for every request.
func TestAuthorizerSignsIn(t *testing.T) {
	for _, era := range []mcp.Era{mcp.Modern, mcp.Legacy} {
		t.Run(era.String(), func(t *testing.T) {
			as := oauthtest.New(t, oauthtest.Options{})
			endpoint := protected(t, as, "mcp:tools")
			a, err := oauth.New(endpoint, oauth.Options{RedirectURL: "http://127.0.0.1:1/callback", Authorize: headless})
			if err != nil {
				t.Fatal(err)
			}
			c, err := client.DialHTTP(t.Context(), endpoint, &client.Options{Era: era, Authorizer: a})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for range 3 {
				res, err := c.CallTool(t.Context(), "echo", map[string]any{"text": "hi"}, nil)
				if err != nil || res.IsError {
					t.Fatalf("echo: %v %+v", err, res)
				}
			}
			if n := len(as.AuthorizationRequests()); n != 1 {
				t.Fatalf("%d sign-ins, want 1", n)
			}
		})
	}
}

// A sign-in that fails leaves the server's refusal standing: an
// *AuthorizationError naming the step, which VerdictOf classes as
// refused (nothing ran), never as an outcome unknown.
func TestAuthorizerFailureIsARefusal(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{DenyAuthorization: true})
	endpoint := protected(t, as)
	a, err := oauth.New(endpoint, oauth.Options{RedirectURL: "http://127.0.0.1:1/callback", Authorize: headless})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.DialHTTP(t.Context(), endpoint, &client.Options{Era: mcp.Modern, Authorizer: a})
	var ae *client.AuthorizationError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || !strings.Contains(err.Error(), "access_denied") {
		t.Fatalf("a denied sign-in: %v", err)
	}
	if v := client.VerdictOf(nil, err); v.Outcome != retry.OutcomeRefused || v.Kind != retry.Rejected {
		t.Fatalf("verdict %+v, want refused", v)
	}
}

// A refusal of server/discover that signing in could not mend ends the
// connection attempt: initialize goes to the same endpoint and would be
// refused alike, after a second sign-in the user did not ask for.
func TestAuthorizerFailureEndsNegotiation(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{DenyAuthorization: true})
	endpoint := protected(t, as)
	a, err := oauth.New(endpoint, oauth.Options{RedirectURL: "http://127.0.0.1:1/callback", Authorize: headless})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.DialHTTP(t.Context(), endpoint, &client.Options{Authorizer: a})
	var ae *client.AuthorizationError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Fatalf("a denied sign-in: %v", err)
	}
	if n := len(as.AuthorizationRequests()); n != 1 {
		t.Fatalf("%d sign-ins, want 1", n)
	}
}
