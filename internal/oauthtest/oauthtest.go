// Package oauthtest is a fake OAuth 2.1 authorization server for tests, in
// the spirit of net/http/httptest. A resource server under test discovers
// it (RFC 8414 or OpenID Connect discovery), fetches its JWKS, verifies the
// access tokens it mints (RFC 9068) or asks its introspection endpoint (RFC
// 7662); the test meanwhile makes it misbehave in every way a real one can:
// a metadata document naming another issuer, keys rotated or retired, two
// keys under one kid, endpoints down or slow, tokens unsigned, signed with
// HMAC over the public key, or signed by a key it never published.
//
// For a client under test it also registers clients (RFC 7591, or client
// ID metadata documents), approves authorization requests at once with a
// redirect carrying the code (and RFC 9207's iss), and redeems codes with
// PKCE, rotating refresh tokens and client credentials at its token
// endpoint; Options make it refuse, omit or lie where real ones do.
//
// Every endpoint is served from one handler that counts, delays and fails
// requests by path before routing them, so every endpoint gets the same
// faults for nothing.
package oauthtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Paths of the endpoints, at the server's root whatever the issuer's path:
// a resource server finds them through the metadata document, never by
// guessing, and a test names them to SetDown, SetDelay and Hits.
const (
	PathJWKS       = "/jwks"
	PathIntrospect = "/introspect"
	PathToken      = "/token"
	PathAuthorize  = "/authorize"
)

// Discovery modes for Options.Discovery: which well-known paths serve the
// metadata document, so a test can check that a resource server falls back
// from one form to the other.
const (
	DiscoveryOAuth  = "oauth"  // RFC 8414 only: /.well-known/oauth-authorization-server[/path]
	DiscoveryOpenID = "openid" // OpenID Connect only: /.well-known/openid-configuration, path-inserted and appended
	DiscoveryBoth   = "both"   // all of them
)

// Options configure a Server; the zero value is an RFC 8414 server whose
// issuer is its bare URL, signing with RS256.
type Options struct {
	// IssuerPath, "" or e.g. "/tenant1", is appended to the server's URL to
	// make the issuer, as multi-tenant authorization servers do; the
	// well-known paths then carry it too.
	IssuerPath string
	// Discovery is one of DiscoveryOAuth (the default), DiscoveryOpenID or
	// DiscoveryBoth.
	Discovery string
	// MetadataIssuer, when set, is the issuer the metadata document names
	// instead of the real one: RFC 8414 section 3.3 says a client must then
	// not use the document.
	MetadataIssuer string
	// Algorithm is the JWS algorithm of the signing keys: "RS256" (the
	// default), "PS256", "ES256" or "EdDSA".
	Algorithm string
	// IntrospectionClientID and IntrospectionClientSecret, when set, are the
	// HTTP Basic credentials the introspection endpoint requires (RFC 7662
	// section 2.1); without them it answers 401.
	IntrospectionClientID, IntrospectionClientSecret string
	// Scopes, when set, are published as scopes_supported.
	Scopes []string
	// Now, when set, is the server's clock: for the default iat and exp of
	// tokens and for whether introspection finds a token expired, so a test
	// with a fake clock in the resource server can keep the two in step.
	Now func() time.Time

	// NoRegistration leaves registration_endpoint out of the metadata and
	// PathRegister unserved.
	NoRegistration bool
	// ClientIDMetadataDocumentSupported advertises client ID metadata
	// documents: a client_id that is a URL is then fetched, and accepted
	// when the document names it as its client_id.
	ClientIDMetadataDocumentSupported bool
	// MetadataDocumentClient fetches client ID metadata documents; nil is
	// http.DefaultClient (a test serving one over TLS passes its
	// httptest server's Client).
	MetadataDocumentClient *http.Client
	// AuthorizationResponseIss advertises and sends RFC 9207's iss in
	// authorization responses; OmitIss then leaves it out all the same.
	AuthorizationResponseIss, OmitIss bool
	// WrongIss, when set, is sent as iss in every authorization response,
	// advertised or not.
	WrongIss string
	// CodeChallengeMethods, when set, replaces ["S256"] as
	// code_challenge_methods_supported; NoCodeChallengeMethods leaves the
	// member out.
	CodeChallengeMethods   []string
	NoCodeChallengeMethods bool
	// TokenEndpointAuthMethods, when set, replaces the advertised
	// token_endpoint_auth_methods_supported (by default none,
	// client_secret_basic and client_secret_post).
	TokenEndpointAuthMethods []string
	// DenyAuthorization answers every authorization request with
	// error=access_denied.
	DenyAuthorization bool
	// RefuseResourceOnRefresh answers a refresh request carrying resource
	// with invalid_request, as Entra ID does.
	RefuseResourceOnRefresh bool
	// TokenTTL is the lifetime of the access tokens the token endpoint
	// issues; zero is an hour.
	TokenTTL time.Duration
}

