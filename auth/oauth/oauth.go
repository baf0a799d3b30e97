// Package oauth makes an mcprel HTTP listener an OAuth 2.1 protected
// resource, as the MCP authorization specification asks: it serves the
// Protected Resource Metadata (RFC 9728) from which a client finds the
// authorization server, and it is an auth.Authenticator that accepts an
// access token only when that server issued it for this resource.
//
// A token is checked one of two ways. A JWT access token (RFC 9068) is
// verified against the keys the issuer publishes (its jwks_uri, found by
// RFC 8414 or OpenID Connect discovery): an asymmetric signature by a key
// of the set, the issuer, an audience naming this resource exactly, and
// the expiry and not-before times within a small skew. Or, with
// Introspection, the authorization server is asked (RFC 7662), which also
// sees revocations. Either way the answer is cached no longer than the
// token lives, in a cache bounded in entries.
//
// What is refused says why, in the error_description of its Bearer
// challenge (RFC 6750 §3), and never quotes the token; nothing of a token
// is logged. When an authorization server cannot be reached, nothing
// unchecked is trusted: a token whose issuer's keys were never fetched
// (or whose introspection fails) is answered 503 until it answers again;
// keys fetched before an outage stay in use through it until they are
// twice KeysMaxAge old.
package oauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/auth"
)

// Defaults of Config.
const (
	DefaultTenantClaim = "sub"
	DefaultClockSkew   = 30 * time.Second
	// DefaultMaxTokenBytes caps an access token: a JWT with a few claims
	// is well under 2 KiB; a header larger than this is refused unread.
	DefaultMaxTokenBytes = 8 << 10
	// DefaultCacheEntries caps the tokens whose verdict is remembered.
	DefaultCacheEntries = 10000
	// DefaultFetchTimeout bounds every request to the authorization
	// server: discovery, keys, introspection.
	DefaultFetchTimeout = 5 * time.Second
	// DefaultRefetchInterval is the least time between two fetches of an
	// issuer's keys (or of its metadata, after a failure): a token naming
	// an unknown key cannot make the server fetch faster than this.
	DefaultRefetchInterval = 30 * time.Second
	// DefaultKeysMaxAge is how long a fetched key set is used before it
	// is fetched again, so that a key the issuer withdrew stops being
	// trusted. A set that cannot be fetched again stays in use until it
	// is twice as old, then its issuer's tokens get 503.
	DefaultKeysMaxAge = time.Hour
)

