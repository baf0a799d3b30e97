package oauthstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/store"
)

const resource = "http://127.0.0.1:1/mcp"

var testKey = []byte("0123456789abcdef0123456789abcdef")

func openStore(t *testing.T, dsn string, key []byte) *Store {
	t.Helper()
	db, err := store.Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := New(t.Context(), db, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// authorize runs the authorization code grant against as by hand, as a
// browser and a public client would, and returns the tokens.
func authorize(t *testing.T, as *oauthtest.Server) (access, refresh string) {
	t.Helper()
	as.RegisterClient(oauthtest.Client{ID: "c1", RedirectURIs: []string{"http://127.0.0.1/cb"}})
	verifier := strings.Repeat("v", 43)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {"c1"}, "redirect_uri": {"http://127.0.0.1/cb"}, "state": {"s"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}, "resource": {resource}}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(as.URL + oauthtest.PathAuthorize + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("authorize: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = http.PostForm(as.URL+oauthtest.PathToken, url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
		"code_verifier": {verifier}, "redirect_uri": {"http://127.0.0.1/cb"}, "client_id": {"c1"}, "resource": {resource}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr struct{ AccessToken, RefreshToken string }
	var raw map[string]any
	json.NewDecoder(resp.Body).Decode(&raw)
	tr.AccessToken, _ = raw["access_token"].(string)
	tr.RefreshToken, _ = raw["refresh_token"].(string)
	if tr.RefreshToken == "" {
		t.Fatalf("token: %d %v", resp.StatusCode, raw)
	}
	return tr.AccessToken, tr.RefreshToken
}

// expired is a State whose access token has expired and whose refresh
// token is good: the next request refreshes it.
func expired(as *oauthtest.Server, access, refresh string) *oauth.State {
	return &oauth.State{Resource: resource, Issuer: as.Issuer(), TokenEndpoint: as.URL + oauthtest.PathToken,
		AccessToken: access, RefreshToken: refresh, Expiry: time.Now().Add(-time.Hour),
		Registrations: map[string]oauth.Registration{as.Issuer(): {ClientID: "c1", AuthMethod: "none", Source: oauth.SourceDynamic}}}
}

// gatedToken holds the first token request until release is closed,
// saying on entered that it came.
type gatedToken struct {
	once             sync.Once
	entered, release chan struct{}
}

func (g *gatedToken) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.URL.Path == oauthtest.PathToken {
		first := false
		g.once.Do(func() { first = true })
		if first {
			close(g.entered)
			<-g.release
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

func authorizeRequest(t *testing.T, a *Authorizer) (string, error) {
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, resource, nil)
	err := a.Authorize(req)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer "), err
}

// Two replicas (two Stores on one database) find the access token
// expired at once: one refreshes, under the lease, while the other
// waits for it and then uses what it saved. The rotated refresh token is
// spent once, and saved sealed.
func TestTwoReplicasRefreshOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		as := oauthtest.New(t, oauthtest.Options{})
		access, refresh := authorize(t, as)
		s1, s2 := openStore(t, dsn, testKey), openStore(t, dsn, testKey)
		if err := s1.Put(t.Context(), resource, expired(as, access, refresh)); err != nil {
			t.Fatal(err)
		}
		gate := &gatedToken{entered: make(chan struct{}), release: make(chan struct{})}
		a1, err := s1.Authorizer(resource, oauth.Options{HTTPClient: &http.Client{Transport: gate}})
		if err != nil {
			t.Fatal(err)
		}
		a2, err := s2.Authorizer(resource, oauth.Options{HTTPClient: &http.Client{Transport: gate}})
		if err != nil {
			t.Fatal(err)
		}
		waiting := make(chan struct{}, 1)
		a2.onWait = func() {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
		type got struct {
			tok string
			err error
		}
		r1, r2 := make(chan got, 1), make(chan got, 1)
		go func() { tok, err := authorizeRequest(t, a1); r1 <- got{tok, err} }()
		<-gate.entered // replica 1 holds the lease and is refreshing
		go func() { tok, err := authorizeRequest(t, a2); r2 <- got{tok, err} }()
		<-waiting // replica 2 found the lease taken and the token expired
		close(gate.release)
		g1, g2 := <-r1, <-r2
		if g1.err != nil || g2.err != nil {
			t.Fatalf("authorize: %v, %v", g1.err, g2.err)
		}
		if g1.tok == "" || g1.tok == access || g2.tok != g1.tok {
			t.Fatalf("replica 1 sent a new token: %v; replica 2 the same: %v", g1.tok != access && g1.tok != "", g2.tok == g1.tok)
		}
		refreshes := 0
		for _, r := range as.TokenRequests() {
			if r.Form.Get("grant_type") == "refresh_token" {
				refreshes++
			}
		}
		if refreshes != 1 {
			t.Fatalf("%d refresh requests; want 1", refreshes)
		}
		st, err := openStore(t, dsn, testKey).Load(t.Context(), resource)
		if err != nil || st.RefreshToken == refresh || st.RefreshToken == "" || st.AccessToken != g1.tok {
			t.Fatalf("the stored state after the rotation: %v (rotated: %v)", err, st != nil && st.RefreshToken != refresh)
		}
	})
}

// Writes are conditional on the version read: a replica that read
// before another wrote writes nothing. The row is sealed: it holds no
// token, and does not open under another key or key.
func TestConditionalAndSealed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s1, s2 := openStore(t, dsn, testKey), openStore(t, dsn, testKey)
		st := &oauth.State{Resource: resource, AccessToken: "access-secret-1", RefreshToken: "refresh-secret-1"}
		if err := s1.Put(ctx, resource, st); err != nil {
			t.Fatal(err)
		}
		if _, err := s1.Load(ctx, resource); err != nil {
			t.Fatal(err)
		}
		if _, err := s2.Load(ctx, resource); err != nil {
			t.Fatal(err)
		}
		st.RefreshToken = "refresh-secret-2"
		if err := s1.Save(ctx, resource, st); err != nil {
			t.Fatal(err)
		}
		st.RefreshToken = "refresh-secret-3"
		if err := s2.Save(ctx, resource, st); !errors.Is(err, ErrConflict) {
			t.Fatalf("a save over a version another replica replaced: %v", err)
		}
		if got, _ := s2.Load(ctx, resource); got == nil || got.RefreshToken != "refresh-secret-2" {
			t.Fatalf("after the conflict: %+v", got)
		}
		var sealed string
		s1.db.ReadTx(ctx, func(tx *store.Tx) error {
			return tx.QueryRow(ctx, `SELECT sealed FROM mcprel_oauth_state WHERE key = ?`, resource).Scan(&sealed)
		})
		raw, _ := base64.StdEncoding.DecodeString(sealed)
		if sealed == "" || strings.Contains(string(raw), "secret") || strings.Contains(sealed, "secret") {
			t.Fatalf("the row is not sealed: %q", sealed)
		}
		other := openStore(t, dsn, []byte("fedcba9876543210fedcba9876543210"))
		if _, err := other.Load(ctx, resource); err == nil || strings.Contains(err.Error(), "secret") {
			t.Fatalf("loading under another key: %v", err)
		}
		// Moved under another key, the sealed row does not open.
		s1.db.WriteTx(ctx, func(tx *store.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO mcprel_oauth_state (key, sealed, version, updated_at) VALUES (?, ?, 1, 0)`, "http://evil/mcp", sealed)
			return err
		})
		if _, err := s1.Load(ctx, "http://evil/mcp"); err == nil {
			t.Fatal("a row copied under another key opened")
		}
	})
}

// A Store whose refresh lease ran out while another took it writes
// nothing, even at the version it read: the other is refreshing now.
// Once the other's lease is released, or runs out, the write is the
// version check's alone again.
func TestSaveUnderAnotherReplicasLease(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		now := time.Now()
		clock := func() time.Time { return now }
		open := func() *Store {
			db, err := store.Open(ctx, dsn, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			s, err := New(ctx, db, testKey, &Options{Now: clock, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		s1, s2 := open(), open()
		st := &oauth.State{Resource: resource, AccessToken: "access-1", RefreshToken: "refresh-1"}
		if err := s1.Put(ctx, resource, st); err != nil {
			t.Fatal(err)
		}
		if _, err := s1.Load(ctx, resource); err != nil {
			t.Fatal(err)
		}
		if held, err := s1.lease(ctx, resource); !held || err != nil {
			t.Fatalf("s1's lease: %v %v", held, err)
		}
		now = now.Add(2 * time.Minute) // s1's lease runs out mid-refresh
		if held, err := s2.lease(ctx, resource); !held || err != nil {
			t.Fatalf("s2's lease after s1's ran out: %v %v", held, err)
		}
		st.RefreshToken = "refresh-from-s1"
		if err := s1.Save(ctx, resource, st); !errors.Is(err, ErrConflict) {
			t.Fatalf("a save under another replica's live lease: %v", err)
		}
		if err := s2.release(ctx, resource); err != nil {
			t.Fatal(err)
		}
		if err := s1.Save(ctx, resource, st); err != nil {
			t.Fatalf("a save once the lease is free: %v", err)
		}
	})
}

// With no stored authorization, or one whose refresh token was revoked,
// the refusal stands, saying so: no sign-in is attempted.
func TestNotAuthorized(t *testing.T) {
	s := openStore(t, storetest.SQLite(t), testKey)
	a, err := s.Authorizer(resource, oauth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, resource, nil)
	if err := a.Authorize(req); err != nil || req.Header.Get("Authorization") != "" {
		t.Fatalf("nothing stored: %v %q", err, req.Header.Get("Authorization"))
	}
	retry, err := a.Refused(t.Context(), req, &http.Response{StatusCode: 401, Header: http.Header{}})
	var oe *oauth.Error
	if retry || !errors.As(err, &oe) || !errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("Refused with nothing stored: %v %v", retry, err)
	}
}

func TestParseKey(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(testKey)
	if k, err := ParseKey(" " + good + "\n"); err != nil || string(k) != string(testKey) {
		t.Fatalf("ParseKey: %v", err)
	}
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(testKey[:16])} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) took it", bad)
		}
	}
}
