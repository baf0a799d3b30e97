package oauthserve_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/internal/interop/oidcprovider"
	"github.com/mcprel/mcprel/oauthstore"
	"github.com/mcprel/mcprel/store"
)

// browserEnv makes the test binary, run as $BROWSER by "mcprel gateway
// login", play the browser (TestMain): oidc-provider's automatic login
// and consent, then a GET of the redirect to login's loopback listener.
const browserEnv = "MCPREL_TEST_PLAY_BROWSER"

// playBrowser follows authURL's redirects at the authorization server
// (oidcprovider.Approve) and GETs the one that leaves it, as a browser
// does; what went wrong goes to stderr, which login passes on.
func playBrowser(authURL string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	back, err := oidcprovider.Approve(ctx, authURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "browser:", err)
		return 1
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, back.String(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "browser:", err)
		return 1
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "browser: the redirect was answered", resp.Status)
		return 1
	}
	return 0
}

// recorder is a reverse proxy in front of `mcprel serve --http`, its
// public URL: it keeps every bearer token the gateway sends upstream, for
// the test to look for where none may be.
type recorder struct {
	public string // the upstream's URL through the recorder: its resource

	mu     sync.Mutex
	tokens []string
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.tokens...)
}

// protectedUpstream starts `mcprel serve --http --oauth-issuer as` (and
// args) behind a recorder, its public URL the recorder's: tokens must be
// issued for that URL (aud), which the gateway's client asks for as the
// resource its metadata names.
func protectedUpstream(t *testing.T, as *oidcprovider.Provider, args ...string) *recorder {
	t.Helper()
	r := &recorder{}
	var target atomicURL
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); ok {
			r.mu.Lock()
			r.tokens = append(r.tokens, tok)
			r.mu.Unlock()
		}
		// Read whole first: proxied as it arrives, the request's body
		// may still be on its way when the answer starts, and the server
		// then closes it under the proxy's transport.
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		p := httputil.NewSingleHostReverseProxy(target.get())
		p.FlushInterval = -1
		p.ServeHTTP(w, req)
	}))
	t.Cleanup(proxy.Close)
	r.public = proxy.URL + "/mcp"
	up := listen(t, nil, append([]string{"serve", "--http", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "upstream.db"),
		"--oauth-issuer", as.Issuer, "--public-url", r.public}, args...)...)
	u, err := url.Parse(up)
	if err != nil {
		t.Fatal(err)
	}
	target.set(&url.URL{Scheme: u.Scheme, Host: u.Host})
	return r
}

type atomicURL struct {
	mu sync.Mutex
	u  *url.URL
}

func (a *atomicURL) get() *url.URL {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.u
}

func (a *atomicURL) set(u *url.URL) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.u = u
}

