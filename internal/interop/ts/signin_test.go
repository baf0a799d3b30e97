package ts_test

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

// The TypeScript SDK v1's server guarded by the SDK's own resource-server
// middleware (requireBearerAuth, mcpAuthMetadataRouter; auth-server.mjs),
// its verifier taking only JWTs oidc-provider issued for its URL, over
// stateful Streamable HTTP (2025-11-25): "mcprel call" signs in to it
// through the browser and calls a tool, and "mcprel gateway" in front of
// it signs in by client credentials and forwards a downstream call. See
// sdkauth for what is checked.
func TestMcprelSignsInToTypeScriptSDKResourceServer(t *testing.T) {
	_, mcprel, as := signInSetup(t)
	s := startAuthServer(t, as)

	// What the middleware answers a request with no token: a 401 whose
	// challenge says invalid_token, as v1's requireBearerAuth does for a
	// missing header too, with the scope and the resource metadata.
	resp, err := http.Post(s.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := `Bearer error="invalid_token", error_description="Missing Authorization header", scope="mcp:tools", resource_metadata="` +
		strings.TrimSuffix(s.URL, "/mcp") + `/.well-known/oauth-protected-resource/mcp"`
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || got != want {
		t.Fatalf("without a token: %s, WWW-Authenticate %q; want 401, %q", resp.Status, got, want)
	}

	t.Run("call-2025", func(t *testing.T) { sdkauth.CallSignsIn(t, mcprel, as, s, "2025") })
	t.Run("gateway", func(t *testing.T) { sdkauth.GatewaySignsIn(t, mcprel, as, s) })
}

// startAuthServer starts auth-server.mjs as a resource server of as.
func startAuthServer(t *testing.T, as *oidcprovider.Provider) sdkauth.Server {
	t.Helper()
	tokenLog := filepath.Join(t.TempDir(), "tokens.jsonl")
	log := mcptest.NewLines()
	cmd := exec.Command("node", "auth-server.mjs", "--issuer", as.Issuer, "--token-log", tokenLog)
	cmd.Stderr = log
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("auth-server.mjs stderr:\n%s", log)
		}
	})
	return sdkauth.Server{URL: mcptest.StartURL(t, cmd), TokenLog: tokenLog}
}
