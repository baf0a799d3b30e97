package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

func TestSignInWithDynamicRegistration(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, AuthorizationResponseIss: true})
	r := newResource(t, as, clk, prmHeader)
	c := newClient(t, r, options(clk))
	mustCall(t, c, r)
	mustCall(t, c, r) // the token is reused

	regs := as.Registrations()
	if len(regs) != 1 {
		t.Fatalf("%d registrations, want 1", len(regs))
	}
	reg := regs[0]
	if reg["application_type"] != "native" || reg["token_endpoint_auth_method"] != "none" ||
		!slices.Equal(strs(reg["grant_types"]), []string{"authorization_code", "refresh_token"}) ||
		!slices.Equal(strs(reg["redirect_uris"]), []string{redirectURL}) {
		t.Errorf("registration %v", reg)
	}
	auths := as.AuthorizationRequests()
	if len(auths) != 1 {
		t.Fatalf("%d authorization requests, want 1", len(auths))
	}
	q := auths[0]
	if q.Get("resource") != r.URL() || q.Get("code_challenge_method") != "S256" || len(q.Get("state")) < 16 ||
		q.Get("redirect_uri") != redirectURL || q.Has("scope") {
		t.Errorf("authorization request %v", q)
	}
	trs := as.TokenRequests()
	if len(trs) != 1 {
		t.Fatalf("%d token requests, want 1", len(trs))
	}
	f := trs[0].Form
	if f.Get("grant_type") != "authorization_code" || f.Get("resource") != r.URL() || len(f.Get("code_verifier")) != 43 ||
		f.Get("client_id") != q.Get("client_id") || trs[0].BasicAuth != "" {
		t.Errorf("token request %v basic %q", f, trs[0].BasicAuth)
	}
	st, err := c.State(t.Context())
	if err != nil || st == nil || st.Issuer != as.Issuer() || st.Resource != r.URL() || st.RefreshToken == "" ||
		st.Registrations[as.Issuer()].Source != oauth.SourceDynamic {
		t.Fatalf("state %+v, %v", st, err)
	}
	if got := r.Hits("/.well-known/oauth-protected-resource"); got != 0 {
		t.Errorf("the root metadata was fetched %d times though the challenge named it", got)
	}
}

func strs(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, s := range list {
		str, _ := s.(string)
		out = append(out, str)
	}
	return out
}

func TestPreregisteredClient(t *testing.T) {
	for _, tc := range []struct {
		name      string
		secret    string
		supported []string
		basic     bool
	}{
		{"public", "", nil, false},
		{"basic by default", "s3cret-pre", nil, true},
		{"post only", "s3cret-pre", []string{"client_secret_post"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, NoRegistration: true, TokenEndpointAuthMethods: tc.supported})
			method := "none"
			if tc.secret != "" {
				method = "client_secret_basic"
				if !tc.basic {
					method = "client_secret_post"
				}
			}
			as.RegisterClient(oauthtest.Client{ID: "pre", Secret: tc.secret, RedirectURIs: []string{redirectURL}, AuthMethod: method})
			r := newResource(t, as, clk, prmPath)
			o := options(clk)
			o.ClientID, o.ClientSecret = "pre", tc.secret
			c := newClient(t, r, o)
			mustCall(t, c, r)
			tr := as.TokenRequests()[0]
			if (tr.BasicAuth == "pre") != tc.basic || tr.Form.Has("client_secret") == (tc.basic || tc.secret == "") {
				t.Errorf("token request authenticated basic=%q form=%v", tr.BasicAuth, tr.Form.Has("client_secret"))
			}
			st, _ := c.State(t.Context())
			if reg := st.Registrations[as.Issuer()]; reg.ClientSecret != "" || reg.Source != oauth.SourcePreregistered {
				t.Errorf("stored registration %+v: a pre-registered secret is never stored", reg)
			}
		})
	}
}

func TestNoWayToRegister(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, NoRegistration: true})
	r := newResource(t, as, clk, prmHeader)
	c := newClient(t, r, options(clk))
	_, err := call(t, c, r)
	refused(t, err, oauth.StepRegistration, as)
	if !strings.Contains(err.Error(), "offers no way to register") {
		t.Errorf("error %q", err)
	}
}

