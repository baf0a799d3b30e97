package oauth_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/auth/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

// RFC 7662: an active token is served for its subject, an inactive,
// revoked or unknown one is 401 invalid_token, an endpoint that refuses
// this server's credentials or cannot be reached is 503; an answer is
// reused a minute at most (so a revocation takes effect within it) and
// never past the token's expiry.
func TestIntrospection(t *testing.T) {
	c := newClock()
	as := oauthtest.New(t, oauthtest.Options{IntrospectionClientID: "rs", IntrospectionClientSecret: "rs&secret", Now: c.Now})
	newRS := func(secret string) *fixture {
		rs, err := oauth.New(t.Context(), oauth.Config{Issuers: []string{as.Issuer()}, Resource: resource, Now: c.Now,
			Introspection: &oauth.Introspection{URL: as.IntrospectionURL(), ClientID: "rs", ClientSecret: secret}})
		if err != nil {
			t.Fatal(err)
		}
		return &fixture{as: as, rs: rs, clock: c}
	}
	f := newRS("rs&secret")
	opaque := as.Opaque(t, f.claims())
	p, e := f.authenticate(t, "Bearer "+opaque)
	if e != nil || p.Tenant != "alice" {
		t.Fatalf("an active opaque token: %+v %+v", p, e)
	}
	asked := as.Hits(oauthtest.PathIntrospect)
	as.Revoke(opaque)
	if _, e := f.authenticate(t, "Bearer "+opaque); e != nil || as.Hits(oauthtest.PathIntrospect) != asked {
		t.Fatalf("within the minute the answer is reused: %+v, %d more asks", e, as.Hits(oauthtest.PathIntrospect)-asked)
	}
	c.Advance(time.Minute)
	if _, e := f.authenticate(t, "Bearer "+opaque); e == nil || e.Code != "invalid_token" || !strings.Contains(e.Description, "not active") {
		t.Fatalf("a revoked token a minute later: %+v", e)
	}
	if _, e := f.authenticate(t, "Bearer never-issued"); e == nil || !strings.Contains(e.Description, "not active") {
		t.Fatalf("a token never issued: %+v", e)
	}
	jwt := as.Token(t, f.claims())
	if _, e := f.authenticate(t, "Bearer "+jwt); e != nil {
		t.Fatalf("a JWT, introspected: %+v", e)
	}
	other := f.claims()
	other.Audience = []string{"https://other.example.com/mcp"}
	if _, e := f.authenticate(t, "Bearer "+as.Opaque(t, other)); e == nil || !strings.Contains(e.Description, "not issued for this resource") {
		t.Fatalf("an active token for another resource: %+v", e)
	}
	// A token expiring in 10 s is not reused past its expiry (and skew).
	brief := f.claims()
	brief.Expiry = c.Now().Add(10 * time.Second)
	briefTok := as.Opaque(t, brief)
	if _, e := f.authenticate(t, "Bearer "+briefTok); e != nil {
		t.Fatal(e)
	}
	c.Advance(10*time.Second + oauth.DefaultClockSkew)
	if _, e := f.authenticate(t, "Bearer "+briefTok); e == nil {
		t.Fatal("a token past its expiry was served from the cache")
	}

	wrong := newRS("not-the-secret")
	if _, e := wrong.authenticate(t, "Bearer "+as.Opaque(t, f.claims())); e == nil || e.Status != http.StatusServiceUnavailable || !strings.Contains(e.Description, "401") {
		t.Fatalf("with credentials the endpoint refuses: %+v", e)
	}
	as.SetDelay(oauthtest.PathIntrospect, time.Hour)
	slow, err := oauth.New(t.Context(), oauth.Config{Resource: resource, Now: c.Now, FetchTimeout: 100 * time.Millisecond,
		Introspection: &oauth.Introspection{URL: as.IntrospectionURL(), ClientID: "rs", ClientSecret: "rs&secret"}})
	if err != nil {
		t.Fatal(err)
	}
	sf := &fixture{as: as, rs: slow, clock: c}
	if _, e := sf.authenticate(t, "Bearer "+as.Opaque(t, f.claims())); e == nil || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("a slow introspection endpoint: %+v", e)
	}
}

