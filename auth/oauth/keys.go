package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Caps on what an authorization server sends, so that none can make the
// resource server hold more than this.
const (
	maxDocumentBytes = 256 << 10
	maxKeys          = 64
	// minRSABits is the least size of an RSA key that verifies a token
	// (RFC 7518 §3.3 and §3.5: 2048 bits or larger MUST be used); a
	// shorter one in the set is skipped, as a symmetric one is.
	minRSABits = 2048
)

// issuer is one trusted authorization server: its metadata and its keys,
// fetched when needed, one fetch at a time.
type issuer struct {
	id string
	rs *ResourceServer

	mu        sync.Mutex
	fetching  chan struct{} // closed when the fetch under way ends; nil when none
	jwksURI   string        // from the metadata; "" until discovered
	set       map[string][]jose.JSONWebKey
	fetched   time.Time // when set was fetched
	tried     time.Time // when a fetch was last started
	lastErr   error     // why the last fetch failed; nil after one that did not
	warnedAt  time.Time // when the last warning was logged
	warnedFor string    // what it was about
}

// key returns the key named kid that may verify alg. A kid the set does
// not hold makes it fetch the set again (at most once per
// RefetchInterval), as an issuer that rotated its keys publishes the new
// one before signing with it.
func (is *issuer) key(ctx context.Context, kid, alg string) (*jose.JSONWebKey, error) {
	set, err := is.keys(ctx, kid)
	if err != nil {
		return nil, err
	}
	var found []jose.JSONWebKey
	if kid == "" {
		// A token naming no key: the set's one key for alg, if it has
		// exactly one.
		for _, ks := range set {
			for _, k := range ks {
				if fits(k, alg) {
					found = append(found, k)
				}
			}
		}
		if len(found) != 1 {
			return nil, is.rs.invalid("the access token names no key (kid) and the issuer publishes more than one")
		}
		return &found[0], nil
	}
	ks := set[kid]
	switch {
	case len(ks) == 0:
		return nil, is.rs.invalid("the access token is signed with a key its issuer does not publish")
	case len(ks) > 1:
		is.mu.Lock()
		is.warn("duplicate kid", "oauth: the authorization server publishes two keys under one kid: tokens naming it are refused", "kid", clip(kid))
		is.mu.Unlock()
		return nil, is.rs.invalid("the issuer publishes more than one key under the access token's kid: which one signed it cannot be told")
	case !fits(ks[0], alg):
		return nil, is.rs.invalid(fmt.Sprintf("the issuer's key named by the access token is not for %s", alg))
	}
	return &ks[0], nil
}