func TestClientIDMetadataDocument(t *testing.T) {
	docs := httptest.NewTLSServer(nil)
	t.Cleanup(docs.Close)
	docURL := docs.URL + "/client.json"
	docs.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"client_id": docURL, "client_name": "test", "redirect_uris": []string{redirectURL}})
	})
	for _, supported := range []bool{true, false} {
		clk := newClock()
		as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, ClientIDMetadataDocumentSupported: supported, MetadataDocumentClient: docs.Client()})
		r := newResource(t, as, clk, prmHeader)
		o := options(clk)
		o.ClientMetadataURL = docURL
		c := newClient(t, r, o)
		mustCall(t, c, r)
		id := as.AuthorizationRequests()[0].Get("client_id")
		if supported && (id != docURL || len(as.Registrations()) != 0) {
			t.Errorf("supported: client_id %q, %d registrations; want the document's URL and none", id, len(as.Registrations()))
		}
		if !supported && (id == docURL || len(as.Registrations()) != 1) {
			t.Errorf("unsupported: client_id %q, %d registrations; want a dynamic one", id, len(as.Registrations()))
		}
	}
}

func TestResourceMetadataDiscoveryOrder(t *testing.T) {
	const path, root, custom = "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource", "/custom/metadata/location.json"
	for _, tc := range []struct {
		mode  string
		want  map[string]int
		issue string
	}{
		{prmHeader, map[string]int{custom: 1, path: 0, root: 0}, ""},
		{prmPath, map[string]int{path: 1, root: 0}, ""},
		{prmRoot, map[string]int{path: 1, root: 1}, "/tenant1"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			clk := newClock()
			as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, IssuerPath: tc.issue})
			r := newResource(t, as, clk, tc.mode)
			mustCall(t, newClient(t, r, options(clk)), r)
			for p, n := range tc.want {
				if got := r.Hits(p); got != n {
					t.Errorf("%s fetched %d times, want %d", p, got, n)
				}
			}
		})
	}
}

func TestServerMetadataDiscoveryOrder(t *testing.T) {
	for _, tc := range []struct {
		discovery, issuerPath string
	}{
		{oauthtest.DiscoveryOAuth, ""},
		{oauthtest.DiscoveryOpenID, ""},
		{oauthtest.DiscoveryOAuth, "/tenant1"},
		{oauthtest.DiscoveryOpenID, "/tenant1"},
	} {
		t.Run(tc.discovery+tc.issuerPath, func(t *testing.T) {
			clk := newClock()
			as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, Discovery: tc.discovery, IssuerPath: tc.issuerPath})
			if tc.discovery == oauthtest.DiscoveryOpenID && tc.issuerPath != "" {
				// Only the third candidate: OpenID Connect appended.
				as.SetDown("/.well-known/openid-configuration/tenant1", http.StatusNotFound)
			}
			r := newResource(t, as, clk, prmHeader)
			mustCall(t, newClient(t, r, options(clk)), r)
			if as.Hits("/.well-known/oauth-authorization-server") != 0 && tc.issuerPath != "" {
				t.Errorf("the root metadata was asked for an issuer with a path")
			}
		})
	}
}

func TestResourceMustBeTheServers(t *testing.T) {
	for _, tc := range []struct {
		resource string // relative ones are under the resource server's URL
		ok       bool
	}{
		{"https://evil.example.com/mcp", false},
		{"/mcpx", false},
		{"/mc", false},
		{"/mcp/", true},
		{"/", true},
	} {
		t.Run(tc.resource, func(t *testing.T) {
			clk := newClock()
			as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
			r := newResource(t, as, clk, prmHeader)
			res := tc.resource
			if strings.HasPrefix(res, "/") {
				res = r.srv.URL + res
			}
			r.set(func(r *resource) { r.prmRes = res })
			c := newClient(t, r, options(clk))
			status, err := call(t, c, r)
			if tc.ok {
				if status != http.StatusOK || err != nil {
					t.Fatalf("call: %d %v", status, err)
				}
				if got := as.AuthorizationRequests()[0].Get("resource"); got != res {
					t.Errorf("resource parameter %q, want the metadata's %q byte for byte", got, res)
				}
				return
			}
			refused(t, err, oauth.StepResource, as)
			if n := len(as.AuthorizationRequests()); n != 0 {
				t.Errorf("%d authorization requests after a resource mismatch", n)
			}
		})
	}
}

func TestAuthorizationServerRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    oauthtest.Options
		step string
	}{
		{"issuer mismatch", oauthtest.Options{MetadataIssuer: "https://other.example.com"}, oauth.StepIssuer},
		{"no code_challenge_methods_supported", oauthtest.Options{NoCodeChallengeMethods: true}, oauth.StepPKCE},
		{"plain only", oauthtest.Options{CodeChallengeMethods: []string{"plain"}}, oauth.StepPKCE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			tc.o.Now = clk.Now
			as := oauthtest.New(t, tc.o)
			r := newResource(t, as, clk, prmHeader)
			_, err := call(t, newClient(t, r, options(clk)), r)
			refused(t, err, tc.step, as)
			if n := len(as.Registrations()) + len(as.AuthorizationRequests()); n != 0 {
				t.Errorf("%d requests to an authorization server that was refused", n)
			}
		})
	}
}

func TestAuthorizationResponseChecks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      oauthtest.Options
		tamper func(string) string
		step   string // "" succeeds
		code   string
	}{
		{name: "iss advertised and right", o: oauthtest.Options{AuthorizationResponseIss: true}},
		{name: "iss neither advertised nor sent", o: oauthtest.Options{}},
		{name: "iss advertised and absent", o: oauthtest.Options{AuthorizationResponseIss: true, OmitIss: true}, step: oauth.StepIssuer},
		{name: "iss wrong", o: oauthtest.Options{AuthorizationResponseIss: true, WrongIss: "https://evil.example.com"}, step: oauth.StepIssuer},
		{name: "iss unadvertised and wrong", o: oauthtest.Options{WrongIss: "https://evil.example.com"}, step: oauth.StepIssuer},
		{name: "access denied", o: oauthtest.Options{DenyAuthorization: true}, step: oauth.StepAuthorization, code: "access_denied"},
		// An error under a wrong iss is not believed: it is the issuer
		// that fails, and Code stays empty.
		{name: "access denied under a wrong iss", o: oauthtest.Options{DenyAuthorization: true, WrongIss: "https://evil.example.com"}, step: oauth.StepIssuer},
		{name: "state mismatch", tamper: func(u string) string {
			p, _ := url.Parse(u)
			q := p.Query()
			q.Set("state", "forged")
			p.RawQuery = q.Encode()
			return p.String()
		}, step: oauth.StepAuthorization},
		{name: "issuer with a slash", o: oauthtest.Options{WrongIss: "ISSUER/"}, step: oauth.StepIssuer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			tc.o.Now = clk.Now
			as := oauthtest.New(t, tc.o)
			if tc.o.WrongIss == "ISSUER/" {
				// A new server with the same options but its own issuer
				// plus a slash: no normalisation makes them equal.
				tc.o.WrongIss = as.Issuer() + "/"
				as = oauthtest.New(t, tc.o)
				tc.o.WrongIss = ""
			}
			r := newResource(t, as, clk, prmHeader)
			o := options(clk)
			if tc.tamper != nil {
				o.Authorize = func(ctx context.Context, u string) (string, error) {
					back, err := browser(ctx, u)
					return tc.tamper(back), err
				}
			}
			status, err := call(t, newClient(t, r, o), r)
			if tc.step == "" {
				if status != http.StatusOK || err != nil {
					t.Fatalf("call: %d %v", status, err)
				}
				return
			}
			e := refused(t, err, tc.step, as)
			if e.Code != tc.code {
				t.Errorf("Code %q, want %q", e.Code, tc.code)
			}
			if n := len(as.TokenRequests()); n != 0 {
				t.Errorf("the code was redeemed (%d token requests)", n)
			}
		})
	}
}

