package oauth

import (
	"errors"
	"strings"
)

// The steps an *Error names, in the order a sign-in takes them.
const (
	// StepMetadata is fetching Protected Resource Metadata (RFC 9728) or
	// authorization server metadata (RFC 8414, OpenID Connect Discovery).
	StepMetadata = "metadata"
	// StepResource is the metadata's resource not being the server's.
	StepResource = "resource"
	// StepIssuer is an issuer that does not match: in the authorization
	// server's metadata (RFC 8414 section 3.3) or in the iss of its
	// authorization response (RFC 9207).
	StepIssuer = "issuer"
	// StepPKCE is an authorization server that does not offer S256.
	StepPKCE = "pkce"
	// StepRegistration is getting a client_id: no way offered, or the
	// registration endpoint refused.
	StepRegistration = "registration"
	// StepAuthorization is the interactive step: the program's Authorize
	// failed, the response's state did not match, or it carried an error
	// (Error.Code then holds it, e.g. "access_denied").
	StepAuthorization = "authorization"
	// StepToken is a token request for a code or client credentials.
	StepToken = "token"
	// StepRefresh is a refresh token request; Error.Code "invalid_grant"
	// means the refresh token is spent, and a sign-in follows.
	StepRefresh = "refresh"
)

// Error is why a sign-in or a refresh failed: the step that failed and
// the cause. Its message names both and never holds a token, a code, a
// PKCE verifier or a client secret, so it can be logged as it is.
type Error struct {
	Step string
	// Code is the OAuth error code the authorization server answered
	// (RFC 6749 section 5.2, section 4.1.2.1), e.g. "invalid_grant" or
	// "access_denied"; "" when the failure was not such an answer.
	Code string
	Err  error
}

func (e *Error) Error() string {
	msg := "oauth: " + e.Step
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

func stepErr(step string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Step: step, Err: err}
}

// describe renders an authorization server's error answer: its code and
// description, the description only when it is short printable ASCII
// holding none of secrets, since a server may echo what it was sent.
func describe(code, desc string, secrets ...string) string {
	code = printable(code, 64)
	if code == "" {
		code = "an error"
	}
	desc = printable(desc, 200)
	for _, s := range secrets {
		if s != "" && strings.Contains(desc, s) {
			desc = ""
		}
	}
	if desc == "" {
		return code
	}
	return code + " (" + desc + ")"
}

// printable is s when it is at most max printable ASCII characters, else
// its printable prefix of at most max.
func printable(s string, max int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < max; i++ {
		if s[i] >= 0x20 && s[i] < 0x7f {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
