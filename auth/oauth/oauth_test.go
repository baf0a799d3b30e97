package oauth_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/auth/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

const resource = "https://mcp.example.com/mcp"

// clock is a settable time for the resource server and the fake
// authorization server alike.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// syncBuffer is a log destination tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	as    *oauthtest.Server
	rs    *oauth.ResourceServer
	clock *clock
	log   *syncBuffer
}

func setup(t *testing.T, o oauthtest.Options, edit func(*oauth.Config)) *fixture {
	t.Helper()
	f := &fixture{clock: newClock(), log: &syncBuffer{}}
	o.Now = f.clock.Now
	f.as = oauthtest.New(t, o)
	cfg := oauth.Config{
		Issuers:  []string{f.as.Issuer()},
		Resource: resource,
		Scopes:   []string{"mcp:tools"},
		Now:      f.clock.Now,
		Logger:   slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&cfg)
	}
	rs, err := oauth.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.rs = rs
	return f
}

// claims are a good token's claims, to be spoilt by a case.
func (f *fixture) claims() oauthtest.Claims {
	return oauthtest.Claims{Subject: "alice", Audience: []string{resource}, Scope: "mcp:tools mcp:write", Expiry: f.clock.Now().Add(time.Hour)}
}

// authenticate runs the resource server on a request with header as its
// Authorization.
func (f *fixture) authenticate(t *testing.T, header string) (auth.Principal, *auth.Error) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, resource, nil)
	if header != "" {
		r.Header.Set("Authorization", header)
	}
	p, err := f.rs.Authenticate(r)
	if err == nil {
		return p, nil
	}
	var e *auth.Error
	if !errors.As(err, &e) {
		t.Fatalf("Authenticate: %v is not an *auth.Error", err)
	}
	return p, e
}

// TestTokenChecks: every way a token can be wrong gets its status, its
// RFC 6750 error code and a description that says what was wrong, with
// the resource metadata in the challenge; a good token's subject is the
// tenant and its scopes are the Principal's.
func TestTokenChecks(t *testing.T) {
	f := setup(t, oauthtest.Options{}, nil)
	bearer := func(tok string) string { return "Bearer " + tok }
	good := f.as.Token(t, f.claims())
	claims := func(edit func(*oauthtest.Claims)) string {
		c := f.claims()
		edit(&c)
		return bearer(f.as.Token(t, c))
	}
	for _, tc := range []struct {
		name   string
		header string
		status int
		code   string
		why    string
	}{
		{"no credentials", "", 401, "", ""},
		{"another scheme", "Basic YWxpY2U6c2VjcmV0", 401, "", ""},
		{"empty bearer", "Bearer ", 401, "invalid_token", "empty"},
		{"not a JWT", bearer("opaque-token"), 401, "invalid_token", "not a JWT"},
		{"four parts", bearer(good + ".x"), 401, "invalid_token", "not a JWT"},
		{"header not JSON", bearer("bm90LWpzb24." + strings.SplitN(good, ".", 2)[1]), 401, "invalid_token", "header"},
		{"truncated", bearer(good[:len(good)-10]), 401, "invalid_token", "signature does not verify"},
		{"oversized", bearer(good + strings.Repeat("A", oauth.DefaultMaxTokenBytes)), 401, "invalid_token", "exceeds 8192 bytes"},
		{"alg none", bearer(f.as.AlgNone(t, f.claims())), 401, "invalid_token", `algorithm "none" is not accepted`},
		{"HS256 keyed by the JWK", bearer(f.as.HS256WithPublicKey(t, f.claims(), oauthtest.FormJWK)), 401, "invalid_token", `algorithm "HS256" is not accepted`},
		{"HS256 keyed by the PEM", bearer(f.as.HS256WithPublicKey(t, f.claims(), oauthtest.FormPEM)), 401, "invalid_token", `"HS256" is not accepted`},
		{"HS256 keyed by the DER", bearer(f.as.HS256WithPublicKey(t, f.claims(), oauthtest.FormDER)), 401, "invalid_token", `"HS256" is not accepted`},
		{"untrusted key", bearer(f.as.UntrustedToken(t, f.claims())), 401, "invalid_token", "signature does not verify"},
		{"unknown kid", bearer(f.as.UntrustedTokenUnknownKid(t, f.claims())), 401, "invalid_token", "does not publish"},
		{"another issuer", claims(func(c *oauthtest.Claims) { c.Issuer = "https://evil.example.com" }), 401, "invalid_token", "issuer is not"},
		{"no issuer", claims(func(c *oauthtest.Claims) { c.Extra = map[string]any{"iss": nil} }), 401, "invalid_token", "issuer is not"},
		{"another audience", claims(func(c *oauthtest.Claims) { c.Audience = []string{"https://other.example.com/mcp"} }), 401, "invalid_token", "not issued for this resource"},
		{"audience with a trailing slash", claims(func(c *oauthtest.Claims) { c.Audience = []string{resource + "/"} }), 401, "invalid_token", "not issued for this resource"},
		{"no audience", claims(func(c *oauthtest.Claims) { c.Audience = nil }), 401, "invalid_token", "not issued for this resource"},
		{"expired", claims(func(c *oauthtest.Claims) { c.Expiry = f.clock.Now().Add(-oauth.DefaultClockSkew - time.Second) }), 401, "invalid_token", "expired"},
		{"no expiry", claims(func(c *oauthtest.Claims) { c.Extra = map[string]any{"exp": nil} }), 401, "invalid_token", "no expiry"},
		{"exp not a number", claims(func(c *oauthtest.Claims) { c.Extra = map[string]any{"exp": "tomorrow"} }), 401, "invalid_token", "cannot be read"},
		{"not valid yet", claims(func(c *oauthtest.Claims) { c.NotBefore = f.clock.Now().Add(oauth.DefaultClockSkew + time.Minute) }), 401, "invalid_token", "not valid yet"},
		{"no subject", claims(func(c *oauthtest.Claims) { c.Subject = "" }), 401, "invalid_token", `no "sub" claim`},
		{"no subject, a client's own", claims(func(c *oauthtest.Claims) { c.Subject, c.ClientID = "", "alice" }), 0, "", ""},
		{"subject not a string", claims(func(c *oauthtest.Claims) { c.Extra = map[string]any{"sub": 42} }), 401, "invalid_token", `no "sub" claim`},
		{"without the required scope", claims(func(c *oauthtest.Claims) { c.Scope = "mcp:read" }), 403, "insufficient_scope", `lacks the scope "mcp:tools"`},
		{"expired within the skew", claims(func(c *oauthtest.Claims) { c.Expiry = f.clock.Now().Add(-oauth.DefaultClockSkew + time.Second) }), 0, "", ""},
		{"scp instead of scope", claims(func(c *oauthtest.Claims) { c.Scope, c.Scp = "", []string{"mcp:tools"} }), 0, "", ""},
		{"good", bearer(good), 0, "", ""},
		{"good, bearer in lower case", "bearer " + good, 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, e := f.authenticate(t, tc.header)
			if tc.status == 0 {
				if e != nil {
					t.Fatalf("refused: %d %s %q", e.Status, e.Code, e.Description)
				}
				if p.Tenant != "alice" || len(p.Scopes) == 0 || p.Scopes[0] != "mcp:tools" {
					t.Fatalf("Principal %+v, want tenant alice with mcp:tools first", p)
				}
				return
			}
			if e == nil {
				t.Fatalf("accepted as %+v; want %d %s", p, tc.status, tc.code)
			}
			status := e.Status
			if status == 0 {
				status = 401
			}
			if status != tc.status || e.Code != tc.code || !strings.Contains(e.Description, tc.why) {
				t.Fatalf("got %d %q %q; want %d %q containing %q", status, e.Code, e.Description, tc.status, tc.code, tc.why)
			}
			ch := e.Challenge()
			if !strings.Contains(ch, `resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"`) || !strings.Contains(ch, `scope="mcp:tools`) {
				t.Errorf("challenge %s lacks the resource metadata or the scope", ch)
			}
			if tc.code == "" && strings.Contains(ch, "error=") {
				t.Errorf("challenge %s has an error code though no token was sent (RFC 6750 §3.1)", ch)
			}
			if tok := strings.TrimPrefix(tc.header, "Bearer "); len(tok) > 20 && strings.Contains(ch+e.Description, tok[len(tok)-20:]) {
				t.Errorf("the refusal quotes the token: %s", ch)
			}
		})
	}
	// Nothing of any token reached the log, at debug level included.
	logged := f.log.String()
	if !strings.Contains(logged, "access token refused") {
		t.Fatalf("the refusals were not logged at debug level:\n%s", logged)
	}
	for _, part := range strings.Split(good, ".") {
		if strings.Contains(logged, part[:16]) {
			t.Fatalf("the log holds part of a token:\n%s", logged)
		}
	}
}

