package oauthtest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// PathRegister is the dynamic client registration endpoint (RFC 7591),
// named in the metadata unless Options.NoRegistration.
const PathRegister = "/register"

// Client is a client the server knows: registered by a test
// (RegisterClient) or dynamically at PathRegister. A client with a Secret
// is confidential and must authenticate at the token endpoint with its
// AuthMethod; one without is public and names itself with client_id.
type Client struct {
	ID, Secret   string
	RedirectURIs []string
	// AuthMethod is client_secret_basic (the default for a client with a
	// secret), client_secret_post, or none.
	AuthMethod string
}

// TokenRequest is one request the token endpoint received, for tests to
// assert what a client sent: the form, and the client_id of HTTP Basic
// credentials when it used them ("" when not).
type TokenRequest struct {
	Form      url.Values
	BasicAuth string
}

type grant struct {
	client, redirect, challenge, resource, scope string
	used                                         bool
}

type refreshGrant struct{ client, resource, scope string }

// RegisterClient makes c known to the authorize and token endpoints, as a
// client registered out of band.
func (s *Server) RegisterClient(c Client) {
	if c.AuthMethod == "" {
		c.AuthMethod = "none"
		if c.Secret != "" {
			c.AuthMethod = "client_secret_basic"
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[c.ID] = &c
}

// Registrations are the JSON bodies of the dynamic registration requests
// received, in order.
func (s *Server) Registrations() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.registrations)
}

// AuthorizationRequests are the query parameters of the authorization
// requests received, in order.
func (s *Server) AuthorizationRequests() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.authRequests)
}

// TokenRequests are the token requests received, in order.
func (s *Server) TokenRequests() []TokenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tokenRequests)
}

// Issued are the access and refresh tokens the token endpoint has issued,
// in order, so a test can check that none leaks where it must not.
func (s *Server) Issued() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.issued)
}

// RevokeRefreshTokens makes every refresh token issued so far invalid, so
// that the next refresh gets invalid_grant.
func (s *Server) RevokeRefreshTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.refresh)
}

// serveRegister is dynamic client registration (RFC 7591 section 3). A
// client asking for token_endpoint_auth_method "none" is public and gets
// no secret; any other gets one, for client_secret_basic unless it asked
// for client_secret_post.
func (s *Server) serveRegister(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError("invalid_client_metadata", "body is not a JSON object"))
		return
	}
	s.mu.Lock()
	s.registrations = append(s.registrations, req)
	s.mu.Unlock()
	var uris []string
	list, _ := req["redirect_uris"].([]any)
	for _, v := range list {
		u, ok := v.(string)
		if !ok {
			writeJSON(w, http.StatusBadRequest, oauthError("invalid_redirect_uri", "redirect_uris must be strings"))
			return
		}
		uris = append(uris, u)
	}
	if len(uris) == 0 {
		writeJSON(w, http.StatusBadRequest, oauthError("invalid_redirect_uri", "redirect_uris is required"))
		return
	}
	method, _ := req["token_endpoint_auth_method"].(string)
	if method == "" {
		method = "client_secret_basic"
	}
	c := Client{ID: "dcr-" + randomID(8), RedirectURIs: uris, AuthMethod: method}
	if method != "none" {
		c.Secret = randomID(16)
	}
	s.RegisterClient(c)
	out := map[string]any{}
	for k, v := range req {
		out[k] = v
	}
	out["client_id"] = c.ID
	out["client_id_issued_at"] = s.opts.Now().Unix()
	out["token_endpoint_auth_method"] = method
	if c.Secret != "" {
		out["client_secret"] = c.Secret
		out["client_secret_expires_at"] = 0
	}
	writeJSON(w, http.StatusCreated, out)
}

