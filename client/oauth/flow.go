package oauth

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// signIn runs the authorization code grant with PKCE for scopes, then
// saves and publishes the tokens. st is the caller's own copy.
func (c *Client) signIn(ctx context.Context, st *State, d *discovery, scopes []string) (*State, error) {
	reg, secret, err := c.register(ctx, st, d)
	if err != nil {
		return nil, err
	}
	// A refresh token is worth asking for where the authorization server
	// lists offline_access (MCP 2026-07-28, SEP-2207); never alone, which
	// would narrow a request that asks for the server's default scopes.
	if len(scopes) > 0 && slices.Contains(d.as.ScopesSupported, "offline_access") && !slices.Contains(scopes, "offline_access") {
		scopes = append(slices.Clip(scopes), "offline_access")
	}
	verifier := random(32)
	sum := sha256.Sum256([]byte(verifier))
	state := random(16)

	au, err := url.Parse(d.as.AuthorizationEndpoint)
	if err != nil {
		return nil, stepErr(StepMetadata, err)
	}
	q := au.Query()
	q.Set("response_type", "code")
	q.Set("client_id", reg.ClientID)
	q.Set("redirect_uri", c.opts.RedirectURL)
	q.Set("code_challenge", base64.RawURLEncoding.EncodeToString(sum[:]))
	q.Set("code_challenge_method", "S256")
	q.Set("state", state)
	q.Set("resource", d.resource)
	if len(scopes) > 0 {
		q.Set("scope", strings.Join(scopes, " "))
	}
	if slices.Contains(scopes, "offline_access") && !q.Has("prompt") {
		// OpenID Connect grants offline_access only with consent asked
		// (Core §11): without it, no refresh token comes, and a sign-in
		// lasts one access token. Servers that do not know prompt
		// ignore it.
		q.Set("prompt", "consent")
	}
	au.RawQuery = q.Encode()

	sctx, cancel := context.WithTimeout(ctx, c.opts.SignInTimeout)
	redirect, err := c.opts.Authorize(sctx, au.String())
	cancel()
	if err != nil {
		return nil, &Error{Step: StepAuthorization, Err: fmt.Errorf("the sign-in did not complete: %w", err)}
	}
	code, err := c.checkResponse(redirect, state, d)
	if err != nil {
		return nil, err
	}

	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"code_verifier": {verifier},
		"redirect_uri":  {c.opts.RedirectURL},
		"resource":      {d.resource},
	}
	tr, err := c.token(ctx, StepToken, d.as.TokenEndpoint, form, reg, secret, code, verifier)
	if err != nil {
		var e *Error
		if reg.Source == SourceDynamic && errors.As(err, &e) && e.Code == "invalid_client" {
			// The server forgot the registration: register anew next time.
			delete(st.Registrations, d.issuer)
			c.save(ctx, StepToken, st)
		}
		return nil, err
	}
	st.apply(tr, scopes, c.opts.Now())
	return st, c.save(ctx, StepToken, st)
}

// checkResponse checks the authorization response the browser brought
// back and returns its code. RFC 9207 comes first: a response whose iss
// is wrong, or missing when the server promised it, may be an attacker's,
// so not even its error is believed.
func (c *Client) checkResponse(redirect, state string, d *discovery) (string, error) {
	ru, err := url.Parse(redirect)
	want, _ := url.Parse(c.opts.RedirectURL)
	if err != nil || ru.Scheme != want.Scheme || !strings.EqualFold(ru.Host, want.Host) || ru.Path != want.Path {
		return "", &Error{Step: StepAuthorization, Err: errors.New("Authorize returned a URL that is not at the redirect URI")}
	}
	q := ru.Query()
	iss, hasIss := q["iss"]
	switch {
	case !hasIss && d.as.IssParameterSupported:
		return "", &Error{Step: StepIssuer, Err: fmt.Errorf("the authorization response has no iss, though %s promises one", d.issuer)}
	case hasIss && (len(iss) != 1 || iss[0] != d.issuer):
		return "", &Error{Step: StepIssuer, Err: fmt.Errorf("the authorization response's iss %q is not %s", printable(q.Get("iss"), 200), d.issuer)}
	}
	if q.Get("state") != state {
		return "", &Error{Step: StepAuthorization, Err: errors.New("the authorization response's state is not the request's")}
	}
	if e := q.Get("error"); e != "" {
		return "", &Error{Step: StepAuthorization, Code: printable(e, 64),
			Err: fmt.Errorf("the authorization server answered %s", describe(e, q.Get("error_description")))}
	}
	code := q.Get("code")
	if code == "" {
		return "", &Error{Step: StepAuthorization, Err: errors.New("the authorization response has no code")}
	}
	return code, nil
}

