package oauthtest

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Opaque is a random opaque access token that the introspection endpoint
// knows, with c's claims; it is the only way to learn about it, as for a
// server that issues no JWTs.
func (s *Server) Opaque(t testing.TB, c Claims) string {
	t.Helper()
	tok := randomID(24)
	p := s.payload(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opaque[tok] = p
	return tok
}

// Revoke makes introspection answer active:false for token, issued as a
// JWT or opaque; a JWT's signature of course still verifies.
func (s *Server) Revoke(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[token] = true
}

// serveIntrospect is the token introspection endpoint (RFC 7662). A token
// is active if this server issued it (an Opaque one, or a JWT that one of
// its own signing keys verifies, retired or not), it is not revoked, and
// the server's clock is within its nbf and exp; the answer then carries
// the token's claims. Anything else is {"active":false}, as the RFC
// requires: the caller learns nothing about why.
func (s *Server) serveIntrospect(w http.ResponseWriter, r *http.Request) {
	if !s.introspectionClient(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="oauthtest"`)
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid_client"})
		return
	}
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request"})
		return
	}
	token := r.PostForm.Get("token")
	if token == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request"})
		return
	}
	// token_type_hint is only a hint (RFC 7662 section 2.1): both kinds
	// are looked up whatever it says.
	claims, ok := s.lookup(token)
	if !ok || !s.activeAt(claims, s.opts.Now()) {
		writeJSON(w, http.StatusOK, map[string]any{"active": false})
		return
	}
	claims["active"] = true
	if _, has := claims["scope"]; !has {
		if scp, isList := claims["scp"].([]any); isList {
			var names []string
			for _, v := range scp {
				if name, isString := v.(string); isString {
					names = append(names, name)
				}
			}
			claims["scope"] = strings.Join(names, " ")
		}
	}
	if _, has := claims["token_type"]; !has {
		claims["token_type"] = "Bearer"
	}
	writeJSON(w, http.StatusOK, claims)
}

// introspectionClient checks the caller's HTTP Basic credentials when the
// server requires them. RFC 6749 section 2.3.1 has the client form-encode
// both before base64, so the encoded and the raw forms are accepted.
func (s *Server) introspectionClient(r *http.Request) bool {
	wantID, wantSecret := s.opts.IntrospectionClientID, s.opts.IntrospectionClientSecret
	if wantID == "" && wantSecret == "" {
		return true
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		return false
	}
	return sameCredential(id, wantID) && sameCredential(secret, wantSecret)
}

func sameCredential(got, want string) bool {
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 {
		return true
	}
	dec, err := url.QueryUnescape(got)
	return err == nil && subtle.ConstantTimeCompare([]byte(dec), []byte(want)) == 1
}

// lookup finds the claims of a token this server issued, revoked or not;
// the map is the caller's own.
func (s *Server) lookup(token string) (map[string]any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked[token] {
		return nil, false
	}
	if c, ok := s.opaque[token]; ok {
		out := map[string]any{}
		// Round-trip through JSON so the claims are what a JWT's would be.
		b, _ := json.Marshal(c)
		return out, decodeClaims(b, &out) == nil
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, false
	}
	hb, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return nil, false
	}
	var header struct {
		Kid *string `json:"kid"`
	}
	if json.Unmarshal(hb, &header) != nil {
		return nil, false
	}
	for _, k := range s.keys {
		if header.Kid != nil && *header.Kid != k.kid {
			continue
		}
		jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.SignatureAlgorithm(k.alg)})
		if err != nil {
			continue
		}
		payload, err := jws.Verify(k.priv.Public())
		if err != nil {
			continue
		}
		out := map[string]any{}
		if decodeClaims(payload, &out) != nil {
			return nil, false
		}
		return out, true
	}
	return nil, false
}

func decodeClaims(b []byte, out *map[string]any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // so exp and the like are echoed as they were
	return d.Decode(out)
}

// activeAt reports whether now is within the claims' nbf and exp, each
// when present; one that is not a number makes the token inactive.
func (s *Server) activeAt(claims map[string]any, now time.Time) bool {
	if exp, has := claims["exp"]; has {
		t, ok := numericDate(exp)
		if !ok || !now.Before(t) {
			return false
		}
	}
	if nbf, has := claims["nbf"]; has {
		t, ok := numericDate(nbf)
		if !ok || now.Before(t) {
			return false
		}
	}
	return true
}

func numericDate(v any) (time.Time, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return time.Time{}, false
	}
	f, err := n.Float64()
	if err != nil {
		return time.Time{}, false
	}
	sec := math.Floor(f)
	return time.Unix(int64(sec), int64((f-sec)*1e9)), true
}