func TestScopeSelection(t *testing.T) {
	for _, tc := range []struct {
		name      string
		challenge string
		supported []string
		asScopes  []string // the authorization server's scopes_supported
		want      string   // "" is no scope parameter
	}{
		{"from the challenge", "mcp:basic", []string{"mcp:basic", "mcp:write"}, nil, "mcp:basic"},
		{"from scopes_supported", "", []string{"mcp:basic", "mcp:read", "mcp:write"}, nil, "mcp:basic mcp:read mcp:write"},
		{"none", "", nil, nil, ""},
		// SEP-2207: offline_access where the authorization server lists
		// it, never where it does not, and never alone.
		{"offline_access listed", "mcp:basic", []string{"mcp:basic"}, []string{"mcp:basic", "offline_access"}, "mcp:basic offline_access"},
		{"offline_access challenged", "mcp:basic offline_access", nil, []string{"offline_access"}, "mcp:basic offline_access"},
		{"offline_access not listed", "", []string{"mcp:basic", "mcp:read"}, []string{"mcp:basic", "mcp:read"}, "mcp:basic mcp:read"},
		{"offline_access without other scopes", "", nil, []string{"offline_access"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			as := oauthtest.New(t, oauthtest.Options{Now: clk.Now, Scopes: tc.asScopes})
			r := newResource(t, as, clk, prmHeader)
			r.set(func(r *resource) { r.chal, r.scopes = tc.challenge, tc.supported })
			mustCall(t, newClient(t, r, options(clk)), r)
			q := as.AuthorizationRequests()[0]
			if q.Get("scope") != tc.want || q.Has("scope") != (tc.want != "") {
				t.Errorf("scope %q (present %v), want %q", q.Get("scope"), q.Has("scope"), tc.want)
			}
			// OpenID Connect grants offline_access only with consent asked.
			if offline := strings.Contains(tc.want, "offline_access"); (q.Get("prompt") == "consent") != offline {
				t.Errorf("prompt %q with scope %q: want consent exactly when offline_access is asked", q.Get("prompt"), tc.want)
			}
		})
	}
}

func TestStepUpAsksForTheUnion(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	r.set(func(r *resource) { r.chal, r.need = "mcp:basic", []string{"mcp:basic"} })
	c := newClient(t, r, options(clk))
	mustCall(t, c, r)
	// The next operation needs mcp:write too; the challenge names only it.
	r.set(func(r *resource) { r.need, r.needChal = []string{"mcp:basic", "mcp:write"}, "mcp:write" })
	mustCall(t, c, r)
	auths := as.AuthorizationRequests()
	if len(auths) != 2 || auths[1].Get("scope") != "mcp:basic mcp:write" {
		t.Fatalf("authorization requests %v, want a second one for mcp:basic mcp:write", auths)
	}
	// The old scope still works with the new token.
	r.set(func(r *resource) { r.need, r.needChal = []string{"mcp:basic"}, "" })
	mustCall(t, c, r)
}

// A 403 whose challenge has no error code, as the Go SDK's
// RequireBearerToken answers a token without a scope it wants, steps up
// when it names a scope the token was not granted, and is left alone
// when it names only scopes the token holds: no sign-in would help.
func TestStepUpWithoutAnErrorCode(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	r.set(func(r *resource) { r.chal, r.need, r.noError = "mcp:basic", []string{"mcp:basic"}, true })
	c := newClient(t, r, options(clk))
	mustCall(t, c, r)
	r.set(func(r *resource) { r.need = []string{"mcp:basic", "mcp:write"} })
	mustCall(t, c, r)
	auths := as.AuthorizationRequests()
	if len(auths) != 2 || auths[1].Get("scope") != "mcp:basic mcp:write" {
		t.Fatalf("authorization requests %v, want a second one for mcp:basic mcp:write", auths)
	}
	// Forbidden although the token holds every scope named: not retried.
	r.set(func(r *resource) { r.need, r.needChal = []string{"never-granted"}, "mcp:basic" })
	if status, err := call(t, c, r); status != http.StatusForbidden || err != nil {
		t.Fatalf("a 403 naming only scopes held: %d, %v; want 403 and no error", status, err)
	}
	if n := len(as.AuthorizationRequests()); n != 2 {
		t.Errorf("%d authorization requests after a 403 naming only scopes held, want 2", n)
	}
}

