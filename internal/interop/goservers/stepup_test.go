package goservers

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/interop/oidcprovider"
	"github.com/mcprel/mcprel/internal/interop/sdkauth"
	"github.com/mcprel/mcprel/internal/mcptest"
)

// When the Go SDK's server comes to want a scope the kept tokens lack,
// its RequireBearerToken answers 403 with a challenge naming the scopes
// but no error code (not error="insufficient_scope"): mcprel call signs
// in again for the scopes held and the challenged ones together, and the
// gateway gets a new client credentials token for them; both calls
// succeed with a token holding the new scope.
func TestMcprelStepsUpWithGoSDKResourceServer(t *testing.T) {
	as := oidcprovider.Start(t, oidcprovider.Options{})
	mcprel, gosdk := buildMcprel(t), build(t, "gosdk-server")
	dir := t.TempDir()
	scopeFile, tokenLog := filepath.Join(dir, "scopes"), filepath.Join(dir, "tokens.jsonl")
	want := func(scopes string) {
		t.Helper()
		if err := os.WriteFile(scopeFile, []byte(scopes), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want("mcp:tools")
	cmd := exec.Command(gosdk, "-http", "127.0.0.1:0", "-oauth-issuer", as.Issuer, "-oauth-scope-file", scopeFile, "-token-log", tokenLog)
	s := sdkauth.Server{URL: mcptest.StartURL(t, cmd), TokenLog: tokenLog}
	oauthDir := filepath.Join(dir, "oauth")
	call := func(text string) string {
		t.Helper()
		out, errs, code := sdkauth.Call(t, mcprel, oauthDir, "--url", s.URL, "--era", "2025", "echo", "text="+text)
		if code != 0 || !strings.Contains(out, `"`+text+`"`) {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		sdkauth.NoSecrets(t, "mcprel's output", out+errs, s.Tokens(t)...)
		return errs
	}
	call("before")
	gw := sdkauth.StartGateway(t, mcprel, as, s)
	gw.Call(t, "gateway-before")

	want("mcp:tools mcp:write")
	if errs := call("after"); !strings.Contains(errs, "asks you to sign in") {
		t.Fatalf("the call did not sign in again:\n%s", errs)
	}
	if got := s.Scopes(t); !slices.Contains(got, "mcp:tools") || !slices.Contains(got, "mcp:write") {
		t.Fatalf("after the step-up the server accepted a token with scopes %v", got)
	}
	gw.Call(t, "gateway-after")
	if got, last := s.Scopes(t), s.Seen(t); !slices.Contains(got, "mcp:tools") || !slices.Contains(got, "mcp:write") ||
		last[len(last)-1].ClientID != as.ClientID {
		t.Fatalf("after the gateway's step-up the server accepted a token with scopes %v, of client %s", got, last[len(last)-1].ClientID)
	}
	gw.NoSecrets(t)
}
