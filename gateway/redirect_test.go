package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// redirectTarget is where an upstream's redirect points: it records what
// reaches it and answers any request with a tool's success, as a server
// that ran the call would.
type redirectTarget struct {
	url string
	mu  sync.Mutex
	got []string
}

func newRedirectTarget(t *testing.T) *redirectTarget {
	rt := &redirectTarget{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rt.mu.Lock()
		rt.got = append(rt.got, fmt.Sprintf("%s Authorization=%q X-Api-Key=%q body=%s", r.Method, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), body))
		rt.mu.Unlock()
		id := "1"
		if m, derr := jsonrpc.Decode(body); derr == nil && m.Kind == jsonrpc.KindRequest {
			id = string(m.ID.AppendJSON(nil))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","content":[{"type":"text","text":"ran elsewhere"}]}}`, id)
	}))
	t.Cleanup(hs.Close)
	rt.url = hs.URL + "/mcp"
	return rt
}

func (rt *redirectTarget) nothing(t *testing.T) {
	t.Helper()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.got) != 0 {
		t.Fatalf("the redirect was followed: its target received %q", rt.got)
	}
}

// redirectsCalls is a redirect answered to every tools/call while on is
// set, for an upstream's inFront.
func redirectsCalls(status int, location string, on *atomic.Bool) func(w http.ResponseWriter, r *http.Request, body []byte) bool {
	return func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		m, derr := jsonrpc.Decode(body)
		if derr != nil || m.Method != mcp.MethodToolsCall || !on.Load() {
			return false
		}
		w.Header().Set("Location", location)
		w.WriteHeader(status)
		return true
	}
}

// loggedRedirect reports whether the gateway logged a redirect to
// location.
func loggedRedirect(t *testing.T, logs *mcptest.LogBuffer, location string) bool {
	for _, rec := range logs.Records(t) {
		if rec["location"] == location {
			return true
		}
	}
	return false
}

// An HTTP upstream that answers a forwarded call with a redirect, in
// either era: the gateway does not follow it, so the upstream's
// credentials (its bearer token and the headers its file adds) and the
// call go nowhere else; the downstream client gets a structured,
// non-retryable upstream_error saying the upstream answered with a
// redirect — never where it pointed, nor the upstream's URL — and the
// gateway's log names where it pointed.
func TestUpstreamRedirectIsNotFollowed(t *testing.T) {
	for _, up := range eras {
		for _, status := range []int{301, 302, 303, 307, 308} {
			t.Run(fmt.Sprintf("%s/%d", up.name, status), func(t *testing.T) {
				target := newRedirectTarget(t)
				u := newUpstream(t)
				var on atomic.Bool
				on.Store(true)
				proxy := u.inFront(t, redirectsCalls(status, target.url, &on))
				logs := &mcptest.LogBuffer{}
				f := newFront(t, gateway.Options{
					Upstreams: []gateway.Upstream{{Name: "up", URL: proxy,
						Header: http.Header{"Authorization": {"Bearer upstream-secret"}, "X-Api-Key": {"upstream-key"}}}},
					Client: client.Options{Era: up.era},
					Logger: logs.Logger(),
				}, nil)
				c := f.dial(t, 0, nil)
				res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "x"}, nil)
				must(t, err)
				fail := failureOf(t, res)
				if fail.Code != mcp.FailureUpstream || fail.Retryable || !strings.Contains(fail.Message, fmt.Sprintf(`upstream "up" answered HTTP %d, a redirect, which the gateway does not follow`, status)) {
					t.Fatalf("the redirected call = %+v; want a non-retryable upstream_error saying the upstream redirected", fail)
				}
				for _, secret := range []string{target.url, mustHost(t, target.url), proxy, mustHost(t, proxy), "127.0.0.1"} {
					if strings.Contains(text(res), secret) {
						t.Fatalf("the downstream was shown %q: %s", secret, text(res))
					}
				}
				target.nothing(t)
				if !loggedRedirect(t, logs, target.url) {
					t.Fatalf("no log line names where the redirect pointed:\n%s", logs.String())
				}
			})
		}
	}
}

func mustHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	must(t, err)
	return u.Host
}

