package oauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/mcprel/mcprel/auth"
)

// check returns the Principal of token, from the cache or by verifying
// it: as a JWT, or by introspection.
func (rs *ResourceServer) check(ctx context.Context, token string) (auth.Principal, error) {
	sum := hashToken(token)
	now := rs.now()
	if p, refused, ok := rs.cache.get(sum, now); ok {
		return p, refused
	}
	var (
		c   *claims
		err error
	)
	if rs.cfg.Introspection != nil {
		c, err = rs.introspect(ctx, token)
		var e *auth.Error
		if errors.As(err, &e) && e.Code == "invalid_token" {
			// Said inactive: the same token sent again is not asked about
			// again for a few seconds.
			rs.cache.put(sum, auth.Principal{}, err, now.Add(inactiveCacheFor), now)
		}
	} else {
		c, err = rs.verifyJWT(ctx, token)
	}
	if err != nil {
		return auth.Principal{}, err
	}
	p, until, err := rs.accept(c, now)
	if err != nil {
		return auth.Principal{}, err
	}
	if rs.cfg.Introspection != nil {
		// Introspection is asked to see revocations: its answer is kept a
		// short while only.
		if limit := now.Add(introspectionCacheFor); until.After(limit) {
			until = limit
		}
	}
	rs.cache.put(sum, p, nil, until, now)
	return p, nil
}

// hashToken returns the SHA-256 of token, the key of its verdict. The
// token is fed to the hash through a buffer on the stack: converting it
// to a []byte, as sha256.Sum256 would need, copies it to the heap on
// every request (crypto/sha256 takes no string, and io.WriteString on
// its digest converts too).
func hashToken(token string) (sum [sha256.Size]byte) {
	h := sha256.New()
	var buf [512]byte
	for len(token) > 0 {
		n := copy(buf[:], token)
		h.Write(buf[:n])
		token = token[n:]
	}
	h.Sum(sum[:0])
	return sum
}

// introspectionCacheFor is the longest an introspection's answer is
// reused; inactiveCacheFor, the longest an answer that the token is not
// active is (a token just issued may be unknown to a replica of the
// authorization server for a moment).
const (
	introspectionCacheFor = time.Minute
	inactiveCacheFor      = 5 * time.Second
)

// claims are the members of an access token (or an introspection
// answer) the resource server reads.
type claims struct {
	Issuer    string
	Audience  audience
	Expiry    *numericDate
	NotBefore *numericDate
	Scope     string
	Scp       json.RawMessage
	raw       map[string]json.RawMessage
}

// audience is aud: a string or an array of strings.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("aud is neither a string nor an array of strings")
	}
	*a = many
	return nil
}

// numericDate is a JWT NumericDate: seconds since the epoch, possibly
// with a fraction.
type numericDate struct{ time.Time }

func (d *numericDate) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1<<40 {
		return errors.New("a time is not a number of seconds")
	}
	sec, frac := math.Modf(f)
	d.Time = time.Unix(int64(sec), int64(frac*1e9))
	return nil
}

// parseClaims reads a JSON object of claims. Each claim is found by its
// exact name (RFC 7519 §4: names are case-sensitive), never by
// encoding/json's case-folding match of struct fields: a claim an
// authorization server lets a user name, "Scope" or "AUD", is not scope
// or aud.
func parseClaims(payload []byte) (*claims, error) {
	c := &claims{}
	if err := json.Unmarshal(payload, &c.raw); err != nil || c.raw == nil {
		return nil, errors.New("its claims are not a JSON object")
	}
	for _, m := range []struct {
		name string
		into any
	}{{"iss", &c.Issuer}, {"aud", &c.Audience}, {"exp", &c.Expiry}, {"nbf", &c.NotBefore}, {"scope", &c.Scope}} {
		if v, ok := c.raw[m.name]; ok {
			if err := json.Unmarshal(v, m.into); err != nil {
				return nil, fmt.Errorf("its claims cannot be read: %s: %v", m.name, err)
			}
		}
	}
	c.Scp = c.raw["scp"]
	return c, nil
}

// has reports whether the claims name name.
func (c *claims) has(name string) bool {
	_, ok := c.raw[name]
	return ok
}

