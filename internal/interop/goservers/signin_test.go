package goservers

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/interop/oidcprovider"
	"github.com/mcprel/mcprel/internal/interop/sdkauth"
	"github.com/mcprel/mcprel/internal/mcptest"
)

// The official Go SDK's server guarded by the SDK's own resource-server
// middleware (auth.RequireBearerToken, auth.ProtectedResourceMetadataHandler),
// its verifier taking only JWTs oidc-provider issued for its URL, stateful
// (2025-11-25) and stateless (2026-07-28): "mcprel call" signs in to it
// through the browser and calls a tool, and "mcprel gateway" in front of
// it signs in by client credentials and forwards a downstream call. See
// sdkauth for what is checked.
func TestMcprelSignsInToGoSDKResourceServer(t *testing.T) {
	as := oidcprovider.Start(t, oidcprovider.Options{})
	mcprel, gosdk := buildMcprel(t), build(t, "gosdk-server")
	for _, tc := range []struct {
		name, era string
		args      []string
	}{
		{"2025-stateful", "2025", nil},
		{"2026-stateless", "2026", []string{"-stateless"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startProtected(t, gosdk, as, tc.args...)
			checkChallenge(t, s.URL)
			t.Run("call", func(t *testing.T) { sdkauth.CallSignsIn(t, mcprel, as, s, tc.era) })
			t.Run("gateway", func(t *testing.T) { sdkauth.GatewaySignsIn(t, mcprel, as, s) })
		})
	}
}

// startProtected starts gosdk-server over HTTP as a resource server of as.
func startProtected(t *testing.T, gosdk string, as *oidcprovider.Provider, args ...string) sdkauth.Server {
	t.Helper()
	tokenLog := filepath.Join(t.TempDir(), "tokens.jsonl")
	log := mcptest.NewLines()
	cmd := exec.Command(gosdk, append([]string{"-http", "127.0.0.1:0", "-oauth-issuer", as.Issuer, "-token-log", tokenLog}, args...)...)
	cmd.Stderr = log
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gosdk-server stderr:\n%s", log)
		}
	})
	return sdkauth.Server{URL: mcptest.StartURL(t, cmd), TokenLog: tokenLog}
}

// checkChallenge pins what the SDK's middleware answers a request with
// no token, which mcprel's client has to make do with: a 401 whose
// challenge names the resource metadata and the scope but no error (RFC
// 6750 leaves it out when no token was sent).
func checkChallenge(t *testing.T, endpoint string) {
	t.Helper()
	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	base := strings.TrimSuffix(endpoint, "/mcp")
	want := `Bearer resource_metadata="` + base + `/.well-known/oauth-protected-resource/mcp", scope="mcp:tools"`
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || got != want {
		t.Fatalf("without a token: %s, WWW-Authenticate %q; want 401, %q", resp.Status, got, want)
	}
}
