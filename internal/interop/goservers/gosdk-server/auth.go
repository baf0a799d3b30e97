package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// protect puts the SDK's own resource-server pieces in front of the MCP
// handler at endpoint (the server's URL): auth.RequireBearerToken with a
// verifier that takes only RFC 9068 JWTs that issuer signed (its JWKS
// found through its RFC 8414 metadata) for exactly endpoint, and that
// wants the scopes in scope (space-separated); and auth.ProtectedResourceMetadataHandler at the path-specific
// well-known URL, naming issuer. Every token the verifier is shown is
// appended to tokenLog, one JSON line each with what the verifier made
// of it, so that a test can tell what reached the server.
//
// With scopeFile, the scopes are read from that file at every request
// instead, so that a test can raise them while the server runs.
func protect(mux *http.ServeMux, mcpHandler http.Handler, endpoint, issuer, scope, scopeFile, tokenLog string) error {
	keys, err := fetchJWKS(issuer)
	if err != nil {
		return err
	}
	log, err := os.OpenFile(tokenLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	rec := &recorder{f: log}
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		info, c, err := verifyJWT(keys, token, issuer, endpoint)
		rec.record(token, c, err)
		return info, err
	}
	scopes := func() []string {
		if scopeFile == "" {
			return strings.Fields(scope)
		}
		b, _ := os.ReadFile(scopeFile)
		return strings.Fields(string(b))
	}
	prmPath := "/.well-known/oauth-protected-resource" + strings.TrimPrefix(endpoint, originOf(endpoint))
	mux.HandleFunc(prmPath, func(w http.ResponseWriter, r *http.Request) {
		auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
			Resource:             endpoint,
			AuthorizationServers: []string{issuer},
			ScopesSupported:      scopes(),
		}).ServeHTTP(w, r)
	})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
			ResourceMetadataURL: originOf(endpoint) + prmPath,
			Scopes:              scopes(),
		})(mcpHandler).ServeHTTP(w, r)
	})
	return nil
}

// originOf is scheme://host of a URL.
func originOf(u string) string {
	scheme, rest, _ := strings.Cut(u, "://")
	host, _, _ := strings.Cut(rest, "/")
	return scheme + "://" + host
}

// claims are the access token's claims the verifier reads.
type claims struct {
	jwt.Claims
	Scope    string `json:"scope"`
	ClientID string `json:"client_id"`
}

// verifyJWT checks token's signature against keys and that issuer issued
// it for audience, unexpired, as auth.TokenVerifier wants: every refusal
// wraps auth.ErrInvalidToken.
func verifyJWT(keys *jose.JSONWebKeySet, token, issuer, audience string) (*auth.TokenInfo, *claims, error) {
	invalid := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", auth.ErrInvalidToken, fmt.Sprintf(format, a...))
	}
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		return nil, nil, invalid("not a JWT: %v", err)
	}
	if typ, _ := tok.Headers[0].ExtraHeaders[jose.HeaderType].(string); !strings.EqualFold(typ, "at+jwt") {
		return nil, nil, invalid("typ %q is not at+jwt", typ)
	}
	found := keys.Key(tok.Headers[0].KeyID)
	if len(found) == 0 {
		return nil, nil, invalid("no key %q in the issuer's JWKS", tok.Headers[0].KeyID)
	}
	var c claims
	if err := tok.Claims(found[0].Public().Key, &c); err != nil {
		return nil, nil, invalid("signature: %v", err)
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Issuer: issuer, AnyAudience: jwt.Audience{audience}, Time: time.Now()}, 0); err != nil {
		return nil, &c, invalid("%v", err)
	}
	if c.Expiry == nil {
		return nil, &c, invalid("no exp")
	}
	return &auth.TokenInfo{Scopes: strings.Fields(c.Scope), Expiration: c.Expiry.Time(), UserID: c.Subject}, &c, nil
}

// recorder appends one JSON line per token shown to the verifier.
type recorder struct {
	mu sync.Mutex
	f  *os.File
}

func (r *recorder) record(token string, c *claims, err error) {
	line := map[string]any{"token": token, "accepted": err == nil}
	if err != nil {
		line["error"] = err.Error()
	}
	if c != nil {
		line["iss"], line["aud"], line["sub"], line["scope"], line["client_id"] = c.Issuer, c.Audience, c.Subject, c.Scope, c.ClientID
	}
	b, _ := json.Marshal(line)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.f.Write(append(b, '\n'))
}

// fetchJWKS reads the issuer's RFC 8414 metadata and the JWKS it names.
func fetchJWKS(issuer string) (*jose.JSONWebKeySet, error) {
	var md struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := getJSON(issuer+"/.well-known/oauth-authorization-server", &md); err != nil {
		return nil, err
	}
	if md.Issuer != issuer || md.JWKSURI == "" {
		return nil, fmt.Errorf("%s: metadata of issuer %q with jwks_uri %q", issuer, md.Issuer, md.JWKSURI)
	}
	var keys jose.JSONWebKeySet
	if err := getJSON(md.JWKSURI, &keys); err != nil {
		return nil, err
	}
	if len(keys.Keys) == 0 {
		return nil, errors.New(md.JWKSURI + ": no keys")
	}
	return &keys, nil
}

func getJSON(u string, v any) error {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.Unmarshal(body, v)
}
