package oauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Grant types for Options.GrantType.
const (
	// GrantAuthorizationCode signs a user in through a browser, with PKCE:
	// the default.
	GrantAuthorizationCode = "authorization_code"
	// GrantClientCredentials is a machine's own sign-in with its client
	// ID and secret (OAuth 2.1 section 4.2): for a gateway toward its
	// upstream servers.
	GrantClientCredentials = "client_credentials"
)

// MaxStepUps is how many times a Client re-authorizes for a server that
// answers 403 insufficient_scope before it gives up, until a 401 starts a
// sign-in afresh.
const MaxStepUps = 3

// Defaults of Options.
const (
	DefaultTimeout       = 30 * time.Second
	DefaultSignInTimeout = 5 * time.Minute
)

// Options configure a Client. The zero value needs Authorize and
// RedirectURL to sign a user in; for GrantClientCredentials, ClientID and
// ClientSecret instead.
type Options struct {
	// GrantType is GrantAuthorizationCode ("" is it) or
	// GrantClientCredentials.
	GrantType string

	// ClientID and ClientSecret are credentials registered with the
	// authorization server beforehand, used first when set (and with
	// every authorization server the server names, since the program
	// gave them). ClientSecret "" is a public client.
	ClientID, ClientSecret string
	// ClientMetadataURL is the HTTPS URL of the client's Client ID
	// Metadata Document, used as client_id with an authorization server
	// that advertises client_id_metadata_document_supported.
	ClientMetadataURL string
	// ClientName is the client_name of a dynamic registration; "" is
	// "mcprel".
	ClientName string

	// RedirectURL is the redirect URI registered and sent: a loopback
	// http URL (registered with application_type "native") or an https
	// one ("web").
	RedirectURL string
	// Authorize is the interactive step, the program's: show the user
	// authorizationURL (open a browser) and return the URL the browser
	// was redirected to, query and all. It runs under SignInTimeout.
	Authorize func(ctx context.Context, authorizationURL string) (redirectURL string, err error)

	// SelectAuthorizationServer chooses among the authorization servers
	// the resource's metadata names; nil takes the first.
	SelectAuthorizationServer func(issuers []string) (string, error)

	// NoResourceOnRefresh leaves the resource parameter out of refresh
	// requests, for authorization servers that refuse it there (Entra
	// ID). It is sent with every other token request.
	NoResourceOnRefresh bool

	// Store keeps tokens and registrations; nil is a new MemoryStore.
	Store Store
	// HTTPClient sends the requests to metadata endpoints and the
	// authorization server; nil is http.DefaultClient. Its redirect
	// policy is replaced: none are followed.
	HTTPClient *http.Client
	// Timeout bounds each request to a metadata endpoint or the
	// authorization server; 0 is DefaultTimeout.
	Timeout time.Duration
	// SignInTimeout bounds Authorize; 0 is DefaultSignInTimeout.
	SignInTimeout time.Duration
	// Now is the clock for token expiry; nil is time.Now.
	Now func() time.Time
}

// Client is the OAuth side of one MCP server for an MCP client: it puts
// the server's access token on every request to the server (Authorize)
// and, told that the server refused one (Refused), discovers the
// server's authorization server and signs in, refreshes, or asks for more
// scopes. Its methods are safe for concurrent use; at most one sign-in
// or refresh runs at a time, and the others wait for its outcome.
type Client struct {
	opts     Options
	resource string // the server's resource identifier: its URL without fragment
	server   *url.URL
	hc       *http.Client

	// flight is held across every sign-in, refresh and Store call.
	flight sync.Mutex
	// Guarded by flight:
	stepUps     int
	refreshedOn string // the access token a refresh answering a 401 gave

	mu     sync.Mutex
	loaded bool   // the Store has been read
	st     *State // published states are never modified
}

