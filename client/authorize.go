package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// An Authorizer gives the requests of an HTTP connection their
// credentials, and is told when a server refuses them: package
// client/oauth's Client is one, signing in by OAuth 2.1 as the MCP
// authorization specification says when a server asks.
type Authorizer interface {
	// Authorize sets req's credentials (its Authorization header). An
	// error fails the request before it is sent.
	Authorize(req *http.Request) error
	// Refused is told of a 401 or 403 answer to req. It returns true
	// when it has new credentials worth one more try (it signed in,
	// refreshed a token, or was granted more scopes); the request is
	// then sent again, once, with Authorize's new credentials. An error
	// says why it has none.
	Refused(ctx context.Context, req *http.Request, resp *http.Response) (retry bool, err error)
}

// AuthorizationError is a request a server refused for its credentials
// (HTTP 401, or 403 for want of a scope) when Options.Authorizer could
// not get better ones. The server ran nothing: VerdictOf classes it
// retry.Rejected, refused.
type AuthorizationError struct {
	// Status is the server's answer, 401 or 403.
	Status int
	// Err is why no credentials could be had: the sign-in step that
	// failed, or nil when the Authorizer had none to offer.
	Err error
}

func (e *AuthorizationError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("client: the server refused the request's credentials (HTTP %d)", e.Status)
	}
	return fmt.Sprintf("client: the server refused the request's credentials (HTTP %d), and signing in failed: %v", e.Status, e.Err)
}

func (e *AuthorizationError) Unwrap() error { return e.Err }

// authorizing is the RoundTripper of a connection with an Authorizer:
// every request, on either HTTP transport (calls, streams, notifications,
// the session's DELETE), gets its credentials here, and a refusal is
// answered by the Authorizer once before the caller sees it.
type authorizing struct {
	base http.RoundTripper
	a    Authorizer
}

// withAuthorizer returns hc with a in front of its transport, or hc when
// a is nil. hc is a copy of the caller's client already.
func withAuthorizer(hc *http.Client, a Authorizer) *http.Client {
	if a == nil {
		return hc
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = &authorizing{base: base, a: a}
	return hc
}

func (t *authorizing) RoundTrip(req *http.Request) (*http.Response, error) {
	first := req.Clone(req.Context()) // a RoundTripper does not change its request
	if err := t.a.Authorize(first); err != nil {
		closeBody(req)
		return nil, &AuthorizationError{Err: err}
	}
	resp, err := t.base.RoundTrip(first)
	if err != nil || (resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden) {
		return resp, err
	}
	retry, aerr := t.a.Refused(req.Context(), first, resp)
	if !retry {
		// No better credentials: the server's refusal stands, as a
		// refusal, with why signing in failed.
		drain(resp)
		return nil, &AuthorizationError{Status: resp.StatusCode, Err: aerr}
	}
	again := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			drain(resp)
			return nil, &AuthorizationError{Status: resp.StatusCode, Err: fmt.Errorf("the request's body cannot be sent again")}
		}
		body, err := req.GetBody()
		if err != nil {
			drain(resp)
			return nil, &AuthorizationError{Status: resp.StatusCode, Err: err}
		}
		again.Body = body
	}
	drain(resp)
	if err := t.a.Authorize(again); err != nil {
		closeBody(again)
		return nil, &AuthorizationError{Status: resp.StatusCode, Err: err}
	}
	return t.base.RoundTrip(again)
}

// drain reads a little of resp's body, so that its connection may be
// kept, and closes it.
func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// CloseIdleConnections passes on to the transport underneath, so that a
// closed connection releases its idle ones.
func (t *authorizing) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
