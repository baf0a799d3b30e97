package oauth_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/mcprel/mcprel/auth/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

// A key rotated in mid-run: a token naming the new kid makes the
// resource server fetch the key set again, once, and is accepted; a
// token naming a kid nobody publishes cannot make it fetch again before
// RefetchInterval has passed.
func TestKeyRotation(t *testing.T) {
	f := setup(t, oauthtest.Options{}, nil)
	first := f.as.Token(t, f.claims())
	if _, e := f.authenticate(t, "Bearer "+first); e != nil {
		t.Fatalf("before the rotation: %v", e)
	}
	fetched := f.as.Hits(oauthtest.PathJWKS)
	f.as.Rotate(t)
	f.clock.Advance(oauth.DefaultRefetchInterval) // since the fetch at the start
	second := f.as.Token(t, f.claims())
	if _, e := f.authenticate(t, "Bearer "+second); e != nil {
		t.Fatalf("a token signed with the new key: %v", e)
	}
	if got := f.as.Hits(oauthtest.PathJWKS); got != fetched+1 {
		t.Fatalf("the key set was fetched %d times for the new kid, want once", got-fetched)
	}
	if _, e := f.authenticate(t, "Bearer "+first); e != nil {
		t.Fatalf("a token of the old key, still published: %v", e)
	}
	// Unknown kids, one after the other: no fetch until the interval has
	// passed.
	fetched = f.as.Hits(oauthtest.PathJWKS)
	for range 5 {
		if _, e := f.authenticate(t, "Bearer "+f.as.UntrustedTokenUnknownKid(t, f.claims())); e == nil || !strings.Contains(e.Description, "does not publish") {
			t.Fatalf("an unknown kid: %+v", e)
		}
	}
	if got := f.as.Hits(oauthtest.PathJWKS); got != fetched {
		t.Fatalf("unknown kids made %d fetches within the refetch interval", got-fetched)
	}
	f.clock.Advance(oauth.DefaultRefetchInterval)
	f.authenticate(t, "Bearer "+f.as.UntrustedTokenUnknownKid(t, f.claims()))
	if got := f.as.Hits(oauthtest.PathJWKS); got != fetched+1 {
		t.Fatalf("after the interval an unknown kid made %d fetches, want 1", got-fetched)
	}
	// A key withdrawn stops verifying once the set is fetched again, its
	// age past KeysMaxAge: a token it signed, not seen before, is refused.
	long := f.claims()
	long.Expiry = f.clock.Now().Add(3 * time.Hour)
	signedByOld := f.as.Token(t, long)
	old := f.as.Kid()
	f.as.Rotate(t)
	f.as.Retire(old)
	f.clock.Advance(oauth.DefaultKeysMaxAge)
	if _, e := f.authenticate(t, "Bearer "+signedByOld); e == nil || !strings.Contains(e.Description, "does not publish") {
		t.Fatalf("a token of a withdrawn key: %+v", e)
	}
}

// A key set that names one kid twice: tokens naming it are refused,
// since which key signed them cannot be told, and the operator is told
// once, not per request.
func TestDuplicateKid(t *testing.T) {
	f := setup(t, oauthtest.Options{}, nil)
	f.as.DuplicateKid(true)
	f.clock.Advance(oauth.DefaultKeysMaxAge) // the set is fetched again
	for range 3 {
		_, e := f.authenticate(t, "Bearer "+f.as.Token(t, f.claims()))
		if e == nil || e.Code != "invalid_token" || !strings.Contains(e.Description, "more than one key") {
			t.Fatalf("a token under a duplicated kid: %+v", e)
		}
	}
	if n := strings.Count(f.log.String(), "two keys under one kid"); n != 1 {
		t.Fatalf("the duplicate kid was logged %d times, want once:\n%s", n, f.log)
	}
}

// Tokens under a duplicated kid arriving at once, while time passes: the
// warning about it, at most one per RefetchInterval, is written under
// the issuer's lock (go test -race).
func TestDuplicateKidConcurrently(t *testing.T) {
	f := setup(t, oauthtest.Options{}, nil)
	f.as.DuplicateKid(true)
	f.clock.Advance(oauth.DefaultKeysMaxAge)
	tok := "Bearer " + f.as.Token(t, f.claims())
	f.authenticate(t, tok) // the set is fetched again
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				f.clock.Advance(oauth.DefaultRefetchInterval / 4)
				if _, e := f.authenticate(t, tok); e == nil || !strings.Contains(e.Description, "more than one key") {
					t.Errorf("a token under a duplicated kid: %+v", e)
				}
			}
		})
	}
	wg.Wait()
}