// New returns a Client for the MCP server at serverURL, with no network
// traffic: it signs in when the server first refuses a request.
func New(serverURL string, o Options) (*Client, error) {
	u, err := url.Parse(serverURL)
	if err != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("oauth: server URL %q is not an absolute http(s) URL", printable(serverURL, 200))
	}
	u.Fragment, u.RawFragment = "", ""
	switch o.GrantType {
	case "":
		o.GrantType = GrantAuthorizationCode
		fallthrough
	case GrantAuthorizationCode:
		if o.Authorize == nil {
			return nil, errors.New("oauth: Options.Authorize is required to sign a user in")
		}
		r, err := url.Parse(o.RedirectURL)
		if err != nil || !r.IsAbs() || r.Fragment != "" {
			return nil, errors.New("oauth: Options.RedirectURL must be an absolute URL without fragment")
		}
	case GrantClientCredentials:
		if o.ClientID == "" || o.ClientSecret == "" {
			return nil, errors.New("oauth: client credentials need Options.ClientID and ClientSecret")
		}
	default:
		return nil, fmt.Errorf("oauth: unknown GrantType %q", o.GrantType)
	}
	if o.ClientMetadataURL != "" {
		m, err := url.Parse(o.ClientMetadataURL)
		if err != nil || m.Scheme != "https" || m.Path == "" || m.Path == "/" {
			return nil, errors.New("oauth: Options.ClientMetadataURL must be an https URL with a path")
		}
	}
	if o.Timeout < 0 || o.SignInTimeout < 0 {
		return nil, errors.New("oauth: negative timeouts")
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.SignInTimeout == 0 {
		o.SignInTimeout = DefaultSignInTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Store == nil {
		o.Store = &MemoryStore{}
	}
	hc := http.DefaultClient
	if o.HTTPClient != nil {
		hc = o.HTTPClient
	}
	noRedirects := *hc
	noRedirects.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{opts: o, resource: u.String(), server: u, hc: &noRedirects}, nil
}

// Resource is the server's resource identifier, its URL without
// fragment: the key of its State in the Store.
func (c *Client) Resource() string { return c.resource }

// State returns a copy of the current State, loading it from the Store
// first if need be; nil when there is none.
func (c *Client) State(ctx context.Context) (*State, error) {
	st, err := c.current(ctx)
	if st == nil || err != nil {
		return nil, err
	}
	return st.clone(), nil
}

// SignOut forgets the server's tokens and registrations, in memory and in
// the Store.
func (c *Client) SignOut(ctx context.Context) error {
	c.flight.Lock()
	defer c.flight.Unlock()
	c.publish(nil)
	return c.opts.Store.Delete(ctx, c.resource)
}

func (c *Client) snapshot() *State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

func (c *Client) publish(st *State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st, c.loaded = st, true
}

// current is the published State, loaded from the Store on first use.
// Once loaded, it waits for no sign-in or refresh in flight: a token
// that is still good is used meanwhile.
func (c *Client) current(ctx context.Context) (*State, error) {
	c.mu.Lock()
	st, loaded := c.st, c.loaded
	c.mu.Unlock()
	if loaded {
		return st, nil
	}
	c.flight.Lock()
	defer c.flight.Unlock()
	return c.load(ctx)
}

// load reads the Store once. c.flight is held.
func (c *Client) load(ctx context.Context) (*State, error) {
	c.mu.Lock()
	st, loaded := c.st, c.loaded
	c.mu.Unlock()
	if loaded {
		return st, nil
	}
	st, err := c.opts.Store.Load(ctx, c.resource)
	if err != nil {
		return nil, fmt.Errorf("oauth: loading the state of %s: %w", c.resource, err)
	}
	c.publish(st)
	return st, nil
}

// save stores st, then publishes it: a rotated refresh token is durable
// before the access token that came with it is used. When the Store
// fails, st is published all the same, since the old refresh token may
// be spent, and the error is returned.
func (c *Client) save(ctx context.Context, step string, st *State) error {
	err := c.opts.Store.Save(ctx, c.resource, st)
	c.publish(st)
	if err != nil {
		return &Error{Step: step, Err: fmt.Errorf("saving the new tokens: %w", err)}
	}
	return nil
}

// sameServer reports whether u is on the server's origin: tokens go
// nowhere else, a redirect included.
func (c *Client) sameServer(u *url.URL) bool {
	return u != nil && strings.EqualFold(u.Scheme, c.server.Scheme) && strings.EqualFold(u.Host, c.server.Host)
}

// fresh reports whether st's access token is good for another minute.
func (c *Client) fresh(st *State) bool {
	return st != nil && st.AccessToken != "" && (st.Expiry.IsZero() || c.opts.Now().Add(time.Minute).Before(st.Expiry))
}

// Authorize sets req's Authorization header to the server's access token
// when the Client holds one, refreshing it first when it expires within a
// minute (one refresh at a time: concurrent callers wait for it). It sets
// nothing on a request to another origin than the server's, nor when it
// holds no token: the server's 401 then leads to Refused.
//
// A token that expires soon but not yet is used when its refresh fails;
// an expired one whose refresh token is spent is dropped, so the request
// goes without and the sign-in follows its 401.
func (c *Client) Authorize(req *http.Request) error {
	if !c.sameServer(req.URL) {
		return nil
	}
	ctx := req.Context()
	st, err := c.current(ctx)
	if err != nil {
		return err
	}
	if !c.fresh(st) && st != nil && st.AccessToken != "" && c.renewable(st) {
		c.flight.Lock()
		st, err = c.renewStale(ctx)
		c.flight.Unlock()
		if err != nil {
			return err
		}
	}
	if st != nil && st.AccessToken != "" {
		req.Header.Set("Authorization", "Bearer "+st.AccessToken)
	}
	return nil
}

// renewable reports whether st's access token can be renewed without the
// user: by its refresh token or by client credentials.
func (c *Client) renewable(st *State) bool {
	return st.TokenEndpoint != "" && (st.RefreshToken != "" || c.opts.GrantType == GrantClientCredentials)
}

// renewStale renews the access token unless another caller did while
// this one waited. c.flight is held.
func (c *Client) renewStale(ctx context.Context) (*State, error) {
	st := c.snapshot()
	if st == nil || c.fresh(st) || st.AccessToken == "" || !c.renewable(st) {
		return st, nil
	}
	next, err := c.renew(ctx, st, nil)
	if err == nil {
		return next, nil
	}
	if next != nil { // saved to memory, not to the Store
		return next, err
	}
	if st.Expiry.After(c.opts.Now()) {
		return st, nil // still good: use it, and try again next time
	}
	var e *Error
	if errors.As(err, &e) && e.Code == "invalid_grant" {
		dropped := st.clone()
		dropped.AccessToken, dropped.RefreshToken, dropped.Expiry = "", "", time.Time{}
		if err := c.save(ctx, StepRefresh, dropped); err != nil {
			return dropped, err
		}
		return dropped, nil
	}
	return nil, err
}

// Refused is told that the server answered req with resp. For a 401, or
// a 403 with error="insufficient_scope" (or with no error, naming a
// scope the token was not granted), it gets new credentials:
// another caller's, when they changed since req was sent; a refresh, for
// a 401 when the Client holds a refresh token; otherwise discovery and a
// sign-in (Options.Authorize), asking on a 403 for the scopes held and
// the ones challenged together. retry is true when req may be sent again
// with new credentials; otherwise err, an *Error, says which step failed.
// Any other answer is not Refused's to mend: false and no error.
func (c *Client) Refused(ctx context.Context, req *http.Request, resp *http.Response) (retry bool, err error) {
	if resp == nil || !c.sameServer(req.URL) {
		return false, nil
	}
	challenge := bearer(resp.Header.Values("WWW-Authenticate"))
	challenged := strings.Fields(challenge["scope"])
	stepUp := resp.StatusCode == http.StatusForbidden && strings.EqualFold(challenge["error"], "insufficient_scope")
	// A 403 whose challenge has no error but names scopes is taken for
	// insufficient_scope when the token lacks one of them: the Go SDK's
	// RequireBearerToken (v1.8.0) answers a missing scope so.
	unnamed := resp.StatusCode == http.StatusForbidden && challenge["error"] == "" && len(challenged) > 0
	if resp.StatusCode != http.StatusUnauthorized && !stepUp && !unnamed {
		return false, nil
	}
	c.flight.Lock()
	defer c.flight.Unlock()
	st, err := c.load(ctx)
	if err != nil {
		return false, err
	}
	if unnamed {
		if st == nil || !slices.ContainsFunc(challenged, func(s string) bool { return !slices.Contains(st.Scopes, s) }) {
			return false, nil // forbidden for another reason: no scope would help
		}
		stepUp = true
	}
	sent, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if st != nil && st.AccessToken != "" && sent != st.AccessToken {
		return true, nil // new credentials since req went out
	}

	d, err := c.discover(ctx, challenge["resource_metadata"])
	if err != nil {
		return false, err
	}
	st = st.clone()
	if st.Issuer != d.issuer || st.Resource != d.resource {
		// Tokens from another authorization server, or for another
		// resource, are never sent; its registrations stay its own.
		st.AccessToken, st.RefreshToken, st.Expiry, st.Scopes = "", "", time.Time{}, nil
		st.Issuer, st.Resource = d.issuer, d.resource
	}
	st.TokenEndpoint = d.as.TokenEndpoint

	var scopes []string
	if stepUp {
		if c.stepUps >= MaxStepUps {
			return false, &Error{Step: StepAuthorization, Code: "insufficient_scope",
				Err: fmt.Errorf("the server still wants more scope after %d re-authorizations", MaxStepUps)}
		}
		c.stepUps++
		scopes = union(st.Scopes, challenged)
	} else {
		c.stepUps = 0
		if len(challenged) == 0 {
			challenged = d.scopes
		}
		scopes = union(st.Scopes, challenged)
		if st.RefreshToken != "" && (c.refreshedOn == "" || sent != c.refreshedOn) {
			next, err := c.renew(ctx, st, d)
			if err == nil {
				c.refreshedOn = next.AccessToken
				return true, nil
			}
			var e *Error
			if next != nil || !errors.As(err, &e) || e.Code != "invalid_grant" {
				return false, err
			}
			// The refresh token is spent: sign in again.
		}
	}
	st.AccessToken, st.RefreshToken, st.Expiry = "", "", time.Time{}
	if c.opts.GrantType == GrantClientCredentials {
		_, err = c.clientCredentials(ctx, st, d, scopes)
	} else {
		_, err = c.signIn(ctx, st, d, scopes)
	}
	return err == nil, err
}

// union is a's scopes then b's not in a, without duplicates.
func union(a, b []string) []string {
	var out []string
	for _, s := range slices.Concat(a, b) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