func TestStepUpIsBounded(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	c := newClient(t, r, options(clk))
	mustCall(t, c, r)
	// A server that wants a scope its tokens never carry.
	r.set(func(r *resource) { r.need, r.needChal = []string{"never-granted"}, "mcp:admin" })
	var err error
	for i := range oauth.MaxStepUps + 2 {
		var status int
		status, err = call(t, c, r)
		if status != http.StatusForbidden {
			t.Fatalf("call %d: %d", i, status)
		}
		if err != nil {
			break
		}
	}
	e := refused(t, err, oauth.StepAuthorization, as)
	if e.Code != "insufficient_scope" {
		t.Errorf("Code %q", e.Code)
	}
	if n := len(as.AuthorizationRequests()); n != 1+oauth.MaxStepUps {
		t.Errorf("%d authorization requests, want 1 and %d step-ups", n, oauth.MaxStepUps)
	}
}

func TestAuthorizationServerMigration(t *testing.T) {
	clk := newClock()
	as1 := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	as2 := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as1, clk, prmHeader)
	c := newClient(t, r, options(clk))
	mustCall(t, c, r)
	old := as1.AuthorizationRequests()[0].Get("client_id")
	r.set(func(r *resource) { r.as = as2 })
	mustCall(t, c, r)
	if len(as2.Registrations()) != 1 {
		t.Fatalf("%d registrations with the new server, want 1", len(as2.Registrations()))
	}
	for _, q := range as2.AuthorizationRequests() {
		if q.Get("client_id") == old {
			t.Errorf("the first server's client_id was offered to the second")
		}
	}
	for _, tr := range as2.TokenRequests() {
		if tr.Form.Get("client_id") == old || tr.Form.Get("refresh_token") != "" {
			t.Errorf("the first server's credentials went to the second: %v", tr.Form)
		}
	}
	st, _ := c.State(t.Context())
	if st.Issuer != as2.Issuer() || len(st.Registrations) != 2 {
		t.Errorf("state issuer %s, %d registrations", st.Issuer, len(st.Registrations))
	}
}

func TestSignInFailures(t *testing.T) {
	t.Run("Authorize fails", func(t *testing.T) {
		clk := newClock()
		as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
		r := newResource(t, as, clk, prmHeader)
		o := options(clk)
		o.Authorize = func(context.Context, string) (string, error) { return "", errors.New("the user closed the window") }
		_, err := call(t, newClient(t, r, o), r)
		refused(t, err, oauth.StepAuthorization, as)
		if !strings.Contains(err.Error(), "the user closed the window") {
			t.Errorf("error %q hides the cause", err)
		}
	})
	t.Run("SignInTimeout", func(t *testing.T) {
		clk := newClock()
		as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
		r := newResource(t, as, clk, prmHeader)
		o := options(clk)
		o.SignInTimeout = 1
		o.Authorize = func(ctx context.Context, _ string) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}
		_, err := call(t, newClient(t, r, o), r)
		if refused(t, err, oauth.StepAuthorization, as); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v is not the deadline", err)
		}
	})
	t.Run("metadata endpoint slow", func(t *testing.T) {
		clk := newClock()
		as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
		as.SetDelay(as.MetadataPaths()[0], 1<<40)
		r := newResource(t, as, clk, prmHeader)
		o := options(clk)
		o.Timeout = 10_000_000 // 10ms
		_, err := call(t, newClient(t, r, o), r)
		refused(t, err, oauth.StepMetadata, as)
		if !strings.Contains(err.Error(), "did not answer within") {
			t.Errorf("error %q", err)
		}
	})
}

