package oauth_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

// A refresh a minute before expiry rotates the refresh token, and the
// Store holds the new one before the server sees the access token that
// came with it.
func TestRefreshBeforeExpirySavesTheRotatedTokenFirst(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, TokenTTL: 10 * time.Minute})
	r := newResource(t, as, clk, prmHeader)
	store := &oauth.MemoryStore{}
	o := options(clk)
	o.Store = store
	c := newClient(t, r, o)
	var mismatches []string
	r.set(func(r *resource) {
		r.onToken = func(tok string) {
			st, err := store.Load(context.Background(), c.Resource())
			issued := as.Issued()
			if err != nil || st == nil || st.AccessToken != tok || st.RefreshToken != issued[len(issued)-1] {
				mismatches = append(mismatches, "a token was used before the Store held it and its refresh token")
			}
		}
	})
	mustCall(t, c, r)
	first, _ := c.State(t.Context())

	clk.Advance(8 * time.Minute) // two minutes left: no refresh yet
	mustCall(t, c, r)
	if n := len(as.TokenRequests()); n != 1 {
		t.Fatalf("%d token requests with two minutes left, want 1", n)
	}
	clk.Advance(90 * time.Second) // 30 seconds left
	mustCall(t, c, r)
	trs := as.TokenRequests()
	if len(trs) != 2 || trs[1].Form.Get("grant_type") != "refresh_token" || trs[1].Form.Get("resource") != r.URL() ||
		trs[1].Form.Get("refresh_token") != first.RefreshToken {
		t.Fatalf("token requests %+v, want a refresh with resource", trs)
	}
	second, _ := c.State(t.Context())
	if second.RefreshToken == first.RefreshToken || second.AccessToken == first.AccessToken {
		t.Error("the refresh did not rotate")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(mismatches) > 0 || len(r.seen) != 3 {
		t.Errorf("%v; %d requests accepted", mismatches, len(r.seen))
	}
	if n := len(as.AuthorizationRequests()); n != 1 {
		t.Errorf("%d sign-ins, want 1", n)
	}
}

// A 401 on a token the Client thinks good is answered by a refresh, not a
// sign-in; a second 401 on the refreshed token by a sign-in.
func TestRefreshOn401(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	c := newClient(t, r, options(clk))
	mustCall(t, c, r)
	st, _ := c.State(t.Context())
	r.set(func(r *resource) { r.reject[st.AccessToken] = true })
	mustCall(t, c, r)
	if a, tr := len(as.AuthorizationRequests()), len(as.TokenRequests()); a != 1 || tr != 2 {
		t.Fatalf("%d sign-ins and %d token requests, want 1 and 2", a, tr)
	}
	// The server refuses the refreshed token too: refreshing again would
	// loop, so the Client signs in.
	st, _ = c.State(t.Context())
	r.set(func(r *resource) { r.reject[st.AccessToken] = true })
	mustCall(t, c, r)
	if a := len(as.AuthorizationRequests()); a != 2 {
		t.Fatalf("%d sign-ins, want 2", a)
	}
}

func TestSpentRefreshTokenLeadsToSignIn(t *testing.T) {
	t.Run("expired", func(t *testing.T) {
		clk := newClock()
		as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, TokenTTL: 10 * time.Minute})
		r := newResource(t, as, clk, prmHeader)
		c := newClient(t, r, options(clk))
		mustCall(t, c, r)
		as.RevokeRefreshTokens()
		clk.Advance(11 * time.Minute)
		mustCall(t, c, r)
		if a := len(as.AuthorizationRequests()); a != 2 {
			t.Fatalf("%d sign-ins, want 2", a)
		}
	})
	t.Run("on 401", func(t *testing.T) {
		clk := newClock()
		as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
		r := newResource(t, as, clk, prmHeader)
		c := newClient(t, r, options(clk))
		mustCall(t, c, r)
		as.RevokeRefreshTokens()
		st, _ := c.State(t.Context())
		r.set(func(r *resource) { r.reject[st.AccessToken] = true })
		mustCall(t, c, r)
		if a := len(as.AuthorizationRequests()); a != 2 {
			t.Fatalf("%d sign-ins, want 2", a)
		}
	})
}

func TestResourceOnRefresh(t *testing.T) {
	for _, omit := range []bool{false, true} {
		clk := newClock()
		as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, TokenTTL: 10 * time.Minute, RefuseResourceOnRefresh: true})
		r := newResource(t, as, clk, prmHeader)
		o := options(clk)
		o.NoResourceOnRefresh = omit
		c := newClient(t, r, o)
		mustCall(t, c, r)
		clk.Advance(11 * time.Minute)
		_, err := call(t, c, r)
		if omit {
			trs := as.TokenRequests()
			if err != nil || trs[len(trs)-1].Form.Has("resource") {
				t.Errorf("NoResourceOnRefresh: %v, refresh form %v", err, trs[len(trs)-1].Form)
			}
			continue
		}
		if e := refused(t, err, oauth.StepRefresh, as); e.Code != "invalid_request" {
			t.Errorf("Code %q", e.Code)
		}
	}
}

