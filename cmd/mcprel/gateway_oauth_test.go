package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/oauthtest"
)

// upstreamGuard is a reverse proxy in front of an OAuth-protected
// upstream: it records the Authorization of every request, and answers
// 401 invalid_token, as the upstream does for an expired or revoked
// token, to the tokens a test rejects.
type upstreamGuard struct {
	mu       sync.Mutex
	target   *url.URL
	public   string // the upstream's URL through the guard
	seen     []string
	rejected map[string]bool
}

func (g *upstreamGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	g.mu.Lock()
	g.seen = append(g.seen, tok)
	rejected, target := g.rejected[tok], g.target
	g.mu.Unlock()
	if rejected {
		base := strings.TrimSuffix(g.public, "/mcp")
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`)
		http.Error(w, `{"error":"invalid_token"}`, http.StatusUnauthorized)
		return
	}
	// The request's body is read whole first: proxied as it arrives,
	// the server discards what is left of it once the upstream's answer
	// starts, and the proxy's transport, still sending it, fails and
	// closes the upstream connection under the answer.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	p := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	p.FlushInterval = -1 // streams pass as they come
	p.Transport = guardTransport
	p.ServeHTTP(w, r)
}

// guardTransport carries the guard's requests upstream, each on a
// connection of its own: one the gateway gave up on (a stream it
// closed) is never reused for another request.
var guardTransport = &http.Transport{DisableKeepAlives: true}

// reject makes the upstream refuse every token seen so far.
func (g *upstreamGuard) rejectSeen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tok := range g.seen {
		if tok != "" {
			g.rejected[tok] = true
		}
	}
}

func (g *upstreamGuard) tokens() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, tok := range g.seen {
		if tok != "" {
			out = append(out, tok)
		}
	}
	return out
}

// protectedUpstream starts "mcprel serve --http --oauth-issuer" behind a
// guard, its public URL the guard's.
func protectedUpstream(t *testing.T, as *oauthtest.Server) *upstreamGuard {
	g := newUpstreamGuard(t)
	upURL, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer(), "--public-url", g.public)
	g.setTarget(upURL)
	return g
}

// newUpstreamGuard starts a guard with no upstream yet: setTarget names
// it, once the upstream can be told the guard's public URL.
func newUpstreamGuard(t *testing.T) *upstreamGuard {
	g := &upstreamGuard{rejected: map[string]bool{}}
	proxy := httptest.NewServer(g)
	t.Cleanup(proxy.Close)
	g.public = proxy.URL + "/mcp"
	return g
}

// setTarget sends the guard's requests to the upstream at endpoint.
func (g *upstreamGuard) setTarget(endpoint string) {
	target, _ := url.Parse(endpoint)
	g.mu.Lock()
	g.target = target
	g.mu.Unlock()
}

// logBuffer keeps a process's whole stderr.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startLogged is startEndpoint keeping the whole of stderr.
func startLogged(t *testing.T, env []string, args ...string) (string, *logBuffer) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); <-done })
	r := bufio.NewReader(stderr)
	first, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("no endpoint on stderr: %v", err)
	}
	endpoint := strings.TrimSpace(first)
	if !strings.HasPrefix(endpoint, "http://127.0.0.1:") {
		t.Fatalf("first stderr line %q is not the endpoint URL", endpoint)
	}
	log := &logBuffer{}
	go func() {
		defer close(done)
		r.WriteTo(log)
	}()
	return endpoint, log
}

// noSecrets fails the test if text holds any of secrets.
func noSecrets(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("%s holds a secret (%.12s…)", what, s)
		}
	}
}

const keyedPolicy = `operations:
  - name: reserve_inventory
    semantics: {kind: mutation}
    idempotency: {key: required, key_argument: idempotencyKey, external_effect_guard: upstream_key}
`

// The gateway in front of an upstream that takes only tokens its
// authorization server issued, signing in as itself by client
// credentials: calls succeed with the gateway's token (never the
// downstream's); a token the upstream refuses (expired there) is renewed
// transparently; when no token can be had (the secret changed) a call is
// told upstream_unauthorized, not retryable, naming what the operator
// must do, and its idempotency key is freed; no token or secret reaches
// the gateway's log or a downstream answer.
func TestGatewayUpstreamClientCredentials(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	as.RegisterClient(oauthtest.Client{ID: "gateway-1", Secret: "first-secret-value"})
	guard := protectedUpstream(t, as)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(secretFile, []byte("first-secret-value\n"), 0o600)
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte(keyedPolicy), 0o600)
	gw, log := startLogged(t, nil, "gateway", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer(),
		"--upstream", "demo="+guard.public, "--upstream-oauth-client-id", "demo=gateway-1",
		"--upstream-oauth-client-secret-file", "demo="+secretFile, "--policy", policy, "--db", filepath.Join(dir, "gw.db"))
	downstream := as.Token(t, oauthtest.Claims{Subject: "alice", Audience: []string{gw}})
	var answers []string
	call := func(id int, tool, args string) string {
		status, _, body := oauthPost(t, gw, downstream, modernCall(id, tool, args), nil)
		if status != 200 {
			t.Fatalf("%s: HTTP %d %s", tool, status, body)
		}
		answers = append(answers, body)
		return body
	}

	if body := call(1, "echo", `{"text":"hi"}`); !strings.Contains(body, `"text":"hi"`) || strings.Contains(body, `"isError":true`) {
		t.Fatalf("echo: %s\n%s", body, log)
	}
	issued := map[string]bool{}
	for _, tok := range as.Issued() {
		issued[tok] = true
	}
	for _, tok := range guard.tokens() {
		if tok == downstream || !issued[tok] {
			t.Fatalf("the upstream saw a token the authorization server did not issue the gateway (the downstream's: %v)", tok == downstream)
		}
	}
	if len(guard.tokens()) == 0 {
		t.Fatal("no token reached the upstream")
	}

	// The upstream refuses the token (it expired there): renewed.
	before := len(as.TokenRequests())
	guard.rejectSeen()
	if body := call(2, "echo", `{"text":"again"}`); !strings.Contains(body, `"text":"again"`) || strings.Contains(body, `"isError":true`) {
		t.Fatalf("echo after the upstream refused the token: %s", body)
	}
	reqs := as.TokenRequests()
	if len(reqs) != before+1 || reqs[len(reqs)-1].Form.Get("grant_type") != "client_credentials" || reqs[len(reqs)-1].Form.Get("resource") != guard.public {
		t.Fatalf("token requests after the refusal: %d new, last %v", len(reqs)-before, reqs[len(reqs)-1].Form)
	}

	// The secret no longer works and the token is refused: the keyed
	// call is told upstream_unauthorized, and its key is freed.
	as.RegisterClient(oauthtest.Client{ID: "gateway-1", Secret: "second-secret-value"})
	guard.rejectSeen()
	reserve := `{"sku":"s","quantity":1,"idempotencyKey":"k-1"}`
	body := call(3, "reserve_inventory", reserve)
	for _, want := range []string{`"isError":true`, `upstream_unauthorized`, `\"retryable\":false`, `--upstream-oauth-client-secret-file`, `\"upstream\":\"demo\"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("reserve_inventory without credentials: want %s in %s", want, body)
		}
	}
	as.RegisterClient(oauthtest.Client{ID: "gateway-1", Secret: "first-secret-value"})
	// The key was freed: the retry reaches the upstream (which has no
	// such SKU), neither replayed nor refused.
	if body := call(4, "reserve_inventory", reserve); !strings.Contains(body, `unknown_sku`) || !strings.Contains(body, `"dev.mcprel/replayed":false`) {
		t.Fatalf("the same key once the credentials work again: %s", body)
	}

	secrets := append(as.Issued(), downstream, "first-secret-value", "second-secret-value")
	noSecrets(t, "a downstream answer", strings.Join(answers, "\n"), secrets...)
	noSecrets(t, "the gateway's log", log.String(), secrets...)
	if !strings.Contains(log.String(), "refused the gateway's credentials") {
		t.Errorf("the gateway's log does not say the upstream refused its credentials:\n%s", log.String())
	}
}

