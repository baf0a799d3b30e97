package oauthstore

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/client/oauth"
)

// Authorizer is a client.Authorizer for one server whose State is in a
// Store: the gateway's credentials toward one upstream. It puts the
// stored access token on every request to the server and renews it
// (refresh, with rotation; or client credentials) only while it holds
// the server's lease in the database, after reading the row again: a
// replica that meets a token another one renewed uses it, and one that
// finds the lease taken waits for the other's outcome, using meanwhile a
// token that has not expired yet. It never signs a user in: with no
// stored authorization, or one the authorization server revoked, the
// refusal stands, its error saying so.
type Authorizer struct {
	s      *Store
	key    string // the server's resource identifier: its URL without fragment
	server *url.URL
	opts   oauth.Options

	// mu serialises this process's renewals: one asks the database for
	// the lease, the others wait for it here.
	mu  sync.Mutex
	cur atomic.Pointer[oauth.Client] // the client of the State last read

	// onWait, for tests, is called each time a renewal waits for another
	// Store's lease.
	onWait func()
}

// ErrNotAuthorized is why an Authorizer has no credentials to offer: no
// authorization is stored for the server, or the stored one can no
// longer be refreshed. It is wrapped in a client/oauth *Error of step
// StepAuthorization.
var ErrNotAuthorized = errors.New("no authorization is stored for this server, or it was revoked")

// Authorizer returns the Authorizer of the server at serverURL. o are the
// options of the client/oauth Clients it runs (grant type, client
// credentials, HTTP client, timeouts); its Store is s, and its Authorize
// fails at once, since no user is at hand. Nothing is read until the
// first request.
func (s *Store) Authorizer(serverURL string, o oauth.Options) (*Authorizer, error) {
	o.Store = s
	if o.GrantType != oauth.GrantClientCredentials {
		o.GrantType = oauth.GrantAuthorizationCode
		o.Authorize = func(context.Context, string) (string, error) { return "", ErrNotAuthorized }
		if o.RedirectURL == "" {
			o.RedirectURL = "http://127.0.0.1/callback" // never visited: Authorize fails first
		}
	}
	c, err := oauth.New(serverURL, o)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(c.Resource())
	a := &Authorizer{s: s, key: c.Resource(), server: u, opts: o}
	a.cur.Store(c)
	return a, nil
}

// Key is the server's key in the Store.
func (a *Authorizer) Key() string { return a.key }

// reload starts over from the database: a new client, which reads the
// row when first used.
func (a *Authorizer) reload() *oauth.Client {
	c, _ := oauth.New(a.key, a.opts) // a.opts passed New before
	a.cur.Store(c)
	return c
}

func (a *Authorizer) sameServer(u *url.URL) bool {
	return u != nil && strings.EqualFold(u.Scheme, a.server.Scheme) && strings.EqualFold(u.Host, a.server.Host)
}

// fresh reports whether st's access token is good for another minute,
// client/oauth's rule for renewing it.
func (a *Authorizer) fresh(st *oauth.State) bool {
	return st != nil && st.AccessToken != "" && (st.Expiry.IsZero() || a.now().Add(time.Minute).Before(st.Expiry))
}

// unexpired reports whether st's access token may still be sent.
func (a *Authorizer) unexpired(st *oauth.State) bool {
	return st != nil && st.AccessToken != "" && (st.Expiry.IsZero() || a.now().Before(st.Expiry))
}

func (a *Authorizer) now() time.Time {
	if a.opts.Now != nil {
		return a.opts.Now()
	}
	return time.Now()
}

func bearer(req *http.Request, st *oauth.State) {
	req.Header.Set("Authorization", "Bearer "+st.AccessToken)
}

// wait waits for another Store's renewal, then reads the row again.
func (a *Authorizer) wait(ctx context.Context) (*oauth.Client, error) {
	if a.onWait != nil {
		a.onWait()
	}
	t := time.NewTimer(a.s.opts.Poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-t.C:
	}
	return a.reload(), nil
}

// Authorize sets req's Authorization to the stored access token,
// renewing it first under the lease when it expires within a minute.
func (a *Authorizer) Authorize(req *http.Request) error {
	if !a.sameServer(req.URL) {
		return nil
	}
	ctx := req.Context()
	st, err := a.cur.Load().State(ctx)
	if err != nil {
		return err
	}
	if a.fresh(st) {
		bearer(req, st)
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cur.Load() // another caller may have renewed it meanwhile
	for {
		if st, err = c.State(ctx); err != nil {
			return err
		}
		if a.fresh(st) {
			bearer(req, st)
			return nil
		}
		held, err := a.s.lease(ctx, a.key)
		if errors.Is(err, errMissing) {
			return nil // nothing to send: the server's 401 says what is missing
		}
		if err != nil {
			return err
		}
		if held {
			defer a.s.release(ctx, a.key)
			// Read again under the lease: the last holder may have
			// renewed it; if not, the client renews it and saves the
			// outcome over the version it read.
			return a.reload().Authorize(req)
		}
		if a.unexpired(st) {
			bearer(req, st) // another replica is renewing it: still good meanwhile
			return nil
		}
		if c, err = a.wait(ctx); err != nil {
			return err
		}
	}
}

// Refused is told of the server's 401 or 403 to req. Under the lease, it
// reads the row again: a token other than the one refused was renewed by
// another caller, and is worth a try; otherwise the client refreshes it
// (or, for client credentials, gets a new one). Without a refresh token
// to try, the refusal stands with ErrNotAuthorized.
func (a *Authorizer) Refused(ctx context.Context, req *http.Request, resp *http.Response) (bool, error) {
	if resp == nil || !a.sameServer(req.URL) {
		return false, nil
	}
	sent, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		held, err := a.s.lease(ctx, a.key)
		if errors.Is(err, errMissing) && a.opts.GrantType != oauth.GrantClientCredentials {
			return false, &oauth.Error{Step: oauth.StepAuthorization, Err: ErrNotAuthorized}
		}
		if err != nil && !errors.Is(err, errMissing) {
			return false, err
		}
		c := a.reload()
		st, serr := c.State(ctx)
		if serr != nil {
			return false, serr
		}
		if st != nil && st.AccessToken != "" && st.AccessToken != sent {
			if held {
				a.s.release(ctx, a.key)
			}
			return true, nil // renewed since req went out
		}
		if held || errors.Is(err, errMissing) {
			if held {
				defer a.s.release(ctx, a.key)
			}
			if a.opts.GrantType != oauth.GrantClientCredentials && (st == nil || st.RefreshToken == "") {
				return false, &oauth.Error{Step: oauth.StepAuthorization, Err: ErrNotAuthorized}
			}
			return c.Refused(ctx, req, resp)
		}
		if _, err := a.wait(ctx); err != nil {
			return false, err
		}
	}
}
