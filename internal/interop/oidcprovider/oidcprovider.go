// Package oidcprovider starts a real OAuth 2.1 / OpenID authorization
// server for tests: panva's oidc-provider, run by Node from
// internal/interop/oauth/provider.mjs, which approves every interaction
// as a fixed account. Tests get access tokens from it as a client would:
// client credentials, or a headless authorization code flow with PKCE.
//
// It needs Node 20.19+ and `npm ci` in internal/interop/oauth (make
// interop-deps); without them Start skips the test, or fails it when
// MCPREL_REQUIRE_INTEROP=1.
package oidcprovider

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure the provider. The zero value is an RS256-signing,
// JWT-issuing server with ten-minute access tokens, logging in as "alice".
type Options struct {
	// TTL is the lifetime of access tokens, in whole seconds (at least one).
	// Zero means ten minutes.
	TTL time.Duration
	// Alg signs JWT access tokens: "RS256" (the default) or "ES256". The
	// JWKS always carries both keys.
	Alg string
	// Format is "jwt" (the default, RFC 9068) or "opaque" (the only form
	// oidc-provider introspects).
	Format string
	// Account is the subject an authorization code flow logs in as;
	// default "alice".
	Account string
	// ClientID and ClientSecret name the confidential client_credentials
	// client; default mcprel-cc / mcprel-cc-secret.
	ClientID, ClientSecret string
	// NativeClientID names the public client for authorization code with
	// PKCE; default mcprel-native.
	NativeClientID string
	// Port to listen on (127.0.0.1); zero picks a free one.
	Port int
	// Backdate, a whole number of seconds, registers a second
	// client_credentials client, Provider.BackdatedClientID, whose JWT
	// access tokens have iat and exp that much earlier than issued: with
	// Backdate past the TTL, a token already expired when issued
	// (oidc-provider refuses a TTL of zero or less). Zero means no such
	// client. Opaque tokens are not backdated.
	Backdate time.Duration
}

// Provider is a running authorization server.
type Provider struct {
	// Issuer is the server's issuer identifier, e.g. http://127.0.0.1:4321.
	Issuer string
	// ClientID and ClientSecret: the confidential client for
	// client_credentials (client_secret_basic).
	ClientID, ClientSecret string
	// NativeClientID: the public native client for authorization code with
	// PKCE S256, redirect URIs http://127.0.0.1/callback and
	// http://localhost/callback on any port.
	NativeClientID string
	// RSClientID and RSClientSecret: a confidential client a resource
	// server can introspect tokens with.
	RSClientID, RSClientSecret string
	// Account is the subject of authorization-code tokens.
	Account string
	// BackdatedClientID, with ClientSecret, is the client whose JWT
	// access tokens are backdated by Options.Backdate; empty without.
	BackdatedClientID string

	log *lines

	metaOnce sync.Once
	meta     Metadata
	metaErr  error
}

// Metadata is the part of the provider's RFC 8414 metadata tests use.
type Metadata struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	JWKSURI               string `json:"jwks_uri"`
	RegistrationEndpoint  string `json:"registration_endpoint"`
	IntrospectionEndpoint string `json:"introspection_endpoint"`
	RevocationEndpoint    string `json:"revocation_endpoint"`
}

// Token is a token endpoint's successful answer.
type Token struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
	Scope        string `json:"scope"`
	RefreshToken string `json:"refresh_token"`
}

// Dir is internal/interop/oauth, where provider.mjs and its node_modules
// are, found from this source file so that any package's test can start
// the provider.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	return filepath.Join(filepath.Dir(file), "..", "oauth")
}

// RequireNode skips the test, or fails it under MCPREL_REQUIRE_INTEROP=1,
// unless Node and internal/interop/oauth/node_modules are there.
func RequireNode(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		skipOrFail(t, "node is not on PATH: install Node 20.19+ and run `npm ci` in internal/interop/oauth")
	}
	if _, err := os.Stat(filepath.Join(Dir(), "node_modules", "oidc-provider")); err != nil {
		skipOrFail(t, "internal/interop/oauth/node_modules is missing: run `npm ci` in internal/interop/oauth (make interop-deps)")
	}
}

