package goclients_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcprel/mcprel/internal/interop/oidcprovider"
)

// The official Go SDK's client, with its own OAuth support, signs in to
// `mcprel serve --http` and to `mcprel gateway --http` (in front of
// `mcprel serve --stdio`) with a real authorization server (oidc-provider):
// by client credentials (extauth, SEP-1046) and by authorization code +
// PKCE with dynamic client registration (auth.AuthorizationCodeHandler,
// its browser step played headlessly), in both eras. A request without a
// token gets 401 with the challenge naming the endpoint's metadata; the
// SDK discovers the rest and calls a tool, which on serve is recorded
// under the token's subject as its tenant.
//
// go-sdk v1.8.0's client credentials handler sends no RFC 8707 resource
// with its token request, so the token it gets has no audience and
// mcprel refuses it (also checked here); its HTTP client adds the
// resource, as the MCP spec requires of clients, for the rest.
func TestGoSDKSignsInWithOAuth(t *testing.T) {
	as := oidcprovider.Start(t, oidcprovider.Options{})
	for _, front := range []string{"serve", "gateway"} {
		t.Run(front, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "mcprel.db")
			args := []string{"serve", "--db", db}
			if front == "gateway" {
				args = []string{"gateway", "--db", db, "--upstream", fmt.Sprintf("demo=%s serve --stdio --db %s", binary, filepath.Join(dir, "upstream.db"))}
			}
			args = append(args, "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer, "--oauth-scopes", "mcp:tools")
			endpoint, rest := startListening(t, args...)
			go io.Copy(io.Discard, rest)
			checkChallenge(t, endpoint)
			t.Run("client_credentials without a resource", func(t *testing.T) {
				transport := &mcp.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: clientCredentials(t, as, ""), MaxRetries: -1}
				client := mcp.NewClient(&mcp.Implementation{Name: "mcprel-interop-gosdk-oauth", Version: "0.0.0"}, nil)
				cs, err := client.Connect(t.Context(), transport, nil)
				if err == nil {
					cs.Close()
					t.Fatal("a token without an audience was accepted")
				}
				if !strings.Contains(err.Error(), "Unauthorized") {
					t.Fatalf("connect: %v, want Unauthorized", err)
				}
			})

			for _, version := range []string{"2025-11-25", "2026-07-28"} {
				for _, grant := range []string{"client_credentials", "authorization_code"} {
					t.Run(version+"/"+grant, func(t *testing.T) {
						var h auth.OAuthHandler
						sub := as.Account
						if grant == "client_credentials" {
							h = clientCredentials(t, as, endpoint)
							sub = as.ClientID
						} else {
							h = authorizationCode(t)
						}
						transport := &mcp.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: h, MaxRetries: -1}
						client := mcp.NewClient(&mcp.Implementation{Name: "mcprel-interop-gosdk-oauth", Version: "0.0.0"}, nil)
						cs, err := client.Connect(t.Context(), transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
						if err != nil {
							t.Fatalf("connect: %v", err)
						}
						defer cs.Close()
						if got := cs.InitializeResult().ProtocolVersion; got != version {
							t.Fatalf("negotiated %s, want %s", got, version)
						}
						key := fmt.Sprintf("gosdk-oauth-%s-%s", version, grant)
						res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_account", Arguments: map[string]any{"account": "acct", "cents": 100, "idempotencyKey": key}})
						if err != nil || res.IsError {
							t.Fatalf("charge_account: %+v, %v", res, err)
						}
						ts, err := h.TokenSource(t.Context())
						if err != nil || ts == nil {
							t.Fatalf("no token source after connecting: %v", err)
						}
						if tok, err := ts.Token(); err != nil || tok.AccessToken == "" {
							t.Fatalf("token: %v", err)
						}
						if front == "serve" {
							if out, code := ledgerShow(t, db, sub, key); code != 0 || !strings.Contains(out, `"committed"`) {
								t.Errorf("ledger show --tenant %s: exit %d, %s", sub, code, out)
							}
							if out, code := ledgerShow(t, db, "", key); code != 3 {
								t.Errorf("ledger show with no tenant: exit %d, %s; want 3", code, out)
							}
						}
					})
				}
			}
		})
	}
}

