package oauth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

// clock is a fake clock shared by the client, the authorization server
// and the resource, so expiry is decided by the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_800_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Where the resource serves its Protected Resource Metadata.
const (
	prmHeader = "header" // at a custom URL named only in the challenge
	prmPath   = "path"   // path-inserted well-known URI, not in the challenge
	prmRoot   = "root"   // root well-known URI only
)

// resource is a tiny protected MCP endpoint at /mcp. It takes a JWT
// without checking its signature (the fake authorization server's
// tokens are trusted here; auth/oauth tests the verification), and
// checks iss, aud, exp and scope.
type resource struct {
	t   *testing.T
	srv *httptest.Server
	clk *clock

	mu       sync.Mutex
	as       *oauthtest.Server
	mode     string
	prmRes   string   // the metadata's resource; "" is the endpoint's URL
	scopes   []string // scopes_supported
	chal     string   // the 401 challenge's scope
	need     []string // scopes a request needs; 403 insufficient_scope otherwise
	needChal string   // the 403's scope; "" is need joined
	noError  bool     // the 403's challenge has no error code (go-sdk v1.8.0's)
	reject   map[string]bool
	seen     []string // tokens accepted, in order
	onToken  func(token string)
	hits     map[string]int
}

func newResource(t *testing.T, as *oauthtest.Server, clk *clock, mode string) *resource {
	r := &resource{t: t, as: as, clk: clk, mode: mode, reject: map[string]bool{}, hits: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *resource) URL() string { return r.srv.URL + "/mcp" }

func (r *resource) prmPath() string {
	switch r.mode {
	case prmHeader:
		return "/custom/metadata/location.json"
	case prmPath:
		return "/.well-known/oauth-protected-resource/mcp"
	}
	return "/.well-known/oauth-protected-resource"
}

func (r *resource) Hits(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[path]
}

func (r *resource) set(f func(r *resource)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

func (r *resource) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.hits[req.URL.Path]++
	as, prmRes := r.as, r.prmRes
	if prmRes == "" {
		prmRes = r.URL()
	}
	r.mu.Unlock()
	switch req.URL.Path {
	case r.prmPath():
		md := map[string]any{"resource": prmRes, "authorization_servers": []string{as.Issuer()}}
		if len(r.scopes) > 0 {
			md["scopes_supported"] = r.scopes
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(md)
	case "/mcp":
		r.serveMCP(w, req, as, prmRes)
	default:
		http.NotFound(w, req)
	}
}

func (r *resource) challenge(extra string) string {
	c := "Bearer realm=\"mcp\""
	if r.mode == prmHeader {
		c += fmt.Sprintf(", resource_metadata=%q", r.srv.URL+r.prmPath())
	}
	return c + extra
}

func (r *resource) serveMCP(w http.ResponseWriter, req *http.Request, as *oauthtest.Server, aud string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	claims := decode(tok)
	exp, _ := claims["exp"].(float64)
	if !ok || claims == nil || r.reject[tok] || claims["iss"] != as.Issuer() || claims["aud"] != aud ||
		!r.clk.Now().Before(time.Unix(int64(exp), 0)) {
		extra := ""
		if r.chal != "" {
			extra = fmt.Sprintf(", scope=%q", r.chal)
		}
		if ok {
			extra += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", r.challenge(extra))
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	granted, _ := claims["scope"].(string)
	for _, s := range r.need {
		if !slices.Contains(strings.Fields(granted), s) {
			scope := r.needChal
			if scope == "" {
				scope = strings.Join(r.need, " ")
			}
			code := `, error="insufficient_scope"`
			if r.noError {
				code = ""
			}
			w.Header().Set("WWW-Authenticate", r.challenge(fmt.Sprintf(`%s, scope=%q`, code, scope)))
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
	}
	if !slices.Contains(r.seen, tok) && r.onToken != nil {
		r.onToken(tok)
	}
	r.seen = append(r.seen, tok)
	w.Write([]byte("ok"))
}

// decode is a JWT's claims, unverified; nil if it is not one.
func decode(tok string) map[string]any {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

const redirectURL = "http://127.0.0.1:1/callback"

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// browser is an Options.Authorize that does what a browser would with
// an authorization server that approves at once: follow the URL and
// return where it redirects.
func browser(ctx context.Context, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		return "", fmt.Errorf("authorize answered %d", resp.StatusCode)
	}
	return resp.Header.Get("Location"), nil
}

func options(clk *clock) oauth.Options {
	return oauth.Options{RedirectURL: redirectURL, Authorize: browser, Now: clk.Now}
}

func newClient(t *testing.T, r *resource, o oauth.Options) *oauth.Client {
	t.Helper()
	c, err := oauth.New(r.URL(), o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// call is what package client does around one request: Authorize, send,
// and on a 401 or 403 ask Refused whether to send it once more.
func call(t *testing.T, c *oauth.Client, r *resource) (int, error) {
	t.Helper()
	send := func() (*http.Request, *http.Response, error) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, r.URL(), nil)
		if err := c.Authorize(req); err != nil {
			return nil, nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return req, resp, nil
	}
	req, resp, err := send()
	if err != nil {
		return 0, err
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		retry, err := c.Refused(t.Context(), req, resp)
		if !retry {
			return resp.StatusCode, err
		}
		if err != nil {
			t.Fatalf("Refused: retry with an error: %v", err)
		}
		if _, resp, err = send(); err != nil {
			return 0, err
		}
	}
	return resp.StatusCode, nil
}

// mustCall is call that must end in a 200.
func mustCall(t *testing.T, c *oauth.Client, r *resource) {
	t.Helper()
	if status, err := call(t, c, r); status != http.StatusOK || err != nil {
		t.Fatalf("call: %d %v", status, err)
	}
}

// refused asserts that err is an *oauth.Error for step, and that its
// message holds no secret the authorization servers saw or issued.
func refused(t *testing.T, err error, step string, ass ...*oauthtest.Server) *oauth.Error {
	t.Helper()
	var e *oauth.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want an *oauth.Error for step %q", err, err, step)
	}
	if e.Step != step {
		t.Fatalf("error step %q, want %q: %v", e.Step, step, err)
	}
	if !strings.Contains(err.Error(), step) {
		t.Errorf("error %q does not name its step", err)
	}
	noSecrets(t, err.Error(), ass...)
	return e
}

// noSecrets fails the test if msg holds any token, code, verifier,
// state or secret the authorization servers issued or were sent.
func noSecrets(t *testing.T, msg string, ass ...*oauthtest.Server) {
	t.Helper()
	var secrets []string
	for _, as := range ass {
		secrets = append(secrets, as.Issued()...)
		for _, tr := range as.TokenRequests() {
			for _, k := range []string{"code", "code_verifier", "refresh_token", "client_secret"} {
				secrets = append(secrets, tr.Form.Get(k))
			}
		}
		for _, q := range as.AuthorizationRequests() {
			secrets = append(secrets, q.Get("code_challenge"), q.Get("state"))
		}
	}
	secrets = append(secrets, "s3cret-pre")
	for _, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			t.Errorf("error %q holds a secret %q", msg, s)
		}
	}
}