func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("MCPREL_REQUIRE_INTEROP") == "1" {
		t.Fatal(why + " (MCPREL_REQUIRE_INTEROP=1)")
	}
	t.Skip(why)
}

// startLimit bounds the wait for the provider's issuer line; a healthy
// start takes well under a second.
const startLimit = 30 * time.Second

// Start runs the provider for the rest of the test and returns once it
// accepts requests (it prints its issuer when listening). It is stopped
// at the test's cleanup; its log is in the test's output if the test
// failed.
func Start(t testing.TB, o Options) *Provider {
	t.Helper()
	RequireNode(t)
	p := &Provider{
		ClientID: or(o.ClientID, "mcprel-cc"), ClientSecret: or(o.ClientSecret, "mcprel-cc-secret"),
		NativeClientID: or(o.NativeClientID, "mcprel-native"),
		RSClientID:     "mcprel-rs", RSClientSecret: "mcprel-rs-secret",
		Account: or(o.Account, "alice"),
		log:     &lines{},
	}
	ttl := 600
	if o.TTL != 0 {
		ttl = int(o.TTL / time.Second)
		if ttl < 1 || o.TTL%time.Second != 0 {
			t.Fatalf("oidcprovider: TTL %v is not a whole number of seconds", o.TTL)
		}
	}
	backdate := int(o.Backdate / time.Second)
	if backdate < 0 || o.Backdate%time.Second != 0 {
		t.Fatalf("oidcprovider: Backdate %v is not a whole number of seconds", o.Backdate)
	}
	if backdate > 0 {
		p.BackdatedClientID = p.ClientID + "-backdated"
	}
	args := []string{"provider.mjs",
		"--port", strconv.Itoa(o.Port),
		"--ttl", strconv.Itoa(ttl),
		"--alg", or(o.Alg, "RS256"),
		"--format", or(o.Format, "jwt"),
		"--account", p.Account,
		"--client-id", p.ClientID, "--client-secret", p.ClientSecret,
		"--native-client-id", p.NativeClientID,
		"--rs-client-id", p.RSClientID, "--rs-client-secret", p.RSClientSecret,
		"--backdate", strconv.Itoa(backdate),
	}
	cmd := exec.Command("node", args...)
	cmd.Dir = Dir()
	cmd.Stderr = p.log
	cmd.WaitDelay = 5 * time.Second
	// The provider exits when this pipe closes: at cleanup, or when the
	// test binary dies without one.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("oidcprovider: node %s: %v", strings.Join(args, " "), err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(startLimit):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("authorization server log (%s):\n%s", p.Issuer, p.log)
		}
	})

	first := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		first <- strings.TrimSpace(line)
		io.Copy(io.Discard, br)
		cmd.Wait()
		close(exited)
	}()
	select {
	case p.Issuer = <-first:
	case <-time.After(startLimit):
		t.Fatalf("oidcprovider: no issuer line within %v; log:\n%s", startLimit, p.log)
	}
	if !strings.HasPrefix(p.Issuer, "http://127.0.0.1:") {
		<-exited
		t.Fatalf("oidcprovider: provider.mjs printed %q, not an issuer; log:\n%s", p.Issuer, p.log)
	}
	return p
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Log is what the provider wrote on stderr so far: warnings, then one
// line per HTTP exchange ("POST /token 200").
func (p *Provider) Log() string { return p.log.String() }

// Metadata is the provider's RFC 8414 authorization server metadata,
// fetched once from /.well-known/oauth-authorization-server.
func (p *Provider) Metadata(ctx context.Context) (Metadata, error) {
	p.metaOnce.Do(func() {
		var m Metadata
		p.metaErr = getJSON(ctx, p.Issuer+"/.well-known/oauth-authorization-server", &m)
		if p.metaErr == nil && m.Issuer != p.Issuer {
			p.metaErr = fmt.Errorf("metadata issuer %q is not %q", m.Issuer, p.Issuer)
		}
		p.meta = m
	})
	return p.meta, p.metaErr
}

