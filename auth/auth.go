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
	"strconv"
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

// Challenge is the WWW-Authenticate header of a 401 Require answers for
// an Authenticator whose error is not an *Error (RFC 6750).
const Challenge = `Bearer realm="mcp"`

// Error is a refusal an Authenticator explains: the status Require
// answers and the Bearer challenge it sends (RFC 6750 §3, RFC 9728 §5.1).
// Its text is Description, or the status's own words.
type Error struct {
	// Status is 401 (no credentials, or credentials not accepted), 403
	// (accepted, but not for this: insufficient_scope) or 503 (the
	// credentials could not be checked now: an authorization server out
	// of reach). Zero means 401.
	Status int
	// Code is the RFC 6750 error code: "" when the request carried no
	// credentials (§3.1: no error code then), "invalid_token",
	// "insufficient_scope" or "invalid_request".
	Code string
	// Description is error_description: what was wrong, in words a
	// client may read. It never quotes the token.
	Description string
	// Scopes are the scope parameter: every scope the request needs.
	Scopes []string
	// ResourceMetadata is the URL of the Protected Resource Metadata
	// (RFC 9728), from which a client finds the authorization server.
	ResourceMetadata string
	// RetryAfter, with Status 503, is sent as Retry-After (seconds).
	RetryAfter int
}

func (e *Error) Error() string {
	if e.Description != "" {
		return e.Description
	}
	return ErrNoCredentials.Error()
}

// status is what Require answers for e.
func (e *Error) status() int {
	if e.Status == 0 {
		return http.StatusUnauthorized
	}
	return e.Status
}

// Challenge returns e as a WWW-Authenticate header value. Every
// parameter is a quoted string holding only what RFC 6750 §3 allows in
// one (printable ASCII but quote and backslash): a quote in a value
// becomes an apostrophe, and backslashes, control and non-ASCII
// characters are dropped, so that no value can end the header or add a
// parameter, and a client that reads a value up to the next quote reads
// all of it.
func (e *Error) Challenge() string {
	var b strings.Builder
	b.WriteString("Bearer")
	sep := " "
	param := func(name, value string) {
		if value == "" {
			return
		}
		b.WriteString(sep)
		sep = ", "
		b.WriteString(name)
		b.WriteString(`="`)
		for _, c := range value {
			switch {
			case c == '"':
				b.WriteByte('\'')
			case c == '\\' || c < 0x20 || c > 0x7e:
			default:
				b.WriteRune(c)
			}
		}
		b.WriteByte('"')
	}
	param("resource_metadata", e.ResourceMetadata)
	param("scope", strings.Join(e.Scopes, " "))
	param("error", e.Code)
	param("error_description", e.Description)
	if sep == " " {
		return Challenge
	}
	return b.String()
}

// Require returns a handler that authenticates each request with a and
// serves next with the Principal in the request's context (FromContext).
// A request a refuses is answered, by refuse (PlainRefuse when nil),
// with the status and the challenge of its *Error; any other error is a
// 401 with the Challenge and the ErrNoCredentials text, so that what an
// Authenticator checked stays in its own logs. The wrapping happens
// once, here: the returned handler is safe for concurrent use and costs
// the same on every request.
func Require(next http.Handler, a Authenticator, refuse Refuse) http.Handler {
	if refuse == nil {
		refuse = PlainRefuse
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Authenticate(r)
		if err != nil {
			Answer(w, r, err, refuse)
			return
		}
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), p)))
	})
}

// Answer writes the refusal of err with refuse, as Require does: the
// status and challenge of an *Error, else a plain 401. A handler behind
// Require that refuses a request for want of a scope answers with it.
func Answer(w http.ResponseWriter, r *http.Request, err error, refuse Refuse) {
	if refuse == nil {
		refuse = PlainRefuse
	}
	var e *Error
	if !errors.As(err, &e) {
		w.Header().Set("WWW-Authenticate", Challenge)
		refuse(w, r, http.StatusUnauthorized, ErrNoCredentials.Error())
		return
	}
	if status := e.status(); status == http.StatusUnauthorized || status == http.StatusForbidden {
		w.Header().Set("WWW-Authenticate", e.Challenge())
	}
	if e.Status == http.StatusServiceUnavailable && e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	refuse(w, r, e.status(), e.Error())
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