// An issuer whose metadata names another issuer is never used: its
// tokens are refused 503 (nothing can be verified), the log says why.
func TestMetadataNamingAnotherIssuer(t *testing.T) {
	f := setup(t, oauthtest.Options{MetadataIssuer: "https://evil.example.com"}, nil)
	_, e := f.authenticate(t, "Bearer "+f.as.Token(t, f.claims()))
	if e == nil || e.Status != http.StatusServiceUnavailable || !strings.Contains(e.Description, `names the issuer "https://evil.example.com"`) {
		t.Fatalf("a token of an issuer whose metadata names another: %+v", e)
	}
	if f.as.Hits(oauthtest.PathJWKS) != 0 {
		t.Fatal("the key set of a mismatched issuer was fetched")
	}
	if !strings.Contains(f.log.String(), "cannot be reached yet") {
		t.Fatalf("the start did not log the issuer's failure:\n%s", f.log)
	}
}

// Discovery in the MCP specification's order: an issuer with a path
// whose metadata is only at an OpenID Connect URL is found there.
func TestDiscoveryOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    oauthtest.Options
	}{
		{"RFC 8414 path-inserted", oauthtest.Options{IssuerPath: "/tenant1"}},
		{"OpenID Connect, path-inserted or appended", oauthtest.Options{IssuerPath: "/tenant1", Discovery: oauthtest.DiscoveryOpenID}},
		{"OpenID Connect at the root", oauthtest.Options{Discovery: oauthtest.DiscoveryOpenID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, tc.o, nil)
			if _, e := f.authenticate(t, "Bearer "+f.as.Token(t, f.claims())); e != nil {
				t.Fatalf("refused: %+v", e)
			}
		})
	}
}

// An authorization server out of reach, or too slow: requests are
// refused 503 with Retry-After (never let through, never called
// invalid), the fetch waits at most FetchTimeout, and the server is
// tried again after RefetchInterval, its tokens then accepted.
func TestUnreachableKeys(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(as *oauthtest.Server)
		heal  func(as *oauthtest.Server)
		why   string
	}{
		{"down", func(as *oauthtest.Server) { as.SetDown(oauthtest.PathJWKS, 500) }, func(as *oauthtest.Server) { as.SetDown(oauthtest.PathJWKS, 0) }, "answered 500"},
		{"not JSON", func(as *oauthtest.Server) { as.SetDown(oauthtest.PathJWKS, 200) }, func(as *oauthtest.Server) { as.SetDown(oauthtest.PathJWKS, 0) }, "not JSON"},
		{"slow", func(as *oauthtest.Server) { as.SetDelay(oauthtest.PathJWKS, time.Hour) }, func(as *oauthtest.Server) { as.SetDelay(oauthtest.PathJWKS, 0) }, "did not answer in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var as *oauthtest.Server
			f := &fixture{clock: newClock(), log: &syncBuffer{}}
			as = oauthtest.New(t, oauthtest.Options{Now: f.clock.Now})
			tc.fault(as)
			f.as = as
			rs, err := oauth.New(t.Context(), oauth.Config{Issuers: []string{as.Issuer()}, Resource: resource, Now: f.clock.Now, FetchTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			f.rs = rs
			_, e := f.authenticate(t, "Bearer "+as.Token(t, f.claims()))
			if e == nil || e.Status != http.StatusServiceUnavailable || e.RetryAfter < 1 || !strings.Contains(e.Description, tc.why) {
				t.Fatalf("with the keys %s: %+v", tc.name, e)
			}
			tc.heal(as)
			if _, e := f.authenticate(t, "Bearer "+as.Token(t, f.claims())); e == nil {
				t.Fatal("accepted before the refetch interval passed: the failure was not remembered")
			}
			f.clock.Advance(oauth.DefaultRefetchInterval)
			if _, e := f.authenticate(t, "Bearer "+as.Token(t, f.claims())); e != nil {
				t.Fatalf("after the server healed: %+v", e)
			}
		})
	}
}