// Server is a running fake authorization server. Its methods are safe for
// concurrent use, including while requests are being served.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:port, with no slash.
	URL string

	opts    Options
	issuer  string
	hs      *httptest.Server
	mux     *http.ServeMux
	closed  chan struct{} // closed when the test ends, to cut delays short
	mdPaths []string

	mu      sync.Mutex
	down    map[string]int
	delay   map[string]time.Duration
	hits    map[string]int
	keys    []*key // signing keys, oldest first; the last is current
	dup     *key   // published under the current kid while dupOn
	dupOn   bool
	foreign *key // never published; signs UntrustedToken
	revoked map[string]bool
	opaque  map[string]map[string]any

	clients       map[string]*Client
	codes         map[string]*grant
	refresh       map[string]*refreshGrant
	registrations []map[string]any
	authRequests  []url.Values
	tokenRequests []TokenRequest
	issued        []string
}

// New starts a fake authorization server on 127.0.0.1 that is closed when
// the test ends. Options that make no sense fail the test.
func New(t testing.TB, o Options) *Server {
	t.Helper()
	if o.IssuerPath != "" && (!strings.HasPrefix(o.IssuerPath, "/") || strings.HasSuffix(o.IssuerPath, "/")) {
		t.Fatalf("oauthtest: IssuerPath %q must start with a slash and not end with one", o.IssuerPath)
	}
	if o.Discovery == "" {
		o.Discovery = DiscoveryOAuth
	}
	if o.Discovery != DiscoveryOAuth && o.Discovery != DiscoveryOpenID && o.Discovery != DiscoveryBoth {
		t.Fatalf("oauthtest: unknown Discovery %q", o.Discovery)
	}
	if o.Algorithm == "" {
		o.Algorithm = "RS256"
	}
	if !knownAlgorithm(o.Algorithm) {
		t.Fatalf("oauthtest: unsupported Algorithm %q", o.Algorithm)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{
		opts:    o,
		mux:     http.NewServeMux(),
		closed:  make(chan struct{}),
		down:    map[string]int{},
		delay:   map[string]time.Duration{},
		hits:    map[string]int{},
		revoked: map[string]bool{},
		opaque:  map[string]map[string]any{},
		clients: map[string]*Client{},
		codes:   map[string]*grant{},
		refresh: map[string]*refreshGrant{},
	}
	s.mdPaths = metadataPaths(o.Discovery, o.IssuerPath)
	for _, p := range s.mdPaths {
		s.mux.HandleFunc("GET "+p, s.serveMetadata)
	}
	s.mux.HandleFunc("GET "+PathJWKS, s.serveJWKS)
	s.mux.HandleFunc("POST "+PathIntrospect, s.serveIntrospect)
	s.mux.HandleFunc("GET "+PathAuthorize, s.serveAuthorize)
	s.mux.HandleFunc("POST "+PathToken, s.serveToken)
	if !o.NoRegistration {
		s.mux.HandleFunc("POST "+PathRegister, s.serveRegister)
	}

	s.hs = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.hs.URL
	s.issuer = s.URL + o.IssuerPath
	t.Cleanup(func() {
		close(s.closed)
		s.hs.Close()
		s.releaseKeys()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, s.newKey(t))
	return s
}

// metadataPaths are the well-known paths that serve the metadata document:
// RFC 8414 inserts the well-known segment before the issuer's path, OpenID
// Connect Discovery 1.0 appends it, and some servers insert it too.
func metadataPaths(discovery, issuerPath string) []string {
	var out []string
	if discovery != DiscoveryOpenID {
		out = append(out, "/.well-known/oauth-authorization-server"+issuerPath)
	}
	if discovery != DiscoveryOAuth {
		out = append(out, issuerPath+"/.well-known/openid-configuration")
		if issuerPath != "" {
			out = append(out, "/.well-known/openid-configuration"+issuerPath)
		}
	}
	return out
}

// Issuer is the issuer identifier: URL followed by Options.IssuerPath.
func (s *Server) Issuer() string { return s.issuer }

// JWKSURL is the jwks_uri the metadata names.
func (s *Server) JWKSURL() string { return s.URL + PathJWKS }

// IntrospectionURL is the introspection_endpoint the metadata names.
func (s *Server) IntrospectionURL() string { return s.URL + PathIntrospect }

// MetadataPaths are the well-known paths that serve the metadata document
// under Options.Discovery, the RFC 8414 one first when it is served; a
// test passes them to SetDown, SetDelay or Hits.
func (s *Server) MetadataPaths() []string { return append([]string(nil), s.mdPaths...) }

// MetadataURL is the URL of the first of MetadataPaths.
func (s *Server) MetadataURL() string { return s.URL + s.mdPaths[0] }

// SetDown makes requests for path (e.g. PathJWKS or one of MetadataPaths)
// answer status with a plain-text body, after any delay; status 0 restores
// the endpoint. A 200 so set serves a body that is not JSON, for the
// malformed-document case. Any path can be set, served or not.
func (s *Server) SetDown(path string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status == 0 {
		delete(s.down, path)
	} else {
		s.down[path] = status
	}
}

// SetDelay makes requests for path wait d before they are answered, or
// until the request's context ends or the test does, so a resource
// server's timeouts can be tested; 0 removes the delay.
func (s *Server) SetDelay(path string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		delete(s.delay, path)
	} else {
		s.delay[path] = d
	}
}

// Hits is how many requests for path the server has received, answered or
// not, so a test can assert that a resource server caches and rate-limits
// its fetches.
func (s *Server) Hits(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

// serve applies the faults set for the request's path, then routes it.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	s.mu.Lock()
	s.hits[path]++
	d, status := s.delay[path], s.down[path]
	s.mu.Unlock()
	if d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-r.Context().Done():
			timer.Stop()
			return
		case <-s.closed:
			timer.Stop()
			return
		}
	}
	if status != 0 {
		http.Error(w, http.StatusText(status), status)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// serveMetadata serves the authorization server metadata (RFC 8414 section
// 2), with the members OpenID Connect Discovery requires as well so one
// document fits both forms.
func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) {
	issuer := s.issuer
	if s.opts.MetadataIssuer != "" {
		issuer = s.opts.MetadataIssuer
	}
	introspectAuth := []string{"none"}
	if s.opts.IntrospectionClientID != "" {
		introspectAuth = []string{"client_secret_basic"}
	}
	md := map[string]any{
		"issuer":                 issuer,
		"jwks_uri":               s.JWKSURL(),
		"introspection_endpoint": s.IntrospectionURL(),
		"introspection_endpoint_auth_methods_supported": introspectAuth,
		"token_endpoint":                        s.URL + PathToken,
		"authorization_endpoint":                s.URL + PathAuthorize,
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token", "client_credentials"},
		"code_challenge_methods_supported":      []string{"S256"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{s.opts.Algorithm},
		"token_endpoint_auth_methods_supported": []string{"none", "client_secret_basic", "client_secret_post"},
	}
	if s.opts.CodeChallengeMethods != nil {
		md["code_challenge_methods_supported"] = s.opts.CodeChallengeMethods
	}
	if s.opts.NoCodeChallengeMethods {
		delete(md, "code_challenge_methods_supported")
	}
	if s.opts.TokenEndpointAuthMethods != nil {
		md["token_endpoint_auth_methods_supported"] = s.opts.TokenEndpointAuthMethods
	}
	if !s.opts.NoRegistration {
		md["registration_endpoint"] = s.URL + PathRegister
	}
	if s.opts.ClientIDMetadataDocumentSupported {
		md["client_id_metadata_document_supported"] = true
	}
	if s.opts.AuthorizationResponseIss {
		md["authorization_response_iss_parameter_supported"] = true
	}
	if len(s.opts.Scopes) > 0 {
		md["scopes_supported"] = s.opts.Scopes
	}
	writeJSON(w, http.StatusOK, md)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
