package ts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/interop/oidcprovider"
)

// signInSetup is what a sign-in test starts from: Node, a context that
// ends with the test or after 5 minutes, mcprel built, and a real
// authorization server (oidc-provider).
func signInSetup(t *testing.T) (context.Context, string, *oidcprovider.Provider) {
	t.Helper()
	requireNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx, buildServer(t, ctx), oidcprovider.Start(t, oidcprovider.Options{})
}

// Both TypeScript SDKs, in every era they speak, sign in to `mcprel serve
// --http` and to `mcprel gateway --http` (in front of `mcprel serve
// --stdio`) with their own OAuth support and a real authorization server
// (oidc-provider): the SDK's ClientCredentialsProvider, and authorization
// code + PKCE with dynamic client registration, driven headlessly. Each
// run starts without a token, meets a 401 whose challenge names the
// endpoint's protected resource metadata and the required scope, finds
// the authorization server through it, and calls a tool with a token
// issued for exactly the endpoint's URL; a call on serve is recorded
// under the token's subject as its tenant.
func TestTypeScriptSDKsSignInWithOAuth(t *testing.T) {
	ctx, bin, as := signInSetup(t)

	for _, front := range []string{"serve", "gateway"} {
		t.Run(front, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "mcprel.db")
			args := []string{"serve", "--db", db}
			if front == "gateway" {
				args = []string{"gateway", "--db", db, "--upstream", fmt.Sprintf("demo=%s serve --stdio --db %s", bin, filepath.Join(dir, "upstream.db"))}
			}
			args = append(args, "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer, "--oauth-scopes", "mcp:tools")
			url := startGateway(t, ctx, bin, args)
			base := strings.TrimSuffix(url, "/mcp")
			challenge := fmt.Sprintf(`Bearer resource_metadata="%s/.well-known/oauth-protected-resource/mcp", scope="mcp:tools"`, base)

			for _, tc := range []struct{ sdk, era, grant string }{
				{"v1", "legacy", "client_credentials"},
				{"v2", "legacy", "client_credentials"},
				{"v2", "modern", "client_credentials"},
				{"v1", "legacy", "authorization_code"},
				{"v2", "legacy", "authorization_code"},
				{"v2", "modern", "authorization_code"},
			} {
				t.Run(tc.sdk+"-"+tc.era+"-"+tc.grant, func(t *testing.T) {
					key := fmt.Sprintf("oauth-%s-%s-%s", tc.sdk, tc.era, tc.grant)
					cargs := []string{"oauth-client.mjs", tc.sdk, tc.grant, url, "--era", tc.era,
						"--tool", "charge_account", "--args", fmt.Sprintf(`{"account":"acct","cents":100,"idempotencyKey":%q}`, key)}
					sub := as.Account
					if tc.grant == "client_credentials" {
						sub = as.ClientID
						// v1 asks for its configured scope only, not the
						// challenge's (see oauth-client.mjs).
						cargs = append(cargs, "--client-id", as.ClientID, "--client-secret", as.ClientSecret, "--issuer", as.Issuer, "--scope", "mcp:tools")
					}
					s := runOAuthClient(t, ctx, cargs)
					if s.FirstChallenge != challenge {
						t.Errorf("the first request's challenge was %q, want %q", s.FirstChallenge, challenge)
					}
					if s.Token.Iss != as.Issuer || s.Token.Aud != url || s.Token.Sub != sub || s.Token.Scope != "mcp:tools" {
						t.Errorf("the client's token: %+v; want iss %s, aud %s, sub %s, scope mcp:tools", s.Token, as.Issuer, url, sub)
					}
					if tc.grant == "authorization_code" {
						if s.RegisteredClientID == "" || s.AuthorizationRequest.ClientID != s.RegisteredClientID {
							t.Errorf("authorization by client %q, registered %q: want a dynamically registered client", s.AuthorizationRequest.ClientID, s.RegisteredClientID)
						}
						if s.AuthorizationRequest.Resource != url || s.AuthorizationRequest.CodeChallengeMethod != "S256" {
							t.Errorf("authorization request %+v: want resource %s and S256", s.AuthorizationRequest, url)
						}
					}
					if front == "serve" {
						// The ledger keeps the call under the token's subject:
						// the tenant is who signed in.
						if out, code := ledgerShow(t, ctx, bin, db, sub, key); code != 0 || !strings.Contains(out, `"committed"`) {
							t.Errorf("ledger show --tenant %s: exit %d, %s", sub, code, out)
						}
						if out, code := ledgerShow(t, ctx, bin, db, "", key); code != 3 {
							t.Errorf("ledger show with no tenant: exit %d, %s; want 3, the call is not the anonymous tenant's", code, out)
						}
					}
				})
			}
		})
	}
}

// oauthSummary is what oauth-client.mjs prints.
type oauthSummary struct {
	Failures        []string
	Error           string
	ProtocolVersion string
	FirstChallenge  string
	Token           struct {
		Iss, Aud, Sub, Scope string
		ClientID             string `json:"client_id"`
	}
	RegisteredClientID   string
	AuthorizationRequest struct {
		ClientID            string `json:"client_id"`
		Resource            string
		CodeChallengeMethod string `json:"code_challenge_method"`
	}
	Call struct{ IsError bool }
}

func runOAuthClient(t *testing.T, ctx context.Context, args []string) oauthSummary {
	t.Helper()
	cmd := exec.CommandContext(ctx, "node", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), nodeEnv...)
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	var s oauthSummary
	if jerr := json.Unmarshal(stdout.Bytes(), &s); err != nil || jerr != nil || len(s.Failures) > 0 || s.Error != "" || s.Call.IsError {
		t.Fatalf("node %s: %v %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, jerr, &stdout, &stderr)
	}
	t.Logf("client summary: %s", compactJSON(stdout.Bytes()))
	return s
}

// ledgerShow runs `mcprel ledger show` for charge_account's key as tenant
// and returns its output and exit status.
func ledgerShow(t *testing.T, ctx context.Context, bin, db, tenant, key string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "ledger", "show", "--db", db, "--tenant", tenant, "--tool", "charge_account", "--key", key)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}
