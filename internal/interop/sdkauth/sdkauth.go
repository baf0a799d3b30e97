// Package sdkauth checks that mcprel signs in to MCP servers built with
// the official SDKs and guarded by the SDKs' own resource-server
// middleware, their tokens issued by a real authorization server
// (oidc-provider, internal/interop/oidcprovider): "mcprel call", which
// signs in as a person does, through a browser, and "mcprel gateway",
// which signs in to its upstream as itself, by client credentials.
//
// The servers under test (internal/interop/goservers/gosdk-server with
// -oauth-issuer, internal/interop/ts/auth-server.mjs) append every token
// their verifier is shown to a file, one JSON line each with what the
// verifier made of it: the checks read it to tell what reached the
// server, and that no such token ever shows in mcprel's output.
//
// A test binary that uses it calls BrowserMain first thing in its
// TestMain: mcprel opens the test binary as its $BROWSER.
package sdkauth

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/interop/oidcprovider"
	"github.com/mcprel/mcprel/internal/mcptest"
)

// browserEnv, set in mcprel's environment, makes the test binary that
// mcprel opens as $BROWSER play the browser (BrowserMain).
const browserEnv = "MCPREL_SDKAUTH_BROWSER"

// BrowserMain returns at once, unless the test binary was started as
// mcprel's $BROWSER: then it plays the browser for the authorization URL,
// its last argument, and exits. It follows the authorization server's
// redirects (oidc-provider's automatic login and consent) up to the one
// to mcprel's loopback redirect URI, and GETs that, as a browser does.
func BrowserMain() {
	if os.Getenv(browserEnv) == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	back, err := oidcprovider.Approve(ctx, os.Args[len(os.Args)-1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "browser:", err)
		os.Exit(1)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, back.String(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "browser:", err)
		os.Exit(1)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	os.Exit(0)
}

// Server is an SDK server under test, guarded by its SDK's bearer-token
// middleware.
type Server struct {
	// URL is its MCP endpoint, the resource its tokens are for.
	URL string
	// TokenLog is the file it appends each token shown to its verifier to.
	TokenLog string
}

// Seen is one line of a server's token log.
type Seen struct {
	Token    string `json:"token"`
	Accepted bool   `json:"accepted"` // by the verifier; the middleware may still want a scope
	Error    string `json:"error"`
	Iss      string `json:"iss"`
	Aud      any    `json:"aud"` // a string, or an array of them
	Sub      string `json:"sub"`
	Scope    string `json:"scope"`
	ClientID string `json:"client_id"`
}

// audience is the token's aud as a list.
func (s Seen) audience() []string {
	switch a := s.Aud.(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, v := range a {
			out = append(out, fmt.Sprint(v))
		}
		return out
	}
	return nil
}

// Seen reads the server's token log. The server writes a line before it
// answers the request the token came with, so a request that has been
// answered is in it.
func (s Server) Seen(t testing.TB) []Seen {
	t.Helper()
	b, err := os.ReadFile(s.TokenLog)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []Seen
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l Seen
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v: %q", s.TokenLog, err, sc.Bytes())
		}
		out = append(out, l)
	}
	return out
}

// Tokens are the tokens the server was shown so far.
func (s Server) Tokens(t testing.TB) []string {
	var out []string
	for _, l := range s.Seen(t) {
		out = append(out, l.Token)
	}
	return out
}

// checkAccepted fails the test unless the server accepted a token from
// position from on in its log, each accepted one issued by as for exactly
// its URL with scope mcp:tools, and, when sub is not empty, for sub.
func (s Server) checkAccepted(t testing.TB, as *oidcprovider.Provider, from int, sub string) {
	t.Helper()
	seen := s.Seen(t)
	accepted := 0
	for _, l := range seen[min(from, len(seen)):] {
		if !l.Accepted {
			t.Logf("the server refused a token (aud %v): %s", l.Aud, l.Error)
			continue
		}
		accepted++
		if aud := l.audience(); len(aud) != 1 || aud[0] != s.URL || l.Iss != as.Issuer || !strings.Contains(" "+l.Scope+" ", " mcp:tools ") || sub != "" && l.Sub != sub {
			t.Errorf("the server accepted a token with iss %s, aud %v, sub %s, scope %q; want iss %s, aud [%s], sub %s, scope mcp:tools",
				l.Iss, l.Aud, l.Sub, l.Scope, as.Issuer, s.URL, sub)
		}
	}
	if accepted == 0 {
		t.Errorf("the server accepted no token (%d shown)", len(seen)-from)
	}
}