// Algorithms are the signature algorithms a JWT access token may use
// unless Config.Algorithms says otherwise: asymmetric ones only. "none"
// and the HMAC algorithms are never accepted, whatever the Config says:
// with a public key set, an HMAC "signature" keyed by the public key is
// a forgery anyone can make.
var Algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Config configures a ResourceServer.
type Config struct {
	// Issuers are the authorization servers whose tokens are accepted,
	// as their issuer identifiers (https URLs; http only for loopback
	// addresses). Each one's metadata names it exactly, or it is not
	// used. At least one is required, unless Introspection is set.
	Issuers []string
	// Resource is this resource's identifier: the URL clients reach the
	// MCP endpoint at. It is the resource of the Protected Resource
	// Metadata and, unless Audience says otherwise, what a token's aud
	// must contain.
	Resource string
	// Audience, when set, is what a token's aud must contain instead of
	// Resource (an authorization server that names resources its own
	// way).
	Audience string
	// Scopes are required of every request: a token without all of them
	// is refused 403 insufficient_scope. They are listed, with
	// ExtraScopes, as the metadata's scopes_supported.
	Scopes []string
	// ExtraScopes are further scopes some operations need (per tool):
	// listed in scopes_supported, checked by Need.
	ExtraScopes []string
	// TenantClaim names the claim whose value is the request's tenant;
	// empty means DefaultTenantClaim ("sub"). A token without sub (a
	// client's own, introspected) is its client_id's. With several Issuers the
	// tenant is the issuer, a space and the claim's value, so that two
	// issuers' subjects never share a tenant.
	TenantClaim string
	// Introspection, when set, checks every token by RFC 7662
	// introspection instead of as a JWT.
	Introspection *Introspection
	// Algorithms narrows the accepted signature algorithms; nil means
	// Algorithms. Only asymmetric algorithms may be named.
	Algorithms []string
	// ClockSkew is how far exp and nbf may be off; zero means
	// DefaultClockSkew.
	ClockSkew time.Duration
	// MaxTokenBytes caps a token; zero means DefaultMaxTokenBytes.
	MaxTokenBytes int
	// CacheEntries caps the verdicts remembered; zero means
	// DefaultCacheEntries, negative none.
	CacheEntries int
	// FetchTimeout, RefetchInterval and KeysMaxAge: zero means their
	// defaults.
	FetchTimeout    time.Duration
	RefetchInterval time.Duration
	KeysMaxAge      time.Duration
	// HTTPClient makes the requests to the authorization servers; nil
	// means one that follows no redirect (a moved metadata document or
	// key set is refused, not trusted at its new address).
	HTTPClient *http.Client
	// Logger gets a line when an authorization server fails or changes
	// (at most one per RefetchInterval per issuer) and, at debug level,
	// why a token was refused. Nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Introspection is an RFC 7662 introspection endpoint and the
// credentials this resource server authenticates to it with (HTTP
// Basic, client_secret_basic).
type Introspection struct {
	URL          string
	ClientID     string
	ClientSecret string
}

// ResourceServer checks access tokens (Authenticate) and serves the
// Protected Resource Metadata (MetadataHandler).
type ResourceServer struct {
	cfg      Config
	audience string
	algs     []string
	issuers  map[string]*issuer // by issuer identifier
	cache    *verdicts
	client   *http.Client
	log      *slog.Logger
	now      func() time.Time
	metaURL  string // the Protected Resource Metadata's path-inserted URL
	required []string

	asking chan struct{} // a slot per introspection under way

	warnMu   sync.Mutex
	warnedAt time.Time // when a failing introspection endpoint was last logged
}

// New checks cfg and returns its ResourceServer. Each issuer's metadata
// and keys are fetched now, waiting at most FetchTimeout for each: an
// issuer that does not answer is logged and fetched again when a token
// needs it; until then its tokens are refused with 503. ctx bounds this
// first fetch only.
func New(ctx context.Context, cfg Config) (*ResourceServer, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	rs := &ResourceServer{
		cfg:      cfg,
		audience: cfg.Audience,
		algs:     cfg.Algorithms,
		issuers:  map[string]*issuer{},
		client:   cfg.HTTPClient,
		log:      cfg.Logger,
		now:      cfg.Now,
		required: slices.Clone(cfg.Scopes),
		asking:   make(chan struct{}, maxIntrospections),
	}
	if rs.audience == "" {
		rs.audience = cfg.Resource
	}
	if rs.algs == nil {
		rs.algs = Algorithms
	}
	if rs.client == nil {
		rs.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if rs.log == nil {
		rs.log = slog.New(slog.DiscardHandler)
	}
	if rs.now == nil {
		rs.now = time.Now
	}
	rs.cfg.TenantClaim = cmpOr(cfg.TenantClaim, DefaultTenantClaim)
	rs.cfg.ClockSkew = cmpOr(cfg.ClockSkew, DefaultClockSkew)
	rs.cfg.MaxTokenBytes = cmpOr(cfg.MaxTokenBytes, DefaultMaxTokenBytes)
	rs.cfg.FetchTimeout = cmpOr(cfg.FetchTimeout, DefaultFetchTimeout)
	rs.cfg.RefetchInterval = cmpOr(cfg.RefetchInterval, DefaultRefetchInterval)
	rs.cfg.KeysMaxAge = cmpOr(cfg.KeysMaxAge, DefaultKeysMaxAge)
	entries := cmpOr(cfg.CacheEntries, DefaultCacheEntries)
	rs.cache = newVerdicts(max(entries, 0))
	rs.metaURL = MetadataURL(cfg.Resource)
	for _, id := range cfg.Issuers {
		rs.issuers[id] = &issuer{id: id, rs: rs}
	}
	if cfg.Introspection == nil {
		var wg sync.WaitGroup
		for _, is := range rs.issuers {
			wg.Go(func() {
				if _, err := is.keys(ctx, ""); err != nil {
					rs.log.Warn("oauth: the authorization server cannot be reached yet: its tokens are refused with 503 until it answers", "issuer", is.id, "error", err)
				}
			})
		}
		wg.Wait()
	}
	return rs, nil
}

func cmpOr[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// Check reports what is wrong with cfg, as New would. A Resource left
// empty is not checked: a caller that learns it later (once its listener
// is bound) checks the rest early.
func (cfg *Config) Check() error {
	c := *cfg
	if c.Resource == "" {
		c.Resource = "https://resource.invalid/mcp"
	}
	return c.check()
}

func (cfg *Config) check() error {
	if len(cfg.Issuers) == 0 && cfg.Introspection == nil {
		return errors.New("oauth: Config.Issuers names no authorization server (and there is no Introspection)")
	}
	seen := map[string]bool{}
	for _, id := range cfg.Issuers {
		if err := checkURL("Config.Issuers", id); err != nil {
			return err
		}
		if seen[id] {
			return fmt.Errorf("oauth: Config.Issuers names %q twice", id)
		}
		seen[id] = true
	}
	if err := checkURL("Config.Resource", cfg.Resource); err != nil {
		return err
	}
	if u, _ := url.Parse(cfg.Resource); u.Fragment != "" || u.RawQuery != "" {
		return fmt.Errorf("oauth: Config.Resource %q must have no query or fragment (RFC 8707)", cfg.Resource)
	}
	if in := cfg.Introspection; in != nil {
		if err := checkURL("Config.Introspection.URL", in.URL); err != nil {
			return err
		}
		if in.ClientID == "" {
			return errors.New("oauth: Config.Introspection needs the ClientID (and ClientSecret) this resource server authenticates with")
		}
	}
	for _, a := range cfg.Algorithms {
		if !slices.Contains(Algorithms, a) {
			return fmt.Errorf("oauth: Config.Algorithms: %q is not an asymmetric signature algorithm (one of %s)", a, strings.Join(Algorithms, ", "))
		}
	}
	for _, s := range slices.Concat(cfg.Scopes, cfg.ExtraScopes) {
		if s == "" || strings.ContainsAny(s, " \"\\") || strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
			return fmt.Errorf("oauth: scope %q is not a scope token (RFC 6749 §3.3: printable ASCII, no space, quote or backslash)", s)
		}
	}
	if cfg.ClockSkew < 0 || cfg.FetchTimeout < 0 || cfg.RefetchInterval < 0 || cfg.KeysMaxAge < 0 || cfg.MaxTokenBytes < 0 {
		return errors.New("oauth: Config durations and sizes must not be negative")
	}
	return nil
}

// checkURL accepts an absolute https URL, or http to a loopback host
// (for tests and a local authorization server).
func checkURL(field, s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("oauth: %s wants an absolute https URL, not %q", field, s)
	}
	if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return fmt.Errorf("oauth: %s %q must use https (http only for localhost, 127.0.0.1 or ::1)", field, s)
	}
	return nil
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "::1" || strings.HasPrefix(host, "127.")
}