// Tokens that expire within the minute are renewed before each request:
// the calls never meet an expired one.
func TestGatewayUpstreamShortLivedTokens(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{TokenTTL: 2 * time.Second})
	as.RegisterClient(oauthtest.Client{ID: "gateway-1", Secret: "first-secret-value"})
	upURL, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer())
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte("first-secret-value"), 0o600)
	gw, log := startLogged(t, nil, "gateway", "--http", "127.0.0.1:0", "--upstream", "demo="+upURL,
		"--upstream-oauth-client-id", "demo=gateway-1", "--upstream-oauth-client-secret-file", "demo="+secretFile, "--db", filepath.Join(t.TempDir(), "gw.db"))
	before := len(as.TokenRequests())
	for i := range 3 {
		if status, _, body := oauthPost(t, gw, "", modernCall(i+1, "echo", `{"text":"hi"}`), nil); status != 200 || strings.Contains(body, `"isError":true`) {
			t.Fatalf("call %d: %d %s\n%s", i, status, body, log)
		}
	}
	if n := len(as.TokenRequests()) - before; n < 3 {
		t.Fatalf("%d token requests over 3 calls: short-lived tokens are not renewed", n)
	}
}

// An operator's authorization, granted once with "mcprel gateway login"
// (the browser played by the test) and kept sealed in the gateway's
// database: the gateway calls with it, refreshes it (the refresh token
// rotating) when the upstream refuses the access token, and once the
// authorization server revoked it, tells callers upstream_unauthorized,
// naming the login to run. No token reaches its log or an answer.
func TestGatewayUpstreamStoredLogin(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	guard := protectedUpstream(t, as)
	dir := t.TempDir()
	db := filepath.Join(dir, "gw.db")
	key := []string{gatewayKeyEnv + "=MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}

	out := gatewayLogin(t, as, key, "demo", guard.public, db)

	gw, log := startLogged(t, key, "gateway", "--http", "127.0.0.1:0", "--upstream", "demo="+guard.public,
		"--upstream-oauth-login", "demo", "--db", db)
	var answers []string
	call := func(id int) string {
		status, _, body := oauthPost(t, gw, "", modernCall(id, "echo", `{"text":"hi"}`), nil)
		if status != 200 {
			t.Fatalf("echo: HTTP %d %s", status, body)
		}
		answers = append(answers, body)
		return body
	}
	if body := call(1); strings.Contains(body, `"isError":true`) {
		t.Fatalf("echo with the stored authorization: %s", body)
	}
	guard.rejectSeen() // the access token expired at the upstream
	if body := call(2); strings.Contains(body, `"isError":true`) {
		t.Fatalf("echo after the upstream refused the access token: %s\n%s", body, log)
	}
	refreshes := 0
	for _, r := range as.TokenRequests() {
		if r.Form.Get("grant_type") == "refresh_token" {
			refreshes++
		}
	}
	if refreshes != 1 {
		t.Fatalf("%d refreshes; want 1", refreshes)
	}
	as.RevokeRefreshTokens()
	guard.rejectSeen()
	body := call(3)
	for _, want := range []string{`upstream_unauthorized`, `\"retryable\":false`, `mcprel gateway login demo`} {
		if !strings.Contains(body, want) {
			t.Fatalf("after the revocation: want %s in %s", want, body)
		}
	}
	secrets := append(as.Issued(), "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
	noSecrets(t, "a downstream answer", strings.Join(answers, "\n"), secrets...)
	noSecrets(t, "the gateway's log", log.String(), secrets...)
	noSecrets(t, "login's output", out, secrets...)
}

// gatewayLogin runs "mcprel gateway login name" for the upstream at
// public with the gateway's database db and env (its key), playing the
// browser: the authorization server approves at once, and its redirect is
// followed to login's listener. It returns login's output.
func gatewayLogin(t *testing.T, as *oauthtest.Server, env []string, name, public, db string) string {
	t.Helper()
	login := exec.Command(binary, "gateway", "login", name, "--upstream", name+"="+public, "--db", db, "--no-browser")
	login.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	login.Stdout = &out
	stderr, _ := login.StderrPipe()
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	authURL := ""
	for authURL == "" && lines.Scan() {
		if u, ok := strings.CutPrefix(strings.TrimSpace(lines.Text()), as.URL+oauthtest.PathAuthorize); ok {
			authURL = as.URL + oauthtest.PathAuthorize + u
		}
	}
	if authURL == "" {
		login.Process.Kill()
		login.Wait()
		t.Fatal("login printed no authorization URL")
	}
	go func() {
		for lines.Scan() {
		}
	}()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL) // the browser: approved at once
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, err = http.Get(resp.Header.Get("Location")); err != nil { // the redirect, to login's listener
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := login.Wait(); err != nil || !strings.Contains(out.String(), "authorized") {
		t.Fatalf("login: %v %s", err, out.String())
	}
	return out.String()
}

// A stored authorization is never kept, nor used, without the key.
func TestGatewayUpstreamLoginNeedsAKey(t *testing.T) {
	for _, args := range [][]string{
		{"gateway", "--upstream", "demo=http://127.0.0.1:1/mcp", "--upstream-oauth-login", "demo"},
		{"gateway", "login", "demo", "--upstream", "demo=http://127.0.0.1:1/mcp"},
		{"gateway", "--upstream", "demo=cat", "--upstream-oauth-client-id", "demo=x"},
		{"gateway", "--upstream", "demo=http://127.0.0.1:1/mcp", "--upstream-oauth-client-id", "demo=x"},
	} {
		cmd := exec.Command(binary, args...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), gatewayKeyEnv+"=")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage {
			t.Errorf("mcprel %s: exit %d, %s; want %d", strings.Join(args, " "), code, out, exitUsage)
		}
	}
}

// An upstream that refuses the gateway's very first connection — no
// authorization stored yet, or a client secret that never worked — is
// never listed; its callers are told upstream_unauthorized all the same,
// naming what the operator must run, and the gateway's start log says
// which upstream and what to do. With one upstream that is any call; with
// several, a call whose name carries its prefix (or, for the upstream
// that keeps its names, none); another upstream's tools are served, and
// an unknown name of a listed upstream's stays unknown. Once the operator
// has authorized the gateway, its next try connects: no restart needed.
func TestGatewayUpstreamRefusedAtStart(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	as.RegisterClient(oauthtest.Client{ID: "gateway-1", Secret: "right-secret-value"})
	guard := protectedUpstream(t, as)
	dir := t.TempDir()
	key := []string{gatewayKeyEnv + "=MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}
	var answers []string
	post := func(t *testing.T, gw string, id int, tool string) string {
		t.Helper()
		// An unlisted tool's call is answered with a JSON-RPC error (an
		// internal error, HTTP 500, when not retryable), a listed one's
		// with a result.
		status, _, body := oauthPost(t, gw, "", modernCall(id, tool, `{"text":"hi"}`), nil)
		if status != 200 && status != 500 && status != 400 {
			t.Fatalf("%s: HTTP %d %s", tool, status, body)
		}
		answers = append(answers, body)
		return body
	}
	unauthorized := func(t *testing.T, what, body string, wants ...string) {
		t.Helper()
		plain := strings.ReplaceAll(body, `\"`, `"`) // a JSON-RPC error's data, or a tool result's text
		for _, want := range append([]string{`"code":"upstream_unauthorized"`, `"retryable":false`, `"upstream":"demo"`}, wants...) {
			if !strings.Contains(plain, want) {
				t.Fatalf("%s: want %s in %s", what, want, body)
			}
		}
	}
	// The gateway serves once started: after its first answer, its
	// start log is on its way through the pipe.
	startLog := func(t *testing.T, log *logBuffer, action string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			text := log.String()
			for l := range strings.Lines(text) {
				if strings.Contains(l, "refused the gateway's credentials at start") {
					if !strings.Contains(l, "upstream=demo") || !strings.Contains(l, action) {
						t.Fatalf("the start log does not say which upstream refused the gateway's credentials and what to do (%s): %s", action, l)
					}
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the start log does not say an upstream refused the gateway's credentials:\n%s", text)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	t.Run("no stored login", func(t *testing.T) {
		db := filepath.Join(dir, "login.db")
		started := time.Now()
		gw, log := startLogged(t, key, "gateway", "--http", "127.0.0.1:0", "--upstream", "demo="+guard.public,
			"--upstream-oauth-login", "demo", "--db", db)
		for i, tool := range []string{"echo", "no_such_tool"} { // one upstream: any call may be its
			unauthorized(t, tool, post(t, gw, i+1, tool), `mcprel gateway login demo`)
		}
		startLog(t, log, `mcprel gateway login demo`)
		// The operator authorizes the gateway: its next try connects.
		gatewayLogin(t, as, key, "demo", guard.public, db)
		deadline := time.Now().Add(time.Minute)
		for i := 3; ; i++ {
			body := post(t, gw, i, "echo")
			if strings.Contains(body, `"text":"hi"`) && !strings.Contains(body, `"isError"`) {
				break
			}
			unauthorized(t, "echo after the login, before the next try", body)
			if time.Now().After(deadline) {
				t.Fatalf("the gateway did not connect within a minute of the login:\n%s", log)
			}
			time.Sleep(100 * time.Millisecond) // polling the gateway's next try, which backs off
		}
		noSecrets(t, "the gateway's log", log.String(), append(as.Issued(), "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")...)
		// Every refused call is told so; the log says it once per 30 s,
		// not once per call.
		if n := strings.Count(log.String(), "gateway: the upstream refused the gateway's credentials\""); n > 1+int(time.Since(started)/(30*time.Second)) {
			t.Errorf("the refusal was logged %d times in %v:\n%s", n, time.Since(started), log)
		}
	})

	t.Run("wrong secret, several upstreams", func(t *testing.T) {
		secretFile := filepath.Join(dir, "secret")
		os.WriteFile(secretFile, []byte("wrong-secret-value\n"), 0o600)
		gw, log := startLogged(t, nil, "gateway", "--http", "127.0.0.1:0",
			"--upstream", "demo="+guard.public, "--upstream-oauth-client-id", "demo=gateway-1",
			"--upstream-oauth-client-secret-file", "demo="+secretFile, "--upstream-keep-names", "demo",
			"--upstream", "plain="+binary+" serve --stdio --db "+filepath.Join(dir, "plain.db"),
			"--db", filepath.Join(dir, "secret.db"))
		for i, tool := range []string{"echo", "demo_echo"} { // demo keeps its names; prefixed ones are its too
			unauthorized(t, tool, post(t, gw, i+1, tool), `--upstream-oauth-client-secret-file`, `"oauthError":"invalid_client"`)
		}
		startLog(t, log, `--upstream-oauth-client-secret-file`)
		if body := post(t, gw, 3, "plain_echo"); !strings.Contains(body, `"text":"hi"`) || strings.Contains(body, `"isError"`) {
			t.Fatalf("plain_echo beside an unauthorized upstream: %s", body)
		}
		if body := post(t, gw, 4, "plain_no_such_tool"); !strings.Contains(body, `unknown tool`) || strings.Contains(body, `upstream_unauthorized`) {
			t.Fatalf("an unknown tool of a listed upstream: %s", body)
		}
		noSecrets(t, "the gateway's log", log.String(), "wrong-secret-value", "right-secret-value")
	})
	noSecrets(t, "a downstream answer", strings.Join(answers, "\n"), append(as.Issued(), "wrong-secret-value", "right-secret-value")...)
}