// checkChallenge sends an initialize without a token and expects 401 with
// the endpoint's resource metadata and required scope in the challenge,
// and that metadata naming the endpoint as the resource.
func checkChallenge(t *testing.T, endpoint string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	metaURL := strings.TrimSuffix(endpoint, "/mcp") + "/.well-known/oauth-protected-resource/mcp"
	want := fmt.Sprintf(`Bearer resource_metadata=%q, scope="mcp:tools"`, metaURL)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("without a token: %s, WWW-Authenticate %q; want 401, %q", resp.Status, resp.Header.Get("WWW-Authenticate"), want)
	}
	prm, err := oauthex.GetProtectedResourceMetadata(t.Context(), metaURL, endpoint, http.DefaultClient)
	if err != nil {
		t.Fatalf("the protected resource metadata: %v", err)
	}
	if prm.Resource != endpoint {
		t.Fatalf("the metadata names resource %q, want %q", prm.Resource, endpoint)
	}
}

// clientCredentials is go-sdk's client credentials handler with the
// provider's confidential client, bound to its issuer; a non-empty
// resource is added to its token requests.
func clientCredentials(t *testing.T, as *oidcprovider.Provider, resource string) auth.OAuthHandler {
	t.Helper()
	c := http.DefaultClient
	if resource != "" {
		c = &http.Client{Transport: addResource{resource}}
	}
	h, err := extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{
		HTTPClient: c,
		Credentials: &oauthex.ClientCredentials{
			ClientID:         as.ClientID,
			ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: as.ClientSecret},
			Issuer:           as.Issuer,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// authorizationCode is go-sdk's authorization code handler registering
// itself as a native client with a loopback redirect URI; its browser is
// oidcprovider.Approve, which stops at the redirect to that URI, so
// nothing needs to listen there.
func authorizationCode(t *testing.T) auth.OAuthHandler {
	t.Helper()
	const redirect = "http://127.0.0.1:49998/callback"
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{
			Metadata: &oauthex.ClientRegistrationMetadata{
				ClientName:              "mcprel interop go-sdk",
				RedirectURIs:            []string{redirect},
				GrantTypes:              []string{"authorization_code", "refresh_token"},
				ResponseTypes:           []string{"code"},
				TokenEndpointAuthMethod: "none",
			},
		},
		RedirectURL: redirect,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			back, err := oidcprovider.Approve(ctx, args.URL)
			if err != nil {
				return nil, err
			}
			q := back.Query()
			if e := q.Get("error"); e != "" {
				return nil, fmt.Errorf("authorization refused: %s: %s", e, q.Get("error_description"))
			}
			if got := back.Scheme + "://" + back.Host + back.Path; got != redirect {
				return nil, fmt.Errorf("authorization ended at %s", redact(back))
			}
			return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// addResource adds an RFC 8707 resource parameter to a client_credentials
// token request that has none.
type addResource struct{ resource string }

func (a addResource) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.Body == nil {
		return http.DefaultTransport.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(body))
	if err == nil && form.Get("grant_type") == "client_credentials" && !form.Has("resource") {
		form.Set("resource", a.resource)
		body = []byte(form.Encode())
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(strings.NewReader(string(body)))
	req.ContentLength = int64(len(body))
	return http.DefaultTransport.RoundTrip(req)
}

func redact(u *url.URL) string { return u.Scheme + "://" + u.Host + u.Path }

// ledgerShow runs `mcprel ledger show` for charge_account's key as tenant
// and returns its output and exit status.
func ledgerShow(t *testing.T, db, tenant, key string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, "ledger", "show", "--db", db, "--tenant", tenant, "--tool", "charge_account", "--key", key)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}