// Scopes are the scopes the metadata lists as supported: the required
// ones, then the others operations may need.
func (rs *ResourceServer) Scopes() []string {
	out := slices.Clone(rs.cfg.Scopes)
	for _, s := range rs.cfg.ExtraScopes {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Resource is the resource identifier.
func (rs *ResourceServer) Resource() string { return rs.cfg.Resource }

// Authenticate returns the Principal of r's access token: its tenant
// (the TenantClaim) and scopes. A request without a bearer token, or with
// one not accepted, gets an *auth.Error: 401 with the resource metadata's
// URL and the required scopes in its challenge (and invalid_token, with
// why, when a token was sent); 403 insufficient_scope when the token
// lacks a required scope; 503 when the authorization server cannot be
// reached to check it.
func (rs *ResourceServer) Authenticate(r *http.Request) (auth.Principal, error) {
	header := r.Header.Get("Authorization")
	scheme, token, _ := strings.Cut(header, " ")
	if header == "" || !strings.EqualFold(scheme, "Bearer") {
		return auth.Principal{}, rs.refuse(http.StatusUnauthorized, "", "")
	}
	token = strings.TrimSpace(token)
	if len(token) > rs.cfg.MaxTokenBytes {
		return auth.Principal{}, rs.invalid(fmt.Sprintf("the access token exceeds %d bytes", rs.cfg.MaxTokenBytes))
	}
	if token == "" {
		return auth.Principal{}, rs.invalid("the bearer token is empty")
	}
	p, err := rs.check(r.Context(), token)
	if err != nil {
		var e *auth.Error
		if errors.As(err, &e) {
			rs.log.Debug("oauth: access token refused", "status", e.Status, "why", e.Description)
		}
		return auth.Principal{}, err
	}
	if err := rs.Need(p, nil); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// Need returns nil when p holds every scope of the Config's Scopes and
// need; otherwise the 403 insufficient_scope refusal whose challenge
// names all of them (the MCP specification: every scope the operation
// needs, in one challenge).
func (rs *ResourceServer) Need(p auth.Principal, need []string) error {
	all := rs.required
	if len(need) > 0 {
		all = slices.Clone(all)
		for _, s := range need {
			if !slices.Contains(all, s) {
				all = append(all, s)
			}
		}
	}
	for _, s := range all {
		if !slices.Contains(p.Scopes, s) {
			return &auth.Error{Status: http.StatusForbidden, Code: "insufficient_scope",
				Description:      fmt.Sprintf("the access token lacks the scope %q", s),
				Scopes:           all,
				ResourceMetadata: rs.metaURL}
		}
	}
	return nil
}

// refuse is a refusal with the resource's challenge.
func (rs *ResourceServer) refuse(status int, code, description string) *auth.Error {
	e := &auth.Error{Status: status, Code: code, Description: description, Scopes: rs.required, ResourceMetadata: rs.metaURL}
	if status == http.StatusServiceUnavailable {
		e.RetryAfter = max(1, int(rs.cfg.RefetchInterval/time.Second))
	}
	return e
}

// invalid is the 401 invalid_token refusal of a token, saying why.
func (rs *ResourceServer) invalid(why string) *auth.Error {
	return rs.refuse(http.StatusUnauthorized, "invalid_token", why)
}

// unavailable is the 503 of a token that cannot be checked now.
func (rs *ResourceServer) unavailable(why string) *auth.Error {
	return rs.refuse(http.StatusServiceUnavailable, "", why)
}
