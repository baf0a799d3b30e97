package auth

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// loopbackHosts are the names allowed when no allow-list is given.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// Hosts is the DNS-rebinding protection: the Host and Origin headers a
// listener accepts. The zero value accepts loopback names only.
type Hosts struct {
	// Allowed lists the Host header values accepted, as host names or IP
	// addresses; a port in the header is ignored; "*" accepts any. Empty
	// means the loopback names only: localhost, 127.0.0.1 and ::1.
	Allowed []string
	// Origins lists the Origin values accepted when a request carries
	// one, as scheme://host[:port]; a listed origin without a port
	// matches every port; "*" accepts any. Empty means loopback origins
	// only. Requests without an Origin (non-browser clients) pass.
	Origins []string
}

// Wrap returns a handler that serves next only requests whose Host and
// Origin headers h allows; the rest get 403, written by refuse
// (PlainRefuse when nil) with `host "…" is not allowed` or
// `origin "…" is not allowed`.
func (h Hosts) Wrap(next http.Handler, refuse Refuse) http.Handler {
	if refuse == nil {
		refuse = PlainRefuse
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.HostAllowed(r.Host) {
			refuse(w, r, http.StatusForbidden, fmt.Sprintf("host %q is not allowed", r.Host))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !h.OriginAllowed(origin) {
			refuse(w, r, http.StatusForbidden, fmt.Sprintf("origin %q is not allowed", origin))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// HostAllowed checks a Host header against the allow-list.
func (h Hosts) HostAllowed(hostHeader string) bool {
	host := hostHeader
	if hh, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = hh
	}
	host = strings.Trim(strings.ToLower(host), "[]")
	allowed := h.Allowed
	if len(allowed) == 0 {
		allowed = loopbackHosts
	}
	for _, a := range allowed {
		if a == "*" || strings.EqualFold(strings.Trim(a, "[]"), host) {
			return true
		}
	}
	return false
}

// OriginAllowed checks an Origin header against the allow-list.
func (h Hosts) OriginAllowed(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return false
	}
	if len(h.Origins) == 0 {
		return (u.Scheme == "http" || u.Scheme == "https") && slices.Contains(loopbackHosts, strings.ToLower(u.Hostname()))
	}
	for _, a := range h.Origins {
		if a == "*" {
			return true
		}
		want, _ := url.Parse(a)
		if !strings.EqualFold(want.Scheme, u.Scheme) || !strings.EqualFold(want.Hostname(), u.Hostname()) {
			continue
		}
		if want.Port() == "" || want.Port() == u.Port() {
			return true
		}
	}
	return false
}