// An introspection answer's members are matched by their exact names, as
// a token's claims are: {"active": false} with a claim the server copied
// from the token, named "Active", is an inactive token.
func TestIntrospectionActiveIsCaseSensitive(t *testing.T) {
	c := newClock()
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"active": false, "sub": "alice", "aud": %q, "scope": "mcp:tools", "exp": %d, "Active": true}`,
			resource, c.Now().Add(time.Hour).Unix())
	}))
	t.Cleanup(endpoint.Close)
	rs, err := oauth.New(t.Context(), oauth.Config{Resource: resource, Now: c.Now,
		Introspection: &oauth.Introspection{URL: endpoint.URL, ClientID: "rs", ClientSecret: "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{rs: rs, clock: c}
	if p, e := f.authenticate(t, "Bearer revoked"); e == nil || !strings.Contains(e.Description, "not active") {
		t.Fatalf("an inactive token: %+v %+v", p, e)
	}
}

// An introspection answer that names no issuer (RFC 7662 makes iss
// optional) is the configured endpoint's word: the token is served. A
// token said inactive is not asked about again for a few seconds.
func TestIntrospectionWithoutIssuerAndInactiveCached(t *testing.T) {
	c := newClock()
	as := oauthtest.New(t, oauthtest.Options{IntrospectionClientID: "rs", IntrospectionClientSecret: "s", Now: c.Now})
	rs, err := oauth.New(t.Context(), oauth.Config{Issuers: []string{as.Issuer()}, Resource: resource, Now: c.Now,
		Introspection: &oauth.Introspection{URL: as.IntrospectionURL(), ClientID: "rs", ClientSecret: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{as: as, rs: rs, clock: c}
	claims := oauthtest.Claims{Subject: "alice", Audience: []string{resource}, Expiry: c.Now().Add(time.Hour), Extra: map[string]any{"iss": nil}}
	if _, e := f.authenticate(t, "Bearer "+as.Opaque(t, claims)); e != nil {
		t.Fatalf("an answer without iss: %+v", e)
	}
	claims.Extra = map[string]any{"iss": "https://evil.example.com"}
	if _, e := f.authenticate(t, "Bearer "+as.Opaque(t, claims)); e == nil || !strings.Contains(e.Description, "issuer is not") {
		t.Fatalf("an answer naming another issuer: %+v", e)
	}
	asked := as.Hits(oauthtest.PathIntrospect)
	for range 3 {
		if _, e := f.authenticate(t, "Bearer never-issued"); e == nil || !strings.Contains(e.Description, "not active") {
			t.Fatalf("a token never issued: %+v", e)
		}
	}
	if n := as.Hits(oauthtest.PathIntrospect) - asked; n != 1 {
		t.Fatalf("a token said inactive was asked about %d times in a row, want once", n)
	}
	c.Advance(5 * time.Second)
	f.authenticate(t, "Bearer never-issued")
	if n := as.Hits(oauthtest.PathIntrospect) - asked; n != 2 {
		t.Fatalf("after 5 s the inactive answer was still reused (%d asks)", n)
	}
}

// However many tokens arrive at once, at most 16 introspections are
// under way: the others wait for a turn.
func TestIntrospectionsBounded(t *testing.T) {
	arrived := make(chan struct{}, 64)
	gate := make(chan struct{})
	var mu sync.Mutex
	inflight, most := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		mu.Unlock()
		arrived <- struct{}{}
		<-gate
		mu.Lock()
		inflight--
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"active":false}`))
	}))
	t.Cleanup(srv.Close)
	rs, err := oauth.New(t.Context(), oauth.Config{Resource: resource, FetchTimeout: time.Minute,
		Introspection: &oauth.Introspection{URL: srv.URL, ClientID: "rs", ClientSecret: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			r := httptest.NewRequest(http.MethodPost, resource, nil)
			r.Header.Set("Authorization", fmt.Sprintf("Bearer token-%d", i))
			rs.Authenticate(r)
		})
	}
	for range 16 {
		<-arrived
	}
	close(gate)
	wg.Wait()
	if most != 16 {
		t.Fatalf("%d introspections were under way at once, want 16", most)
	}
}