// client finds the client id names: a registered one, or, when the server
// supports client ID metadata documents, the document at the URL id is,
// which must name id itself as client_id.
func (s *Server) client(ctx context.Context, id string) (*Client, bool) {
	s.mu.Lock()
	c, ok := s.clients[id]
	s.mu.Unlock()
	if ok {
		return c, true
	}
	if !s.opts.ClientIDMetadataDocumentSupported || !strings.HasPrefix(id, "http") {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, false
	}
	hc := http.DefaultClient
	if s.opts.MetadataDocumentClient != nil {
		hc = s.opts.MetadataDocumentClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var doc struct {
		ClientID     string   `json:"client_id"`
		RedirectURIs []string `json:"redirect_uris"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&doc) != nil || doc.ClientID != id {
		return nil, false
	}
	return &Client{ID: id, RedirectURIs: doc.RedirectURIs, AuthMethod: "none"}, true
}

// serveAuthorize approves every authorization request at once, as the
// conformance suite's server does: it answers 302 to the redirect URI
// with a code, the state, and iss as Options say. A request naming an
// unknown client or an unregistered redirect URI gets a 400 page instead,
// since redirecting it would be an open redirect (RFC 6749 section
// 4.1.2.1); other faults go back to the client as error parameters.
func (s *Server) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	s.authRequests = append(s.authRequests, q)
	s.mu.Unlock()
	c, ok := s.client(r.Context(), q.Get("client_id"))
	if !ok {
		http.Error(w, "unknown client_id", http.StatusBadRequest)
		return
	}
	redirect := q.Get("redirect_uri")
	if !slices.Contains(c.RedirectURIs, redirect) {
		http.Error(w, "redirect_uri is not registered", http.StatusBadRequest)
		return
	}
	back := func(params url.Values) {
		if st := q.Get("state"); st != "" {
			params.Set("state", st)
		}
		switch {
		case s.opts.WrongIss != "":
			params.Set("iss", s.opts.WrongIss)
		case s.opts.AuthorizationResponseIss && !s.opts.OmitIss:
			params.Set("iss", s.issuer)
		}
		u, _ := url.Parse(redirect)
		old := u.Query()
		for k, v := range params {
			old[k] = v
		}
		u.RawQuery = old.Encode()
		http.Redirect(w, r, u.String(), http.StatusFound)
	}
	switch {
	case q.Get("response_type") != "code":
		back(url.Values{"error": {"unsupported_response_type"}})
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		back(url.Values{"error": {"invalid_request"}, "error_description": {"PKCE with S256 is required"}})
	case !absoluteWithoutFragment(q.Get("resource")):
		back(url.Values{"error": {"invalid_target"}})
	case s.opts.DenyAuthorization:
		back(url.Values{"error": {"access_denied"}, "error_description": {"the user said no"}})
	default:
		code := randomID(16)
		s.mu.Lock()
		s.codes[code] = &grant{client: c.ID, redirect: redirect, challenge: q.Get("code_challenge"),
			resource: q.Get("resource"), scope: q.Get("scope")}
		s.mu.Unlock()
		back(url.Values{"code": {code}})
	}
}

func absoluteWithoutFragment(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.IsAbs() && u.Host != "" && u.Fragment == "" && !strings.Contains(s, "#")
}

// serveToken is the token endpoint: the authorization_code grant with
// PKCE, refresh_token with rotation (each refresh token works once), and
// client_credentials for confidential clients. Access tokens are JWTs for
// the requested resource as audience.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError("invalid_request", "form does not parse"))
		return
	}
	basicID, basicSecret, basic := r.BasicAuth()
	rec := TokenRequest{Form: r.PostForm}
	if basic {
		if id, err := url.QueryUnescape(basicID); err == nil {
			basicID = id
		}
		if sec, err := url.QueryUnescape(basicSecret); err == nil {
			basicSecret = sec
		}
		rec.BasicAuth = basicID
	}
	s.mu.Lock()
	s.tokenRequests = append(s.tokenRequests, rec)
	s.mu.Unlock()

	// Authenticate the client by the method it registered.
	id := r.PostForm.Get("client_id")
	if basic {
		id = basicID
	}
	c, ok := s.client(r.Context(), id)
	if !ok {
		writeJSON(w, http.StatusUnauthorized, oauthError("invalid_client", "unknown client"))
		return
	}
	var secret string
	switch c.AuthMethod {
	case "client_secret_basic":
		if !basic {
			writeJSON(w, http.StatusUnauthorized, oauthError("invalid_client", "client_secret_basic is required"))
			return
		}
		secret = basicSecret
	case "client_secret_post":
		if basic {
			writeJSON(w, http.StatusUnauthorized, oauthError("invalid_client", "client_secret_post is required"))
			return
		}
		secret = r.PostForm.Get("client_secret")
	}
	if c.AuthMethod != "none" && subtle.ConstantTimeCompare([]byte(secret), []byte(c.Secret)) != 1 {
		writeJSON(w, http.StatusUnauthorized, oauthError("invalid_client", "wrong secret"))
		return
	}

	f := r.PostForm
	switch f.Get("grant_type") {
	case "authorization_code":
		s.mu.Lock()
		g, ok := s.codes[f.Get("code")]
		if ok {
			delete(s.codes, f.Get("code"))
		}
		s.mu.Unlock()
		sum := sha256.Sum256([]byte(f.Get("code_verifier")))
		switch {
		case !ok || g.client != c.ID:
			writeJSON(w, http.StatusBadRequest, oauthError("invalid_grant", "unknown code"))
		case f.Get("redirect_uri") != g.redirect:
			writeJSON(w, http.StatusBadRequest, oauthError("invalid_grant", "redirect_uri differs"))
		case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
			writeJSON(w, http.StatusBadRequest, oauthError("invalid_grant", "code_verifier does not match"))
		case f.Get("resource") != g.resource:
			writeJSON(w, http.StatusBadRequest, oauthError("invalid_target", "resource differs from the authorization request's"))
		default:
			s.issue(w, c, g.resource, g.scope, true)
		}
	case "refresh_token":
		_, hasResource := f["resource"]
		s.mu.Lock()
		g, ok := s.refresh[f.Get("refresh_token")]
		var refused map[string]any
		switch {
		case !ok || g.client != c.ID:
			refused = oauthError("invalid_grant", "unknown refresh token")
		case hasResource && s.opts.RefuseResourceOnRefresh:
			refused = oauthError("invalid_request", "resource is not allowed on refresh")
		case hasResource && f.Get("resource") != g.resource:
			refused = oauthError("invalid_target", "resource differs")
		default:
			// Rotation: this refresh token is spent, whatever happens next.
			delete(s.refresh, f.Get("refresh_token"))
		}
		s.mu.Unlock()
		if refused != nil {
			writeJSON(w, http.StatusBadRequest, refused)
			return
		}
		s.issue(w, c, g.resource, g.scope, true)
	case "client_credentials":
		if c.Secret == "" {
			writeJSON(w, http.StatusUnauthorized, oauthError("unauthorized_client", "client_credentials needs a confidential client"))
			return
		}
		s.issue(w, c, f.Get("resource"), f.Get("scope"), false)
	default:
		writeJSON(w, http.StatusBadRequest, oauthError("unsupported_grant_type", ""))
	}
}

// issue answers a token response: a JWT access token for resource and
// scope, and a new refresh token when refresh is set.
func (s *Server) issue(w http.ResponseWriter, c *Client, resource, scope string, refresh bool) {
	ttl := s.opts.TokenTTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	claims := Claims{Subject: "user-1", Scope: scope, ClientID: c.ID, Expiry: s.opts.Now().Add(ttl)}
	if resource != "" {
		claims.Audience = []string{resource}
	}
	s.mu.Lock()
	k := s.current()
	s.mu.Unlock()
	at, err := signed(k, s.payload(claims))
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, oauthError("server_error", err.Error()))
		return
	}
	out := map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int(ttl / time.Second)}
	if scope != "" {
		out["scope"] = scope
	}
	s.mu.Lock()
	s.issued = append(s.issued, at)
	if refresh {
		rt := "rt-" + randomID(16)
		s.refresh[rt] = &refreshGrant{client: c.ID, resource: resource, scope: scope}
		s.issued = append(s.issued, rt)
		out["refresh_token"] = rt
	}
	s.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// signed is compact for a token response, where there is no test to fail.
func signed(k *key, payload map[string]any) (string, error) {
	h, err := json.Marshal(map[string]any{"alg": k.alg, "kid": k.kid, "typ": "at+jwt"})
	if err != nil {
		return "", err
	}
	p, err := json.Marshal(payload)
	if err != nil {
		return "", err
	}
	input := b64(h) + "." + b64(p)
	sig, err := k.sign([]byte(input))
	if err != nil {
		return "", err
	}
	return input + "." + b64(sig), nil
}

func oauthError(code, description string) map[string]any {
	m := map[string]any{"error": code}
	if description != "" {
		m["error_description"] = description
	}
	return m
}