// fits reports whether k may verify a signature made with alg: its alg,
// when it names one, is alg, and its type is alg's.
func fits(k jose.JSONWebKey, alg string) bool {
	if k.Algorithm != "" && k.Algorithm != alg {
		return false
	}
	switch k.Key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		return strings.HasPrefix(alg, "ES")
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// keys returns the issuer's key set, fetching it when there is none yet,
// when it is older than KeysMaxAge, or when it lacks want (a kid) and the
// last fetch is RefetchInterval old. Concurrent callers wait for one
// fetch. With no set at all and none to be had, it is a 503.
func (is *issuer) keys(ctx context.Context, want string) (map[string][]jose.JSONWebKey, error) {
	rs := is.rs
	for {
		is.mu.Lock()
		now := rs.now()
		stale := is.set == nil || now.Sub(is.fetched) >= rs.cfg.KeysMaxAge
		missing := want != "" && is.set != nil && len(is.set[want]) == 0
		may := is.tried.IsZero() || now.Sub(is.tried) >= rs.cfg.RefetchInterval
		if !(stale || missing) || !may {
			set, err := is.usable(now)
			is.mu.Unlock()
			return set, err
		}
		if wait := is.fetching; wait != nil {
			is.mu.Unlock()
			select {
			case <-wait:
				// Whatever it fetched, read it once, without fetching again.
				is.mu.Lock()
				set, err := is.usable(rs.now())
				is.mu.Unlock()
				return set, err
			case <-ctx.Done():
				return nil, rs.unavailable("the authorization server's keys are being fetched")
			}
		}
		done := make(chan struct{})
		is.fetching, is.tried = done, now
		jwksURI := is.jwksURI
		is.mu.Unlock()

		// The fetch is the resource server's, not the request's: a client
		// that goes away does not cut it short for the others.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rs.cfg.FetchTimeout)
		set, uri, err := is.fetch(fctx, jwksURI)
		cancel()

		is.mu.Lock()
		is.fetching = nil
		close(done)
		if err != nil {
			is.lastErr = err
			// The next fetch discovers the metadata again: the issuer may
			// have moved its keys.
			is.jwksURI = ""
			is.warn("fetch", "oauth: the authorization server's keys cannot be fetched", "error", err)
		} else {
			if is.set == nil && is.lastErr != nil {
				rs.log.Info("oauth: the authorization server answers again", "issuer", is.id)
			}
			is.set, is.jwksURI, is.fetched, is.lastErr = set, uri, rs.now(), nil
		}
		is.mu.Unlock()
		want = "" // fetched once for it: what the set holds now is the answer
	}
}

// usable returns the key set while it may be used: fetched less than
// twice KeysMaxAge ago. A set that could not be fetched again for that
// long is not trusted any more (a key the issuer withdrew in the
// meantime would still be in it): its tokens get 503 until a fetch
// succeeds. The caller holds is.mu.
func (is *issuer) usable(now time.Time) (map[string][]jose.JSONWebKey, error) {
	switch {
	case is.set == nil && is.lastErr == nil:
		return nil, is.rs.unavailable("the authorization server's keys are being fetched")
	case is.set == nil:
		return nil, is.rs.unavailable("the authorization server's keys cannot be fetched: " + is.lastErr.Error())
	case now.Sub(is.fetched) >= 2*is.rs.cfg.KeysMaxAge:
		return nil, is.rs.unavailable(fmt.Sprintf("the authorization server's keys could not be fetched again for %v: %v", now.Sub(is.fetched).Round(time.Second), is.lastErr))
	}
	return is.set, nil
}

// warn logs msg, about what, at most once per RefetchInterval for the
// same what. The caller holds is.mu.
func (is *issuer) warn(what, msg string, args ...any) {
	now := is.rs.now()
	if what == is.warnedFor && now.Sub(is.warnedAt) < is.rs.cfg.RefetchInterval {
		return
	}
	is.warnedFor, is.warnedAt = what, now
	is.rs.log.Warn(msg, append([]any{"issuer", is.id}, args...)...)
}

// fetch discovers the issuer's metadata, unless jwksURI is already known,
// and fetches its key set.
func (is *issuer) fetch(ctx context.Context, jwksURI string) (map[string][]jose.JSONWebKey, string, error) {
	if jwksURI == "" {
		md, err := Discover(ctx, is.rs.client, is.id)
		if err != nil {
			return nil, "", err
		}
		if md.JWKSURI == "" {
			return nil, "", fmt.Errorf("the metadata of %s names no jwks_uri", is.id)
		}
		if err := checkURL("jwks_uri", md.JWKSURI); err != nil {
			return nil, "", fmt.Errorf("the metadata of %s names a jwks_uri that is not https: %q", is.id, md.JWKSURI)
		}
		jwksURI = md.JWKSURI
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := getJSON(ctx, is.rs.client, jwksURI, &doc); err != nil {
		return nil, "", err
	}
	if len(doc.Keys) > maxKeys {
		return nil, "", fmt.Errorf("the key set at %s holds %d keys, more than %d", jwksURI, len(doc.Keys), maxKeys)
	}
	set := map[string][]jose.JSONWebKey{}
	skipped := 0
	for _, raw := range doc.Keys {
		var k jose.JSONWebKey
		// A key that cannot be read, a symmetric key, a key for
		// encryption, an RSA key too short: none ever verifies a token.
		if err := k.UnmarshalJSON(raw); err != nil || k.Use == "enc" || !k.Valid() {
			skipped++
			continue
		}
		if !k.IsPublic() {
			pub := k.Public()
			if !pub.Valid() {
				skipped++
				continue
			}
			k = pub
		}
		if pub, ok := k.Key.(*rsa.PublicKey); ok && pub.N.BitLen() < minRSABits {
			skipped++
			continue
		}
		set[k.KeyID] = append(set[k.KeyID], k)
	}
	if len(set) == 0 {
		return nil, "", fmt.Errorf("the key set at %s holds no public signing key (%d skipped)", jwksURI, skipped)
	}
	return set, jwksURI, nil
}

// Metadata is what the resource server reads of an authorization
// server's metadata (RFC 8414 §2, OpenID Connect Discovery §3).
type Metadata struct {
	Issuer                string   `json:"issuer"`
	JWKSURI               string   `json:"jwks_uri"`
	IntrospectionEndpoint string   `json:"introspection_endpoint"`
	ScopesSupported       []string `json:"scopes_supported"`
}

// Discover fetches the metadata of the authorization server whose issuer
// identifier is id, where the MCP specification says to look, in its
// order: RFC 8414's path-inserted URL, then OpenID Connect's, path-
// inserted and then appended. The first document found must name id as
// its issuer exactly (RFC 8414 §3.3), or it is not used.
func Discover(ctx context.Context, c *http.Client, id string) (*Metadata, error) {
	u, err := url.Parse(id)
	if err != nil {
		return nil, err
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	origin := u.Scheme + "://" + u.Host
	candidates := []string{
		origin + "/.well-known/oauth-authorization-server" + path,
		origin + "/.well-known/openid-configuration" + path,
	}
	if path != "" {
		candidates = append(candidates, origin+path+"/.well-known/openid-configuration")
	}
	var errs []error
	for _, at := range candidates {
		var md Metadata
		err := getJSON(ctx, c, at, &md)
		var nf notFound
		if errors.As(err, &nf) {
			errs = append(errs, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		if md.Issuer != id {
			return nil, fmt.Errorf("the metadata at %s names the issuer %q, not %q: it is not used", at, clip64(md.Issuer), id)
		}
		return &md, nil
	}
	return nil, fmt.Errorf("no authorization server metadata for %s: %w", id, errors.Join(errs...))
}

func clip64(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// notFound is a 404 or 410: a document that is not at that address.
type notFound struct{ url string }

func (e notFound) Error() string { return e.url + " is not found" }

// getJSON GETs url and decodes its JSON body, at most maxDocumentBytes,
// into v.
func getJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s did not answer in time", url)
		}
		return fmt.Errorf("%s cannot be reached: %w", url, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return notFound{url}
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		return fmt.Errorf("%s answered %q, not JSON", url, mt)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("%s: reading the answer: %w", url, err)
	}
	if len(body) > maxDocumentBytes {
		return fmt.Errorf("%s answered more than %d bytes", url, maxDocumentBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s answered JSON that cannot be read: %v", url, err)
	}
	return nil
}