func (p *Provider) metadata(t testing.TB) Metadata {
	t.Helper()
	m, err := p.Metadata(t.Context())
	if err != nil {
		t.Fatalf("oidcprovider: %v", err)
	}
	return m
}

// ClientCredentialsToken gets an access token for resource with the
// confidential client, failing the test if the provider refuses.
func (p *Provider) ClientCredentialsToken(t testing.TB, resource string, scopes ...string) string {
	t.Helper()
	tok, err := p.ClientCredentials(t.Context(), resource, scopes...)
	if err != nil {
		t.Fatalf("oidcprovider: client credentials for %s: %v", resource, err)
	}
	return tok.AccessToken
}

// ClientCredentials asks the token endpoint for a client_credentials
// token for resource (RFC 8707) and scopes, authenticating with
// client_secret_basic.
func (p *Provider) ClientCredentials(ctx context.Context, resource string, scopes ...string) (Token, error) {
	m, err := p.Metadata(ctx)
	if err != nil {
		return Token{}, err
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	if resource != "" {
		form.Set("resource", resource)
	}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	return p.token(ctx, m.TokenEndpoint, form, p.ClientID)
}

// BackdatedToken gets an access token for resource as ClientCredentials
// does, but with the backdated client (Options.Backdate): a JWT whose iat
// and exp are Backdate earlier than issued.
func (p *Provider) BackdatedToken(t testing.TB, resource string, scopes ...string) string {
	t.Helper()
	if p.BackdatedClientID == "" {
		t.Fatal("oidcprovider: BackdatedToken needs Options.Backdate")
	}
	form := url.Values{"grant_type": {"client_credentials"}, "resource": {resource}}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	tok, err := p.token(t.Context(), p.metadata(t).TokenEndpoint, form, p.BackdatedClientID)
	if err != nil {
		t.Fatalf("oidcprovider: backdated client credentials for %s: %v", resource, err)
	}
	return tok.AccessToken
}

// AuthorizationCodeToken gets an access token for resource with the
// public native client by an authorization code flow with PKCE S256,
// failing the test if any step does.
func (p *Provider) AuthorizationCodeToken(t testing.TB, resource string, scopes ...string) string {
	t.Helper()
	tok, err := p.AuthorizationCode(t.Context(), resource, scopes...)
	if err != nil {
		t.Fatalf("oidcprovider: authorization code for %s: %v", resource, err)
	}
	return tok.AccessToken
}

// redirectURI is the native client's loopback redirect URI. Nothing
// listens there: Approve stops at the redirect that points at it.
const redirectURI = "http://127.0.0.1:49999/callback"

// AuthorizationCode runs the authorization code flow headlessly: the
// authorization request (with resource, scope, state and an S256
// challenge), the provider's automatic login and consent, the code from
// the redirect to the loopback redirect URI (whose state and RFC 9207 iss
// it checks), and the token request with resource and code_verifier.
func (p *Provider) AuthorizationCode(ctx context.Context, resource string, scopes ...string) (Token, error) {
	m, err := p.Metadata(ctx)
	if err != nil {
		return Token{}, err
	}
	verifier, state := randomString(32), randomString(16)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {p.NativeClientID},
		"redirect_uri":          {redirectURI},
		"state":                 {state},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}
	if resource != "" {
		q.Set("resource", resource)
	}
	if len(scopes) > 0 {
		q.Set("scope", strings.Join(scopes, " "))
	}
	back, err := Approve(ctx, m.AuthorizationEndpoint+"?"+q.Encode())
	if err != nil {
		return Token{}, err
	}
	if got := back.Scheme + "://" + back.Host + back.Path; got != redirectURI {
		return Token{}, fmt.Errorf("authorization ended at %s, not the redirect URI", back)
	}
	r := back.Query()
	if e := r.Get("error"); e != "" {
		return Token{}, fmt.Errorf("authorization refused: %s: %s", e, r.Get("error_description"))
	}
	if r.Get("state") != state {
		return Token{}, fmt.Errorf("redirect state %q, want %q", r.Get("state"), state)
	}
	if r.Get("iss") != p.Issuer {
		return Token{}, fmt.Errorf("redirect iss %q, want %q", r.Get("iss"), p.Issuer)
	}
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"client_id":     {p.NativeClientID},
		"code":          {r.Get("code")},
		"redirect_uri":  {redirectURI},
		"code_verifier": {verifier},
	}
	if resource != "" {
		form.Set("resource", resource)
	}
	return p.token(ctx, m.TokenEndpoint, form, "")
}

