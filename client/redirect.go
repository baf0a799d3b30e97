package client

import (
	"fmt"
	"net/http"
)

// RedirectError is an HTTP answer that pointed the request elsewhere: a
// 301, 302, 303, 307 or 308. The client follows no redirect, over either
// HTTP transport, for any request: what it sends — Options.Header (the
// credentials), a body that may have effects — goes to the URL it was
// given and to no address a server names. The server that answered did
// not run the request (it sent the redirect instead), and the same
// request would be redirected again, so VerdictOf classes it
// retry.Rejected: nothing ran, and it is not made again.
type RedirectError struct {
	// Status is the redirect's HTTP status.
	Status int
	// Location is where it pointed, resolved against the request's URL
	// (a password in it redacted); "" when it named nowhere.
	Location string
}

func (e *RedirectError) Error() string {
	where := "to " + e.Location
	if e.Location == "" {
		where = "naming no Location"
	}
	return fmt.Sprintf("client: the server answered HTTP %d, a redirect %s, which the client does not follow: the request was not sent there", e.Status, where)
}

// withoutRedirects returns the HTTP client a connection uses: a shallow
// copy of hc (the connection's own when hc is nil) whose CheckRedirect
// hands every redirect back as the answer instead of following it, for
// redirectOf to read. The copy shares hc's Transport, so its pooled
// connections; hc itself is not changed.
func withoutRedirects(hc *http.Client) *http.Client {
	if hc == nil {
		hc = newHTTPClient()
	}
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// redirectOf is the *RedirectError that resp is, or nil when resp is no
// redirect.
func redirectOf(resp *http.Response) *RedirectError {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return nil
	}
	e := &RedirectError{Status: resp.StatusCode, Location: resp.Header.Get("Location")}
	if u, err := resp.Location(); err == nil {
		e.Location = u.Redacted()
	}
	if len(e.Location) > 200 {
		e.Location = clip([]byte(e.Location))
	}
	return e
}