// A metadata URL that redirects, answers HTML, or answers too much fails
// the metadata step with an error that says which.
func TestBoundedMetadataFetch(t *testing.T) {
	other := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(other.Close)
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/prm?secret=1", http.StatusFound)
		}, "redirects are not followed"},
		{"html", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<html>sign in</html>"))
		}, "HTML"},
		{"huge", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"resource":"`))
			w.Write([]byte(strings.Repeat("x", oauth.MaxBodyBytes)))
			w.Write([]byte(`"}`))
		}, "more than"},
		{"server error", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "down", http.StatusBadGateway)
		}, "502"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/mcp" {
					w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+"http://"+r.Host+`/prm"`)
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				tc.h(w, r)
			}))
			t.Cleanup(srv.Close)
			c, err := oauth.New(srv.URL+"/mcp", oauth.Options{RedirectURL: redirectURL, Authorize: browser})
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			retry, err := c.Refused(t.Context(), req, resp)
			if retry {
				t.Fatal("retry after a failed discovery")
			}
			refused(t, err, oauth.StepMetadata)
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret=1") {
				t.Errorf("error %q, want one saying %q without the query", err, tc.want)
			}
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  string
		o    oauth.Options
	}{
		{"relative server URL", "/mcp", oauth.Options{RedirectURL: redirectURL, Authorize: browser}},
		{"no Authorize", "http://127.0.0.1/mcp", oauth.Options{RedirectURL: redirectURL}},
		{"no RedirectURL", "http://127.0.0.1/mcp", oauth.Options{Authorize: browser}},
		{"client credentials without a secret", "http://127.0.0.1/mcp", oauth.Options{GrantType: oauth.GrantClientCredentials, ClientID: "x"}},
		{"metadata document over http", "http://127.0.0.1/mcp", oauth.Options{RedirectURL: redirectURL, Authorize: browser, ClientMetadataURL: "http://x/c.json"}},
		{"unknown grant", "http://127.0.0.1/mcp", oauth.Options{GrantType: "password"}},
	} {
		if _, err := oauth.New(tc.url, tc.o); err == nil {
			t.Errorf("%s: New accepted it", tc.name)
		}
	}
	c, err := oauth.New("http://127.0.0.1:9/mcp#frag", oauth.Options{RedirectURL: redirectURL, Authorize: browser})
	if err != nil || c.Resource() != "http://127.0.0.1:9/mcp" {
		t.Errorf("Resource %q, %v: want the URL without its fragment", c.Resource(), err)
	}
}

// Tokens go to the server's origin only.
func TestAuthorizeOnlyTheServersOrigin(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	c := newClient(t, r, options(clk))
	mustCall(t, c, r)
	req, _ := http.NewRequest(http.MethodGet, "http://other.example.com/mcp", nil)
	if err := c.Authorize(req); err != nil || req.Header.Get("Authorization") != "" {
		t.Errorf("Authorize put %q on a request to another origin (%v)", req.Header.Get("Authorization"), err)
	}
}

// A dynamic registration is kept with the redirect URI it registered: a
// Client with another RedirectURL (a loopback port of another run)
// registers anew rather than send a URI the authorization server never
// saw, and one with the same URL reuses it.
func TestDynamicRegistrationFollowsTheRedirectURL(t *testing.T) {
	clk := newClock()
	as := oauthtest.New(t, oauthtest.Options{Now: clk.Now})
	r := newResource(t, as, clk, prmHeader)
	store := &oauth.MemoryStore{}
	signIn := func(redirect string) {
		t.Helper()
		o := options(clk)
		o.RedirectURL, o.Store = redirect, store
		c := newClient(t, r, o)
		mustCall(t, c, r)
		st, err := c.State(t.Context())
		if err != nil || st.Registrations[as.Issuer()].RedirectURI != redirect {
			t.Fatalf("state %+v, %v", st, err)
		}
		if err := store.Save(t.Context(), r.URL(), &oauth.State{Registrations: st.Registrations}); err != nil {
			t.Fatal(err) // the tokens are forgotten, the registration kept
		}
	}
	signIn("http://127.0.0.1:40001/callback")
	signIn("http://127.0.0.1:40001/callback")
	if n := len(as.Registrations()); n != 1 {
		t.Fatalf("the same redirect URI: %d registrations, want 1", n)
	}
	signIn("http://127.0.0.1:40002/callback")
	if n := len(as.Registrations()); n != 2 {
		t.Fatalf("another redirect URI: %d registrations, want 2", n)
	}
}