// claims are a JWT's claims, unverified: the test only looks.
func claims(t *testing.T, jwt string) map[string]any {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("the upstream was sent a token that is no JWT (%d parts)", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c map[string]any
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		t.Fatalf("a JWT's claims: %v", err)
	}
	return c
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

// The gateway in front of `mcprel serve --http --oauth-issuer
// <oidc-provider>`, signing in as oidc-provider's confidential client by
// client credentials: the upstream takes only tokens issued for its own
// URL, which the gateway's client asks for with resource (RFC 8707), and
// the call succeeds with them. No token nor the secret reaches the
// gateway's log or the answer.
func TestGatewayUpstreamClientCredentials(t *testing.T) {
	as := oidcprovider.Start(t, oidcprovider.Options{})
	up := protectedUpstream(t, as)
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte(as.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, gwLog := listenLogged(t, nil, "gateway", "--http", "127.0.0.1:0", "--db", filepath.Join(dir, "gateway.db"),
		"--upstream", "demo="+up.public, "--upstream-oauth-client-id", "demo="+as.ClientID,
		"--upstream-oauth-client-secret-file", "demo="+secret)

	a := call(t, gw, "", "echo", `{"text":"hi"}`)
	if got := served(t, "echo through the gateway", a); !strings.Contains(got, "hi") {
		t.Errorf("echo answered %q", got)
	}
	tokens := up.seen()
	if len(tokens) == 0 {
		t.Fatal("no token reached the upstream")
	}
	for _, tok := range tokens {
		c := claims(t, tok)
		if c["aud"] != up.public || c["client_id"] != as.ClientID || c["iss"] != as.Issuer {
			t.Errorf("the upstream was sent a token for aud %v, client %v, from %v; want %s, %s, %s",
				c["aud"], c["client_id"], c["iss"], up.public, as.ClientID, as.Issuer)
		}
	}
	secrets := append(tokens, as.ClientSecret)
	noSecrets(t, "the answer", a.body, secrets...)
	noSecrets(t, "the gateway's log", gwLog(), secrets...)
}

// gatewayKey is the key of the gateway's stored authorizations.
const gatewayKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

// storedState reads, as the gateway would, the authorization kept in its
// database db for the upstream at resource.
func storedState(t *testing.T, db, resource string) *oauth.State {
	t.Helper()
	ctx := t.Context()
	d, err := store.Open(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	key, err := oauthstore.ParseKey(gatewayKey)
	if err != nil {
		t.Fatal(err)
	}
	s, err := oauthstore.New(ctx, d, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(ctx, resource)
	if err != nil || st == nil {
		t.Fatalf("no authorization stored for %s: %v", resource, err)
	}
	return st
}

// active asks oidc-provider's introspection endpoint whether token (a
// refresh token: always opaque) is active.
func active(t *testing.T, as *oidcprovider.Provider, token string) bool {
	t.Helper()
	got, err := as.Introspect(t.Context(), token)
	if err != nil {
		t.Fatal(err)
	}
	return got["active"] == true
}

// revokeAs revokes token at oidc-provider's revocation endpoint (RFC
// 7009) as the public client clientID, whose token it is.
func revokeAs(t *testing.T, as *oidcprovider.Provider, clientID, token string) {
	t.Helper()
	m, err := as.Metadata(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"token": {token}, "token_type_hint": {"refresh_token"}, "client_id": {clientID}}
	resp, err := http.PostForm(m.RevocationEndpoint, form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revocation: %s %s", resp.Status, body)
	}
}

// expireAfter waits until the access token that expires at exp has:
// the stored state says when, the wait is bounded.
func expireAfter(t *testing.T, exp time.Time) {
	t.Helper()
	if exp.IsZero() || time.Until(exp) > 30*time.Second {
		t.Fatalf("the stored access token expires at %v: not soon", exp)
	}
	time.Sleep(time.Until(exp) + 10*time.Millisecond)
}

// The gateway in front of `mcprel serve --http --oauth-issuer
// <oidc-provider>` with an operator's authorization: "mcprel gateway
// login demo" (its $BROWSER this test binary, approving at
// oidc-provider) registers the gateway (RFC 7591, a public client),
// signs in with PKCE asking for offline_access, and keeps the tokens
// sealed in the gateway's database; the gateway then serves calls with
// them. Access tokens live two seconds: each expired one is refreshed,
// and oidc-provider rotates the refresh token (it does for public
// clients): the one rotated out is inactive there, the new one active,
// and the next refresh spends that one (had an old one been spent
// again, oidc-provider would have revoked the whole grant). Once the
// refresh token is revoked at oidc-provider and the access token has
// expired, a call is a clean upstream_unauthorized naming
// "mcprel gateway login demo". No token reaches the gateway's log,
// login's output or an answer.
func TestGatewayUpstreamStoredLogin(t *testing.T) {
	as := oidcprovider.Start(t, oidcprovider.Options{TTL: 2 * time.Second})
	up := protectedUpstream(t, as, "--oauth-scopes", "mcp:tools")
	dir := t.TempDir()
	db := filepath.Join(dir, "gateway.db")
	key := []string{"MCPREL_GATEWAY_KEY=" + gatewayKey}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	login := exec.CommandContext(t.Context(), mcprel(t), "gateway", "login", "demo", "--upstream", "demo="+up.public, "--db", db)
	login.Env = append(append(append(os.Environ(), runEnv...), key...), "BROWSER="+strconv.Quote(exe), browserEnv+"=approve")
	var out, errOut strings.Builder
	login.Stdout, login.Stderr = &out, &errOut
	if err := login.Run(); err != nil || !strings.Contains(out.String(), "and a refresh token") {
		t.Fatalf("gateway login: %v\nstdout: %s\nstderr: %s\nauthorization server:\n%s", err, out.String(), errOut.String(), as.Log())
	}
	st := storedState(t, db, up.public)
	reg, ok := st.Registrations[as.Issuer]
	if !ok || reg.AuthMethod != "none" || st.RefreshToken == "" || st.Issuer != as.Issuer {
		t.Fatalf("login stored issuer %s, registration %+v (a refresh token: %v); want a public client of %s", st.Issuer, reg, st.RefreshToken != "", as.Issuer)
	}
	secrets := []string{gatewayKey}
	keep := func(st *oauth.State) { secrets = append(secrets, st.AccessToken, st.RefreshToken) }
	keep(st)

	gw, gwLog := listenLogged(t, key, "gateway", "--http", "127.0.0.1:0", "--db", db,
		"--upstream", "demo="+up.public, "--upstream-oauth-login", "demo")
	var answers []string
	echo := func(what string) {
		t.Helper()
		a := call(t, gw, "", "echo", `{"text":"hi"}`)
		answers = append(answers, a.body)
		served(t, what, a)
	}
	echo("echo with the stored authorization")
	prev := storedState(t, db, up.public)
	keep(prev)
	for i := range 2 {
		expireAfter(t, prev.Expiry)
		echo(fmt.Sprintf("echo once access token %d expired", i+1))
		next := storedState(t, db, up.public)
		keep(next)
		switch {
		case next.AccessToken == prev.AccessToken || !next.Expiry.After(prev.Expiry):
			t.Fatalf("the expired access token was not renewed")
		case next.RefreshToken == prev.RefreshToken:
			t.Fatalf("oidc-provider did not rotate the refresh token")
		case active(t, as, prev.RefreshToken):
			t.Fatalf("the refresh token rotated out is still active at oidc-provider")
		case !active(t, as, next.RefreshToken):
			t.Fatalf("the rotated refresh token is not active at oidc-provider: an old one was spent again")
		}
		prev = next
	}
	for _, tok := range up.seen() {
		if c := claims(t, tok); c["aud"] != up.public || c["client_id"] != reg.ClientID || c["sub"] != as.Account {
			t.Fatalf("the upstream was sent a token for aud %v, client %v, subject %v", c["aud"], c["client_id"], c["sub"])
		}
	}

	// The operator's authorization is revoked at oidc-provider; the
	// access token in hand expires.
	revokeAs(t, as, reg.ClientID, prev.RefreshToken)
	if active(t, as, prev.RefreshToken) {
		t.Fatal("the refresh token is still active after its revocation")
	}
	expireAfter(t, storedState(t, db, up.public).Expiry)
	a := call(t, gw, "", "echo", `{"text":"hi"}`)
	answers = append(answers, a.body)
	plain := strings.ReplaceAll(a.body, `\"`, `"`)
	for _, want := range []string{`"isError":true`, `"code":"upstream_unauthorized"`, `"retryable":false`, `"upstream":"demo"`, `mcprel gateway login demo`} {
		if !strings.Contains(plain, want) {
			t.Fatalf("a call once the authorization was revoked: want %s in %v", want, a)
		}
	}

	secrets = append(secrets, up.seen()...)
	noSecrets(t, "an answer", strings.Join(answers, "\n"), secrets...)
	noSecrets(t, "the gateway's log", gwLog(), secrets...)
	noSecrets(t, "login's output", out.String()+errOut.String(), secrets...)
}
