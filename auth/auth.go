// Package auth is the HTTP middleware that wraps every listener of an
// mcprel runtime, as net/http composes concerns: an Authenticator decides
// who sent a request (its Principal: tenant and scopes), Require runs it
// and puts the Principal in the request's context, and Hosts refuses
// requests whose Host or Origin header is not allowed (the DNS-rebinding
// protection). Static bearer tokens (StaticTokens) are one Authenticator
// among others.
//
// The package knows net/http only: the MCP endpoint reads the Principal
// with FromContext and serves the request for its tenant, and a handler
// mounted beside it may read it the same way.
package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
)

// Principal is who a request's credentials say sent it.
type Principal struct {
	// Tenant owns the request's keys, tasks, limits and sessions. "" is
	// the tenant of a runtime without tenants (and of AuthToken).
	Tenant string
	// Scopes are what the credentials grant; nil when they name none
	// (static tokens grant everything the endpoint serves).
	Scopes []string
}

// An Authenticator decides who sent r from its credentials. It returns an
// error, and no Principal, when r carries none or none that it accepts;
// Require answers such a request 401 without calling the next handler.
// The error's text is not sent to the client (it may name what was
// checked); it is for the Authenticator's own logs and tests.
// Authenticate must be safe for concurrent use and must not read r's body.
type Authenticator interface {
	Authenticate(r *http.Request) (Principal, error)
}

// AuthenticatorFunc adapts a function to an Authenticator.
type AuthenticatorFunc func(r *http.Request) (Principal, error)

// Authenticate calls f(r).
func (f AuthenticatorFunc) Authenticate(r *http.Request) (Principal, error) { return f(r) }

// ErrNoCredentials is the error of a request that carries no valid
// credentials for StaticTokens. Its text is the body of the 401.
var ErrNoCredentials = errors.New("a valid bearer token is required")

type principalKey struct{}

// NewContext returns ctx carrying p: the request's authenticated caller.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the Principal NewContext put in ctx, and whether
// there was one: false means no Authenticator ran on the request.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Refuse writes the answer to a refused request: status is 401 or 403,
// message says why in words a client may read. The MCP endpoint answers
// with a JSON-RPC error body; PlainRefuse suits every other handler.
type Refuse func(w http.ResponseWriter, r *http.Request, status int, message string)

// PlainRefuse answers with message as text, as http.Error does.
func PlainRefuse(w http.ResponseWriter, _ *http.Request, status int, message string) {
	http.Error(w, message, status)
}

// Challenge is the WWW-Authenticate header of every 401 Require answers
// (RFC 6750).
const Challenge = `Bearer realm="mcp"`

// Require returns a handler that authenticates each request with a and
// serves next with the Principal in the request's context (FromContext);
// a request a refuses gets 401 with the Challenge and the
// ErrNoCredentials text, written by refuse (PlainRefuse when nil). The
// wrapping happens once, here: the returned handler is safe for
// concurrent use and costs the same on every request.
func Require(next http.Handler, a Authenticator, refuse Refuse) http.Handler {
	if refuse == nil {
		refuse = PlainRefuse
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", Challenge)
			refuse(w, r, http.StatusUnauthorized, ErrNoCredentials.Error())
			return
		}
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), p)))
	})
}

// Bearer returns r's bearer token (RFC 6750 §2.1), if it carries one. The
// scheme is matched without regard to case.
func Bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// StaticTokens returns the Authenticator of fixed bearer tokens: tenants
// maps each token to its tenant, and any, when not empty, is one more
// token whose requests belong to the tenant "". Every token is compared,
// in constant time, so that timing says nothing about which tokens exist.
// An empty token matches nothing: with none, every request is refused.
func StaticTokens(shared string, tenants map[string]string) Authenticator {
	s := &staticTokens{}
	if shared != "" {
		s.tokens = append(s.tokens, tokenTenant{[]byte(shared), ""})
	}
	for t, tenant := range tenants {
		if t != "" {
			s.tokens = append(s.tokens, tokenTenant{[]byte(t), tenant})
		}
	}
	return s
}

type tokenTenant struct {
	token  []byte
	tenant string
}

type staticTokens struct{ tokens []tokenTenant }

func (s *staticTokens) Authenticate(r *http.Request) (Principal, error) {
	got, ok := Bearer(r)
	if !ok {
		return Principal{}, ErrNoCredentials
	}
	found, tenant := false, ""
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare([]byte(got), t.token) == 1 {
			found, tenant = true, t.tenant
		}
	}
	if !found {
		return Principal{}, ErrNoCredentials
	}
	return Principal{Tenant: tenant}, nil
}