// verifyJWT verifies token's signature by a key of its issuer and
// returns its claims, unchecked.
func (rs *ResourceServer) verifyJWT(ctx context.Context, token string) (*claims, error) {
	if strings.Count(token, ".") != 2 {
		return nil, rs.invalid("the access token is not a JWT (three base64url parts separated by dots)")
	}
	header, payload, _ := strings.Cut(token, ".")
	payload, _, _ = strings.Cut(payload, ".")
	var h struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	hb, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil || json.Unmarshal(hb, &h) != nil {
		return nil, rs.invalid("the access token's header is not base64url-encoded JSON")
	}
	if !slices.Contains(rs.algs, h.Alg) {
		return nil, rs.invalid(fmt.Sprintf("the access token's signing algorithm %q is not accepted (only %s)", clip(h.Alg), strings.Join(rs.algs, ", ")))
	}
	// The issuer is read before the signature is checked, to pick whose
	// keys check it; it is checked again with the verified claims.
	pb, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, rs.invalid("the access token's payload is not base64url-encoded")
	}
	unverified, err := parseClaims(pb)
	if err != nil {
		return nil, rs.invalid("the access token is not a JWT: " + err.Error())
	}
	is := rs.issuers[unverified.Issuer]
	if is == nil {
		return nil, rs.invalid("the access token's issuer is not an authorization server this resource trusts")
	}
	algs := make([]jose.SignatureAlgorithm, len(rs.algs))
	for i, a := range rs.algs {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	jws, err := jose.ParseSignedCompact(token, algs)
	if err != nil || len(jws.Signatures) != 1 {
		return nil, rs.invalid("the access token is not a signed JWT")
	}
	if jws.Signatures[0].Header.Algorithm != h.Alg || jws.Signatures[0].Header.KeyID != h.Kid {
		return nil, rs.invalid("the access token's header cannot be read")
	}
	key, err := is.key(ctx, h.Kid, h.Alg)
	if err != nil {
		return nil, err
	}
	verified, err := jws.Verify(key.Key)
	if err != nil {
		return nil, rs.invalid("the access token's signature does not verify with the issuer's key")
	}
	if !bytes.Equal(verified, pb) {
		return nil, rs.invalid("the access token's payload cannot be read")
	}
	return unverified, nil
}

// accept checks verified claims and makes the Principal, and returns
// until when the verdict holds (the token's expiry).
func (rs *ResourceServer) accept(c *claims, now time.Time) (auth.Principal, time.Time, error) {
	// An introspection answer need not name its issuer (RFC 7662 §2.2):
	// the endpoint asked is the configured one. When it does, it must be
	// trusted.
	introspected := rs.cfg.Introspection != nil
	if len(rs.issuers) > 0 && rs.issuers[c.Issuer] == nil && !(introspected && !c.has("iss")) {
		return auth.Principal{}, time.Time{}, rs.invalid("the access token's issuer is not an authorization server this resource trusts")
	}
	if !slices.Contains(c.Audience, rs.audience) {
		return auth.Principal{}, time.Time{}, rs.invalid(fmt.Sprintf("the access token was not issued for this resource: its audience must include %q", rs.audience))
	}
	skew := rs.cfg.ClockSkew
	switch {
	case c.Expiry == nil:
		return auth.Principal{}, time.Time{}, rs.invalid("the access token has no expiry (exp)")
	case !now.Before(c.Expiry.Add(skew)):
		return auth.Principal{}, time.Time{}, rs.invalid("the access token expired")
	case c.NotBefore != nil && now.Add(skew).Before(c.NotBefore.Time):
		return auth.Principal{}, time.Time{}, rs.invalid("the access token is not valid yet (nbf)")
	}
	var tenant string
	raw, ok := c.raw[rs.cfg.TenantClaim]
	if !ok && rs.cfg.TenantClaim == "sub" {
		// A token no user took part in (client credentials) may name no
		// subject, introspected (RFC 7662 §2.2: sub is optional); its
		// client is then who calls (RFC 9068 §2.2 makes it the sub).
		raw = c.raw["client_id"]
	}
	if err := json.Unmarshal(raw, &tenant); err != nil || tenant == "" {
		return auth.Principal{}, time.Time{}, rs.invalid(fmt.Sprintf("the access token has no %q claim naming its tenant (a non-empty string)", rs.cfg.TenantClaim))
	}
	if len(rs.issuers) > 1 {
		tenant = c.Issuer + " " + tenant
	}
	scopes, err := c.scopes()
	if err != nil {
		return auth.Principal{}, time.Time{}, rs.invalid(err.Error())
	}
	return auth.Principal{Tenant: tenant, Scopes: scopes}, c.Expiry.Add(skew), nil
}

// scopes reads scope (a space-separated string) or, without it, scp (an
// array of strings, or one such string).
func (c *claims) scopes() ([]string, error) {
	if c.Scope != "" || len(c.Scp) == 0 {
		return strings.Fields(c.Scope), nil
	}
	var many []string
	if err := json.Unmarshal(c.Scp, &many); err == nil {
		return many, nil
	}
	var one string
	if err := json.Unmarshal(c.Scp, &one); err != nil {
		return nil, errors.New("the access token's scp is neither a string nor an array of strings")
	}
	return strings.Fields(one), nil
}

// clip shortens what a token says of itself before it is quoted back.
func clip(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}