// gate holds requests to the token endpoint until released, and says
// when the first one arrives.
type gate struct {
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == oauthtest.PathToken {
		g.once.Do(func() { close(g.arrived) })
		<-g.release
	}
	return http.DefaultTransport.RoundTrip(req)
}

// Callers that find the token expiring while a refresh runs wait for it:
// one refresh, and every caller gets its token.
func TestConcurrentCallersShareOneRefresh(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, TokenTTL: 10 * time.Minute})
	r := newResource(t, as, clk, prmHeader)
	c := newClient(t, r, options(clk))
	mustCall(t, c, r)
	before := as.Hits(oauthtest.PathToken)

	// The same Store and a gated transport, from here on.
	st, _ := c.State(t.Context())
	store := &oauth.MemoryStore{}
	store.Save(t.Context(), c.Resource(), st)
	g := &gate{arrived: make(chan struct{}), release: make(chan struct{})}
	o := options(clk)
	o.Store = store
	o.HTTPClient = &http.Client{Transport: g}
	c = newClient(t, r, o)
	clk.Advance(9*time.Minute + 30*time.Second)

	const n = 16
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, r.URL(), nil)
			if err := c.Authorize(req); err != nil {
				t.Error(err)
			}
			got[i] = req.Header.Get("Authorization")
		})
	}
	<-g.arrived
	close(g.release)
	wg.Wait()
	if refreshes := as.Hits(oauthtest.PathToken) - before; refreshes != 1 {
		t.Errorf("%d refreshes, want 1", refreshes)
	}
	now, _ := c.State(t.Context())
	for i, h := range got {
		if h != "Bearer "+now.AccessToken {
			t.Errorf("caller %d sent %.20q, not the refreshed token", i, h)
		}
	}
}

// Concurrent refusals of one token lead to one sign-in; the others retry
// with its token.
func TestConcurrentRefusalsShareOneSignIn(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	c := newClient(t, r, options(clk))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if status, err := call(t, c, r); status != http.StatusOK || err != nil {
				t.Errorf("call: %d %v", status, err)
			}
		})
	}
	wg.Wait()
	if a := len(as.AuthorizationRequests()); a != 1 {
		t.Errorf("%d sign-ins, want 1", a)
	}
}