// A keyed call whose upstream answered with a redirect provably did not
// run there: its key is freed, not recorded as an unknown outcome, and
// the same key runs the call once the upstream answers it.
func TestKeyedCallRedirectedFreesItsKey(t *testing.T) {
	m := newMailer(t)
	target := newRedirectTarget(t)
	var on atomic.Bool
	on.Store(true)
	redirect := redirectsCalls(http.StatusTemporaryRedirect, target.url, &on)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			if redirect(w, r, body) {
				return
			}
		}
		proxyTo(m.url).ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	l := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "mail", URL: proxy.URL, Header: http.Header{"Authorization": {"Bearer upstream-secret"}}}},
		Ledger:    l,
		Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{
			"send":   {Keyed: &idempotency.Policy{Key: idempotency.KeyOptional, External: true, AtMostOnce: true, KeyArgument: "requestId", ReconcileWith: "outbox"}},
			"outbox": {Server: server.Policy{Retry: mcp.RetrySafe}},
		}},
	}, nil)
	c := f.dial(t, mcp.Modern, nil)
	if fail := failureOf(t, send(t, c, "send", "r-1", "ops")); fail.Code != mcp.FailureUpstream || fail.Retryable || m.sent.Load() != 0 {
		t.Fatalf("the redirected keyed call = %+v, %d sent; want upstream_error, nothing sent", fail, m.sent.Load())
	}
	if _, err := l.Lookup(context.Background(), "", "send", "r-1"); err == nil {
		t.Fatal("a keyed call the upstream redirected left its key claimed")
	}
	target.nothing(t)
	on.Store(false)
	if again := send(t, c, "send", "r-1", "ops"); again.IsError || again.Meta[mcp.MetaReplayed] != false || m.sent.Load() != 1 {
		t.Fatalf("the same key once the upstream answers = %+v, %d sent; want it run once", again, m.sent.Load())
	}
}

// An upstream that runs a call as a task of its own and then answers the
// gateway's tasks/get with a redirect: the task may still run, so the
// call's outcome is unknown, and the downstream is told so without being
// shown where the redirect pointed; the target gets nothing.
func TestUpstreamTaskRedirectIsNotFollowed(t *testing.T) {
	for _, up := range eras {
		t.Run("upstream-"+up.name, func(t *testing.T) {
			r := newResearcher(t)
			// The upstream's task goes on when the gateway stops following
			// it: let it end, so that its server can shut down.
			t.Cleanup(func() {
				for {
					select {
					case r.step <- struct{}{}:
					case <-r.ended:
						return
					case <-time.After(wait):
						t.Error("the upstream's task never ended")
						return
					}
				}
			})
			target := newRedirectTarget(t)
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.Method == http.MethodPost {
					body, _ := io.ReadAll(req.Body)
					req.Body = io.NopCloser(strings.NewReader(string(body)))
					if m, derr := jsonrpc.Decode(body); derr == nil && m.Method == mcp.MethodTasksGet {
						w.Header().Set("Location", target.url)
						w.WriteHeader(http.StatusTemporaryRedirect)
						return
					}
				}
				proxyTo(r.url).ServeHTTP(w, req)
			}))
			t.Cleanup(proxy.Close)
			logs := &mcptest.LogBuffer{}
			f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: proxy.URL, Header: http.Header{"Authorization": {"Bearer upstream-secret"}}}},
				Client: client.Options{Era: up.era}, Logger: logs.Logger()}, nil)
			c := f.dial(t, mcp.Modern, nil)
			res, err := c.CallTool(context.Background(), "research", map[string]any{"topic": "tides"}, nil)
			must(t, err)
			fail := failureOf(t, res)
			if fail.Code != mcp.FailureOutcomeUnknown || !strings.Contains(fail.Message, "redirect") {
				t.Fatalf("the call whose task's tasks/get was redirected = %+v; want outcome_unknown saying so", fail)
			}
			for _, secret := range []string{target.url, mustHost(t, target.url), proxy.URL, mustHost(t, proxy.URL), "127.0.0.1"} {
				if strings.Contains(text(res), secret) {
					t.Fatalf("the downstream was shown %q: %s", secret, text(res))
				}
			}
			target.nothing(t)
			if !loggedRedirect(t, logs, target.url) {
				t.Fatalf("no log line names where the redirect pointed:\n%s", logs.String())
			}
		})
	}
}