// register finds the client's registration with d's authorization
// server, in MCP's order: pre-registered credentials, a client ID
// metadata document the server accepts, a dynamic registration held from
// before, a new dynamic registration (saved at once). It records the one
// used in st.
func (c *Client) register(ctx context.Context, st *State, d *discovery) (Registration, string, error) {
	if st.Registrations == nil {
		st.Registrations = map[string]Registration{}
	}
	if c.opts.ClientID != "" {
		method, err := authMethod(c.opts.ClientSecret != "", d.as.TokenEndpointAuthMethodsSupported)
		if err != nil {
			return Registration{}, "", &Error{Step: StepRegistration, Err: err}
		}
		reg := Registration{ClientID: c.opts.ClientID, AuthMethod: method, Source: SourcePreregistered}
		st.Registrations[d.issuer] = reg
		return reg, c.opts.ClientSecret, nil
	}
	if c.opts.ClientMetadataURL != "" && d.as.ClientIDMetadataDocumentSupported {
		reg := Registration{ClientID: c.opts.ClientMetadataURL, AuthMethod: "none", Source: SourceMetadataDocument}
		st.Registrations[d.issuer] = reg
		return reg, "", nil
	}
	if reg, ok := st.Registrations[d.issuer]; ok && reg.Source == SourceDynamic &&
		(reg.RedirectURI == "" || reg.RedirectURI == c.opts.RedirectURL) {
		return reg, reg.ClientSecret, nil
	}
	if d.as.RegistrationEndpoint == "" {
		return Registration{}, "", &Error{Step: StepRegistration, Err: fmt.Errorf(
			"the authorization server offers no way to register: %s has no registration endpoint, no client ID metadata document is accepted or given, and no client ID is configured", d.issuer)}
	}
	reg, err := c.registerDynamically(ctx, d)
	if err != nil {
		return Registration{}, "", err
	}
	st.Registrations[d.issuer] = reg
	if err := c.save(ctx, StepRegistration, st); err != nil {
		return Registration{}, "", err
	}
	return reg, reg.ClientSecret, nil
}

// authMethod picks how a client authenticates at the token endpoint: none
// without a secret, else client_secret_basic (RFC 8414's default when the
// server lists none) or client_secret_post.
func authMethod(hasSecret bool, supported []string) (string, error) {
	switch {
	case !hasSecret:
		return "none", nil
	case len(supported) == 0 || slices.Contains(supported, "client_secret_basic"):
		return "client_secret_basic", nil
	case slices.Contains(supported, "client_secret_post"):
		return "client_secret_post", nil
	}
	return "", fmt.Errorf("the token endpoint takes neither client_secret_basic nor client_secret_post (it takes %v)", supported)
}

