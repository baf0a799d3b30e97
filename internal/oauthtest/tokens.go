package oauthtest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
)

// Claims are the claims of an access token (RFC 9068 section 2.2). Zero
// fields are left out of the token, except the defaults noted; Extra
// covers whatever else a test needs, good or bad.
type Claims struct {
	Subject  string   // sub, the resource owner or the client itself
	Audience []string // aud: one audience is a string claim, more an array
	Scope    string   // scope, space-separated, as RFC 9068 has it
	Scp      []string // scp, the array form some servers use instead
	ClientID string   // client_id, the client the token was issued to
	// IssuedAt defaults to the server's now, Expiry to an hour after it;
	// NotBefore is left out when zero.
	IssuedAt, NotBefore, Expiry time.Time
	// Issuer defaults to the server's Issuer().
	Issuer string
	// Extra claims are added last and win over the ones above; a nil value
	// removes a claim, e.g. {"exp": nil} for a token that never expires or
	// {"iss": nil} for one with no issuer.
	Extra map[string]any
}

// payload renders c as a JWT claims set; jti is random so no two tokens
// are alike.
func (s *Server) payload(c Claims) map[string]any {
	now := s.opts.Now()
	iat, exp := c.IssuedAt, c.Expiry
	if iat.IsZero() {
		iat = now
	}
	if exp.IsZero() {
		exp = now.Add(time.Hour)
	}
	iss := c.Issuer
	if iss == "" {
		iss = s.issuer
	}
	m := map[string]any{"iss": iss, "iat": iat.Unix(), "exp": exp.Unix(), "jti": randomID(16)}
	if c.Subject != "" {
		m["sub"] = c.Subject
	}
	switch len(c.Audience) {
	case 0:
	case 1:
		m["aud"] = c.Audience[0]
	default:
		m["aud"] = c.Audience
	}
	if c.Scope != "" {
		m["scope"] = c.Scope
	}
	if c.Scp != nil {
		m["scp"] = c.Scp
	}
	if c.ClientID != "" {
		m["client_id"] = c.ClientID
	}
	if !c.NotBefore.IsZero() {
		m["nbf"] = c.NotBefore.Unix()
	}
	for k, v := range c.Extra {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

// Token is a JWT access token for c signed with the current key, its
// header carrying the key's alg and kid and typ "at+jwt" (RFC 9068
// section 2.1): the good case every bad one departs from.
func (s *Server) Token(t testing.TB, c Claims) string {
	t.Helper()
	s.mu.Lock()
	k := s.current()
	s.mu.Unlock()
	return compact(t, map[string]any{"alg": k.alg, "kid": k.kid, "typ": "at+jwt"}, s.payload(c), k.sign)
}

// Sign signs payload with the current key under header, for tokens Claims
// cannot describe (a wrong typ, a crit header, claims of the wrong type).
// The header's alg and kid are the key's unless header gives them; a nil
// value leaves that header out, e.g. {"kid": nil}. The signature is always
// the current key's, whatever alg the header claims.
func (s *Server) Sign(t testing.TB, header, payload map[string]any) string {
	t.Helper()
	s.mu.Lock()
	k := s.current()
	s.mu.Unlock()
	h := map[string]any{"alg": k.alg, "kid": k.kid}
	for name, v := range header {
		if v == nil {
			delete(h, name)
		} else {
			h[name] = v
		}
	}
	return compact(t, h, payload, k.sign)
}

// AlgNone is an unsigned token for c, alg "none" with an empty signature
// (RFC 7519 section 6), which a resource server must refuse.
func (s *Server) AlgNone(t testing.TB, c Claims) string {
	t.Helper()
	return compact(t, map[string]any{"alg": "none", "typ": "at+jwt"}, s.payload(c),
		func([]byte) ([]byte, error) { return nil, nil })
}

// HS256WithPublicKey is the algorithm-confusion token for c: alg "HS256",
// the current kid, and an HMAC-SHA256 whose secret is the current public
// key in form. A verifier that takes the algorithm from the token rather
// than from the key accepts it.
func (s *Server) HS256WithPublicKey(t testing.TB, c Claims, form KeyForm) string {
	t.Helper()
	secret := s.PublicKeyBytes(t, form)
	kid := s.Kid()
	return compact(t, map[string]any{"alg": "HS256", "kid": kid, "typ": "at+jwt"}, s.payload(c),
		func(input []byte) ([]byte, error) {
			mac := hmac.New(sha256.New, secret)
			mac.Write(input)
			return mac.Sum(nil), nil
		})
}

// UntrustedToken is a token for c that looks like Token's, the current
// kid included, but is signed by a key the server never published: the
// forgery a resource server must catch by checking the signature, not
// just the kid.
func (s *Server) UntrustedToken(t testing.TB, c Claims) string {
	t.Helper()
	f := s.foreignKey(t)
	return compact(t, map[string]any{"alg": f.alg, "kid": s.Kid(), "typ": "at+jwt"}, s.payload(c), f.sign)
}

// UntrustedTokenUnknownKid is UntrustedToken under a kid the JWKS does
// not have, which a resource server may answer by refetching the JWKS,
// within its rate limit, before it refuses the token.
func (s *Server) UntrustedTokenUnknownKid(t testing.TB, c Claims) string {
	t.Helper()
	f := s.foreignKey(t)
	return compact(t, map[string]any{"alg": f.alg, "kid": f.kid, "typ": "at+jwt"}, s.payload(c), f.sign)
}

// foreignKey is the server's one unpublished key, made on first use.
func (s *Server) foreignKey(t testing.TB) *key {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.foreign == nil {
		s.foreign = s.newKey(t)
	}
	return s.foreign
}

// compact serialises a JWS in compact form (RFC 7515 section 7.1).
func compact(t testing.TB, header, payload map[string]any, sign func([]byte) ([]byte, error)) string {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatalf("oauthtest: encoding a JWT header: %v", err)
	}
	p, err := json.Marshal(payload)
	if err != nil {
		t.Fatalf("oauthtest: encoding JWT claims: %v", err)
	}
	input := b64(h) + "." + b64(p)
	sig, err := sign([]byte(input))
	if err != nil {
		t.Fatalf("oauthtest: signing a JWT: %v", err)
	}
	return input + "." + b64(sig)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