// Scopes are the scopes of the last token the server accepted.
func (s Server) Scopes(t testing.TB) []string {
	t.Helper()
	seen := s.Seen(t)
	for i := len(seen) - 1; i >= 0; i-- {
		if seen[i].Accepted {
			return strings.Fields(seen[i].Scope)
		}
	}
	return nil
}

// run runs mcprel with args and env added to the test's, and returns
// stdout, stderr and the exit status. An mcprel built with -race exits
// without the race runtime's one-second pause.
func run(t testing.TB, mcprel string, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mcprel, args...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// CallSignsIn checks "mcprel call --url" against s in era ("2025" or
// "2026"): the first run meets the SDK middleware's 401, signs in through
// the browser with a dynamically registered native client, authorization
// code and PKCE, and calls echo; the server accepted a token as issued
// for exactly its URL to the provider's account; the second run reuses
// the kept token without signing in again. No token the server saw, nor
// any in the store, shows in mcprel's output.
func CallSignsIn(t *testing.T, mcprel string, as *oidcprovider.Provider, s Server, era string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oauth")
	authorizations := func() int { return strings.Count(as.Log(), "GET /auth?") }
	var outputs []string
	for i, signsIn := range []bool{true, false} {
		before, from := authorizations(), len(s.Seen(t))
		text := fmt.Sprintf("%s-run-%d", era, i+1)
		out, errs, code := Call(t, mcprel, dir, "--url", s.URL, "--era", era, "echo", "text="+text)
		outputs = append(outputs, out, errs)
		if code != 0 || !strings.Contains(out, strconv.Quote(text)) {
			t.Fatalf("run %d: exit %d\n%s\n%s", i+1, code, out, errs)
		}
		if asked := strings.Contains(errs, "asks you to sign in"); asked != signsIn {
			t.Fatalf("run %d signed in: %v, want %v\n%s", i+1, asked, signsIn, errs)
		}
		if n, want := authorizations()-before, map[bool]int{true: 1, false: 0}[signsIn]; n != want {
			t.Fatalf("run %d: %d authorization requests, want %d", i+1, n, want)
		}
		s.checkAccepted(t, as, from, as.Account)
	}
	secrets := s.Tokens(t)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		var kept map[string]any
		json.Unmarshal(b, &kept)
		for _, k := range []string{"access_token", "refresh_token"} {
			if v, ok := findString(kept, k); ok {
				secrets = append(secrets, v)
			}
		}
	}
	NoSecrets(t, "mcprel's output", strings.Join(outputs, "\n"), secrets...)
}

// Call runs "mcprel call" with args, its sign-ins kept in oauthDir and
// the test binary as its browser (BrowserMain), and returns stdout,
// stderr and the exit status.
func Call(t testing.TB, mcprel, oauthDir string, args ...string) (string, string, int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"MCPREL_OAUTH_DIR=" + oauthDir, "BROWSER=" + strconv.Quote(exe), browserEnv + "=1"}
	return run(t, mcprel, env, append([]string{"call"}, args...)...)
}

// findString finds the first string member named key at any depth.
func findString(v any, key string) (string, bool) {
	switch v := v.(type) {
	case map[string]any:
		if s, ok := v[key].(string); ok && s != "" {
			return s, true
		}
		for _, m := range v {
			if s, ok := findString(m, key); ok {
				return s, true
			}
		}
	case []any:
		for _, m := range v {
			if s, ok := findString(m, key); ok {
				return s, true
			}
		}
	}
	return "", false
}

// GatewaySignsIn checks "mcprel gateway --http" in front of s, signing
// in to it as the provider's confidential client by client credentials
// (--upstream-oauth-client-id, --upstream-oauth-client-secret-file): a
// downstream "mcprel call" through the gateway succeeds, the server
// accepted a token issued to that client for exactly its URL, and no
// token nor the secret shows in the gateway's log or the call's output.
func GatewaySignsIn(t *testing.T, mcprel string, as *oidcprovider.Provider, s Server) {
	t.Helper()
	from := len(s.Seen(t))
	g := StartGateway(t, mcprel, as, s)
	g.Call(t, "through-the-gateway-1")
	g.Call(t, "through-the-gateway-2")
	g.Check(t, from)
}