// Several issuers: each one's tokens are verified with its own keys, and
// their subjects are tenants apart.
func TestSeveralIssuers(t *testing.T) {
	c := newClock()
	a := oauthtest.New(t, oauthtest.Options{Now: c.Now})
	b := oauthtest.New(t, oauthtest.Options{Now: c.Now})
	rs, err := oauth.New(t.Context(), oauth.Config{Issuers: []string{a.Issuer(), b.Issuer()}, Resource: resource, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{rs: rs, clock: c}
	claims := oauthtest.Claims{Subject: "alice", Audience: []string{resource}, Expiry: c.Now().Add(time.Hour)}
	pa, e := f.authenticate(t, "Bearer "+a.Token(t, claims))
	if e != nil {
		t.Fatal(e)
	}
	pb, e := f.authenticate(t, "Bearer "+b.Token(t, claims))
	if e != nil {
		t.Fatal(e)
	}
	if pa.Tenant == pb.Tenant || !strings.HasSuffix(pa.Tenant, " alice") {
		t.Fatalf("tenants %q and %q: two issuers' alice must be two tenants", pa.Tenant, pb.Tenant)
	}
	// b's token claiming to be a's: a's keys do not verify it.
	claims.Issuer = a.Issuer()
	if _, e := f.authenticate(t, "Bearer "+b.Token(t, claims)); e == nil || !strings.Contains(e.Description, "does not publish") && !strings.Contains(e.Description, "does not verify") {
		t.Fatalf("a token of b naming a as its issuer: %+v", e)
	}
}

// The verdict cache holds at most CacheEntries tokens, and a token is
// not served from it past its expiry.
func TestVerdictCacheBounded(t *testing.T) {
	f := setup(t, oauthtest.Options{}, func(c *oauth.Config) { c.CacheEntries = 3 })
	for range 10 {
		if _, e := f.authenticate(t, "Bearer "+f.as.Token(t, f.claims())); e != nil {
			t.Fatal(e)
		}
	}
	if n := f.rs.CachedVerdicts(); n > 3 {
		t.Fatalf("the cache holds %d verdicts, more than its 3", n)
	}
	short := f.claims()
	short.Expiry = f.clock.Now().Add(time.Minute)
	tok := "Bearer " + f.as.Token(t, short)
	if _, e := f.authenticate(t, tok); e != nil {
		t.Fatal(e)
	}
	f.clock.Advance(time.Minute + oauth.DefaultClockSkew)
	if _, e := f.authenticate(t, tok); e == nil || !strings.Contains(e.Description, "expired") {
		t.Fatalf("an expired token from the cache: %+v", e)
	}
}

// keyServer is an authorization server publishing exactly the keys a
// test gives it, for keys oauthtest would never make.
func keyServer(t *testing.T, keys ...jose.JSONWebKey) string {
	t.Helper()
	var hs *httptest.Server
	hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			json.NewEncoder(w).Encode(map[string]any{"issuer": hs.URL, "jwks_uri": hs.URL + "/jwks"})
		case "/jwks":
			json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: keys})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// signWith signs claims for issuer with priv under alg and kid.
func signWith(t *testing.T, priv any, alg jose.SignatureAlgorithm, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: priv}, (&jose.SignerOptions{}).WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// An RSA key shorter than 2048 bits verifies nothing (RFC 7518 §3.3: a
// key of 2048 bits or more MUST be used), though crypto/rsa would check
// a signature by a 1024-bit one.
func TestShortRSAKeyRefused(t *testing.T) {
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	iss := keyServer(t, jose.JSONWebKey{Key: weak.Public(), KeyID: "weak", Algorithm: "RS256", Use: "sig"})
	c := newClock()
	rs, err := oauth.New(t.Context(), oauth.Config{Issuers: []string{iss}, Resource: resource, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{rs: rs, clock: c}
	tok := signWith(t, weak, jose.RS256, "weak", map[string]any{"iss": iss, "sub": "alice", "aud": resource, "exp": c.Now().Add(time.Hour).Unix()})
	if p, e := f.authenticate(t, "Bearer "+tok); e == nil {
		t.Fatalf("a token signed by a 1024-bit RSA key was accepted as %+v", p)
	}
}

// A key set that cannot be fetched again is used until it is twice
// KeysMaxAge old, then nothing it holds is trusted: a key withdrawn
// during an outage stops verifying by then.
func TestStaleKeySetExpires(t *testing.T) {
	f := setup(t, oauthtest.Options{}, nil)
	long := f.claims()
	long.Expiry = f.clock.Now().Add(24 * time.Hour)
	early, late := f.as.Token(t, long), f.as.Token(t, long)
	if _, e := f.authenticate(t, "Bearer "+early); e != nil {
		t.Fatal(e)
	}
	f.as.SetDown(oauthtest.PathJWKS, 500)
	f.clock.Advance(oauth.DefaultKeysMaxAge)
	if _, e := f.authenticate(t, "Bearer "+late); e != nil {
		t.Fatalf("within twice KeysMaxAge, through the outage: %+v", e)
	}
	f.clock.Advance(oauth.DefaultKeysMaxAge)
	if _, e := f.authenticate(t, "Bearer "+f.as.Token(t, long)); e == nil || e.Status != http.StatusServiceUnavailable || !strings.Contains(e.Description, "could not be fetched again") {
		t.Fatalf("past twice KeysMaxAge: %+v", e)
	}
	f.as.SetDown(oauthtest.PathJWKS, 0)
	f.clock.Advance(oauth.DefaultRefetchInterval)
	if _, e := f.authenticate(t, "Bearer "+f.as.Token(t, long)); e != nil {
		t.Fatalf("once the keys can be fetched again: %+v", e)
	}
}
