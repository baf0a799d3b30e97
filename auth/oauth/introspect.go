package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// maxIntrospections bounds the introspection requests under way at once.
const maxIntrospections = 16

// introspect asks the introspection endpoint about token (RFC 7662) and
// returns its claims when the token is active. An endpoint that cannot
// be reached, or answers otherwise than RFC 7662 says, is a 503: the
// token is not trusted, and not called invalid either.
func (rs *ResourceServer) introspect(ctx context.Context, token string) (*claims, error) {
	in := rs.cfg.Introspection
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rs.cfg.FetchTimeout)
	defer cancel()
	// At most maxIntrospections ask at once: tokens nobody issued cannot
	// make this server flood the authorization server. A request that
	// waits past FetchTimeout for its turn gets 503.
	select {
	case rs.asking <- struct{}{}:
		defer func() { <-rs.asking }()
	case <-fctx.Done():
		return nil, rs.unavailable("too many tokens are being introspected at once")
	case <-ctx.Done():
		return nil, rs.unavailable("the request ended while its token waited to be introspected")
	}
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(fctx, http.MethodPost, in.URL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, rs.unavailable("the introspection endpoint cannot be asked")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 §2.3.1: the credentials are form-encoded before Basic.
	req.SetBasicAuth(url.QueryEscape(in.ClientID), url.QueryEscape(in.ClientSecret))
	resp, err := rs.client.Do(req)
	if err != nil {
		rs.warnIntrospection("cannot be reached", errors.Unwrap(err))
		return nil, rs.unavailable("the authorization server's introspection endpoint cannot be reached")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		rs.warnIntrospection("answered "+resp.Status, nil)
		return nil, rs.unavailable("the authorization server's introspection endpoint answered " + resp.Status)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil || len(body) > maxDocumentBytes || mt != "application/json" {
		rs.warnIntrospection("answered something that is not an introspection answer", err)
		return nil, rs.unavailable("the authorization server's introspection endpoint answered something else than JSON")
	}
	// Members are matched by their exact names, as a token's claims are
	// (parseClaims): an answer copies the token's claims, and one of them
	// named "Active" is not active.
	var members map[string]json.RawMessage
	var active *bool
	err = json.Unmarshal(body, &members)
	if err == nil {
		err = json.Unmarshal(members["active"], &active)
	}
	if err != nil || active == nil {
		rs.warnIntrospection("answered without active", err)
		return nil, rs.unavailable("the authorization server's introspection answer has no active member")
	}
	if !*active {
		return nil, rs.invalid("the access token is not active (the authorization server says it expired, was revoked or was never issued)")
	}
	c, err := parseClaims(body)
	if err != nil {
		return nil, rs.unavailable("the authorization server's introspection answer cannot be read")
	}
	return c, nil
}

// warnIntrospection logs a failing introspection endpoint, at most once
// per RefetchInterval.
func (rs *ResourceServer) warnIntrospection(what string, err error) {
	rs.warnMu.Lock()
	defer rs.warnMu.Unlock()
	now := rs.now()
	if !rs.warnedAt.IsZero() && now.Sub(rs.warnedAt) < rs.cfg.RefetchInterval {
		return
	}
	rs.warnedAt = now
	args := []any{"url", redacted(rs.cfg.Introspection.URL)}
	if err != nil {
		args = append(args, "error", err)
	}
	rs.log.Warn("oauth: the introspection endpoint "+what+": tokens are refused with 503 until it answers", args...)
}

// redacted is u with any password it holds replaced, for a log line.
func redacted(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an introspection URL that cannot be parsed)"
	}
	return p.Redacted()
}