// Gateway is an "mcprel gateway --http" in front of an SDK server, with
// the provider's confidential client for it.
type Gateway struct {
	URL     string
	mcprel  string
	dir     string
	as      *oidcprovider.Provider
	s       Server
	log     *mcptest.Lines
	outputs []string
}

// StartGateway starts the gateway in front of s for the rest of the test.
func StartGateway(t *testing.T, mcprel string, as *oidcprovider.Provider, s Server) *Gateway {
	t.Helper()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(as.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &Gateway{mcprel: mcprel, dir: dir, as: as, s: s}
	g.URL, g.log = startGateway(t, mcprel, "gateway", "--http", "127.0.0.1:0", "--db", filepath.Join(dir, "gateway.db"),
		"--upstream", "sdk="+s.URL, "--upstream-oauth-client-id", "sdk="+as.ClientID, "--upstream-oauth-client-secret-file", "sdk="+secretFile)
	return g
}

// Call calls echo with text through the gateway, failing the test
// unless it succeeds.
func (g *Gateway) Call(t *testing.T, text string) {
	t.Helper()
	out, errs, code := run(t, g.mcprel, []string{"MCPREL_OAUTH_DIR=" + filepath.Join(g.dir, "oauth")}, "call", "--url", g.URL, "echo", "text="+text)
	g.outputs = append(g.outputs, out, errs)
	if code != 0 || !strings.Contains(out, strconv.Quote(text)) || strings.Contains(errs, "asks you to sign in") {
		t.Fatalf("a call through the gateway: exit %d\n%s\n%s\ngateway log:\n%s", code, out, errs, g.log)
	}
}

// Check fails the test unless the server accepted, from position from
// of its token log on, tokens issued to the gateway's client for exactly
// its URL, and only those; and if a token or the secret shows in the
// gateway's log or a call's output.
func (g *Gateway) Check(t *testing.T, from int) {
	t.Helper()
	g.s.checkAccepted(t, g.as, from, g.as.ClientID)
	for _, l := range g.s.Seen(t)[from:] {
		if l.Accepted && l.ClientID != g.as.ClientID {
			t.Errorf("the server accepted a token of client %q, want the gateway's %q", l.ClientID, g.as.ClientID)
		}
	}
	g.NoSecrets(t)
}

// NoSecrets fails the test if a token the server saw, or the secret,
// shows in the gateway's log or a call's output.
func (g *Gateway) NoSecrets(t *testing.T) {
	t.Helper()
	secrets := append(g.s.Tokens(t), g.as.ClientSecret)
	NoSecrets(t, "the downstream calls' output", strings.Join(g.outputs, "\n"), secrets...)
	NoSecrets(t, "the gateway's log", g.log.String(), secrets...)
}

// startGateway starts mcprel with args (a gateway on --http 127.0.0.1:0)
// for the rest of the test and returns its URL, the first line of its
// stderr, and the rest of its stderr.
func startGateway(t *testing.T, mcprel string, args ...string) (string, *mcptest.Lines) {
	t.Helper()
	return StartHTTP(t, exec.Command(mcprel, args...))
}

// StartHTTP starts cmd, an mcprel serving HTTP (serve or gateway on
// --http 127.0.0.1:0), in a temporary directory for the rest of the test,
// and returns its endpoint URL, the first line of its stderr, and the
// rest of its stderr, logged if the test fails.
func StartHTTP(t *testing.T, cmd *exec.Cmd) (string, *mcptest.Lines) {
	t.Helper()
	cmd.Dir = t.TempDir()
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rest := mcptest.NewLines()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("gateway stderr:\n%s", rest)
		}
	})
	br := bufio.NewReader(stderr)
	url, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(url, "http://") {
		t.Fatalf("mcprel gateway printed %q, %v", url, err)
	}
	go br.WriteTo(rest)
	return strings.TrimSpace(url), rest
}

// NoSecrets fails the test if text holds any of secrets.
func NoSecrets(t testing.TB, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("%s holds a token or secret (%d characters)", what, len(s))
		}
	}
}