// Approve plays the browser for an authorization URL: it requests it and
// follows the authorization server's redirects (keeping its cookies, as
// a browser would), without following the one that leaves the server,
// and returns that redirect's target: the client's redirect URI with the
// code (or error), state and iss. Nothing needs to listen there. It works
// with any client's authorization URL, so an SDK's own flow can use it.
func Approve(ctx context.Context, authURL string) (*url.URL, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	c := &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	at, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	origin := at.Scheme + "://" + at.Host
	// Login and consent are two rounds of interaction → resume; a few
	// more hops than that mean a loop.
	for range 10 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, at.String(), nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode/100 != 3 || loc == "" {
			return nil, fmt.Errorf("GET %s: %s, not a redirect: %s", at, resp.Status, body)
		}
		next, err := at.Parse(loc)
		if err != nil {
			return nil, fmt.Errorf("GET %s: Location %q: %v", at, loc, err)
		}
		if next.Scheme+"://"+next.Host != origin {
			return next, nil
		}
		at = next
	}
	return nil, fmt.Errorf("authorization at %s did not leave the server within 10 redirects", origin)
}

// token posts form to the token endpoint, authenticating as the
// confidential client clientID (with ClientSecret, in basic auth) unless
// clientID is empty.
func (p *Provider) token(ctx context.Context, endpoint string, form url.Values, clientID string) (Token, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return Token{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if clientID != "" {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(p.ClientSecret))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Token{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Token{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Token{}, fmt.Errorf("token endpoint: %s: %s", resp.Status, body)
	}
	var tok Token
	if err := json.Unmarshal(body, &tok); err != nil {
		return Token{}, fmt.Errorf("token endpoint: %v: %s", err, body)
	}
	if tok.AccessToken == "" {
		return Token{}, fmt.Errorf("token endpoint: no access_token in %s", body)
	}
	return tok, nil
}

// Introspect asks the introspection endpoint (RFC 7662) about token as
// the resource server's client and returns the answer's members. Only
// opaque tokens (Options.Format "opaque") are introspected; oidc-provider
// refuses JWTs.
func (p *Provider) Introspect(ctx context.Context, token string) (map[string]any, error) {
	m, err := p.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.IntrospectionEndpoint, strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(p.RSClientID), url.QueryEscape(p.RSClientSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("introspection endpoint: %s: %s", resp.Status, body)
	}
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("introspection endpoint: %v: %s", err, body)
	}
	return out, nil
}

// Revoke revokes a token the confidential client (ClientID) got, at the
// revocation endpoint (RFC 7009). The endpoint answers 200 whether or not
// it revoked anything (RFC 7009 §2.2), so a caller that must know asks
// Introspect afterwards. oidc-provider revokes only opaque tokens; a JWT
// is refused.
func (p *Provider) Revoke(ctx context.Context, token string) error {
	m, err := p.Metadata(ctx)
	if err != nil {
		return err
	}
	if m.RevocationEndpoint == "" {
		return fmt.Errorf("the metadata names no revocation_endpoint")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.RevocationEndpoint,
		strings.NewReader(url.Values{"token": {token}, "token_type_hint": {"access_token"}}.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(p.ClientID), url.QueryEscape(p.ClientSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revocation endpoint: %s: %s", resp.Status, body)
	}
	return nil
}

func getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %v", u, err)
	}
	return nil
}

// randomString is n random bytes, base64url: a PKCE verifier of 32 bytes
// is 43 characters, the least RFC 7636 allows.
func randomString(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// lines is a goroutine-safe log buffer.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
