package host

import (
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/mcprel/mcprel/auth"
)

// statusRealm is the Basic realm a browser is asked for: a person reads
// the status page in a browser, which cannot send a bearer token but asks
// for a user name and password when told to, and sends them on every
// request to the page after.
const statusRealm = `Basic realm="mcprel status", charset="UTF-8"`

// pageGuard is what the status page adds to the guard of the metrics
// beside it: it is a page a browser shows, so
//   - a request naming another site as its Origin is refused (403): a
//     page of another site must not read it, even on a listener that,
//     for scrapers, checks no Host;
//   - on the metrics' own listener, a Host that is a name other than
//     localhost or one of Options.HTTP.AllowedHosts is refused (403): a
//     name that resolves to this listener is how another site's page
//     reaches a loopback listener (DNS rebinding); an address is fine;
//   - a Basic Authorization's password is taken as the bearer token (the
//     user name is ignored), and a 401 also asks for Basic, so that a
//     browser prompts for the token.
//
// And the page lists every tenant's work (their unknown outcomes, their
// load): where tenants sign in with tokens of their own (Options.HTTP.Tokens,
// OAuth) and the metrics take those tokens, one tenant's token would read
// the others' keys. The page is then refused (403) until the metrics have
// a token of their own (Metrics.Token), or are open (Metrics.Open: the
// operator chose to show them to whoever reaches the listener).
func (rt *Runtime) pageGuard(next http.Handler, checkHost bool) http.Handler {
	hosts := auth.Hosts{Allowed: rt.opts.HTTP.AllowedHosts}
	tenantsRead := rt.opts.Metrics.Token == "" && !rt.opts.Metrics.Open && (len(rt.opts.HTTP.Tokens) > 0 || rt.opts.OAuth != nil || rt.opts.HTTP.Authenticator != nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenantsRead {
			auth.PlainRefuse(w, r, http.StatusForbidden, "the status page lists every tenant's work, and the tenants' own tokens read the metrics here: serve the metrics with a token of their own (--metrics-token) to read it")
			return
		}
		if checkHost && !hostIsAddressOr(r.Host, hosts) {
			auth.PlainRefuse(w, r, http.StatusForbidden, "host "+strconv.Quote(r.Host)+" is not allowed")
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r.Host) {
			auth.PlainRefuse(w, r, http.StatusForbidden, "origin "+strconv.Quote(origin)+" is not allowed")
			return
		}
		if _, password, ok := r.BasicAuth(); ok {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+password)
		}
		next.ServeHTTP(basicChallenge{w}, r)
	})
}

// hostIsAddressOr reports whether a Host header is an IP address, or a
// name the hosts allow (localhost and the loopback names by default).
func hostIsAddressOr(hostHeader string, hosts auth.Hosts) bool {
	host := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = h
	}
	if net.ParseIP(strings.Trim(host, "[]")) != nil {
		return true
	}
	return hosts.HostAllowed(hostHeader)
}

// sameOrigin reports whether origin is the page's own: its host and port
// those the request was sent to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// basicChallenge adds the Basic challenge to a 401, beside the bearer
// one the authenticator wrote.
type basicChallenge struct{ http.ResponseWriter }

func (b basicChallenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		b.Header().Add("WWW-Authenticate", statusRealm)
	}
	b.ResponseWriter.WriteHeader(code)
}

func (b basicChallenge) Unwrap() http.ResponseWriter { return b.ResponseWriter }
