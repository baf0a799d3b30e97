package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// MaxBodyBytes is the most of any answer from a metadata endpoint or an
// authorization server the client reads; a longer body fails the step.
const MaxBodyBytes = 256 << 10

// errNotFound is a metadata URL answering 4xx: the next candidate URL is
// tried.
type errNotFound struct {
	url    string
	status int
}

func (e *errNotFound) Error() string { return fmt.Sprintf("%s answered %d", e.url, e.status) }

// do sends req under the client's timeout, follows no redirect, and reads
// at most MaxBodyBytes of the answer. A redirect is an error naming where
// it pointed: an authorization server or metadata endpoint that moves has
// to be configured where it is.
func (c *Client) do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	req = req.WithContext(ctx)
	where := redact(req.URL)
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, fmt.Errorf("%s did not answer within %v", where, c.opts.Timeout)
		}
		return nil, nil, fmt.Errorf("%s: %w", where, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		to := "elsewhere"
		if loc, err := resp.Location(); err == nil {
			to = redact(loc)
		}
		return nil, nil, fmt.Errorf("%s answered %d redirecting to %s; redirects are not followed", where, resp.StatusCode, to)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: reading the answer: %w", where, err)
	}
	if len(body) > MaxBodyBytes {
		return nil, nil, fmt.Errorf("%s answered more than %d bytes", where, MaxBodyBytes)
	}
	return resp, body, nil
}

// unwrapURLError drops *url.Error's wrapping, which repeats the URL with
// its query.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redact is u without its query and fragment, for error messages: an
// authorization URL's query holds the PKCE challenge and state, a
// redirect's the code.
func redact(u *url.URL) string {
	v := *u
	v.RawQuery, v.Fragment, v.RawFragment, v.User = "", "", "", nil
	return v.String()
}

// getJSON fetches a JSON document into v. Any 4xx is *errNotFound, so
// that discovery moves to its next candidate.
func (c *Client) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, body, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		return &errNotFound{url: redact(req.URL), status: resp.StatusCode}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", redact(req.URL), resp.StatusCode)
	}
	return decodeJSON(redact(req.URL), resp, body, v)
}

// decodeJSON decodes body into v, with errors that say what came
// instead: HTML (a login page, a proxy's error page) or not JSON at all.
func decodeJSON(where string, resp *http.Response, body []byte, v any) error {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	trimmed := bytes.TrimSpace(body)
	if mt == "text/html" || bytes.HasPrefix(trimmed, []byte("<")) {
		return fmt.Errorf("%s answered an HTML page, not JSON", where)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s answered a body that is not the JSON expected: %v", where, jsonWhy(err))
	}
	return nil
}

// jsonWhy is a JSON error without the document's text.
func jsonWhy(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q is not a %v", te.Field, te.Type)
	}
	return "it does not parse"
}

// checkEndpoint refuses a URL the client would send credentials to or
// trust metadata from unless it is HTTPS, or HTTP to a loopback host.
func checkEndpoint(what, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return nil, fmt.Errorf("%s %q is not an absolute URL", what, printable(s, 200))
	}
	if u.Scheme == "https" || u.Scheme == "http" && loopback(u.Hostname()) {
		return u, nil
	}
	return nil, fmt.Errorf("%s %s is neither HTTPS nor loopback HTTP", what, redact(u))
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
