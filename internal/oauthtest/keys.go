package oauthtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"sync"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

// key is a signing key of a Server, published in its JWKS or not.
type key struct {
	kid     string
	alg     string
	priv    crypto.Signer
	retired bool // withdrawn from the JWKS by Retire
}

func (k *key) jwk() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: k.alg, Use: "sig"}
}

// sign computes the JWS signature of input (RFC 7518 section 3).
func (k *key) sign(input []byte) ([]byte, error) {
	digest := sha256.Sum256(input)
	switch k.alg {
	case "RS256":
		return rsa.SignPKCS1v15(rand.Reader, k.priv.(*rsa.PrivateKey), crypto.SHA256, digest[:])
	case "PS256":
		return rsa.SignPSS(rand.Reader, k.priv.(*rsa.PrivateKey), crypto.SHA256, digest[:],
			&rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
	case "ES256":
		der, err := ecdsa.SignASN1(rand.Reader, k.priv.(*ecdsa.PrivateKey), digest[:])
		if err != nil {
			return nil, err
		}
		// JWS wants R and S as two fixed-width big-endian halves, not ASN.1.
		var rs struct{ R, S *big.Int }
		if _, err := asn1.Unmarshal(der, &rs); err != nil {
			return nil, err
		}
		out := make([]byte, 64)
		rs.R.FillBytes(out[:32])
		rs.S.FillBytes(out[32:])
		return out, nil
	case "EdDSA":
		return ed25519.Sign(k.priv.(ed25519.PrivateKey), input), nil
	}
	return nil, fmt.Errorf("oauthtest: unsupported algorithm %q", k.alg)
}

func knownAlgorithm(alg string) bool {
	switch alg {
	case "RS256", "PS256", "ES256", "EdDSA":
		return true
	}
	return false
}

// rsaPool holds RSA keys no running Server uses. Generating a 2048-bit key
// takes tens of milliseconds, far more under the race detector, and tests
// start servers by the hundred; a Server takes its RSA keys from here and
// gives them back when its test ends. No two servers alive at once share a
// key, so a token from one never verifies against another's JWKS, and a
// reused key gets a fresh kid.
var rsaPool struct {
	sync.Mutex
	free []*rsa.PrivateKey
}

func takeRSA() (*rsa.PrivateKey, error) {
	rsaPool.Lock()
	if n := len(rsaPool.free); n > 0 {
		k := rsaPool.free[n-1]
		rsaPool.free = rsaPool.free[:n-1]
		rsaPool.Unlock()
		return k, nil
	}
	rsaPool.Unlock()
	return rsa.GenerateKey(rand.Reader, 2048)
}

// newKey makes a key of the server's algorithm with a fresh random kid.
func (s *Server) newKey(t testing.TB) *key {
	t.Helper()
	k, err := genKey(s.opts.Algorithm)
	if err != nil {
		t.Fatalf("oauthtest: generating a key: %v", err)
	}
	return k
}

func genKey(alg string) (*key, error) {
	var priv crypto.Signer
	var err error
	switch alg {
	case "RS256", "PS256":
		priv, err = takeRSA()
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EdDSA":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		err = errors.New("unsupported algorithm " + alg)
	}
	if err != nil {
		return nil, err
	}
	return &key{kid: randomID(8), alg: alg, priv: priv}, nil
}

// releaseKeys gives the server's RSA keys back to the pool.
func (s *Server) releaseKeys() {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := append([]*key{s.dup, s.foreign}, s.keys...)
	s.keys, s.dup, s.foreign = nil, nil, nil
	rsaPool.Lock()
	defer rsaPool.Unlock()
	for _, k := range all {
		if k == nil {
			continue
		}
		if r, ok := k.priv.(*rsa.PrivateKey); ok {
			rsaPool.free = append(rsaPool.free, r)
		}
	}
}

func randomID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// current is the key tokens are signed with. s.mu is held.
func (s *Server) current() *key { return s.keys[len(s.keys)-1] }

// Kid is the key ID of the current signing key, the one Token uses.
func (s *Server) Kid() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current().kid
}

// Rotate adds a new signing key, published at once, and makes it current;
// the old keys stay published until Retire, as a real server keeps them
// while the tokens they signed are still valid. It returns the new kid.
func (s *Server) Rotate(t testing.TB) (newKid string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.newKey(t)
	s.keys = append(s.keys, k)
	return k.kid
}

// Retire withdraws the key kid from the JWKS. Retiring the current key
// leaves it current: Token goes on signing with it, which is what a
// resource server sees when a key is withdrawn while its tokens live.
// The introspection endpoint still recognises the key's tokens, since this
// server issued them. An unknown kid panics, as it is a mistake in the test.
func (s *Server) Retire(kid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		if k.kid == kid {
			k.retired = true
			return
		}
	}
	panic("oauthtest: Retire of unknown kid " + kid)
}

// DuplicateKid, on, makes the JWKS publish a second, different key under
// the current kid, right after the real one, so only a verifier that
// looks past the first match notices the ambiguity. Tokens are still
// signed with the real key.
func (s *Server) DuplicateKid(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on && s.dup == nil {
		k, err := genKey(s.opts.Algorithm)
		if err != nil {
			panic("oauthtest: generating a key: " + err.Error())
		}
		s.dup = k
	}
	s.dupOn = on
}

// serveJWKS serves the published keys as a JWK Set (RFC 7517 section 5).
func (s *Server) serveJWKS(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	var set jose.JSONWebKeySet
	for _, k := range s.keys {
		if !k.retired {
			set.Keys = append(set.Keys, k.jwk())
		}
	}
	if s.dupOn {
		d := s.dup.jwk()
		d.KeyID = s.current().kid
		set.Keys = append(set.Keys, d)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, set)
}

// KeyForm is a serialisation of a public key, for the algorithm-confusion
// tokens of HS256WithPublicKey: a verifier that lets the token's alg
// choose the algorithm uses whatever key material it holds as the HMAC
// secret, and which bytes those are depends on how it stores keys.
type KeyForm int

const (
	// FormJWK is the key's JSON object, byte for byte as the JWKS
	// publishes it.
	FormJWK KeyForm = iota
	// FormPEM is the PKIX SubjectPublicKeyInfo in a "PUBLIC KEY" PEM block,
	// with its final newline, as in a .pem file.
	FormPEM
	// FormDER is the PKIX SubjectPublicKeyInfo in DER.
	FormDER
)

// PublicKeyBytes is the current key's public half in form, the secret of
// HS256WithPublicKey's tokens.
func (s *Server) PublicKeyBytes(t testing.TB, form KeyForm) []byte {
	t.Helper()
	s.mu.Lock()
	k := s.current()
	s.mu.Unlock()
	b, err := publicKeyBytes(k, form)
	if err != nil {
		t.Fatalf("oauthtest: %v", err)
	}
	return b
}

func publicKeyBytes(k *key, form KeyForm) ([]byte, error) {
	switch form {
	case FormJWK:
		return json.Marshal(k.jwk())
	case FormPEM, FormDER:
		der, err := x509.MarshalPKIXPublicKey(k.priv.Public())
		if err != nil || form == FormDER {
			return der, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
	}
	return nil, fmt.Errorf("unknown KeyForm %d", form)
}