// registerDynamically registers a public client (RFC 7591), native when
// its redirect URI is loopback or a private scheme, web otherwise.
func (c *Client) registerDynamically(ctx context.Context, d *discovery) (Registration, error) {
	name := c.opts.ClientName
	if name == "" {
		name = "mcprel"
	}
	appType := "web"
	if r, _ := url.Parse(c.opts.RedirectURL); r.Scheme != "https" && (r.Scheme != "http" || loopback(r.Hostname())) {
		appType = "native"
	}
	body, err := json.Marshal(map[string]any{
		"client_name":                name,
		"redirect_uris":              []string{c.opts.RedirectURL},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
		"application_type":           appType,
	})
	if err != nil {
		return Registration{}, stepErr(StepRegistration, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.as.RegistrationEndpoint, bytes.NewReader(body))
	if err != nil {
		return Registration{}, stepErr(StepRegistration, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, b, err := c.do(ctx, req)
	if err != nil {
		return Registration{}, stepErr(StepRegistration, err)
	}
	var out struct {
		ClientID         string `json:"client_id"`
		ClientSecret     string `json:"client_secret"`
		AuthMethod       string `json:"token_endpoint_auth_method"`
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}
	derr := decodeJSON(redact(req.URL), resp, b, &out)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		if derr == nil && out.Error != "" {
			return Registration{}, &Error{Step: StepRegistration, Code: printable(out.Error, 64),
				Err: fmt.Errorf("%s answered %d: %s", redact(req.URL), resp.StatusCode, describe(out.Error, out.ErrorDescription))}
		}
		return Registration{}, &Error{Step: StepRegistration, Err: fmt.Errorf("%s answered %d", redact(req.URL), resp.StatusCode)}
	}
	if derr != nil {
		return Registration{}, stepErr(StepRegistration, derr)
	}
	if out.ClientID == "" {
		return Registration{}, &Error{Step: StepRegistration, Err: fmt.Errorf("%s answered no client_id", redact(req.URL))}
	}
	method := out.AuthMethod
	if method == "" {
		method = "none"
	}
	if method != "none" && method != "client_secret_basic" && method != "client_secret_post" || method != "none" && out.ClientSecret == "" {
		return Registration{}, &Error{Step: StepRegistration, Err: fmt.Errorf("%s registered the client for %q, which this client cannot do", redact(req.URL), printable(method, 64))}
	}
	return Registration{ClientID: out.ClientID, ClientSecret: out.ClientSecret, AuthMethod: method, Source: SourceDynamic,
		RedirectURI: c.opts.RedirectURL}, nil
}

// renew gets a new access token without the user: by refresh token, or by
// client credentials again. It returns the new State, saved and
// published; a non-nil State with an error is one the Store failed to
// keep.
func (c *Client) renew(ctx context.Context, st *State, d *discovery) (*State, error) {
	if c.opts.GrantType == GrantClientCredentials {
		return c.clientCredentials(ctx, st.clone(), d, st.Scopes)
	}
	reg, ok := st.Registrations[st.Issuer]
	if !ok {
		return nil, &Error{Step: StepRefresh, Err: fmt.Errorf("no registration with %s to refresh with", st.Issuer)}
	}
	secret := reg.ClientSecret
	if reg.Source == SourcePreregistered {
		secret = c.opts.ClientSecret
	}
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {st.RefreshToken}}
	if !c.opts.NoResourceOnRefresh {
		form.Set("resource", st.Resource)
	}
	tr, err := c.token(ctx, StepRefresh, st.TokenEndpoint, form, reg, secret, st.RefreshToken, st.AccessToken)
	if err != nil {
		return nil, err
	}
	next := st.clone()
	next.apply(tr, st.Scopes, c.opts.Now())
	if err := c.save(ctx, StepRefresh, next); err != nil {
		return next, err
	}
	return next, nil
}

// clientCredentials gets a token with the client's own credentials.
func (c *Client) clientCredentials(ctx context.Context, st *State, d *discovery, scopes []string) (*State, error) {
	if st.Registrations == nil {
		st.Registrations = map[string]Registration{}
	}
	reg, ok := st.Registrations[st.Issuer]
	if d != nil || !ok || reg.ClientID != c.opts.ClientID {
		var supported []string
		if d != nil {
			supported = d.as.TokenEndpointAuthMethodsSupported
		}
		method, err := authMethod(true, supported)
		if err != nil {
			return nil, &Error{Step: StepRegistration, Err: err}
		}
		reg = Registration{ClientID: c.opts.ClientID, AuthMethod: method, Source: SourcePreregistered}
		st.Registrations[st.Issuer] = reg
	}
	form := url.Values{"grant_type": {"client_credentials"}, "resource": {st.Resource}}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	tr, err := c.token(ctx, StepToken, st.TokenEndpoint, form, reg, c.opts.ClientSecret)
	if err != nil {
		return nil, err
	}
	st.apply(tr, scopes, c.opts.Now())
	if err := c.save(ctx, StepToken, st); err != nil {
		return st, err
	}
	return st, nil
}

// tokenResponse is a token endpoint's answer (RFC 6749 sections 5.1 and
// 5.2).
type tokenResponse struct {
	AccessToken      string `json:"access_token"`
	TokenType        string `json:"token_type"`
	ExpiresIn        any    `json:"expires_in"` // a number, or a string from some servers
	RefreshToken     string `json:"refresh_token"`
	Scope            string `json:"scope"`
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
}

// apply takes tr's tokens into st. Scopes are the ones granted, or the
// ones requested when the server does not say; a refresh answer without a
// refresh token leaves the old one in place.
func (st *State) apply(tr *tokenResponse, requested []string, now time.Time) {
	st.AccessToken = tr.AccessToken
	if tr.RefreshToken != "" {
		st.RefreshToken = tr.RefreshToken
	}
	st.Expiry = time.Time{}
	if secs := expiresIn(tr.ExpiresIn); secs > 0 {
		st.Expiry = now.Add(time.Duration(secs) * time.Second)
	}
	st.Scopes = slices.Clone(requested)
	if tr.Scope != "" {
		st.Scopes = strings.Fields(tr.Scope)
	}
}

func expiresIn(v any) int64 {
	switch n := v.(type) {
	case float64:
		return int64(n)
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}

// token posts form to the token endpoint, authenticating as reg, and
// returns a Bearer token. secrets are the values in form that must not
// appear in an error, should the server echo them.
func (c *Client) token(ctx context.Context, step, endpoint string, form url.Values, reg Registration, secret string, secrets ...string) (*tokenResponse, error) {
	switch reg.AuthMethod {
	case "client_secret_post":
		form.Set("client_id", reg.ClientID)
		form.Set("client_secret", secret)
	case "client_secret_basic":
	default:
		form.Set("client_id", reg.ClientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, stepErr(step, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if reg.AuthMethod == "client_secret_basic" {
		// RFC 6749 section 2.3.1: both form-encoded first.
		req.SetBasicAuth(url.QueryEscape(reg.ClientID), url.QueryEscape(secret))
	}
	resp, body, err := c.do(ctx, req)
	if err != nil {
		return nil, stepErr(step, err)
	}
	var tr tokenResponse
	derr := decodeJSON(redact(req.URL), resp, body, &tr)
	secrets = append(secrets, secret)
	if resp.StatusCode != http.StatusOK {
		if derr == nil && tr.Error != "" {
			return nil, &Error{Step: step, Code: printable(tr.Error, 64),
				Err: fmt.Errorf("%s answered %d: %s", redact(req.URL), resp.StatusCode, describe(tr.Error, tr.ErrorDescription, secrets...))}
		}
		return nil, &Error{Step: step, Err: fmt.Errorf("%s answered %d", redact(req.URL), resp.StatusCode)}
	}
	if derr != nil {
		return nil, stepErr(step, derr)
	}
	if tr.AccessToken == "" {
		return nil, &Error{Step: step, Err: fmt.Errorf("%s answered no access_token", redact(req.URL))}
	}
	if !strings.EqualFold(tr.TokenType, "bearer") {
		return nil, &Error{Step: step, Err: fmt.Errorf("%s answered token_type %q, not Bearer", redact(req.URL), printable(tr.TokenType, 32))}
	}
	return &tr, nil
}

// random is n random bytes, base64url-encoded: 32 make a PKCE verifier
// of 43 characters (RFC 7636 section 4.1).
func random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