// Claim names are case-sensitive (RFC 7519 §4): a claim an
// authorization server copies from a user's attributes, named "Scope",
// "AUD", "Exp" or "ISS", is not scope, aud, exp or iss, whatever
// encoding/json's case-folding field matching would make of it.
func TestClaimNamesAreCaseSensitive(t *testing.T) {
	f := setup(t, oauthtest.Options{}, nil)
	payload := func(edit map[string]any) map[string]any {
		m := map[string]any{"iss": f.as.Issuer(), "sub": "alice", "aud": resource, "scope": "mcp:tools",
			"exp": f.clock.Now().Add(time.Hour).Unix()}
		for k, v := range edit {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	for _, tc := range []struct {
		name string
		edit map[string]any
		why  string
	}{
		{"Scope beside scp", map[string]any{"scope": nil, "scp": []string{"mcp:read"}, "Scope": "mcp:tools mcp:admin"}, `lacks the scope "mcp:tools"`},
		{"AUD without aud", map[string]any{"aud": nil, "AUD": resource}, "not issued for this resource"},
		{"Exp without exp", map[string]any{"exp": nil, "Exp": f.clock.Now().Add(time.Hour).Unix()}, "no expiry"},
		{"ISS without iss", map[string]any{"iss": nil, "ISS": f.as.Issuer()}, "issuer is not"},
		{"NBF without nbf", map[string]any{"NBF": "soon"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, e := f.authenticate(t, "Bearer "+f.as.Sign(t, nil, payload(tc.edit)))
			if tc.why == "" {
				if e != nil {
					t.Fatalf("refused for a claim that is not nbf: %d %q", e.Status, e.Description)
				}
				return
			}
			if e == nil {
				t.Fatalf("accepted as %+v", p)
			}
			if !strings.Contains(e.Description, tc.why) {
				t.Fatalf("refused with %q, want %q", e.Description, tc.why)
			}
		})
	}
}