func TestClientCredentials(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, NoRegistration: true, NoCodeChallengeMethods: true, TokenTTL: 10 * time.Minute})
	as.RegisterClient(oauthtest.Client{ID: "gateway", Secret: "s3cret-pre"})
	r := newResource(t, as, clk, prmPath)
	r.set(func(r *resource) { r.scopes = []string{"mcp:tools"} })
	c, err := oauth.New(r.URL(), oauth.Options{GrantType: oauth.GrantClientCredentials, ClientID: "gateway", ClientSecret: "s3cret-pre", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	mustCall(t, c, r)
	clk.Advance(9*time.Minute + 30*time.Second)
	mustCall(t, c, r) // a new token before expiry, without a 401
	trs := as.TokenRequests()
	if len(trs) != 2 {
		t.Fatalf("%d token requests, want 2", len(trs))
	}
	for _, tr := range trs {
		if tr.Form.Get("grant_type") != "client_credentials" || tr.Form.Get("resource") != r.URL() ||
			tr.Form.Get("scope") != "mcp:tools" || tr.BasicAuth != "gateway" || tr.Form.Has("client_secret") {
			t.Errorf("token request %v basic %q", tr.Form, tr.BasicAuth)
		}
	}
	if len(as.AuthorizationRequests()) != 0 {
		t.Error("client credentials went through the authorize endpoint")
	}
	// A wrong secret fails the token step, without the secret in the error.
	as2 := oauthtest.New(t, oauthtest.Options{Now: clk.Now, NoRegistration: true})
	as2.RegisterClient(oauthtest.Client{ID: "gateway", Secret: "another"})
	r2 := newResource(t, as2, clk, prmPath)
	c2, _ := oauth.New(r2.URL(), oauth.Options{GrantType: oauth.GrantClientCredentials, ClientID: "gateway", ClientSecret: "s3cret-pre", Now: clk.Now})
	_, err = call(t, c2, r2)
	if e := refused(t, err, oauth.StepToken, as2); e.Code != "invalid_client" {
		t.Errorf("Code %q", e.Code)
	}
}

// A Client started later finds the tokens in the Store and uses them
// without a sign-in; SignOut forgets them.
func TestStoreAcrossClients(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	o := options(clk)
	o.Store = oauth.FileStore{Dir: filepath.Join(t.TempDir(), "oauth")}
	mustCall(t, newClient(t, r, o), r)
	c := newClient(t, r, o)
	mustCall(t, c, r)
	if a := len(as.AuthorizationRequests()); a != 1 {
		t.Fatalf("%d sign-ins, want 1", a)
	}
	if err := c.SignOut(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st, err := o.Store.Load(t.Context(), c.Resource()); st != nil || err != nil {
		t.Errorf("after SignOut the Store holds %+v, %v", st, err)
	}
}

func TestFileStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "oauth")
	fs := oauth.FileStore{Dir: dir}
	ctx := t.Context()
	if st, err := fs.Load(ctx, "https://a.example/mcp"); st != nil || err != nil {
		t.Fatalf("Load of nothing: %v %v", st, err)
	}
	one := &oauth.State{Issuer: "https://as", AccessToken: "at-1", RefreshToken: "rt-1", Expiry: time.Unix(1_900_000_000, 0).UTC(),
		Registrations: map[string]oauth.Registration{"https://as": {ClientID: "c", ClientSecret: "cs", AuthMethod: "client_secret_basic", Source: oauth.SourceDynamic}}}
	if err := fs.Save(ctx, "https://a.example/mcp", one); err != nil {
		t.Fatal(err)
	}
	if err := fs.Save(ctx, "https://b.example/mcp", &oauth.State{AccessToken: "other"}); err != nil {
		t.Fatal(err)
	}
	got, err := fs.Load(ctx, "https://a.example/mcp")
	if err != nil || got.RefreshToken != "rt-1" || !got.Expiry.Equal(one.Expiry) || got.Registrations["https://as"].ClientSecret != "cs" {
		t.Fatalf("Load: %+v %v", got, err)
	}
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700 (%v)", info.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("%d files, want one per key and no temporaries: %v", len(entries), entries)
	}
	for _, e := range entries {
		info, _ := e.Info()
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", e.Name(), info.Mode().Perm())
		}
	}

	// Saving writes a new file and renames it: in a directory that takes
	// no new files, the save fails and the old State stays whole.
	if os.Geteuid() != 0 {
		os.Chmod(dir, 0o500)
		err := fs.Save(ctx, "https://a.example/mcp", &oauth.State{AccessToken: "at-2"})
		os.Chmod(dir, 0o700)
		if err == nil {
			t.Error("Save wrote in place, not through a new file")
		}
		if got, err := fs.Load(ctx, "https://a.example/mcp"); err != nil || got.AccessToken != "at-1" {
			t.Errorf("after a failed Save: %+v %v", got, err)
		}
	}
	if err := fs.Delete(ctx, "https://a.example/mcp"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Delete(ctx, "https://a.example/mcp"); err != nil {
		t.Errorf("Delete of nothing: %v", err)
	}
	if got, _ := fs.Load(ctx, "https://b.example/mcp"); got == nil || got.AccessToken != "other" {
		t.Errorf("another key's state: %+v", got)
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "/tmp/xdg")
	t.Setenv("HOME", "/tmp/home")
	d, err := oauth.DefaultDir()
	if err != nil || filepath.Base(d) != "oauth" || filepath.Base(filepath.Dir(d)) != "mcprel" {
		t.Errorf("DefaultDir %q %v", d, err)
	}
}

// failingStore saves nothing.
type failingStore struct{ oauth.MemoryStore }

func (*failingStore) Save(context.Context, string, *oauth.State) error {
	return errors.New("disk full")
}

// A Store that cannot save fails each step that needed it loudly; what
// it could not keep stays in memory, so a later request gets through.
func TestStoreFailureIsReported(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	o := options(clk)
	o.Store = &failingStore{}
	c := newClient(t, r, o)
	for _, step := range []string{oauth.StepRegistration, oauth.StepToken} {
		_, err := call(t, c, r)
		if refused(t, err, step, as); !strings.Contains(err.Error(), "disk full") {
			t.Errorf("error %q hides the Store's", err)
		}
	}
	mustCall(t, c, r)
	if n := len(as.Registrations()); n != 1 {
		t.Errorf("%d registrations, want 1", n)
	}
}

// While a step-up waits for the user, requests go on with the token in
// hand rather than waiting for the sign-in.
func TestAuthorizeDoesNotWaitForASignIn(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	arrived, release := make(chan struct{}), make(chan struct{})
	o := options(clk)
	o.Authorize = func(ctx context.Context, u string) (string, error) {
		if len(as.AuthorizationRequests()) > 0 { // the step-up, not the first sign-in
			close(arrived)
			<-release
		}
		return browser(ctx, u)
	}
	c := newClient(t, r, o)
	mustCall(t, c, r)
	held, _ := c.State(t.Context())
	r.set(func(r *resource) { r.need = []string{"mcp:write"} })
	done := make(chan error, 1)
	go func() {
		_, err := call(t, c, r)
		done <- err
	}()
	<-arrived
	req, _ := http.NewRequest(http.MethodPost, r.URL(), nil)
	if err := c.Authorize(req); err != nil || req.Header.Get("Authorization") != "Bearer "+held.AccessToken {
		t.Errorf("Authorize during a sign-in: %v, %.20q", err, req.Header.Get("Authorization"))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
